import * as vscode from 'vscode';
import {
  abandonPublication,
  abortTurn,
  closeSession,
  createSession,
  describeFailure,
  listSessions,
  listTurns,
  RequestSender,
  retryPublication,
  SaveResult,
  saveSession,
  SessionState,
  renameSession,
  Scope,
  showTurn,
  VIRTUAL_SCHEME,
} from './protocol';
import { reviewChanges } from './reviewCommands';
import { openListed, PickerEntry, pickerEntries, transcriptUri, turnLine, uriSession } from './sessions';
import { STAYS_OPEN } from './staysOpen';

export interface SessionCommandContext {
  sender(): Promise<RequestSender>;
  workspaceFolder(): string | undefined;
  // Makes VS Code read an open virtual document again.
  refresh(uri: vscode.Uri): void;
  // Runs after a picked session opened (to offer resolving its recovery).
  opened?(state: SessionState, workspaceFolder?: string): Promise<void>;
}

// Session commands act on the session of the active virtual document (its
// transcript), else on the folder's current session.
export function scope(context: SessionCommandContext): Scope {
  const active = vscode.window.activeTextEditor?.document.uri;
  const session = active?.scheme === VIRTUAL_SCHEME ? uriSession(active.toString()) : undefined;
  return { workspaceFolder: context.workspaceFolder(), sessionId: session };
}

// Runs a command body; a refusal is shown with the server's words.
async function reporting(body: () => Promise<void>): Promise<void> {
  try {
    await body();
  } catch (error) {
    void vscode.window.showErrorMessage(`mevedel: ${describeFailure(error)}`);
  }
}

function info(message: string): void {
  void vscode.window.showInformationMessage(`mevedel: ${message}`);
}

// Shows a session's transcript, read again when it is already open.
export async function showTranscript(context: SessionCommandContext, where: Scope): Promise<vscode.TextEditor> {
  const uri = vscode.Uri.parse(await transcriptUri(await context.sender(), where), true);
  const open = vscode.workspace.textDocuments.some((document) => document.uri.toString() === uri.toString());
  const document = await vscode.workspace.openTextDocument(uri);
  if (open) context.refresh(uri);
  return vscode.window.showTextDocument(document, { preview: false });
}

type Item = vscode.QuickPickItem & { entry?: PickerEntry };

async function pickSession(context: SessionCommandContext): Promise<void> {
  const sender = await context.sender();
  const workspaceFolder = context.workspaceFolder();
  const entries = pickerEntries(await listSessions(sender, { workspaceFolder }));
  if (entries.length === 0) {
    info('this workspace has no sessions yet; "mevedel: New Session" starts one');
    return;
  }
  const items: Item[] = [];
  for (const entry of entries) {
    if (entry.inspect && !items.some((item) => item.kind === vscode.QuickPickItemKind.Separator)) {
      items.push({ label: 'Inspect only', kind: vscode.QuickPickItemKind.Separator });
    }
    items.push({ label: entry.label, description: entry.description, detail: entry.detail, entry });
  }
  const chosen = await vscode.window.showQuickPick(items, {
    title: 'mevedel: Open Session',
    placeHolder: 'A session: its action (Switch, Resume, Join, Take over), turns and host',
    matchOnDescription: true,
    matchOnDetail: true,
    ...STAYS_OPEN,
  });
  const entry = chosen?.entry;
  if (!entry) return;
  if (entry.inspect) {
    void vscode.window.showWarningMessage(`mevedel: ${entry.inspect.name} can only be inspected: ${entry.inspect.reason}`);
    return;
  }
  // A takeover is asked by the server (window/showMessageRequest), which the
  // language client shows as a notification with its buttons.
  const opened = await openListed(sender, entry.session!, workspaceFolder);
  await showTranscript(context, { workspaceFolder, sessionId: opened.session.sessionId });
  const verb = { switch: 'switched to', join: 'joined', takeover: 'took over', resume: 'resumed' }[opened.action];
  const interrupted = opened.interruptedTurn ? `; turn ${opened.interruptedTurn} was in flight and is now interrupted` : '';
  info(`${verb} ${opened.session.displayName} (${opened.session.access})${interrupted}`);
  await context.opened?.(opened.session, workspaceFolder);
}

async function newSession(context: SessionCommandContext): Promise<void> {
  const name = await vscode.window.showInputBox({ title: 'mevedel: New Session', prompt: 'Its name (empty: unnamed)', ...STAYS_OPEN });
  if (name === undefined) return;
  const workspaceFolder = context.workspaceFolder();
  const state = await createSession(await context.sender(), { workspaceFolder, name: name.trim() || undefined });
  await showTranscript(context, { workspaceFolder, sessionId: state.sessionId });
  info(`created session ${state.displayName}`);
}

async function renameCurrent(context: SessionCommandContext): Promise<void> {
  const where = scope(context);
  const name = await vscode.window.showInputBox({ title: 'mevedel: Rename Session', prompt: 'The new name', ...STAYS_OPEN });
  if (name === undefined) return;
  const state = await renameSession(await context.sender(), { ...where, name });
  info(`session ${state.sessionId} is now called ${state.displayName}`);
}

function reportSave(what: string, result: SaveResult): void {
  info(`${what} ${result.sessionId}: ${result.committed ? 'published' : result.note ?? 'nothing was published'}`);
}

async function listTurnsAndGo(context: SessionCommandContext): Promise<void> {
  const sender = await context.sender();
  const listing = await listTurns(sender, scope(context));
  if (listing.turns.length === 0) {
    info(`${listing.sessionId} has no turns yet`);
    return;
  }
  const where = { workspaceFolder: context.workspaceFolder(), sessionId: listing.sessionId };
  // Each row's button reviews what the turn changed; picking the row goes
  // to the turn in the transcript.
  const review: vscode.QuickInputButton = { iconPath: new vscode.ThemeIcon('diff'), tooltip: 'Review changes' };
  const pick = vscode.window.createQuickPick<vscode.QuickPickItem & { turn: number }>();
  pick.title = `mevedel: Go to Turn (${listing.sessionId})`;
  pick.matchOnDetail = true;
  // Open when the focus moves (Esc closes it): the chat, whose focus the
  // palette hands back late, would close it and take its keys.
  pick.ignoreFocusOut = STAYS_OPEN.ignoreFocusOut;
  pick.items = listing.turns.map((turn) => ({
    label: `Turn ${turn.turn}`,
    description: `${turn.state} · ${turn.toolCalls} tool calls${turn.reason ? ` · ${turn.reason}` : ''}`,
    detail: turn.prompt,
    turn: turn.turn,
    buttons: [review],
  }));
  const chosen = await new Promise<{ turn: number; review: boolean } | undefined>((resolve) => {
    pick.onDidAccept(() => resolve(pick.selectedItems[0] && { turn: pick.selectedItems[0].turn, review: false }));
    pick.onDidTriggerItemButton((event) => resolve({ turn: event.item.turn, review: true }));
    pick.onDidHide(() => resolve(undefined));
    pick.show();
  });
  pick.dispose();
  if (!chosen) return;
  if (chosen.review) return reviewChanges(context, where, { first: chosen.turn, last: chosen.turn });
  await revealTurn(context, where, chosen.turn);
}

// Shows a session's transcript with the cursor on a turn's heading.
export async function revealTurn(context: SessionCommandContext, where: Scope & { sessionId: string }, turn: number): Promise<void> {
  const shown = await showTurn(await context.sender(), { ...where, turn });
  const editor = await showTranscript(context, where);
  const line = turnLine(editor.document.getText(), shown);
  if (line === undefined) {
    void vscode.window.showWarningMessage(`mevedel: turn ${turn} is not in the transcript of ${where.sessionId}`);
    return;
  }
  const start = new vscode.Position(line, 0);
  editor.selection = new vscode.Selection(start, start);
  editor.revealRange(new vscode.Range(start, start), vscode.TextEditorRevealType.AtTop);
}

// The session commands of the palette, by id (commands.ts adds them to its
// table, which package.json mirrors).
export function sessionCommands(context: SessionCommandContext): Record<string, () => Promise<void>> {
  const run = (body: () => Promise<void>) => () => reporting(body);
  return {
    pickSession: run(() => pickSession(context)),
    newSession: run(() => newSession(context)),
    renameSession: run(() => renameCurrent(context)),
    saveSession: run(async () => reportSave('saved', await saveSession(await context.sender(), scope(context)))),
    closeSession: run(async () => {
      const closed = await closeSession(await context.sender(), scope(context));
      info(`closed ${closed.sessionId}${closed.saved ? ' (saved its unsaved content)' : ''}`);
    }),
    retryPublication: run(async () => reportSave('retried', await retryPublication(await context.sender(), scope(context)))),
    abandonPublication: run(async () => {
      const result = await abandonPublication(await context.sender(), scope(context));
      info(
        `${result.sessionId}: ${result.abandoned ? 'the failed save was dropped; the next save carries its content' : 'no failed save was pending'}`,
      );
    }),
    abortTurn: run(async () => {
      const reason = await vscode.window.showInputBox({ title: 'mevedel: Abort Turn', prompt: 'Why (empty: aborted)', ...STAYS_OPEN });
      if (reason === undefined) return;
      const where = scope(context);
      reportSave('interrupted the turn in flight in', await abortTurn(await context.sender(), { ...where, reason: reason.trim() || undefined }));
    }),
    showTranscript: run(async () => {
      await showTranscript(context, scope(context));
    }),
    listTurns: run(() => listTurnsAndGo(context)),
  };
}
