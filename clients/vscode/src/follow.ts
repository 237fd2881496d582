// Following a session owned elsewhere, refresh, compaction and /clear, as
// the VS Code client speaks them. No `vscode` import: the Node tests run it
// against the real server with the mevedel CLI owning the followed session.
import { RequestSender, Scope } from './protocol';
import { uriSession } from './sessions';

export const FollowMethods = {
  setFollow: 'mevedel/session/setFollow',
  refresh: 'mevedel/session/refresh',
  compact: 'mevedel/session/compact',
  clear: 'mevedel/session/clear',
  didPublish: 'mevedel/session/didPublish',
} as const;

export interface FollowState {
  sessionId: string;
  enabled: boolean;
  following: boolean;
  mode?: 'notify' | 'poll';
}

export interface PublishedTurn {
  turn: number;
  turnId: string;
  segment: number;
  change: 'new' | 'replaced';
  state: 'completed' | 'errored' | 'interrupted';
  prompt: string;
}

export interface SessionDidPublishParams {
  workspaceFolder: string;
  sessionId: string;
  generation: number;
  displayName: string;
  named: boolean;
  settledTurns: number;
  turns: PublishedTurn[];
  removedTurns: number[];
  renamed: boolean;
  holderChanged: boolean;
  holderHost?: string;
  leaseState?: string;
  heldBack?: string;
}

export interface SessionRefreshResult {
  sessionId: string;
  status: 'advanced' | 'unchanged' | 'held-back' | 'writable';
  publication?: SessionDidPublishParams;
}

export interface SegmentRotationResult {
  sessionId: string;
  segment: number;
  previousSegment: number;
  committed: boolean;
  chapter?: number;
}

export function setFollow(sender: RequestSender, params: Scope & { enabled: boolean }): Promise<FollowState> {
  return sender.sendRequest<FollowState>(FollowMethods.setFollow, params);
}

export function refreshSession(sender: RequestSender, scope: Scope = {}): Promise<SessionRefreshResult> {
  return sender.sendRequest<SessionRefreshResult>(FollowMethods.refresh, scope);
}

export function compactSession(sender: RequestSender, params: Scope & { summary: string }): Promise<SegmentRotationResult> {
  return sender.sendRequest<SegmentRotationResult>(FollowMethods.compact, params);
}

export function clearSession(sender: RequestSender, scope: Scope = {}): Promise<SegmentRotationResult> {
  return sender.sendRequest<SegmentRotationResult>(FollowMethods.clear, scope);
}

// The open virtual documents a publication makes stale: every one of that
// session, unless the server held the new head back.
export function publishedDocuments(openUris: readonly string[], published: SessionDidPublishParams): string[] {
  if (published.heldBack) return [];
  return openUris.filter((uri) => uriSession(uri) === published.sessionId);
}

export function describeFollow(state: FollowState): string {
  if (!state.enabled) return `${state.sessionId}: not following ("mevedel: Refresh Session" reads the latest)`;
  if (state.following) return `${state.sessionId}: following the owner's publications (${state.mode ?? 'on'})`;
  return `${state.sessionId}: following is on; it applies while the session is read-only here`;
}

export function describeRefresh(result: SessionRefreshResult): string {
  const said = {
    advanced: `now at the owner's latest (${result.publication?.settledTurns ?? '?'} settled turns)`,
    unchanged: "already at the owner's latest",
    'held-back': `not advanced: ${result.publication?.heldBack ?? 'this client has changes it never committed'}`,
    writable: 'you own it; there is nothing to refresh',
  }[result.status];
  return `${result.sessionId}: ${said}`;
}
