// What the session commands decide, apart from showing it: which rows the
// picker offers and how, the open mode each action takes, where a session's
// transcript view is, which open documents a session change makes stale,
// and where a turn starts in a transcript. No `vscode` import, so the Node
// tests run it against the real server.
import {
  describe,
  InspectEntry,
  isVirtualUri,
  OpenMode,
  openSession,
  RequestSender,
  Scope,
  SessionAction,
  SessionDidChangeParams,
  SessionListEntry,
  SessionListResult,
  SessionOpenResult,
  TurnShowResult,
  VIRTUAL_SCHEME,
} from './protocol';

// The `mevedel/session/open` mode for each action the listing offers. A
// takeover makes the server ask the user first (window/showMessageRequest).
export const OPEN_MODES: Readonly<Record<SessionAction, OpenMode>> = {
  Switch: 'auto',
  Resume: 'resume',
  Join: 'join',
  'Take over': 'takeover',
};

export interface PickerEntry {
  label: string;
  description: string;
  detail: string;
  // Exactly one of these: a session to open, or a directory to inspect only.
  session?: SessionListEntry;
  inspect?: InspectEntry;
}

function plural(count: number, word: string): string {
  return `${count} ${word}${count === 1 ? '' : 's'}`;
}

// The picker's rows: every session with its action, turns, host and id, then
// the directories that can only be inspected, with why.
export function pickerEntries(listing: SessionListResult): PickerEntry[] {
  const sessions = listing.sessions.map((session) => ({
    label: session.displayName,
    description: session.current ? `${session.action} · current` : session.action,
    detail: [
      plural(session.turns, 'turn'),
      session.holderHost ? `host ${session.holderHost}` : undefined,
      session.sessionId,
      session.latestPrompt,
    ]
      .filter((part): part is string => part !== undefined && part !== '')
      .join(' · '),
    session,
  }));
  const inspect = (listing.inspect ?? []).map((entry) => ({
    label: entry.name,
    description: 'Inspect only',
    detail: entry.reason,
    inspect: entry,
  }));
  return [...sessions, ...inspect];
}

// Opens a listed session the way its action says.
export function openListed(
  sender: RequestSender,
  session: SessionListEntry,
  workspaceFolder?: string,
): Promise<SessionOpenResult> {
  return openSession(sender, { sessionId: session.sessionId, mode: OPEN_MODES[session.action], workspaceFolder });
}

// The session a virtual URI carries (`mevedel-resource:/WORKSPACE/SESSION/...`,
// `_` for none), in either spelling of its empty authority.
export function uriSession(uri: string): string | undefined {
  if (!isVirtualUri(uri)) return undefined;
  const components = uri.slice(VIRTUAL_SCHEME.length + 1).split('/').filter((part) => part !== '');
  const session = components[1];
  return session && session !== '_' ? decodeURIComponent(session) : undefined;
}

// The virtual URI of a session's transcript (its `history://root`); the
// folder's current session when `scope` names none.
export async function transcriptUri(sender: RequestSender, scope: Scope): Promise<string> {
  const described = await describe(sender, { ...scope, address: 'history://root' });
  if (!described.uri || !uriSession(described.uri)) {
    throw new Error('no session is current; open one with "mevedel: Open Session"');
  }
  return described.uri;
}

// The open virtual documents a session change makes stale: every one of that
// session (its transcript, its work:// listings). A closed session's live
// conversation is gone from the server, so its views keep their last text.
export function staleDocuments(openUris: readonly string[], change: SessionDidChangeParams): string[] {
  if (change.reason === 'closed') return [];
  return openUris.filter((uri) => uriSession(uri) === change.sessionId);
}

// The 0-based line of a transcript where a turn starts: the first line of
// the turn as the transcript renders it (its heading).
export function turnLine(transcript: string, shown: TurnShowResult): number | undefined {
  const heading = shown.markdown.split('\n')[0];
  const line = transcript.split('\n').indexOf(heading);
  return line < 0 ? undefined : line;
}
