// The workspace artifact store in VS Code: the "mevedel Artifacts" view
// (every item by title, the ones attached to the current session marked),
// items opened as `mevedel-artifact:` files whose save is a
// `mevedel/artifact/write` based on the revision the editor read, and the
// artifact commands. What talks to the server is in artifacts.ts.
import * as vscode from 'vscode';
import {
  ARTIFACT_SCHEME,
  AskedItems,
  ArtifactDidChangeParams,
  ArtifactEntry,
  ArtifactFiles,
  ArtifactRef,
  artifactRef,
  ArtifactRow,
  artifactRows,
  artifactUriParts,
  artifactVersions,
  ASK_FOR_IT,
  attachArtifact,
  changedRefs,
  commentOnArtifact,
  createArtifact,
  deleteArtifact,
  detachArtifact,
  duplicateArtifact,
  errorKind,
  ItemInFolder,
  ItemKind,
  listArtifacts,
  needsReload,
  readArtifact,
  readOnlyNotice,
  requestHandover,
  restoreArtifact,
  saveArtifactVersion,
  versionRows,
} from './artifacts';
import { describeFailure, RequestSender } from './protocol';
import { STAYS_OPEN } from './staysOpen';

export interface ArtifactContext {
  sender(): Promise<RequestSender>;
  workspaceFolder(): string | undefined;
  // The items asked for here and not yet writable here.
  asked?: AskedItems;
  // The list of WORKSPACEFOLDER was read, ENTRIES: called before it is
  // shown (the editors are brought in line with it first).
  listed?(entries: readonly ArtifactEntry[], workspaceFolder: string | undefined): Promise<void>;
}

function info(message: string): void {
  void vscode.window.showInformationMessage(`mevedel: ${message}`);
}

function refOf(uri: vscode.Uri): ArtifactRef | undefined {
  return uri.scheme === ARTIFACT_SCHEME ? artifactRef(uri.path, uri.query) : undefined;
}

export function artifactUri(ref: ArtifactRef, item: { title: string; kind: ItemKind; primary: string }): vscode.Uri {
  return vscode.Uri.from(artifactUriParts(ref, item));
}

// How long a change notice waits for the open editors to read the item
// again before the list is refreshed anyway (VS Code reads at once; this
// only keeps an editor that never does from holding the list back).
const REREAD_BOUND_MS = 5_000;

// A failure as VS Code's file service reports it: the server's words.
function fileSystemError(error: unknown, uri: vscode.Uri): vscode.FileSystemError {
  if (error instanceof vscode.FileSystemError) return error;
  const message = describeFailure(error);
  if (errorKind(error) === 'missing-target') return vscode.FileSystemError.FileNotFound(message || uri);
  return vscode.FileSystemError.Unavailable(message);
}

// Serves items as files: reading one reads the item, saving writes it with
// the revision its text was read at. An item another server process holds
// is a read-only file. Nothing is polled: the server watches every item
// read through it and says when another process takes, writes or lets go
// of one (mevedel/artifact/didChange), and `reread` makes the open editors
// read it again.
export class ArtifactFileSystem implements vscode.FileSystemProvider {
  private readonly emitter = new vscode.EventEmitter<vscode.FileChangeEvent[]>();
  readonly onDidChangeFile = this.emitter.event;
  private readonly watched = new Map<string, { uri: vscode.Uri; count: number }>();
  // Per URI, who waits for VS Code to read it again (`reread`).
  private readonly waiting = new Map<string, (() => void)[]>();
  // Per URI, whether VS Code was last told the item is writable.
  private readonly given = new Map<string, boolean>();

  constructor(readonly files: ArtifactFiles) {}

  watch(uri: vscode.Uri): vscode.Disposable {
    const id = uri.toString();
    const entry = this.watched.get(id) ?? { uri, count: 0 };
    entry.count++;
    this.watched.set(id, entry);
    return new vscode.Disposable(() => {
      const current = this.watched.get(id);
      if (current && --current.count <= 0) {
        this.watched.delete(id);
        this.given.delete(id);
        const ref = refOf(uri);
        if (ref) this.files.forget(ref);
      }
    });
  }

  // Tells VS Code the items at URIS changed, and resolves once each open
  // text editor of them without unsaved edits (VS Code reloads exactly
  // those) has read its item again: its text and whether it is read-only
  // are then the server's at that point, so what is shown after this
  // (the list) never runs ahead of the editors. Bounded: an editor closed
  // meanwhile is not waited for.
  async reread(uris: vscode.Uri[]): Promise<void> {
    const ids = new Set(uris.map((uri) => uri.toString()));
    const reloaded = vscode.workspace.textDocuments.filter((document) => ids.has(document.uri.toString()) && !document.isDirty);
    const read = reloaded.map(
      (document) =>
        new Promise<void>((resolve) => {
          const id = document.uri.toString();
          this.waiting.set(id, [...(this.waiting.get(id) ?? []), resolve]);
        }),
    );
    this.changed(uris);
    if (read.length === 0) return;
    let bound: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([Promise.all(read), new Promise<void>((resolve) => (bound = setTimeout(resolve, REREAD_BOUND_MS)))]);
    clearTimeout(bound);
  }

  // VS Code starts reading URI: those waiting on it are answered once this
  // read is done and VS Code has its answer. A stat that finds a revision
  // other than the editor's text is followed by a readFile, which then
  // answers them (the editor takes the new text and state together).
  private reading(uri: vscode.Uri): (revision?: string) => void {
    const id = uri.toString();
    const waiters = this.waiting.get(id);
    if (!waiters) return () => undefined;
    this.waiting.delete(id);
    return (revision) => {
      const ref = refOf(uri);
      if (revision !== undefined && ref && revision !== this.files.baseRevision(ref)) {
        this.waiting.set(id, [...waiters, ...(this.waiting.get(id) ?? [])]);
        return;
      }
      // After VS Code's answer has gone out.
      setTimeout(() => waiters.forEach((resolve) => resolve()), 0);
    };
  }

  // Whether VS Code was last told URI's item is writable (undefined: not
  // asked yet).
  shownWritable(uri: vscode.Uri): boolean | undefined {
    return this.given.get(uri.toString());
  }

  // The open item URIs (watched by VS Code while an editor shows them).
  openUris(): vscode.Uri[] {
    const uris = new Map<string, vscode.Uri>();
    for (const { uri } of this.watched.values()) uris.set(uri.toString(), uri);
    for (const document of vscode.workspace.textDocuments) {
      if (document.uri.scheme === ARTIFACT_SCHEME) uris.set(document.uri.toString(), document.uri);
    }
    return [...uris.values()];
  }

  changed(uris: vscode.Uri[], type = vscode.FileChangeType.Changed): void {
    if (uris.length) this.emitter.fire(uris.map((uri) => ({ type, uri })));
  }

  async stat(uri: vscode.Uri): Promise<vscode.FileStat> {
    const ref = refOf(uri);
    if (!ref) {
      // The `/ID` folder of an item, or the root.
      if (uri.path.split('/').filter((part) => part !== '').length <= 1) {
        return { type: vscode.FileType.Directory, ctime: 0, mtime: 0, size: 0 };
      }
      throw vscode.FileSystemError.FileNotFound(uri);
    }
    const done = this.reading(uri);
    try {
      const stat = await this.files.stat(ref);
      this.given.set(uri.toString(), stat.writable);
      done(stat.item.revision);
      return {
        type: vscode.FileType.File,
        ctime: 0,
        mtime: stat.mtime,
        size: stat.size,
        permissions: stat.writable ? undefined : vscode.FilePermission.Readonly,
      };
    } catch (error) {
      done();
      throw fileSystemError(error, uri);
    }
  }

  readDirectory(): [string, vscode.FileType][] {
    return [];
  }

  createDirectory(uri: vscode.Uri): void {
    throw vscode.FileSystemError.NoPermissions(uri);
  }

  async readFile(uri: vscode.Uri): Promise<Uint8Array> {
    const ref = refOf(uri);
    if (!ref) throw vscode.FileSystemError.FileNotFound(uri);
    const done = this.reading(uri);
    try {
      const loaded = await this.files.load(ref);
      return loaded.bytes;
    } catch (error) {
      throw fileSystemError(error, uri);
    } finally {
      done();
    }
  }

  async writeFile(uri: vscode.Uri, content: Uint8Array): Promise<void> {
    const ref = refOf(uri);
    if (!ref) throw vscode.FileSystemError.NoPermissions(uri);
    try {
      await this.files.save(ref, content);
    } catch (error) {
      if (needsReload(error)) setTimeout(() => void reloadAfterRefusal(uri, error), 0);
      throw fileSystemError(error, uri);
    }
  }

  delete(uri: vscode.Uri): void {
    throw vscode.FileSystemError.NoPermissions(`${uri.path}: delete an item with "mevedel: Delete Artifact…"`);
  }

  rename(uri: vscode.Uri): void {
    throw vscode.FileSystemError.NoPermissions(uri);
  }

  dispose(): void {
    for (const waiters of this.waiting.values()) waiters.forEach((resolve) => resolve());
    this.waiting.clear();
    this.emitter.dispose();
  }
}

// A save the server refused because the item moved on (another write, or
// another server process took it): the user is told why, the edits are
// kept in an untitled document, and the editor reads the item again (a
// held item then shows read-only).
async function reloadAfterRefusal(uri: vscode.Uri, error: unknown): Promise<void> {
  const document = vscode.workspace.textDocuments.find((open) => open.uri.toString() === uri.toString());
  let kept = '';
  if (document?.isDirty) {
    const copy = await vscode.workspace.openTextDocument({ content: document.getText(), language: document.languageId });
    await vscode.window.showTextDocument(copy, { viewColumn: vscode.ViewColumn.Beside, preview: false, preserveFocus: true });
    kept = '; your edits are kept in an untitled document beside it';
  }
  if (document) {
    await vscode.window.showTextDocument(document, { preview: false });
    await vscode.commands.executeCommand('workbench.action.files.revert');
  }
  const name = uri.path.split('/').pop();
  const message = `mevedel: ${name} was not saved: ${describeFailure(error)}. It was reloaded from the server${kept}.`;
  const offered = errorKind(error) === 'item-held' ? [ASK_FOR_IT] : [];
  const chosen = await vscode.window.showWarningMessage(message, ...offered);
  if (chosen === ASK_FOR_IT) await vscode.commands.executeCommand('mevedel.requestArtifactHandover', uri);
}

type Node = ArtifactRow;

// The "mevedel Artifacts" view: every item of the workspace folder by title.
export class ArtifactTree implements vscode.TreeDataProvider<Node> {
  private readonly emitter = new vscode.EventEmitter<Node | undefined>();
  readonly onDidChangeTreeData = this.emitter.event;
  view: vscode.TreeView<Node> | undefined;

  constructor(private readonly context: ArtifactContext) {}

  refresh(): void {
    this.emitter.fire(undefined);
  }

  async getChildren(parent?: Node): Promise<Node[]> {
    if (parent) return [];
    try {
      const sender = await this.context.sender();
      const workspaceFolder = this.context.workspaceFolder();
      const listing = await listArtifacts(sender, { workspaceFolder });
      await this.context.listed?.(listing.items, workspaceFolder);
      const rows = artifactRows(listing);
      if (this.view) this.view.message = undefined;
      return rows;
    } catch (error) {
      if (this.view) this.view.message = `mevedel: ${describeFailure(error)}`;
      return [];
    }
  }

  getTreeItem(row: Node): vscode.TreeItem {
    const item = new vscode.TreeItem(row.label, vscode.TreeItemCollapsibleState.None);
    item.id = `${row.entry.id}`;
    item.description = row.description;
    item.tooltip = `${row.label}\n${row.description}\n${row.detail}`;
    item.contextValue = row.contextValue;
    const icon = { document: 'file-text', whiteboard: 'symbol-color', artifact: 'file-media' }[row.entry.kind];
    item.iconPath = new vscode.ThemeIcon(
      row.entry.attached ? 'pass-filled' : icon,
      row.entry.attached ? new vscode.ThemeColor('charts.green') : undefined,
    );
    item.command = { command: 'mevedel.openArtifact', title: 'Open', arguments: [row] };
    return item;
  }

  dispose(): void {
    this.emitter.dispose();
  }
}

// An item a command acts on: the view's row, an item URI (the editor's
// title menu), the active item editor, else one the user picks.
type Target = { ref: ArtifactRef; title: string; entry?: ArtifactEntry };

async function pickItem(context: ArtifactContext, title: string): Promise<Target | undefined> {
  const workspaceFolder = context.workspaceFolder();
  const rows = artifactRows(await listArtifacts(await context.sender(), { workspaceFolder }));
  if (rows.length === 0) {
    info('this workspace has no artifacts yet; "mevedel: New Document" creates one');
    return undefined;
  }
  const chosen = await vscode.window.showQuickPick(
    rows.map((row) => ({ label: row.label, description: row.description, detail: row.detail, row })),
    { title, placeHolder: 'An item, by title (attached: the current session has it)', matchOnDescription: true, matchOnDetail: true, ...STAYS_OPEN },
  );
  return chosen && { ref: { id: chosen.row.entry.id, workspaceFolder }, title: chosen.row.label, entry: chosen.row.entry };
}

async function target(context: ArtifactContext, argument: unknown, title: string, active: boolean): Promise<Target | undefined> {
  const row = argument as Partial<ArtifactRow> | undefined;
  if (row?.entry?.id) return { ref: { id: row.entry.id, workspaceFolder: context.workspaceFolder() }, title: row.entry.title, entry: row.entry };
  const uri = argument instanceof vscode.Uri ? argument : active ? vscode.window.activeTextEditor?.document.uri : undefined;
  const ref = uri && refOf(uri);
  if (ref) return { ref, title: (uri.path.split('/').pop() ?? ref.id).replace(/(\.excalidraw\.json|\.[A-Za-z0-9]+)$/, '') };
  return pickItem(context, title);
}

function params(ref: ArtifactRef): { id: string; workspaceFolder?: string } {
  return ref.workspaceFolder ? { id: ref.id, workspaceFolder: ref.workspaceFolder } : { id: ref.id };
}

// Opens an item in an editor: a document or Markdown/HTML artifact as text,
// a whiteboard as its JSON text, an image in VS Code's image preview. One
// another server process holds opens read-only, and says who holds it.
export async function openArtifact(context: ArtifactContext, ref: ArtifactRef): Promise<void> {
  const item = await readArtifact(await context.sender(), params(ref));
  const uri = artifactUri(ref, item);
  if (item.encoding === 'base64') {
    await vscode.commands.executeCommand('vscode.open', uri, { preview: false });
  } else {
    const document = await vscode.workspace.openTextDocument(uri);
    await vscode.window.showTextDocument(document, { preview: false });
  }
  await offerHandover(context, ref, item);
}

async function offerHandover(
  context: ArtifactContext,
  ref: ArtifactRef,
  item: { title: string; writable?: boolean; holderHost?: string },
): Promise<void> {
  const notice = readOnlyNotice(item);
  if (!notice) return;
  const chosen = await vscode.window.showWarningMessage(`mevedel: ${notice}`, ASK_FOR_IT);
  if (chosen === ASK_FOR_IT) await askForIt(context, { ref, title: item.title });
}

async function askForIt(context: ArtifactContext, item: Target): Promise<void> {
  // Remembered before asking: a holder idle long enough hands it over at
  // once, and the news of that can come before the server's answer (the
  // user was told then).
  context.asked?.asking(item.ref, item.title);
  let entry: ArtifactEntry;
  try {
    entry = await requestHandover(await context.sender(), params(item.ref));
  } catch (error) {
    context.asked?.drop(item.ref);
    throw error;
  }
  const outcome = context.asked?.answered(item.ref, Boolean(entry.holderHost)) ?? (entry.holderHost ? 'asked' : 'not-held');
  if (outcome === 'not-held') info(`"${entry.title}" is not held by another server: it is writable here`);
  else if (outcome === 'asked') info(`asked ${entry.holderHost} to hand "${entry.title}" over; it stays read-only here until it does (once the item has been idle there for 10 seconds)`);
}

function handedOver(title: string): string {
  return `"${title}" was handed over: it is writable here now`;
}

async function create(context: ArtifactContext, kind: 'document' | 'whiteboard'): Promise<void> {
  const title = await vscode.window.showInputBox({
    title: `mevedel: New ${kind === 'document' ? 'Document' : 'Whiteboard'}`,
    prompt: 'Its title',
    ...STAYS_OPEN,
    validateInput: (text) => (text.trim() === '' ? 'A title is needed' : /[\r\n]/.test(text) ? 'One line' : undefined),
  });
  if (title === undefined) return;
  const workspaceFolder = context.workspaceFolder();
  const entry = await createArtifact(await context.sender(), { kind, title: title.trim(), workspaceFolder });
  await openArtifact(context, { id: entry.id, workspaceFolder });
  info(`created ${kind} "${entry.title}"${entry.attached ? ' (attached to the current session)' : ''}`);
}

async function versions(context: ArtifactContext, item: Target): Promise<void> {
  const sender = await context.sender();
  const rows = versionRows(await artifactVersions(sender, params(item.ref)));
  if (rows.length === 0) {
    info(`"${item.title}" has no versions yet`);
    return;
  }
  const chosen = await vscode.window.showQuickPick(
    rows.map((row) => ({ label: row.label, description: row.description, detail: row.detail, row })),
    { title: `mevedel: Versions of ${item.title}`, placeHolder: 'A version to restore (newest first)', matchOnDetail: true, ...STAYS_OPEN },
  );
  if (!chosen) return;
  const restore = 'Restore';
  const confirmed = await vscode.window.showWarningMessage(
    `Restore ${chosen.label} of "${item.title}"?`,
    { modal: true, detail: 'Its content becomes the item\'s current content (recorded as a new version, so this can be restored back).' },
    restore,
  );
  if (confirmed !== restore) return;
  await restoreArtifact(sender, { ...params(item.ref), version: chosen.row.version.number });
  info(`restored ${chosen.label.toLowerCase()} of "${item.title}"`);
}

async function duplicate(context: ArtifactContext, item: Target): Promise<void> {
  const title = await vscode.window.showInputBox({
    title: `mevedel: Duplicate ${item.title}`,
    prompt: 'The copy\'s title',
    ...STAYS_OPEN,
    value: `${item.entry?.title ?? item.title} (copy)`,
    validateInput: (text) => (text.trim() === '' ? 'A title is needed' : /[\r\n]/.test(text) ? 'One line' : undefined),
  });
  if (title === undefined) return;
  const entry = await duplicateArtifact(await context.sender(), { ...params(item.ref), title: title.trim() });
  await openArtifact(context, { id: entry.id, workspaceFolder: item.ref.workspaceFolder });
  info(`duplicated as "${entry.title}"`);
}

async function remove(context: ArtifactContext, item: Target, files: ArtifactFileSystem): Promise<void> {
  const remove = 'Delete';
  const confirmed = await vscode.window.showWarningMessage(
    `Delete "${item.title}"?`,
    { modal: true, detail: 'Its files, versions and discussion are removed from the workspace. Sessions that attached it keep nothing of it.' },
    remove,
  );
  if (confirmed !== remove) return;
  const deleted = await deleteArtifact(await context.sender(), params(item.ref));
  files.changed(
    files.openUris().filter((uri) => refOf(uri)?.id === item.ref.id),
    vscode.FileChangeType.Deleted,
  );
  info(`deleted "${item.title}"${deleted.keptSession ? `; its session ${deleted.keptSession} ran a turn and was kept` : ''}`);
}

async function comment(context: ArtifactContext, item: Target): Promise<void> {
  const text = await vscode.window.showInputBox({
    title: `mevedel: Comment on ${item.title}`,
    prompt: 'Your comment (it goes to the session working on the item)',
    ...STAYS_OPEN,
    validateInput: (value) => (value.trim() === '' ? 'A comment is needed' : undefined),
  });
  if (text === undefined) return;
  const added = await commentOnArtifact(await context.sender(), { ...params(item.ref), text });
  info(`comment ${added.number} on "${item.title}" added${added.sessionId ? ` (for session ${added.sessionId})` : ''}`);
}

// The artifacts view, its file system and its commands, and what the
// server's didChange does to them.
export class Artifacts implements vscode.Disposable {
  readonly tree: ArtifactTree;
  readonly files: ArtifactFileSystem;
  private readonly disposables: vscode.Disposable[] = [];

  private readonly context: ArtifactContext;

  constructor(outer: ArtifactContext) {
    // The folder of the active item editor, else the extension's; always a
    // folder URI when there is one, so one item has one URI.
    const context: ArtifactContext = {
      sender: () => outer.sender(),
      workspaceFolder: () => {
        const active = vscode.window.activeTextEditor?.document.uri;
        const ref = active && refOf(active);
        const first = vscode.workspace.workspaceFolders?.[0]?.uri.toString();
        return ref ? ref.workspaceFolder ?? first : outer.workspaceFolder() ?? first;
      },
      asked: new AskedItems(),
      listed: (entries, workspaceFolder) => this.listed(entries, workspaceFolder),
    };
    this.context = context;
    this.tree = new ArtifactTree(context);
    this.files = new ArtifactFileSystem(new ArtifactFiles(() => context.sender()));
    const view = vscode.window.createTreeView('mevedel.artifacts', { treeDataProvider: this.tree, showCollapseAll: false });
    this.tree.view = view;
    this.disposables.push(
      view,
      this.tree,
      this.files,
      vscode.workspace.registerFileSystemProvider(ARTIFACT_SCHEME, this.files, { isCaseSensitive: true }),
    );
  }

  // An item changed, through this server or (reason `elsewhere`) another
  // process: the editors showing it read it again first (VS Code keeps an
  // editor with unsaved edits as it is), then the list, so the list never
  // shows an item free while its editor is still read-only. A fenced item
  // is read-only now; an item asked for that is writable here now was
  // handed over, and the user is told so.
  async didChange(change: ArtifactDidChangeParams): Promise<void> {
    const open = this.files.openUris().map((uri) => ({ uri, ...refOf(uri)! })).filter((ref) => ref.id);
    const affected = changedRefs(open, change).map((ref) => ref.uri);
    if (change.reason === 'deleted') {
      this.context.asked!.forget(change);
      this.files.changed(affected, vscode.FileChangeType.Deleted);
    } else if (['written', 'restored', 'handed-over', 'fenced', 'elsewhere'].includes(change.reason)) {
      await this.files.reread(affected);
    }
    this.tree.refresh();
    if (change.reason === 'elsewhere' && change.writable === true) this.announceFree(change);
    if (change.reason === 'fenced' && affected.length > 0) {
      const fenced = refOf(affected[0])!;
      try {
        const item = await readArtifact(await this.context.sender(), params(fenced));
        await offerHandover(this.context, fenced, item);
      } catch {
        // The editor, read again, shows what it can.
      }
    }
  }

  // The list is about to show ENTRIES: an open editor last told otherwise
  // (read-only while the list shows its item free, or the other way round:
  // the list was read before the server's notice came) reads its item
  // again first, and an item asked for that the list shows free was
  // handed over.
  private async listed(entries: readonly ArtifactEntry[], workspaceFolder: string | undefined): Promise<void> {
    const folder = workspaceFolder ?? '';
    const open = this.files.openUris().map((uri) => ({ uri, ...refOf(uri)! })).filter((ref) => ref.id);
    const behind = entries.flatMap((entry) =>
      changedRefs(open, { id: entry.id, workspaceFolder: folder })
        .filter((ref) => this.files.shownWritable(ref.uri) === Boolean(entry.holderHost))
        .map((ref) => ref.uri),
    );
    if (behind.length > 0) await this.files.reread(behind);
    for (const entry of entries) if (!entry.holderHost) this.announceFree({ id: entry.id, workspaceFolder: folder });
  }

  private announceFree(about: ItemInFolder): void {
    const title = this.context.asked!.free(about);
    if (title !== undefined) info(handedOver(title));
  }

  // A new server process: it watches only the items read through it, so
  // the open editors read theirs again (it then tells them what other
  // processes do), and the list is read again.
  serverRestarted(): void {
    this.files.changed(this.files.openUris());
    this.tree.refresh();
  }

  // The current session changed: its attached items are marked anew.
  sessionChanged(): void {
    this.tree.refresh();
  }

  commands(): Record<string, (argument?: unknown) => Promise<void>> {
    const context = this.context;
    const run =
      (title: string, body: (item: Target) => Promise<void>, active = true) =>
      async (argument?: unknown): Promise<void> => {
        try {
          const item = await target(context, argument, title, active);
          if (item) await body(item);
        } catch (error) {
          void vscode.window.showErrorMessage(`mevedel: ${describeFailure(error)}`);
        } finally {
          this.tree.refresh();
        }
      };
    const plain =
      (body: () => Promise<void>) =>
      async (): Promise<void> => {
        try {
          await body();
        } catch (error) {
          void vscode.window.showErrorMessage(`mevedel: ${describeFailure(error)}`);
        } finally {
          this.tree.refresh();
        }
      };
    return {
      openArtifact: run('mevedel: Open Artifact', (item) => openArtifact(context, item.ref), false),
      newDocument: plain(() => create(context, 'document')),
      newWhiteboard: plain(() => create(context, 'whiteboard')),
      refreshArtifacts: plain(async () => undefined),
      artifactVersions: run('mevedel: Artifact Versions', (item) => versions(context, item)),
      saveArtifactVersion: run('mevedel: Save Artifact Version', async (item) => {
        const version = await saveArtifactVersion(await context.sender(), params(item.ref));
        info(`saved version ${version.number} of "${item.title}"`);
      }),
      attachArtifact: run('mevedel: Attach Artifact to Session', async (item) => {
        const result = await attachArtifact(await context.sender(), params(item.ref));
        info(`"${item.title}" is attached to session ${result.sessionId}`);
      }),
      detachArtifact: run('mevedel: Detach Artifact from Session', async (item) => {
        const result = await detachArtifact(await context.sender(), params(item.ref));
        info(`"${item.title}" is no longer attached to session ${result.sessionId}`);
      }),
      duplicateArtifact: run('mevedel: Duplicate Artifact', (item) => duplicate(context, item)),
      deleteArtifact: run('mevedel: Delete Artifact', (item) => remove(context, item, this.files)),
      commentOnArtifact: run('mevedel: Comment on Artifact', (item) => comment(context, item)),
      requestArtifactHandover: run('mevedel: Ask for the Artifact', (item) => askForIt(context, item)),
    };
  }

  dispose(): void {
    for (const disposable of this.disposables) disposable.dispose();
  }
}
