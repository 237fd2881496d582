// Rewind, Redo, Fork, Worktree Fork and Save As as the VS Code client runs
// them: the wire types, the impact a prepare reports turned into the text the
// user confirms, and the prepare -> confirm -> commit sequence. No `vscode`
// import: the Node tests run every transaction against the real server, with
// a confirm callback standing in for the modal dialog.
import { isErrorData, openSession, RequestSender, Scope, SessionOpenResult, SessionState } from './protocol';

export const LifecycleMethods = {
  rewindPrepare: 'mevedel/rewind/prepare',
  rewindCommit: 'mevedel/rewind/commit',
  redoList: 'mevedel/redo/list',
  redoPrepare: 'mevedel/redo/prepare',
  redoCommit: 'mevedel/redo/commit',
  forkPrepare: 'mevedel/fork/prepare',
  forkCommit: 'mevedel/fork/commit',
  worktreeForkPrepare: 'mevedel/worktreeFork/prepare',
  worktreeForkCommit: 'mevedel/worktreeFork/commit',
  saveAsPrepare: 'mevedel/saveAs/prepare',
  saveAsCommit: 'mevedel/saveAs/commit',
  forkVariants: 'mevedel/fork/variants',
  retryRecovery: 'mevedel/session/retryRecovery',
  abandonRecovery: 'mevedel/session/abandonRecovery',
} as const;

export type Boundary = 'after' | 'before';

export interface TurnLabel {
  turn: number;
  segment: number;
  turnId: string;
  preview: string;
}

export interface FileRestore {
  path: string;
  state: 'present' | 'absent' | 'directory' | 'symlink';
  checkpoint: string;
  turn: number;
  changes: boolean;
  // delete, restore, create directory, remove directory, chmod 755, relink, unchanged
  action?: string;
  sha256?: string;
  size?: number;
  mode?: number;
  linkTarget?: string;
  // Rewind: the retained sub-agents (paths) whose tasks changed it.
  agents?: string[];
}

export interface KnownGap {
  path: string;
  turn: number;
  reason: string;
}

export interface ExternalChange {
  path: string;
  recordedTurn: number;
}

export interface GitCheck {
  status: 'checked' | 'no-repository' | 'unavailable' | 'not-local';
  divergent?: string[];
  detail?: string;
}

// What a commit changes in the project and the transcript: shared by Rewind
// and Redo.
interface FileImpact {
  restores?: FileRestore[];
  gaps?: KnownGap[];
  externallyModified?: ExternalChange[];
  git: GitCheck;
  token: string;
  // What happens to the agent's own history of the conversation (absent:
  // the session retains none).
  agentHistory?: string | null;
}

export interface RewindImpact extends FileImpact {
  sessionId: string;
  boundary: Boundary;
  turn: number;
  keptTurns: number;
  discarded?: TurnLabel[];
  transcriptChanges: boolean;
  empty: boolean;
}

export interface RedoState {
  publicationId: string;
  turnCount: number;
  updatedAt: number;
  lastTurn?: TurnLabel;
}

export interface RedoListResult {
  sessionId: string;
  states: RedoState[];
  skipped?: Array<{ publicationId: string; reason: string }>;
  currentHead?: string;
}

export interface RedoImpact extends FileImpact {
  sessionId: string;
  publicationId: string;
  commonTurns: number;
  restored?: TurnLabel[];
  discarded?: TurnLabel[];
}

export interface ForkImpact {
  sessionId: string;
  response: TurnLabel;
  forkPointId: string;
  turns: number;
  attachedArtifacts?: string[];
  localFiles?: string[];
  plansNote?: string;
  token: string;
  agentHistory?: string | null;
}

export interface WorktreePlace {
  name: string;
  branch: string;
  directory: string;
  baseCommit: string;
  sourceCheckout: string;
}

export interface UnrestoredFile {
  path: string;
  reason: string;
}

export interface WorktreeForkImpact {
  sessionId: string;
  response: TurnLabel;
  forkPointId: string;
  turns: number;
  worktree: WorktreePlace;
  restores?: string[];
  unrestored?: UnrestoredFile[];
  shared?: string[];
  localFiles?: string[];
  plansNote?: string;
  token: string;
  agentHistory?: string | null;
}

export interface SaveAsImpact {
  sessionId: string;
  name: string;
  turns: number;
  segments: number;
  chats: number;
  artifacts: number;
  size: number;
  token: string;
  agentHistory?: string | null;
}

export interface InPlaceResult {
  sessionId: string;
  committed: boolean;
  settledTurns: number;
  written?: string[];
  warning?: string;
}

export interface ChildResult {
  session: SessionState;
  sourceId: string;
  warning?: string;
}

export interface WorktreeForkResult extends ChildResult {
  worktree: WorktreePlace;
  restored?: string[];
  unrestored?: UnrestoredFile[];
}

export interface RecoveryResult {
  sessionId: string;
  recoveryId: string;
  resolution: 'rolled-back' | 'completed' | 'abandoned';
  written?: string[];
  // Files edited outside the session since the interruption: the server
  // keeps them as they are rather than overwrite the user's edit.
  left?: string[];
  // What the person is told of them: the server's sentence, the one the
  // CLI and every client say (absent when nothing was left).
  leftNote?: string;
}

// Requests ----------------------------------------------------------------

export function listRedo(sender: RequestSender, scope: Scope = {}): Promise<RedoListResult> {
  return sender.sendRequest<RedoListResult>(LifecycleMethods.redoList, scope);
}

export function retryRecovery(sender: RequestSender, scope: Scope = {}): Promise<RecoveryResult> {
  return sender.sendRequest<RecoveryResult>(LifecycleMethods.retryRecovery, scope);
}

export function abandonRecovery(sender: RequestSender, scope: Scope = {}): Promise<RecoveryResult> {
  return sender.sendRequest<RecoveryResult>(LifecycleMethods.abandonRecovery, scope);
}

// The server refused because an interrupted transaction left a recovery:
// the client then offers retry and abandon.
export function isRecoveryPending(error: unknown): boolean {
  const data = (error as { data?: unknown } | null)?.data;
  return isErrorData(data) && data.kind === 'recovery-pending';
}

// Impact text --------------------------------------------------------------

// What the user confirms: a one-line summary, the details (one fact a line),
// and the verb of the confirming button.
export interface Impact {
  summary: string;
  details: string[];
  action: string;
}

function plural(count: number, word: string): string {
  return `${count} ${word}${count === 1 ? '' : 's'}`;
}

function labelLine(label: TurnLabel): string {
  return `  turn ${label.turn}: ${label.preview}`;
}

function fileLines(impact: FileImpact): string[] {
  const lines: string[] = [];
  const writes = (impact.restores ?? []).filter((r) => r.changes);
  if (writes.length) {
    lines.push(`Restores ${plural(writes.length, 'file')}:`);
    for (const r of writes) {
      // The action (delete, create directory, chmod 755, relink...); a
      // restore shows the bytes it writes.
      const action = r.action ?? (r.state === 'absent' ? 'delete' : 'restore');
      const content = action === 'restore' ? plural(r.size ?? 0, 'byte') : action;
      // Which sub-agents changed it (the parent's own changes name none).
      const by = r.agents?.length ? `; changed by sub-agent${r.agents.length === 1 ? '' : 's'} ${r.agents.join(', ')}` : '';
      lines.push(`  ${r.path} (${r.checkpoint} of turn ${r.turn}: ${content}${by})`);
    }
  }
  const same = (impact.restores ?? []).length - writes.length;
  if (same > 0) lines.push(`${plural(same, 'captured file')} already match and stay as they are`);
  if (impact.gaps?.length) {
    lines.push('Capture gaps (these files may have changed and are NOT restored):');
    for (const gap of impact.gaps) lines.push(`  ${gap.path} (turn ${gap.turn}: ${gap.reason})`);
  }
  if (impact.externallyModified?.length) {
    lines.push('Changed outside the session since recorded (the commit overwrites them):');
    for (const change of impact.externallyModified) lines.push(`  ${change.path} (recorded by turn ${change.recordedTurn})`);
  }
  if (impact.git.status === 'checked' && impact.git.divergent?.length) {
    lines.push('Git index will differ from the restored files:');
    for (const path of impact.git.divergent) lines.push(`  ${path}`);
  } else if (impact.git.status === 'unavailable') {
    lines.push(`Git could not be asked about the index: ${impact.git.detail ?? 'no detail'}`);
  }
  return lines;
}

// The server's word on the agent's own history, when the session has one.
function historyLines(agentHistory?: string | null): string[] {
  return agentHistory ? [`Agent history: ${agentHistory}`] : [];
}

export function describeRewind(impact: RewindImpact): Impact {
  const where =
    impact.boundary === 'after'
      ? `to after the response of turn ${impact.turn}`
      : `to before the prompt of turn ${impact.turn}`;
  const summary = `Rewind ${impact.sessionId} ${where}: ${plural(impact.keptTurns, 'turn')} kept.`;
  if (impact.empty) return { summary, details: ['Nothing changes.', ...historyLines(impact.agentHistory)], action: 'Rewind' };
  const details: string[] = [];
  if (impact.discarded?.length) {
    details.push(`Discards ${plural(impact.discarded.length, 'prompt')}:`, ...impact.discarded.map(labelLine));
  } else if (impact.transcriptChanges) {
    details.push('Discards no prompts; undoes a compaction or /clear');
  } else {
    details.push('Discards no prompts');
  }
  details.push(...fileLines(impact), ...historyLines(impact.agentHistory));
  return { summary, details, action: 'Rewind' };
}

export function describeRedo(impact: RedoImpact): Impact {
  const back = impact.restored ?? [];
  const gone = impact.discarded ?? [];
  const summary = `Redo ${impact.sessionId}: return to the state with ${plural(impact.commonTurns + back.length, 'turn')}.`;
  const details: string[] = [];
  if (back.length) details.push(`Brings back ${plural(back.length, 'turn')}:`, ...back.map(labelLine));
  if (gone.length) details.push(`Discards ${plural(gone.length, 'prompt')}:`, ...gone.map(labelLine));
  details.push(...fileLines(impact));
  if (!back.length && !gone.length && !(impact.restores ?? []).some((r) => r.changes)) details.push('Nothing changes.');
  details.push(...historyLines(impact.agentHistory));
  return { summary, details, action: 'Redo' };
}

function childLines(localFiles?: string[], plansNote?: string, artifacts?: string[], agentHistory?: string | null): string[] {
  const lines: string[] = [];
  if (artifacts?.length) lines.push(`Carries ${plural(artifacts.length, 'attached artifact')}: ${artifacts.join(', ')}`);
  if (localFiles?.length) lines.push(`Copies ${plural(localFiles.length, 'session-local file')}: ${localFiles.join(', ')}`);
  if (plansNote) lines.push(`Plans: ${plansNote}`);
  lines.push(...historyLines(agentHistory));
  lines.push('The source session is not changed.');
  return lines;
}

export function describeFork(impact: ForkImpact): Impact {
  return {
    summary: `Fork ${impact.sessionId} after the response of turn ${impact.response.turn} (${impact.response.preview}): a new session with ${plural(impact.turns, 'turn')}.`,
    details: [
      'The working files are left as they are: a Fork restores no files (Worktree Fork writes the turn\'s files into a new worktree).',
      ...childLines(impact.localFiles, impact.plansNote, impact.attachedArtifacts, impact.agentHistory),
    ],
    action: 'Fork',
  };
}

export function describeWorktreeFork(impact: WorktreeForkImpact): Impact {
  const place = impact.worktree;
  const details = [
    `Creates the Git worktree ${place.directory} on the new branch ${place.branch} at ${place.baseCommit.slice(0, 12)} (HEAD of ${place.sourceCheckout})`,
  ];
  if (impact.restores?.length) details.push(`Writes the turn's content of: ${impact.restores.join(', ')}`);
  if (impact.unrestored?.length) {
    details.push('Left at their HEAD content:');
    for (const file of impact.unrestored) details.push(`  ${file.path} (${file.reason})`);
  }
  if (impact.shared?.length) details.push(`Shared, not copied (outside the checkout): ${impact.shared.join(', ')}`);
  details.push(...childLines(impact.localFiles, impact.plansNote, undefined, impact.agentHistory));
  return {
    summary: `Worktree Fork ${impact.sessionId} after the response of turn ${impact.response.turn} (${impact.response.preview}): a new session with ${plural(impact.turns, 'turn')}.`,
    details,
    action: 'Create Worktree Fork',
  };
}

export function describeSaveAs(impact: SaveAsImpact): Impact {
  return {
    summary: `Save ${impact.sessionId} as "${impact.name}": a new session with ${plural(impact.turns, 'turn')}.`,
    details: [
      `${plural(impact.segments, 'transcript segment')}, ${plural(impact.chats, 'chat')}, ${plural(impact.artifacts, 'artifact')} (${plural(impact.size, 'byte')})`,
      'The working files are left as they are.',
      ...historyLines(impact.agentHistory),
      'The source session is not changed.',
    ],
    action: 'Save As',
  };
}

// What a commit did, in one sentence.
export function describeInPlace(verb: string, result: InPlaceResult): string {
  const written = result.written?.length ? `; wrote ${result.written.join(', ')}` : '';
  const warning = result.warning ? ` (warning: ${result.warning})` : '';
  const what = result.committed ? `now ${plural(result.settledTurns, 'settled turn')}` : 'nothing changed';
  return `${verb} ${result.sessionId}: ${what}${written}${warning}`;
}

export function describeChild(verb: string, result: ChildResult): string {
  const warning = result.warning ? ` (warning: ${result.warning})` : '';
  const child = result.session;
  return `${verb} ${result.sourceId} into ${child.displayName} (${child.sessionId}, ${plural(child.settledTurns, 'turn')}), now current${warning}`;
}

export interface Notice {
  text: string;
  severity: 'information' | 'warning';
}

// What a resolved recovery tells the person: a warning when it left a file
// as someone edited it since the interruption (never overwritten, but not
// put back either).
export function recoveryNotice(result: RecoveryResult): Notice {
  const what = {
    'rolled-back': 'the files have their content from before the interrupted transaction',
    completed: 'the interrupted transaction was finished',
    abandoned: 'the files were left as they are',
  }[result.resolution];
  const written = result.written?.length ? `; wrote ${result.written.join(', ')}` : '';
  const kept = result.leftNote ? `; ${result.leftNote}` : '';
  return {
    text: `recovery ${result.recoveryId} of ${result.sessionId}: ${what}${written}${kept}`,
    severity: kept ? 'warning' : 'information',
  };
}

// The two phases --------------------------------------------------------------

interface Transaction<P, I extends { token: string }> {
  prepare: string;
  commit: string;
  params: P;
  describe: (impact: I) => Impact;
}

export type Outcome<R> = { committed: true; result: R; impact: Impact } | { committed: false; impact: Impact };

// Prepare, show the impact, and commit with the prepare's token only when
// `confirm` says yes; declining sends nothing more, so nothing changes.
// Failures (a stale head, a pending recovery) reject with the server's error.
async function run<P extends Scope, I extends { token: string; sessionId: string }, R>(
  sender: RequestSender,
  transaction: Transaction<P, I>,
  confirm: (impact: Impact) => Promise<boolean>,
): Promise<Outcome<R>> {
  const prepared = await sender.sendRequest<I>(transaction.prepare, transaction.params);
  const impact = transaction.describe(prepared);
  if (!(await confirm(impact))) return { committed: false, impact };
  // The commit names the session the prepare saw, so a session switch in
  // between cannot redirect it.
  const result = await sender.sendRequest<R>(transaction.commit, {
    token: prepared.token,
    sessionId: prepared.sessionId,
    workspaceFolder: transaction.params.workspaceFolder,
  });
  return { committed: true, result, impact };
}

export type Confirm = (impact: Impact) => Promise<boolean>;

export function rewind(
  sender: RequestSender,
  params: Scope & { turn: number; boundary: Boundary },
  confirm: Confirm,
): Promise<Outcome<InPlaceResult>> {
  return run(sender, { prepare: LifecycleMethods.rewindPrepare, commit: LifecycleMethods.rewindCommit, params, describe: describeRewind }, confirm);
}

export function redo(
  sender: RequestSender,
  params: Scope & { publicationId: string },
  confirm: Confirm,
): Promise<Outcome<InPlaceResult>> {
  return run(sender, { prepare: LifecycleMethods.redoPrepare, commit: LifecycleMethods.redoCommit, params, describe: describeRedo }, confirm);
}

export function fork(sender: RequestSender, params: Scope & { turn: number }, confirm: Confirm): Promise<Outcome<ChildResult>> {
  return run(sender, { prepare: LifecycleMethods.forkPrepare, commit: LifecycleMethods.forkCommit, params, describe: describeFork }, confirm);
}

export function worktreeFork(
  sender: RequestSender,
  params: Scope & { turn: number; name?: string; branch?: string },
  confirm: Confirm,
): Promise<Outcome<WorktreeForkResult>> {
  return run(
    sender,
    { prepare: LifecycleMethods.worktreeForkPrepare, commit: LifecycleMethods.worktreeForkCommit, params, describe: describeWorktreeFork },
    confirm,
  );
}

export function saveAs(sender: RequestSender, params: Scope & { name: string }, confirm: Confirm): Promise<Outcome<ChildResult>> {
  return run(sender, { prepare: LifecycleMethods.saveAsPrepare, commit: LifecycleMethods.saveAsCommit, params, describe: describeSaveAs }, confirm);
}

// The Redo picker's rows: each restorable state like the Rewind picker
// labels a turn.
export function redoLabel(state: RedoState): string {
  const last = state.lastTurn ? `ends at turn ${state.lastTurn.turn}: ${state.lastTurn.preview}` : 'the empty session';
  return `${plural(state.turnCount, 'turn')} · ${last}`;
}

export interface ForkVariant {
  sessionId: string;
  role: string;
  displayName: string;
  createdAt: number;
  isCurrent: boolean;
  latestPreview?: string;
  worktreeBranch?: string;
  worktreeDirectory?: string;
}

export interface ForkVariantsResult {
  sourceId: string;
  forkPointId: string;
  turn: number;
  forks: ForkVariant[];
  source?: ForkVariant;
}

export function forkVariants(sender: RequestSender, params: Scope & { turn: number }): Promise<ForkVariantsResult> {
  return sender.sendRequest<ForkVariantsResult>(LifecycleMethods.forkVariants, params);
}

export interface VariantEntry {
  label: string;
  description: string;
  detail: string;
  variant: ForkVariant;
}

// The Fork Variants picker's rows: the source first, then the direct forks
// oldest to newest (the server's order), the session asked about marked.
export function variantEntries(group: ForkVariantsResult): VariantEntry[] {
  const variants = group.source ? [group.source, ...group.forks] : [...group.forks];
  return variants.map((variant) => ({
    label: `${variant.isCurrent ? '$(check) ' : ''}${variant.role}: ${variant.displayName}`,
    description: `${variant.sessionId}${variant.isCurrent ? ' · current' : ''}${variant.worktreeDirectory ? ` · ${variant.worktreeDirectory}` : ''}`,
    detail: variant.latestPreview ?? '',
    variant,
  }));
}

// Opens a picked variant the way the session picker opens a Switch row:
// mode auto (a takeover is asked by the server itself).
export function openVariant(sender: RequestSender, variant: ForkVariant, workspaceFolder?: string): Promise<SessionOpenResult> {
  return openSession(sender, { sessionId: variant.sessionId, mode: 'auto', workspaceFolder });
}
