// The workspace artifact store as the VS Code client speaks it: the
// `mevedel/artifact/*` requests, the rows the artifacts view and picker
// show, the `mevedel-artifact:` URIs items open under, and what opening,
// saving and reloading an item does (the file system provider in
// artifactsView.ts only wraps `ArtifactFiles`). No `vscode` import: the
// Node tests run it against the real server.
import { isErrorData, RequestSender } from './protocol';

// Items open as files of this scheme: `mevedel-artifact:/ID/NAME?FOLDER`,
// NAME being the title with the primary file's extension (what the tab
// shows), FOLDER the workspace folder's URI (empty for the first folder).
export const ARTIFACT_SCHEME = 'mevedel-artifact';

export const ArtifactMethods = {
  list: 'mevedel/artifact/list',
  create: 'mevedel/artifact/create',
  read: 'mevedel/artifact/read',
  write: 'mevedel/artifact/write',
  attach: 'mevedel/artifact/attach',
  detach: 'mevedel/artifact/detach',
  duplicate: 'mevedel/artifact/duplicate',
  delete: 'mevedel/artifact/delete',
  versions: 'mevedel/artifact/versions',
  saveVersion: 'mevedel/artifact/saveVersion',
  restore: 'mevedel/artifact/restore',
  comment: 'mevedel/artifact/comment',
  requestHandover: 'mevedel/artifact/requestHandover',
  conversation: 'mevedel/artifact/conversation',
  didChange: 'mevedel/artifact/didChange',
} as const;

export type ItemKind = 'document' | 'whiteboard' | 'artifact';
export type ContentEncoding = 'utf-8' | 'base64';

export interface ArtifactScope {
  sessionId?: string;
  workspaceFolder?: string;
}

export interface ArtifactParams extends ArtifactScope {
  id: string;
}

export interface ArtifactEntry {
  id: string;
  title: string;
  kind: ItemKind;
  primary: string;
  attached: boolean;
  updatedAt: number;
  versions: number;
  holderHost?: string;
  // That holder for people: its editor or process, pid and host.
  holder?: string;
}

export interface ArtifactListResult {
  items: ArtifactEntry[];
}

export interface ArtifactCreateParams extends ArtifactScope {
  kind: ItemKind;
  title: string;
  content?: string;
  encoding?: ContentEncoding;
  fileName?: string;
}

export interface ArtifactComment {
  number: number;
  at: number;
  author: string;
  text: string;
  sessionId?: string;
}

export interface ArtifactReadResult {
  id: string;
  title: string;
  kind: ItemKind;
  primary: string;
  content: string;
  encoding: ContentEncoding;
  revision: string;
  attached: boolean;
  writable: boolean;
  comments?: ArtifactComment[];
  holderHost?: string;
  holder?: string;
}

export interface ArtifactWriteParams extends ArtifactParams {
  content: string;
  encoding?: ContentEncoding;
  baseRevision?: string;
}

export interface ArtifactWriteResult {
  revision: string;
}

export interface ArtifactAttachResult {
  id: string;
  sessionId: string;
  attached: boolean;
}

export interface ArtifactDuplicateParams extends ArtifactParams {
  title?: string;
}

export interface ArtifactDeleteResult {
  id: string;
  keptSession?: string;
}

export interface ArtifactVersion {
  number: number;
  at: number;
  reason: 'turn' | 'saved' | 'created' | 'restored' | 'replaced';
  size: number;
  revision: string;
  sessionId?: string;
  turn?: number;
}

export interface ArtifactVersionsResult {
  versions: ArtifactVersion[];
}

export interface ArtifactRestoreParams extends ArtifactParams {
  version: number;
}

export interface ArtifactCommentParams extends ArtifactParams {
  text: string;
}

export interface ArtifactDidChangeParams {
  workspaceFolder: string;
  id: string;
  reason:
    | 'created'
    | 'written'
    | 'restored'
    | 'deleted'
    | 'attached'
    | 'detached'
    | 'commented'
    | 'versioned'
    | 'handed-over'
    | 'fenced'
    | 'delivered'
    // Another process took its lease, wrote it or handed it back.
    | 'elsewhere';
  writable?: boolean;
  holder?: string;
  holderHost?: string;
}

export function listArtifacts(sender: RequestSender, params: ArtifactScope = {}): Promise<ArtifactListResult> {
  return sender.sendRequest<ArtifactListResult>(ArtifactMethods.list, params);
}

export function createArtifact(sender: RequestSender, params: ArtifactCreateParams): Promise<ArtifactEntry> {
  return sender.sendRequest<ArtifactEntry>(ArtifactMethods.create, params);
}

export function readArtifact(sender: RequestSender, params: ArtifactParams): Promise<ArtifactReadResult> {
  return sender.sendRequest<ArtifactReadResult>(ArtifactMethods.read, params);
}

export function writeArtifact(sender: RequestSender, params: ArtifactWriteParams): Promise<ArtifactWriteResult> {
  return sender.sendRequest<ArtifactWriteResult>(ArtifactMethods.write, params);
}

export function attachArtifact(sender: RequestSender, params: ArtifactParams): Promise<ArtifactAttachResult> {
  return sender.sendRequest<ArtifactAttachResult>(ArtifactMethods.attach, params);
}

export function detachArtifact(sender: RequestSender, params: ArtifactParams): Promise<ArtifactAttachResult> {
  return sender.sendRequest<ArtifactAttachResult>(ArtifactMethods.detach, params);
}

export function duplicateArtifact(sender: RequestSender, params: ArtifactDuplicateParams): Promise<ArtifactEntry> {
  return sender.sendRequest<ArtifactEntry>(ArtifactMethods.duplicate, params);
}

export function deleteArtifact(sender: RequestSender, params: ArtifactParams): Promise<ArtifactDeleteResult> {
  return sender.sendRequest<ArtifactDeleteResult>(ArtifactMethods.delete, params);
}

export function artifactVersions(sender: RequestSender, params: ArtifactParams): Promise<ArtifactVersionsResult> {
  return sender.sendRequest<ArtifactVersionsResult>(ArtifactMethods.versions, params);
}

export function saveArtifactVersion(sender: RequestSender, params: ArtifactParams): Promise<ArtifactVersion> {
  return sender.sendRequest<ArtifactVersion>(ArtifactMethods.saveVersion, params);
}

export function restoreArtifact(sender: RequestSender, params: ArtifactRestoreParams): Promise<ArtifactWriteResult> {
  return sender.sendRequest<ArtifactWriteResult>(ArtifactMethods.restore, params);
}

export function commentOnArtifact(sender: RequestSender, params: ArtifactCommentParams): Promise<ArtifactComment> {
  return sender.sendRequest<ArtifactComment>(ArtifactMethods.comment, params);
}

export function requestHandover(sender: RequestSender, params: ArtifactParams): Promise<ArtifactEntry> {
  return sender.sendRequest<ArtifactEntry>(ArtifactMethods.requestHandover, params);
}

// Rows ------------------------------------------------------------------

export interface ArtifactRow {
  // The title; two items with one title are two rows (the id tells them apart).
  label: string;
  // Its kind, then `attached` when the session has it, then who holds it.
  description: string;
  detail: string;
  // The row's state for the view's menus: `artifact` plus `.attached` or
  // `.detached`, and `.held` while another server process holds it.
  contextValue: string;
  entry: ArtifactEntry;
}

function plural(count: number, word: string): string {
  return `${count} ${word}${count === 1 ? '' : 's'}`;
}

// The artifacts list: every item by title (the server's order), the ones
// attached to the session marked.
export function artifactRows(listing: ArtifactListResult): ArtifactRow[] {
  return listing.items.map((entry) => ({
    label: entry.title,
    description: [entry.kind, entry.attached ? 'attached' : undefined, entry.holderHost ? `held by ${entry.holderHost}` : undefined]
      .filter((part): part is string => part !== undefined)
      .join(' · '),
    detail: `${plural(entry.versions, 'version')} · ${entry.primary} · ${entry.id}`,
    contextValue: `artifact.${entry.attached ? 'attached' : 'detached'}${entry.holderHost ? '.held' : ''}`,
    entry,
  }));
}

// The versions picker's rows, newest first (as the server lists them).
export interface VersionRow {
  label: string;
  description: string;
  detail: string;
  version: ArtifactVersion;
}

const REASONS: Readonly<Record<ArtifactVersion['reason'], string>> = {
  turn: 'written by a turn',
  saved: 'saved',
  created: 'created',
  restored: 'restored',
  replaced: 'replaced by a restore',
};

export function versionRows(result: ArtifactVersionsResult): VersionRow[] {
  return result.versions.map((version) => ({
    label: `Version ${version.number}`,
    description: `${REASONS[version.reason] ?? version.reason} · ${plural(version.size, 'byte')}`,
    detail: [
      new Date(version.at * 1000).toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC'),
      version.sessionId ? `session ${version.sessionId}${version.turn !== undefined ? `, turn ${version.turn}` : ''}` : undefined,
      version.revision.slice(0, 12),
    ]
      .filter((part): part is string => part !== undefined)
      .join(' · '),
    version,
  }));
}

// URIs ------------------------------------------------------------------

export interface ArtifactRef {
  id: string;
  workspaceFolder?: string;
}

// The parts of an item's URI (VS Code's `Uri.from` takes them; its `path`
// and `query` give them back decoded).
export interface ArtifactUriParts {
  scheme: typeof ARTIFACT_SCHEME;
  path: string;
  query: string;
}

const ID = /^[A-Za-z0-9][A-Za-z0-9_-]{0,79}$/;

// The name an item's editor tab shows: its title with the extension that
// gives VS Code the language (a whiteboard is JSON text).
export function artifactFileName(item: { title: string; kind: ItemKind; primary: string }): string {
  const extension =
    item.kind === 'whiteboard' ? '.excalidraw.json' : item.kind === 'document' ? '.md' : (/\.[A-Za-z0-9]+$/.exec(item.primary)?.[0] ?? '');
  // One path component: no separators, no control characters, not a dot name.
  let name = item.title.replace(/[\\/\u0000-\u001f\u007f]/g, '-').trim().slice(0, 120);
  if (name === '' || name === '.' || name === '..') name = item.primary;
  return name.toLowerCase().endsWith(extension.toLowerCase()) ? name : name + extension;
}

export function artifactUriParts(ref: ArtifactRef, item: { title: string; kind: ItemKind; primary: string }): ArtifactUriParts {
  return { scheme: ARTIFACT_SCHEME, path: `/${ref.id}/${artifactFileName(item)}`, query: ref.workspaceFolder ?? '' };
}

// The item a URI's decoded path and query name (undefined for anything else,
// such as the `/ID` folder VS Code may ask about).
export function artifactRef(path: string, query: string): ArtifactRef | undefined {
  const parts = path.split('/').filter((part) => part !== '');
  if (parts.length !== 2 || !ID.test(parts[0])) return undefined;
  return query ? { id: parts[0], workspaceFolder: query } : { id: parts[0] };
}

function sameFolder(a: string, b: string): boolean {
  const normal = (uri: string) => {
    let text = uri;
    try {
      text = decodeURIComponent(uri);
    } catch {
      // Not an escape sequence; compare as written.
    }
    return text.replace(/\/+$/, '');
  };
  return normal(a) === normal(b);
}

// An item as the server names it: its id in a workspace folder's URI.
export interface ItemInFolder {
  id: string;
  workspaceFolder: string;
}

// The open items a didChange is about: that id, in that folder (an item
// opened in the first folder carries no folder in its URI).
export function changedRefs<T extends ArtifactRef>(open: readonly T[], change: ItemInFolder): T[] {
  return open.filter(
    (ref) => ref.id === change.id && (ref.workspaceFolder === undefined || sameFolder(ref.workspaceFolder, change.workspaceFolder)),
  );
}

// What the user is told --------------------------------------------------

export const ASK_FOR_IT = 'Ask for It';

// Why an item opens read-only, or undefined when it is writable here.
export function readOnlyNotice(item: { title: string; writable?: boolean; holderHost?: string }): string | undefined {
  if (item.writable !== false && !item.holderHost) return undefined;
  const holder = item.holderHost ? `another mevedel server on ${item.holderHost}` : 'another mevedel server';
  return `"${item.title}" is read-only here: ${holder} holds it. "${ASK_FOR_IT}" asks it to hand the item over (it does once the item has been idle there for 10 seconds).`;
}

// What asking for an item comes to, once the server answered: it was not
// held, it is asked for (read-only until handed over), or the user was
// told already that it was handed over (the holder was idle and handed it
// over at once: the news can come before the answer).
export type AskOutcome = 'not-held' | 'asked' | 'told';

// The items this window asked another server process to hand over, until
// it learns one is writable here (from the server's change notice or from
// the list), when the user is told it was handed over -- once, as soon as
// that news comes, whether before or after the server's answer.
export class AskedItems {
  private items: (ArtifactRef & { title: string; state: 'asking' | 'asked' | 'told' })[] = [];

  private index(ref: ArtifactRef): number {
    return this.items.findIndex((item) => item.id === ref.id && item.workspaceFolder === ref.workspaceFolder);
  }

  // Before the request goes out.
  asking(ref: ArtifactRef, title: string): void {
    this.drop(ref);
    this.items.push({ id: ref.id, workspaceFolder: ref.workspaceFolder, title, state: 'asking' });
  }

  // The server's answer to the request for REF: whether another process
  // held it then.
  answered(ref: ArtifactRef, held: boolean): AskOutcome {
    const item = this.items[this.index(ref)];
    if (item?.state === 'told' || !held) {
      this.drop(ref);
      return item?.state === 'told' ? 'told' : 'not-held';
    }
    if (item) item.state = 'asked';
    return 'asked';
  }

  // The request failed: nothing is awaited.
  drop(ref: ArtifactRef): void {
    const at = this.index(ref);
    if (at >= 0) this.items.splice(at, 1);
  }

  // News that ABOUT is writable here: the title to announce as handed over
  // when it was asked for and not announced yet, else undefined.
  free(about: ItemInFolder): string | undefined {
    const [item] = changedRefs(this.items, about);
    if (!item || item.state === 'told') return undefined;
    if (item.state === 'asked') this.items.splice(this.items.indexOf(item), 1);
    else item.state = 'told'; // the answer, still to come, says nothing more
    return item.title;
  }

  // ABOUT was deleted.
  forget(about: ItemInFolder): void {
    for (const item of changedRefs(this.items, about)) this.items.splice(this.items.indexOf(item), 1);
  }
}

// The actions an open item offers: asking for it while another process
// holds it.
export function itemActions(item: { writable?: boolean; holderHost?: string }): string[] {
  return item.writable === false || item.holderHost ? [ASK_FOR_IT] : [];
}

// The kinds of refusal after which the editor's text is no longer the
// item's: the item is read again (a held one then shows read-only).
const RELOAD_KINDS = new Set(['conflict', 'item-lease-lost', 'item-held', 'missing-target']);

export function errorKind(error: unknown): string | undefined {
  const data = (error as { data?: unknown } | null)?.data;
  return isErrorData(data) ? data.kind : undefined;
}

export function needsReload(error: unknown): boolean {
  const kind = errorKind(error);
  return kind !== undefined && RELOAD_KINDS.has(kind);
}

// Files -----------------------------------------------------------------

export interface LoadedItem {
  bytes: Uint8Array;
  item: ArtifactReadResult;
}

export interface ItemStat {
  size: number;
  // Milliseconds: when this client first saw the item's current revision,
  // so a new revision is a newer file to VS Code and the same one is not.
  mtime: number;
  writable: boolean;
  item: ArtifactReadResult;
}

function bytesOf(item: { content: string; encoding: ContentEncoding }): Uint8Array {
  return Buffer.from(item.content, item.encoding === 'base64' ? 'base64' : 'utf8');
}

function key(ref: ArtifactRef): string {
  return `${ref.workspaceFolder ?? ''}\n${ref.id}`;
}

// What an item's editor does with the server: reading it (remembering the
// revision the editor's text came from) and saving it as a whole-item write
// based on that revision, so a save over a change the editor never saw is
// refused (`conflict`), as is one after another server process took the
// item (`item-held`, `item-lease-lost`).
export class ArtifactFiles {
  // The revision each open item's text was read at, and how it is spelled.
  private readonly loaded = new Map<string, { revision: string; encoding: ContentEncoding }>();
  private readonly seen = new Map<string, { revision: string; mtime: number }>();
  private clock = 0;

  constructor(private readonly sender: () => Promise<RequestSender>) {}

  private scope(ref: ArtifactRef): ArtifactParams {
    return ref.workspaceFolder ? { id: ref.id, workspaceFolder: ref.workspaceFolder } : { id: ref.id };
  }

  private mtimeOf(ref: ArtifactRef, revision: string): number {
    const known = this.seen.get(key(ref));
    if (known?.revision === revision) return known.mtime;
    this.clock = Math.max(this.clock + 1, Date.now());
    this.seen.set(key(ref), { revision, mtime: this.clock });
    return this.clock;
  }

  async stat(ref: ArtifactRef): Promise<ItemStat> {
    const item = await readArtifact(await this.sender(), this.scope(ref));
    return { size: bytesOf(item).byteLength, mtime: this.mtimeOf(ref, item.revision), writable: item.writable, item };
  }

  // Reads the item for its editor; a later save is based on this revision.
  async load(ref: ArtifactRef): Promise<LoadedItem> {
    const item = await readArtifact(await this.sender(), this.scope(ref));
    this.mtimeOf(ref, item.revision);
    this.loaded.set(key(ref), { revision: item.revision, encoding: item.encoding });
    return { bytes: bytesOf(item), item };
  }

  // The revision the editor's text of the item was read at.
  baseRevision(ref: ArtifactRef): string | undefined {
    return this.loaded.get(key(ref))?.revision;
  }

  // Saves the editor's text as the item's new content. A refusal is thrown
  // as the server's error (needsReload tells whether to read the item again).
  async save(ref: ArtifactRef, bytes: Uint8Array): Promise<ArtifactWriteResult> {
    const base = this.loaded.get(key(ref));
    const encoding = base?.encoding ?? 'utf-8';
    const content = Buffer.from(bytes).toString(encoding === 'base64' ? 'base64' : 'utf8');
    const written = await writeArtifact(await this.sender(), {
      ...this.scope(ref),
      content,
      encoding,
      baseRevision: base?.revision,
    });
    this.loaded.set(key(ref), { revision: written.revision, encoding });
    this.mtimeOf(ref, written.revision);
    return written;
  }

  // The item is no longer open.
  forget(ref: ArtifactRef): void {
    this.loaded.delete(key(ref));
    this.seen.delete(key(ref));
  }
}
