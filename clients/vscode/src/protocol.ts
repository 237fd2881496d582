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
