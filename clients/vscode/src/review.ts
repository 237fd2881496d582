// What a turn (or a range of turns) changed in the tree, as the extension
// reviews it: `mevedel/turn/diff` names every path the turns changed --
// fs writes, ApplyPatch and shell commands alike, from the session's
// checkpoints -- with its kind of change and, asked with `contents`, the
// whole text of both sides of every text file. The quick pick lists the
// paths with the server's descriptions; a text file opens in VS Code's diff
// editor over two read-only `mevedel-diff:` documents whose text this
// module keeps (reviewCommands.ts serves them). A path can be restored to
// its state before the review's first turn that changed it
// (`mevedel/turn/restoreFile`): what that does is asked about first, and a
// yes records it as a turn of its own, which Rewind undoes. No `vscode`
// import: the Node tests drive it against the real server.
import { RequestSender, Scope } from './protocol';

export const TURN_DIFF = 'mevedel/turn/diff';
export const RESTORE_FILE = 'mevedel/turn/restoreFile';
// The scheme of the two sides of a reviewed file.
export const DIFF_SCHEME = 'mevedel-diff';

export interface TurnDiffParams extends Scope {
  first?: number;
  last?: number;
  contents?: boolean;
}

export interface DiffSide {
  kind: 'absent' | 'file' | 'directory' | 'symlink' | 'unknown';
  mode?: number | null;
  size?: number | null;
  sha256?: string | null;
  target?: string | null;
  why?: string | null;
  text?: string | null;
}

export interface PathChange {
  path: string;
  change: string;
  description: string;
  before: DiffSide;
  after: DiffSide;
  firstTurn: number;
  lastTurn: number;
  insertions?: number;
  deletions?: number;
  binary?: boolean;
  renamedFrom?: string | null;
  noText?: string | null;
  diff?: string;
}

export interface TurnDiffResult {
  sessionId: string;
  first: number;
  last: number;
  files: PathChange[];
  insertions: number;
  deletions: number;
  stat: string[];
}

export function turnDiff(sender: RequestSender, params: TurnDiffParams): Promise<TurnDiffResult> {
  return sender.sendRequest<TurnDiffResult>(TURN_DIFF, params);
}

export interface RestoreFileParams extends Scope {
  path: string;
  beforeTurn: number;
  commit?: boolean;
}

export interface RestoreFileResult {
  sessionId: string;
  path: string;
  beforeTurn: number;
  // The file now to the wanted state; absent: already as wanted.
  change?: PathChange | null;
  // The turn that recorded the restore; absent: not done.
  turn?: number | null;
}

export function restoreFile(sender: RequestSender, params: RestoreFileParams): Promise<RestoreFileResult> {
  return sender.sendRequest<RestoreFileResult>(RESTORE_FILE, params);
}

// The question before a restore: the modal's message, and its detail (what
// the restore does, the file now to the wanted state, with its diff).
export function restoreQuestion(path: string, beforeTurn: number, change: PathChange): { message: string; detail: string } {
  const lines = [change.description];
  if (change.binary) lines.push(`binary file: ${change.before.size ?? 0} -> ${change.after.size ?? 0} bytes`);
  else if (change.noText) lines.push(`no line diff: ${change.noText}`);
  if (change.diff) lines.push(change.diff.replace(/\n$/, ''));
  return {
    message: `Restore ${path} to its state before turn ${beforeTurn}?`,
    detail: `${lines.join('\n')}\n\nThe restore is recorded as a new turn of the session; Rewind to before that turn undoes it.`,
  };
}

export type RestoreOutcome =
  | { kind: 'nothing-to-do'; message: string }
  | { kind: 'cancelled'; message: string }
  | { kind: 'restored'; message: string; turn: number };

// Restores FILE (a path change of a review of SESSION) to its state before
// the review's first turn that changed it: asks the server what that does,
// asks CONFIRM (false or undefined -- No, Escape -- restores nothing), and
// only then restores it. A refusal is thrown in the server's words.
export async function restoreFromReview(
  sender: RequestSender,
  where: Scope,
  file: PathChange,
  confirm: (question: { message: string; detail: string }) => Promise<boolean | undefined>,
): Promise<RestoreOutcome> {
  const path = file.path;
  const beforeTurn = file.firstTurn;
  const preview = await restoreFile(sender, { ...where, path, beforeTurn });
  if (!preview.change) return { kind: 'nothing-to-do', message: `${path} is already as it was before turn ${beforeTurn}; nothing to do` };
  if (!(await confirm(restoreQuestion(path, beforeTurn, preview.change)))) {
    return { kind: 'cancelled', message: `restore of ${path} cancelled; nothing changed` };
  }
  const done = await restoreFile(sender, { ...where, sessionId: preview.sessionId, path, beforeTurn, commit: true });
  const turn = done.turn as number;
  return {
    kind: 'restored',
    turn,
    message: `restored ${path} to its state before turn ${beforeTurn} as turn ${turn} (Rewind to before turn ${turn} undoes it)`,
  };
}

// "turn 3" or "turns 1..3".
export function span(result: { first: number; last: number }): string {
  return result.first === result.last ? `turn ${result.first}` : `turns ${result.first}..${result.last}`;
}

// A turn or a range a person typed: N, N..M, N.., ..M, all, or empty (the
// latest turn). An error names the text and what was expected.
export function parseRange(text: string): { first?: number; last?: number } {
  const trimmed = text.trim();
  if (trimmed === '') return {};
  if (trimmed === 'all') return { first: 1 };
  const single = /^(\d+)$/.exec(trimmed);
  if (single) return { first: Number(single[1]), last: Number(single[1]) };
  const range = /^(\d*)\.\.(\d*)$/.exec(trimmed);
  if (range) return { first: range[1] ? Number(range[1]) : 1, last: range[2] ? Number(range[2]) : undefined };
  throw new Error(`"${trimmed}" is not a turn or a range (N, N..M, N.., ..M or all)`);
}

// Whether a path's two sides are texts the diff editor can compare.
export function comparable(file: PathChange): boolean {
  return typeof file.before.text === 'string' && typeof file.after.text === 'string';
}

// Why a path opens no diff editor: its description, and why it has no text.
export function noDiffMessage(file: PathChange): string {
  if (file.binary) return `${file.description}: a binary file (${file.before.size ?? 0} -> ${file.after.size ?? 0} bytes)`;
  if (file.noText) return `${file.description}: no line diff (${file.noText})`;
  return file.description;
}

export interface ReviewItem {
  label: string;
  description: string;
  detail?: string;
  file: PathChange;
}

// The quick pick's rows: the path (a rename: old -> new), then what
// happened to it and how many lines, in the order the server sorted them.
export function reviewItems(result: TurnDiffResult): ReviewItem[] {
  const ranged = result.first !== result.last;
  return result.files.map((file) => {
    const name = file.renamedFrom ? `${file.renamedFrom} -> ${file.path}` : file.path;
    const what = file.description.startsWith(`${name}: `) ? file.description.slice(name.length + 2) : file.description;
    const parts = [what];
    if (file.diff) parts.push(`+${file.insertions ?? 0} -${file.deletions ?? 0}`);
    if (ranged) parts.push(file.firstTurn === file.lastTurn ? `turn ${file.firstTurn}` : `turns ${file.firstTurn}..${file.lastTurn}`);
    const detail = comparable(file) ? undefined : noDiffMessage(file);
    return { label: name, description: parts.join(' · '), detail, file };
  });
}

// The placeholder line of the quick pick.
export function reviewSummary(result: TurnDiffResult): string {
  const n = result.files.length;
  if (n === 0) return `${span(result)} of ${result.sessionId} changed nothing in the tree`;
  return `${span(result)} of ${result.sessionId}: ${n} path${n === 1 ? '' : 's'} changed, +${result.insertions} -${result.deletions}`;
}

export interface DiffDocuments {
  before: string;
  after: string;
  title: string;
}

// The texts of the reviewed files' sides, served as `mevedel-diff:` documents
// whose path is /SESSION/KEY/SIDE/PATH. Each review of a file gets a key of
// its own, so a side stays what that review showed while its editor is open.
export class ReviewDocuments {
  private readonly texts = new Map<string, string>();
  private readonly files = new Map<string, { sessionId: string; file: PathChange }>();
  private next = 0;

  // Keeps FILE's two sides; returns their URIs and the diff editor's title.
  add(result: TurnDiffResult, file: PathChange): DiffDocuments {
    if (!comparable(file)) throw new Error(noDiffMessage(file));
    const key = `${++this.next}`;
    this.files.set(key, { sessionId: result.sessionId, file });
    const uri = (side: string, path: string) => {
      this.texts.set(`${key}/${side}`, side.startsWith('before') ? (file.before.text as string) : (file.after.text as string));
      const segments = [result.sessionId, key, side, ...path.split('/')].map(encodeURIComponent);
      return `${DIFF_SCHEME}:/${segments.join('/')}`;
    };
    const before = uri(`before-turn-${file.firstTurn}`, file.renamedFrom ?? file.path);
    const after = uri(`after-turn-${file.lastTurn}`, file.path);
    const name = file.renamedFrom ? `${file.renamedFrom} -> ${file.path}` : file.path;
    return { before, after, title: `${name} (${span({ first: file.firstTurn, last: file.lastTurn })}: before ↔ after)` };
  }

  // The text of the side whose URI has the (decoded) PATH, or undefined
  // for one no review made.
  text(path: string): string | undefined {
    const [, , key, side] = path.split('/');
    return this.texts.get(`${key}/${side}`);
  }

  // The session and the path change whose side has the (decoded) PATH, or
  // undefined for one no review made.
  reviewed(path: string): { sessionId: string; file: PathChange } | undefined {
    const [, , key] = path.split('/');
    return this.files.get(key);
  }

  // Forgets the side whose editor closed (and the file once both are).
  forget(path: string): void {
    const [, , key, side] = path.split('/');
    this.texts.delete(`${key}/${side}`);
    if (![...this.texts.keys()].some((k) => k.startsWith(`${key}/`))) this.files.delete(key);
  }
}
