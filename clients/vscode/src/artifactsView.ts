// The workspace artifact store in VS Code: the "mevedel Artifacts" view
// (every item by title, the ones attached to the current session marked),
// items opened as `mevedel-artifact:` files whose save is a
// `mevedel/artifact/write` based on the revision the editor read, and the
// artifact commands. What talks to the server is in artifacts.ts.
import * as vscode from 'vscode';
import {
  ARTIFACT_SCHEME,
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
  // Follows an item asked for until it is handed over (the holder tells
  // only its own editors).
  awaitHandover?(ref: ArtifactRef, title: string): void;
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

// A failure as VS Code's file service reports it: the server's words.
function fileSystemError(error: unknown, uri: vscode.Uri): vscode.FileSystemError {
  if (error instanceof vscode.FileSystemError) return error;
  const message = describeFailure(error);
  if (errorKind(error) === 'missing-target') return vscode.FileSystemError.FileNotFound(message || uri);
  return vscode.FileSystemError.Unavailable(message);
}

// Serves items as files: reading one reads the item, saving writes it with
// the revision its text was read at. An item another server process holds
// is a read-only file. Items are watched while open: one that is read-only
// here (or an artifact, which has no lease) is read again every few seconds
// to follow the other process's writes; the rest change only through this
// server, which says so (mevedel/artifact/didChange).
export class ArtifactFileSystem implements vscode.FileSystemProvider {
  private readonly emitter = new vscode.EventEmitter<vscode.FileChangeEvent[]>();
  readonly onDidChangeFile = this.emitter.event;
  private readonly watched = new Map<string, { uri: vscode.Uri; count: number }>();
  private readonly followed = new Map<string, { writable: boolean; revision: string; kind: ItemKind }>();
  private poller: ReturnType<typeof setInterval> | undefined;

  constructor(readonly files: ArtifactFiles) {}

  watch(uri: vscode.Uri): vscode.Disposable {
    const id = uri.toString();
    const entry = this.watched.get(id) ?? { uri, count: 0 };
    entry.count++;
    this.watched.set(id, entry);
    this.poller ??= setInterval(() => void this.poll(), 5_000);
    return new vscode.Disposable(() => {
      const current = this.watched.get(id);
      if (current && --current.count <= 0) {
        this.watched.delete(id);
        this.followed.delete(id);
        const ref = refOf(uri);
        if (ref) this.files.forget(ref);
      }
      if (this.watched.size === 0 && this.poller) {
        clearInterval(this.poller);
        this.poller = undefined;
      }
    });
  }

  private async poll(): Promise<void> {
    for (const [id, { uri }] of this.watched) {
      const last = this.followed.get(id);
      if (!last || (last.writable && last.kind !== 'artifact')) continue;
      const ref = refOf(uri);
      if (!ref) continue;
      try {
        const now = await this.files.stat(ref);
        this.remember(uri, now.item);
        if (now.item.revision !== last.revision || now.writable !== last.writable) this.changed([uri]);
      } catch {
        // Shown when the editor reads it again.
      }
    }
  }

  private remember(uri: vscode.Uri, item: { writable: boolean; revision: string; kind: ItemKind }): void {
    this.followed.set(uri.toString(), { writable: item.writable, revision: item.revision, kind: item.kind });
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
    try {
      const stat = await this.files.stat(ref);
      this.remember(uri, stat.item);
      return {
        type: vscode.FileType.File,
        ctime: 0,
        mtime: stat.mtime,
        size: stat.size,
        permissions: stat.writable ? undefined : vscode.FilePermission.Readonly,
      };
    } catch (error) {
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
    try {
      const loaded = await this.files.load(ref);
      this.remember(uri, loaded.item);
      return loaded.bytes;
    } catch (error) {
      throw fileSystemError(error, uri);
    }
  }

  async writeFile(uri: vscode.Uri, content: Uint8Array): Promise<void> {
    const ref = refOf(uri);
    if (!ref) throw vscode.FileSystemError.NoPermissions(uri);
    try {
      const written = await this.files.save(ref, content);
      const last = this.followed.get(uri.toString());
      if (last) last.revision = written.revision;
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
    if (this.poller) clearInterval(this.poller);
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
      const rows = artifactRows(await listArtifacts(sender, { workspaceFolder: this.context.workspaceFolder() }));
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
  const entry = await requestHandover(await context.sender(), params(item.ref));
  if (entry.holderHost) context.awaitHandover?.(item.ref, entry.title);
  info(
    entry.holderHost
      ? `asked ${entry.holderHost} to hand "${entry.title}" over; it stays read-only here until it does (once the item has been idle there for 10 seconds)`
      : `"${entry.title}" is not held by another server: it is writable here`,
  );
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
      awaitHandover: (ref, title) => this.awaitHandover(ref, title),
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

  // An item changed through this server: the list is read again, and the
  // editors showing it read it again (VS Code keeps an editor with unsaved
  // edits as it is). A fenced item is read-only now.
  didChange(change: ArtifactDidChangeParams): void {
    this.tree.refresh();
    const open = this.files.openUris().map((uri) => ({ uri, ...refOf(uri)! })).filter((ref) => ref.id);
    const affected = changedRefs(open, change).map((ref) => ref.uri);
    if (change.reason === 'deleted') {
      this.files.changed(affected, vscode.FileChangeType.Deleted);
      return;
    }
    // 'elsewhere': another process took, wrote or handed back the item.
    if (['written', 'restored', 'handed-over', 'fenced', 'elsewhere'].includes(change.reason)) this.files.changed(affected);
    if (change.reason === 'fenced' && affected.length > 0) {
      const ref = refOf(affected[0])!;
      void (async () => {
        const item = await readArtifact(await this.context.sender(), params(ref));
        await offerHandover(this.context, ref, item);
      })().catch(() => undefined);
    }
  }

  private readonly awaiting = new Map<string, ReturnType<typeof setInterval>>();

  // Reads an item asked for every 2 seconds (for at most 5 minutes) until
  // it is writable here; then the list and its editors show it so.
  private awaitHandover(ref: ArtifactRef, title: string): void {
    const key = `${ref.workspaceFolder ?? ''}\n${ref.id}`;
    if (this.awaiting.has(key)) return;
    const until = Date.now() + 300_000;
    let reading = false;
    const stop = () => {
      clearInterval(this.awaiting.get(key));
      this.awaiting.delete(key);
    };
    this.awaiting.set(
      key,
      setInterval(async () => {
        if (reading) return;
        reading = true;
        try {
          const item = await readArtifact(await this.context.sender(), params(ref));
          if (item.writable) {
            stop();
            this.tree.refresh();
            this.files.changed(this.files.openUris().filter((uri) => refOf(uri)?.id === ref.id));
            info(`"${title}" was handed over: it is writable here now`);
          } else if (Date.now() > until) {
            stop();
          }
        } catch {
          stop();
        } finally {
          reading = false;
        }
      }, 2_000),
    );
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
    for (const timer of this.awaiting.values()) clearInterval(timer);
    this.awaiting.clear();
    for (const disposable of this.disposables) disposable.dispose();
  }
}
