// The mevedel LSP extension as the VS Code client speaks it: method names,
// wire types and typed request wrappers. This module must not import `vscode`:
// the Node tests drive it against the real server over vscode-jsonrpc, so
// everything the extension asks the server for goes through here.

export const VIRTUAL_SCHEME = 'mevedel-resource';
export const CONFIGURATION_SECTION = 'mevedel';

export const Methods = {
  resourceRead: 'mevedel/resource/read',
  resourceGlob: 'mevedel/resource/glob',
  resourceGrep: 'mevedel/resource/grep',
  addressDescribe: 'mevedel/address/describe',
  sessionList: 'mevedel/session/list',
  sessionCreate: 'mevedel/session/create',
  sessionOpen: 'mevedel/session/open',
  sessionClose: 'mevedel/session/close',
  sessionRename: 'mevedel/session/rename',
  sessionSave: 'mevedel/session/save',
  sessionRetryPublication: 'mevedel/session/retryPublication',
  sessionAbandonPublication: 'mevedel/session/abandonPublication',
  turnAbort: 'mevedel/turn/abort',
  turnList: 'mevedel/turn/list',
  turnShow: 'mevedel/turn/show',
} as const;

// Server-to-client notifications.
export const Notifications = {
  sessionDidChange: 'mevedel/session/didChange',
} as const;

// Both vscode-languageclient's LanguageClient and vscode-jsonrpc's
// MessageConnection satisfy this, which is what keeps the layer testable.
export interface RequestSender {
  sendRequest<R>(method: string, params: unknown): Promise<R>;
}

// Where a request runs; without them the server uses its first workspace
// folder and that folder's current session.
export interface Scope {
  workspaceFolder?: string;
  sessionId?: string;
}

// A client-chosen LSP progress token: the server reports `$/progress`
// begin/end for the request that carries it.
export type ProgressToken = number | string;

export interface ReadParams extends Scope {
  workDoneToken?: ProgressToken;
  address?: string;
  uri?: string;
  offset?: number;
  limit?: number;
  charOffset?: number;
  maxLineChars?: number;
  view?: 'numbered' | 'plain';
}

export interface TruncatedLine {
  line: number;
  charOffset: number;
}

export interface ReadResult {
  address: string;
  canonical: string;
  text: string;
  startLine: number;
  endLine: number;
  totalLines: number;
  kind: 'file' | 'directory' | 'listing' | 'empty';
  truncatedLines?: TruncatedLine[];
  nextOffset?: number;
  notice?: string;
}

export interface GlobParams extends Scope {
  workDoneToken?: ProgressToken;
  address: string;
  pattern?: string;
  limit?: number;
}

export interface GlobResult {
  address: string;
  canonical: string;
  matches: string[];
  truncated: boolean;
  notice?: string;
}

export interface GrepParams extends Scope {
  workDoneToken?: ProgressToken;
  address: string;
  pattern: string;
  glob?: string;
  ignoreCase?: boolean;
  limit?: number;
  contextLines?: number;
}

export interface ContextLine {
  line: number;
  text: string;
}

export interface GrepMatch {
  address: string;
  line: number;
  column: number;
  preview: string;
  charOffset?: number;
  before?: ContextLine[];
  after?: ContextLine[];
}

export interface GrepResult {
  address: string;
  canonical: string;
  matches: GrepMatch[];
  filesSearched: number;
  truncated: boolean;
  notice?: string;
}

export interface DescribeParams extends Scope {
  address: string;
}

export interface DescribeResult {
  address: string;
  canonical: string;
  family: string;
  locatorClass: 'exact' | 'session-relative' | 'discovery';
  operations: string[];
  status: 'exists' | 'missing' | 'unavailable' | 'discovery';
  kind: 'file' | 'directory' | 'virtual' | 'listing';
  size?: number;
  reason?: string;
  // The backing file:// URI of a file-backed address, else a virtual URI.
  uri?: string;
}

// ResponseError.data of every failure the server reports.
export interface ErrorData {
  kind: string;
  authored: string;
  reason: string;
}

export function isErrorData(value: unknown): value is ErrorData {
  if (typeof value !== 'object' || value === null) return false;
  const v = value as Record<string, unknown>;
  return typeof v.kind === 'string' && typeof v.authored === 'string' && typeof v.reason === 'string';
}

// The text to show a user for a failed request: the server's own wording
// (it names the authored input), never a stack.
export function describeFailure(error: unknown): string {
  const data = (error as { data?: unknown } | null)?.data;
  if (isErrorData(data)) return `${data.authored}: ${data.reason}`;
  if (error instanceof Error) return error.message;
  return String(error);
}

export function isVirtualUri(uri: string): boolean {
  return uri.startsWith(`${VIRTUAL_SCHEME}:`);
}

export function read(sender: RequestSender, params: ReadParams): Promise<ReadResult> {
  return sender.sendRequest<ReadResult>(Methods.resourceRead, params);
}

export function glob(sender: RequestSender, params: GlobParams): Promise<GlobResult> {
  return sender.sendRequest<GlobResult>(Methods.resourceGlob, params);
}

export function grep(sender: RequestSender, params: GrepParams): Promise<GrepResult> {
  return sender.sendRequest<GrepResult>(Methods.resourceGrep, params);
}

export function describe(sender: RequestSender, params: DescribeParams): Promise<DescribeResult> {
  return sender.sendRequest<DescribeResult>(Methods.addressDescribe, params);
}

// Sessions ---------------------------------------------------------------

export type SessionAction = 'Switch' | 'Resume' | 'Join' | 'Take over';
export type OpenMode = 'auto' | 'resume' | 'join' | 'takeover';
export type Access = 'writable' | 'read-only';

export interface SessionListParams {
  workspaceFolder?: string;
}

export interface SessionListEntry {
  sessionId: string;
  displayName: string;
  action: SessionAction;
  turns: number;
  updatedAt: number;
  lease: 'free' | 'held' | 'expired';
  published: boolean;
  current: boolean;
  latestPrompt?: string;
  holderHost?: string;
}

export interface InspectEntry {
  name: string;
  subject: 'directory' | 'lease' | 'manifest' | 'sidecar';
  reason: string;
  kind?: string;
}

export interface SessionListResult {
  sessions: SessionListEntry[];
  inspect?: InspectEntry[];
}

export interface SessionState {
  sessionId: string;
  displayName: string;
  named: boolean;
  access: Access;
  materialized: boolean;
  settledTurns: number;
  reconciliationPending: boolean;
  current: boolean;
  readOnlyReason?: string;
  holderHost?: string;
  openTurn?: number;
  pendingPublication?: string;
  // An interrupted Rewind or Redo left project files to repair (its ID):
  // mutations are refused until the recovery is retried or abandoned.
  recoveryPending?: string;
}

export interface SessionCreateParams {
  name?: string;
  workspaceFolder?: string;
}

export interface SessionOpenParams {
  sessionId: string;
  mode?: OpenMode;
  confirmTakeover?: boolean;
  workspaceFolder?: string;
}

export interface SessionOpenResult {
  session: SessionState;
  action: 'resume' | 'join' | 'takeover' | 'switch';
  interruptedTurn?: number;
}

// Params of the requests about one session; without sessionId the server
// uses the folder's current session.
export type SessionParams = Scope;

export interface SessionRenameParams extends Scope {
  name: string;
}

export interface SessionCloseResult {
  sessionId: string;
  saved: boolean;
}

export interface SaveResult {
  sessionId: string;
  committed: boolean;
  materialized: boolean;
  turn?: number;
  note?: string;
}

export interface AbandonResult {
  sessionId: string;
  abandoned: boolean;
}

export interface TurnAbortParams extends Scope {
  reason?: string;
}

export interface TurnSummary {
  turn: number;
  turnId: string;
  segment: number;
  prompt: string;
  state: 'in-flight' | 'completed' | 'errored' | 'interrupted';
  beganAt: number;
  toolCalls: number;
  reminder: boolean;
  settledAt?: number;
  reason?: string;
}

export interface TurnListResult {
  sessionId: string;
  turns: TurnSummary[];
}

export interface TurnShowParams extends Scope {
  turn: number;
}

export interface TurnItem {
  kind: string;
  text?: string;
  callId?: string;
  name?: string;
  arguments?: string;
  output?: string;
  isError?: boolean;
  mailId?: string;
  sender?: string;
  // agent_task: how the task ended and why, as the task records them.
  outcome?: 'completed' | 'errored' | 'interrupted';
  reason?: string;
  // agent_task: the callId of the caller's Agent call that started it
  // (absent: not known, or recorded before tasks kept it).
  parentCallId?: string;
}

export interface TurnShowResult {
  sessionId: string;
  summary: TurnSummary;
  prompt: string;
  items: TurnItem[];
  markdown: string;
}

export interface SessionDidChangeParams {
  workspaceFolder: string;
  sessionId: string;
  reason:
    | 'settled'
    | 'checkpoint'
    | 'saved'
    | 'renamed'
    | 'resumed'
    | 'retried'
    | 'read-only'
    | 'closed'
    | 'rewound'
    | 'redone'
    | 'created'
    | 'recovered';
  settledTurns: number;
  access: Access;
}

export function listSessions(sender: RequestSender, params: SessionListParams = {}): Promise<SessionListResult> {
  return sender.sendRequest<SessionListResult>(Methods.sessionList, params);
}

export function createSession(sender: RequestSender, params: SessionCreateParams = {}): Promise<SessionState> {
  return sender.sendRequest<SessionState>(Methods.sessionCreate, params);
}

export function openSession(sender: RequestSender, params: SessionOpenParams): Promise<SessionOpenResult> {
  return sender.sendRequest<SessionOpenResult>(Methods.sessionOpen, params);
}

export function closeSession(sender: RequestSender, params: SessionParams = {}): Promise<SessionCloseResult> {
  return sender.sendRequest<SessionCloseResult>(Methods.sessionClose, params);
}

export function renameSession(sender: RequestSender, params: SessionRenameParams): Promise<SessionState> {
  return sender.sendRequest<SessionState>(Methods.sessionRename, params);
}

export function saveSession(sender: RequestSender, params: SessionParams = {}): Promise<SaveResult> {
  return sender.sendRequest<SaveResult>(Methods.sessionSave, params);
}

export function retryPublication(sender: RequestSender, params: SessionParams = {}): Promise<SaveResult> {
  return sender.sendRequest<SaveResult>(Methods.sessionRetryPublication, params);
}

export function abandonPublication(sender: RequestSender, params: SessionParams = {}): Promise<AbandonResult> {
  return sender.sendRequest<AbandonResult>(Methods.sessionAbandonPublication, params);
}

export function abortTurn(sender: RequestSender, params: TurnAbortParams = {}): Promise<SaveResult> {
  return sender.sendRequest<SaveResult>(Methods.turnAbort, params);
}

export function listTurns(sender: RequestSender, params: SessionParams = {}): Promise<TurnListResult> {
  return sender.sendRequest<TurnListResult>(Methods.turnList, params);
}

export function showTurn(sender: RequestSender, params: TurnShowParams): Promise<TurnShowResult> {
  return sender.sendRequest<TurnShowResult>(Methods.turnShow, params);
}

export type ResourceRef = { uri: string } | { address: string };

export interface Document {
  canonical: string;
  kind: ReadResult['kind'];
  text: string;
}

// Reads a resource's plain projection completely: page after page, and every
// line the server cut at its page width continued from where it stopped, so
// the document has the server's line numbering (definitions and links land on
// the right line).
// `workDoneToken` rides on the first page, which is where the server resolves
// the address and does most of the work.
export async function readDocument(
  sender: RequestSender,
  ref: ResourceRef,
  scope: Scope = {},
  workDoneToken?: ProgressToken,
): Promise<Document> {
  const lines: string[] = [];
  let offset: number | undefined;
  let first: ReadResult | undefined;
  for (;;) {
    const token = first === undefined ? workDoneToken : undefined;
    const page = await read(sender, { ...scope, ...ref, view: 'plain', offset, workDoneToken: token });
    first ??= page;
    if (page.kind === 'empty' || page.totalLines === 0) break;
    const shown = page.text.split('\n');
    for (let i = 0; i < shown.length; i++) lines[page.startLine - 1 + i] = shown[i];
    for (const cut of page.truncatedLines ?? []) {
      lines[cut.line - 1] += await restOfLine(sender, ref, scope, cut);
    }
    if (page.nextOffset === undefined || page.nextOffset === null) break;
    if (page.nextOffset <= page.startLine) {
      throw new Error(`${page.canonical}: the server's next page (${page.nextOffset}) does not advance`);
    }
    offset = page.nextOffset;
  }
  return { canonical: first!.canonical, kind: first!.kind, text: lines.length ? lines.join('\n') + '\n' : '' };
}

async function restOfLine(sender: RequestSender, ref: ResourceRef, scope: Scope, cut: TruncatedLine): Promise<string> {
  let rest = '';
  let charOffset = cut.charOffset;
  for (;;) {
    const page = await read(sender, { ...scope, ...ref, view: 'plain', offset: cut.line, limit: 1, charOffset });
    rest += page.text;
    const again = (page.truncatedLines ?? []).find((t) => t.line === cut.line);
    if (!again) return rest;
    if (again.charOffset <= charOffset) {
      throw new Error(`${page.canonical}: line ${cut.line} does not advance past character ${charOffset}`);
    }
    charOffset = again.charOffset;
  }
}
