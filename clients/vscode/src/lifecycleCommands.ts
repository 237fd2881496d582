import * as vscode from 'vscode';
import {
  abandonRecovery,
  Boundary,
  Confirm,
  describeChild,
  describeInPlace,
  fork,
  forkVariants,
  Impact,
  isRecoveryPending,
  listRedo,
  Notice,
  redo,
  redoLabel,
  retryRecovery,
  rewind,
  openVariant,
  recoveryNotice,
  saveAs,
  variantEntries,
  worktreeFork,
} from './lifecycle';
import { describeRelease, describeTake, grantControl, keepControl, releaseControl, takeControl } from './control';
import { clearSession, compactSession, describeFollow, describeRefresh, refreshSession, setFollow } from './follow';
import { describeFailure, listTurns, RequestSender, Scope, SessionState, TurnSummary } from './protocol';
import { revealTurn, SessionCommandContext, showTranscript } from './sessionCommands';
import { STAYS_OPEN } from './staysOpen';

function info(message: string): void {
  void vscode.window.showInformationMessage(`mevedel: ${message}`);
}

function tell(notice: Notice): void {
  if (notice.severity === 'warning') void vscode.window.showWarningMessage(`mevedel: ${notice.text}`);
  else info(notice.text);
}

// The modal confirmation: the summary as the message, every impact line as
// its detail, one button named for the action. Escape or Cancel declines,
// and a declined transaction is never committed.
export const confirmModal: Confirm = async (impact: Impact) => {
  const chosen = await vscode.window.showWarningMessage(
    impact.summary,
    { modal: true, detail: impact.details.join('\n') },
    impact.action,
  );
  return chosen === impact.action;
};

async function pickTurn(
  sender: RequestSender,
  where: Scope,
  title: string,
  usable: (turn: TurnSummary) => boolean,
): Promise<{ sessionId: string; turn: number } | undefined> {
  const listing = await listTurns(sender, where);
  const turns = listing.turns.filter(usable);
  if (turns.length === 0) {
    info(`${listing.sessionId} has no settled turn to pick`);
    return undefined;
  }
  const chosen = await vscode.window.showQuickPick(
    [...turns].reverse().map((turn) => ({
      label: `Turn ${turn.turn}`,
      description: turn.state,
      detail: turn.prompt,
      turn: turn.turn,
    })),
    { title: `${title} (${listing.sessionId})`, placeHolder: 'The turn', matchOnDetail: true, ...STAYS_OPEN },
  );
  return chosen && { sessionId: listing.sessionId, turn: chosen.turn };
}

const settled = (turn: TurnSummary) => turn.state !== 'in-flight';

async function rewindCommand(context: SessionCommandContext, where: Scope): Promise<void> {
  const sender = await context.sender();
  const picked = await pickTurn(sender, where, 'mevedel: Rewind', settled);
  if (!picked) return;
  const boundary = await vscode.window.showQuickPick(
    [
      { label: `After the response of turn ${picked.turn}`, description: 'keep this turn and its answer', boundary: 'after' as Boundary },
      { label: `Before the prompt of turn ${picked.turn}`, description: 'discard this turn too', boundary: 'before' as Boundary },
    ],
    // A step of a multi-step choice stays open when a view refreshes
    // and takes the focus (the transcript, the chat): Esc closes it.
    { title: 'mevedel: Rewind to', ...STAYS_OPEN },
  );
  if (!boundary) return;
  const scope = { workspaceFolder: where.workspaceFolder, sessionId: picked.sessionId };
  const outcome = await rewind(sender, { ...scope, turn: picked.turn, boundary: boundary.boundary }, confirmModal);
  if (!outcome.committed) return info('rewind cancelled; nothing changed');
  info(describeInPlace('rewound', outcome.result));
  await showTranscript(context, scope);
}

async function redoCommand(context: SessionCommandContext, where: Scope): Promise<void> {
  const sender = await context.sender();
  const listing = await listRedo(sender, where);
  if (listing.states.length === 0) return info(`${listing.sessionId} has no earlier state to return to`);
  const chosen = await vscode.window.showQuickPick(
    listing.states.map((state) => ({
      label: redoLabel(state),
      description: new Date(state.updatedAt * 1000).toLocaleString(),
      state,
    })),
    { title: `mevedel: Redo (${listing.sessionId})`, placeHolder: 'The state to return to', ...STAYS_OPEN },
  );
  if (!chosen) return;
  const scope = { workspaceFolder: where.workspaceFolder, sessionId: listing.sessionId };
  const outcome = await redo(sender, { ...scope, publicationId: chosen.state.publicationId }, confirmModal);
  if (!outcome.committed) return info('redo cancelled; nothing changed');
  info(describeInPlace('redone', outcome.result));
  await showTranscript(context, scope);
}

async function showChild(context: SessionCommandContext, where: Scope, child: SessionState): Promise<void> {
  await showTranscript(context, { workspaceFolder: where.workspaceFolder, sessionId: child.sessionId });
}

async function forkCommand(context: SessionCommandContext, where: Scope, inWorktree: boolean): Promise<void> {
  const sender = await context.sender();
  const title = inWorktree ? 'mevedel: Worktree Fork' : 'mevedel: Fork';
  const picked = await pickTurn(sender, where, `${title} after`, (turn) => turn.state === 'completed');
  if (!picked) return;
  const scope = { workspaceFolder: where.workspaceFolder, sessionId: picked.sessionId };
  if (!inWorktree) {
    const outcome = await fork(sender, { ...scope, turn: picked.turn }, confirmModal);
    if (!outcome.committed) return info('fork cancelled; nothing was created');
    info(describeChild('forked', outcome.result));
    return showChild(context, where, outcome.result.session);
  }
  const name = await vscode.window.showInputBox({ title, prompt: 'The worktree name (empty: allocated)', ...STAYS_OPEN });
  if (name === undefined) return;
  const outcome = await worktreeFork(sender, { ...scope, turn: picked.turn, name: name.trim() || undefined }, confirmModal);
  if (!outcome.committed) return info('worktree fork cancelled; nothing was created');
  const result = outcome.result;
  const unrestored = result.unrestored?.length
    ? `; left at HEAD: ${result.unrestored.map((f) => `${f.path} (${f.reason})`).join(', ')}`
    : '';
  info(`${describeChild('forked', result)} in ${result.worktree.directory} on ${result.worktree.branch}${unrestored}`);
  return showChild(context, where, result.session);
}

// Picks the source or one of its forks at a fork point and opens it there.
async function forkVariantsCommand(context: LifecycleCommandContext, where: Scope): Promise<void> {
  const sender = await context.sender();
  const picked = await pickTurn(sender, where, 'mevedel: Fork Variants at', (turn) => turn.state === 'completed');
  if (!picked) return;
  const group = await forkVariants(sender, { workspaceFolder: where.workspaceFolder, sessionId: picked.sessionId, turn: picked.turn });
  const chosen = await vscode.window.showQuickPick(variantEntries(group), {
    title: `mevedel: Variants at turn ${group.turn} of ${group.sourceId}`,
    placeHolder: 'The source first, then its forks oldest to newest',
    matchOnDescription: true,
    matchOnDetail: true,
    ...STAYS_OPEN,
  });
  if (!chosen) return;
  const opened = await openVariant(sender, chosen.variant, where.workspaceFolder);
  await revealTurn(context, { workspaceFolder: where.workspaceFolder, sessionId: opened.session.sessionId }, group.turn);
  info(`opened ${opened.session.displayName} (${chosen.variant.role}) at turn ${group.turn}`);
  await announceRecovery(context, opened.session, where.workspaceFolder);
}

async function saveAsCommand(context: SessionCommandContext, where: Scope): Promise<void> {
  const name = await vscode.window.showInputBox({ title: 'mevedel: Save Session As', prompt: 'The new session name', ...STAYS_OPEN });
  if (name === undefined) return;
  const outcome = await saveAs(await context.sender(), { ...where, name }, confirmModal);
  if (!outcome.committed) return info('save as cancelled; nothing was created');
  info(describeChild('saved', outcome.result));
  return showChild(context, where, outcome.result.session);
}

// Asks whether to retry or abandon the recovery the server reported.
async function offerRecovery(context: SessionCommandContext, where: Scope, why: string): Promise<void> {
  const chosen = await vscode.window.showWarningMessage(
    `mevedel: ${why}`,
    { modal: true, detail: 'Retry finishes or rolls back the interrupted transaction; Abandon leaves the files as they are.' },
    'Retry Recovery',
    'Abandon Recovery',
  );
  if (!chosen) return;
  const sender = await context.sender();
  const result = chosen === 'Retry Recovery' ? await retryRecovery(sender, where) : await abandonRecovery(sender, where);
  tell(recoveryNotice(result));
}

export interface LifecycleCommandContext extends SessionCommandContext {
  scope(): Scope;
}

// Runs a lifecycle step; refused by a pending recovery, it offers to
// resolve it; any other failure is shown with the server's words.
export async function runGuarded(context: SessionCommandContext, where: Scope, body: (where: Scope) => Promise<void>): Promise<void> {
  try {
    await body(where);
  } catch (error) {
    if (isRecoveryPending(error)) {
      await offerRecovery(context, where, describeFailure(error)).catch((again) =>
        vscode.window.showErrorMessage(`mevedel: ${describeFailure(again)}`),
      );
      return;
    }
    void vscode.window.showErrorMessage(`mevedel: ${describeFailure(error)}`);
  }
}

// A lifecycle command acts on the command context's scope, guarded.
function guarded(context: LifecycleCommandContext, body: (where: Scope) => Promise<void>): () => Promise<void> {
  return () => runGuarded(context, context.scope(), body);
}

// Sessions whose following was turned off here (the server's default is
// the followPublished setting, on unless changed).
const followOff = new Set<string>();

export function lifecycleCommands(context: LifecycleCommandContext): Record<string, () => Promise<void>> {
  return {
    rewind: guarded(context, (where) => rewindCommand(context, where)),
    redo: guarded(context, (where) => redoCommand(context, where)),
    fork: guarded(context, (where) => forkCommand(context, where, false)),
    worktreeFork: guarded(context, (where) => forkCommand(context, where, true)),
    forkVariants: guarded(context, (where) => forkVariantsCommand(context, where)),
    saveAs: guarded(context, (where) => saveAsCommand(context, where)),
    retryRecovery: guarded(context, async (where) => tell(recoveryNotice(await retryRecovery(await context.sender(), where)))),
    // A takeover or the owner's answer is asked by the servers themselves
    // (window/showMessageRequest), shown as a notification with buttons.
    takeControl: guarded(context, async (where) => info(describeTake(await takeControl(await context.sender(), where)))),
    releaseControl: guarded(context, async (where) => info(describeRelease(await releaseControl(await context.sender(), where)))),
    toggleFollow: guarded(context, async (where) => {
      const sender = await context.sender();
      const sessionId = where.sessionId ?? (await listTurns(sender, where)).sessionId;
      const key = `${where.workspaceFolder ?? ''} ${sessionId}`;
      const state = await setFollow(sender, { ...where, sessionId, enabled: followOff.has(key) });
      if (state.enabled) followOff.delete(key);
      else followOff.add(key);
      info(describeFollow(state));
    }),
    refreshSession: guarded(context, async (where) => info(describeRefresh(await refreshSession(await context.sender(), where)))),
    compactSession: guarded(context, async (where) => {
      const summary = await vscode.window.showInputBox({
        title: 'mevedel: Compact Session',
        prompt: 'The summary the next segment starts with',
        ...STAYS_OPEN,
      });
      if (summary === undefined) return;
      const result = await compactSession(await context.sender(), { ...where, summary });
      info(`${result.sessionId}: segment ${result.previousSegment} closed; segment ${result.segment} starts with your summary`);
    }),
    clearSession: guarded(context, async (where) => {
      const result = await clearSession(await context.sender(), where);
      info(`${result.sessionId}: chapter ${result.chapter} closed; a new chat starts in segment ${result.segment}`);
    }),
    grantControl: guarded(context, async (where) => {
      const status = await grantControl(await context.sender(), where);
      info(`granted the request for ${status.sessionId} (${status.phase})`);
    }),
    keepControl: guarded(context, async (where) => {
      const status = await keepControl(await context.sender(), where);
      info(`kept ${status.sessionId} (${status.phase})`);
    }),
    abandonRecovery: guarded(context, async (where) => {
      const sure = await vscode.window.showWarningMessage(
        'mevedel: Abandon the recovery? The project files stay as the interrupted transaction left them.',
        { modal: true },
        'Abandon Recovery',
      );
      if (sure === 'Abandon Recovery') tell(recoveryNotice(await abandonRecovery(await context.sender(), where)));
    }),
  };
}

// Opening a session in recovery says so and offers to resolve it.
export async function announceRecovery(context: LifecycleCommandContext, state: SessionState, workspaceFolder?: string): Promise<void> {
  if (!state.recoveryPending) return;
  await offerRecovery(
    context,
    { workspaceFolder, sessionId: state.sessionId },
    `${state.sessionId} is in recovery ${state.recoveryPending}: an interrupted Rewind or Redo left project files to repair`,
  );
}
