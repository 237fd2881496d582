// The chat panel: a webview showing the current session's turns and the one
// in flight, with a composer for the next prompt. What it shows comes from
// src/chat.ts (the state folded from the server's messages) and
// src/chatView.ts (the HTML); this file is the VS Code side: the panel, its
// messages, the agent picker, attachments, and the buttons' transactions.
import { randomBytes } from 'node:crypto';
import * as vscode from 'vscode';
import {
  Advice,
  agentMemoryKey,
  agentPickItems,
  cancelTurn,
  chooseAgent,
  describeOutcome,
  describePromptFailure,
  describeTurnError,
  listAgents,
  promptParams,
  promptTurn,
  QuotedSelection,
  TurnDidUpdateParams,
} from './agents';
import { AgentOptions, getOptions, optionTargets, renderOptions, setOption, valueItems } from './agentOptions';
import { activity, applyUpdate, ChatState, emptyChat, loadHistory, promptSent, withHistory } from './chat';
import { makeNonce, renderAttachments, renderPage, renderParts } from './chatView';
import { reviewChanges } from './reviewCommands';
import { describeChild, describeInPlace, fork, listRedo, redo, redoLabel, rewind, Boundary } from './lifecycle';
import { confirmModal, runGuarded } from './lifecycleCommands';
import { listSessions, RequestSender, Scope, SessionDidChangeParams } from './protocol';
import { SessionCommandContext } from './sessionCommands';
import { addToQueue, cancelQueued, editQueued, listQueue, QueueDidChangeParams, QueueState, renderQueue, sendingEntry, steer } from './queue';
import { inputHistory } from './inputHistory';
import { STAYS_OPEN } from './staysOpen';

export interface ChatContext extends SessionCommandContext {
  // Where the agent chosen for each session is remembered.
  memory: vscode.Memento;
  showOutput(): void;
}

// The server's live messages, for whoever shows them.
export class ChatEvents implements vscode.Disposable {
  readonly updates = new vscode.EventEmitter<TurnDidUpdateParams>();
  readonly changes = new vscode.EventEmitter<SessionDidChangeParams>();
  readonly options = new vscode.EventEmitter<AgentOptions>();
  readonly queues = new vscode.EventEmitter<QueueDidChangeParams>();
  dispose(): void {
    this.updates.dispose();
    this.changes.dispose();
    this.options.dispose();
    this.queues.dispose();
  }
}

// What goes with the next prompt: a quoted selection, or an attachment (a
// workspace path or an address the server reads).
export type Attachment = { label: string; selection: QuotedSelection } | { label: string; attachment: string };

// The selection of an editor (or its whole document when `whole`) as a
// quotation, or as an attachment when it is a saved workspace file.
export function attachmentFrom(editor: vscode.TextEditor, whole: boolean): Attachment | undefined {
  const document = editor.document;
  const path = vscode.workspace.asRelativePath(document.uri, false);
  const inWorkspace = document.uri.scheme === 'file' && vscode.workspace.getWorkspaceFolder(document.uri) !== undefined;
  if (whole || editor.selection.isEmpty) {
    // The server reads a saved file itself; unsaved text goes quoted.
    if (inWorkspace && !document.isDirty) return { label: path, attachment: path };
    const text = document.getText();
    if (!text) return undefined;
    return { label: `${path} (unsaved)`, selection: { path, startLine: 1, endLine: document.lineCount, text, languageId: document.languageId } };
  }
  const selection = editor.selection;
  const endLine = selection.end.character === 0 && selection.end.line > selection.start.line ? selection.end.line : selection.end.line + 1;
  const startLine = selection.start.line + 1;
  return {
    label: `${path}:${startLine}${endLine === startLine ? '' : `-${endLine}`}`,
    selection: { path, startLine, endLine, text: document.getText(selection), languageId: document.languageId },
  };
}

// A failure with the buttons that do what it says.
export async function showAdvice(context: ChatContext, advice: Advice): Promise<void> {
  const chosen = await vscode.window.showErrorMessage(`mevedel: ${advice.message}`, ...advice.actions.map((a) => a.title));
  const action = advice.actions.find((a) => a.title === chosen);
  if (!action) return;
  switch (action.title) {
    case 'Open Settings':
      await vscode.commands.executeCommand('workbench.action.openSettings', action.setting);
      break;
    case 'Open Agent Log':
      await vscode.window.showTextDocument(await vscode.workspace.openTextDocument(vscode.Uri.file(action.path)), { preview: true });
      break;
    case 'Open Terminal':
      vscode.window.createTerminal({ name: 'mevedel: agent login' }).show();
      break;
    case 'Show Server Output':
      context.showOutput();
      break;
  }
}

type WebviewMessage =
  | { type: 'ready' }
  | { type: 'history' }
  | { type: 'prompt'; text: string }
  | { type: 'steer'; text: string }
  | { type: 'action'; action: string; turn?: number; boundary?: string; index?: number; entry?: string };

function isMessage(value: unknown): value is WebviewMessage {
  if (typeof value !== 'object' || value === null) return false;
  const v = value as Record<string, unknown>;
  if (v.type === 'ready' || v.type === 'history') return true;
  if (v.type === 'prompt' || v.type === 'steer') return typeof v.text === 'string';
  if (v.type !== 'action' || typeof v.action !== 'string') return false;
  return (
    (v.turn === undefined || Number.isInteger(v.turn)) &&
    (v.index === undefined || Number.isInteger(v.index)) &&
    (v.entry === undefined || typeof v.entry === 'string')
  );
}


// Updates are rendered at most this often while a turn streams.
const RENDER_INTERVAL_MS = 40;

export class ChatPanel implements vscode.Disposable {
  private static current: ChatPanel | undefined;

  private state: ChatState;
  // The session's queued prompts, as the server last said.
  private queue: QueueState | undefined;
  // The text of the queued prompt the server is sending (shown as the next turn's).
  private sendingQueued: string | undefined;
  private attachments: Attachment[] = [];
  // The session's agent modes and options, as the server last told.
  private options: AgentOptions | undefined;
  private renderTimer: NodeJS.Timeout | undefined;
  private refreshTimer: NodeJS.Timeout | undefined;
  private readonly disposables: vscode.Disposable[] = [];
  private disposed = false;

  // Shows the panel (made on first use) with the folder's current session.
  static async show(context: ChatContext, events: ChatEvents, options: { focus?: boolean; attach?: Attachment[] } = {}): Promise<ChatPanel> {
    let panel = ChatPanel.current;
    if (panel) {
      panel.panel.reveal(undefined, false);
    } else {
      const webview = vscode.window.createWebviewPanel(
        'mevedel.chat',
        'mevedel chat',
        { viewColumn: vscode.ViewColumn.Beside, preserveFocus: false },
        { enableScripts: true, localResourceRoots: [], enableFindWidget: true },
      );
      panel = new ChatPanel(webview, context, events);
      ChatPanel.current = panel;
    }
    for (const item of options.attach ?? []) panel.attach(item);
    await panel.refresh();
    if (options.focus) panel.focusComposer();
    return panel;
  }

  static get shown(): ChatPanel | undefined {
    return ChatPanel.current;
  }

  private constructor(
    private readonly panel: vscode.WebviewPanel,
    private readonly context: ChatContext,
    events: ChatEvents,
  ) {
    this.state = emptyChat({ workspaceFolder: context.workspaceFolder() });
    panel.webview.html = renderPage({ nonce: makeNonce((n) => randomBytes(n)), cspSource: panel.webview.cspSource });
    this.disposables.push(
      panel.onDidDispose(() => this.dispose()),
      panel.webview.onDidReceiveMessage((message: unknown) => {
        if (isMessage(message)) void this.received(message);
      }),
      events.updates.event((update) => this.updated(update)),
      events.changes.event((change) => this.changed(change)),
      events.options.event((options) => {
        if (options.sessionId !== this.state.sessionId) return;
        this.options = options;
        this.scheduleRender();
      }),
      events.queues.event((queue) => this.queueChanged(queue)),
    );
  }

  // The prompt's params: its text with the attachments waiting in the panel.
  private promptFor(text: string, agent: Parameters<typeof promptParams>[2]) {
    const attachments = this.attachments;
    return promptParams(
      {
        text,
        selections: attachments.flatMap((a) => ('selection' in a ? [a.selection] : [])),
        attachments: attachments.flatMap((a) => ('attachment' in a ? [a.attachment] : [])),
      },
      this.scope,
      agent,
    );
  }

  private post(message: unknown): void {
    if (!this.disposed) void this.panel.webview.postMessage(message);
  }

  get scope(): Scope {
    return { workspaceFolder: this.state.workspaceFolder, sessionId: this.state.sessionId };
  }

  attach(item: Attachment): void {
    if (this.attachments.some((a) => a.label === item.label)) return;
    this.attachments.push(item);
    this.scheduleRender();
  }

  focusComposer(): void {
    this.post({ type: 'focus' });
  }

  // A prompt is on its way or its turn runs.
  private get busy(): boolean {
    return activity(this.state) !== 'idle' || this.state.pendingPrompt !== undefined;
  }

  // The live stream ----------------------------------------------------------------

  private updated(update: TurnDidUpdateParams): void {
    const before = this.state;
    this.state = applyUpdate(this.state, update);
    if (this.state === before) return;
    if (before.sessionId !== this.state.sessionId) this.scheduleRefresh();
    this.scheduleRender();
  }

  private changed(change: SessionDidChangeParams): void {
    if (this.state.workspaceFolder && change.workspaceFolder !== this.state.workspaceFolder) return;
    // A checkpoint mid-turn changes nothing the live view lacks.
    if (change.reason === 'checkpoint' && activity(this.state) !== 'idle') return;
    this.scheduleRefresh();
  }

  private scheduleRefresh(): void {
    if (this.refreshTimer) clearTimeout(this.refreshTimer);
    this.refreshTimer = setTimeout(() => {
      this.refreshTimer = undefined;
      void this.refresh();
    }, 150);
  }

  private refreshing: Promise<void> = Promise.resolve();

  // Reads the folder's current session and its turns again (one read at a
  // time).
  refresh(): Promise<void> {
    this.refreshing = this.refreshing.then(() => this.read());
    return this.refreshing;
  }

  private async read(): Promise<void> {
    if (this.disposed) return;
    try {
      const sender = await this.context.sender();
      const workspaceFolder = this.state.workspaceFolder ?? this.context.workspaceFolder();
      const listing = await listSessions(sender, { workspaceFolder });
      const current = listing.sessions.find((s) => s.current);
      if (!current) {
        this.state = { ...emptyChat({ workspaceFolder }), live: this.state.live, refused: this.state.refused };
      } else {
        const same = current.sessionId === this.state.sessionId;
        const known = same ? this.state.turns : [];
        const history = await loadHistory(sender, { workspaceFolder, sessionId: current.sessionId }, known);
        this.state = { ...withHistory(this.state, history.sessionId, history.turns), workspaceFolder, displayName: current.displayName };
        const remembered = this.context.memory.get<string>(agentMemoryKey(workspaceFolder, current.sessionId));
        this.state = { ...this.state, agent: remembered ?? (same ? this.state.agent : undefined) };
        if (!same || !this.options) this.options = await getOptions(sender, { workspaceFolder, sessionId: current.sessionId }).catch(() => undefined);
        this.queue = await listQueue(sender, { workspaceFolder, sessionId: current.sessionId });
      }
      if (!this.disposed) this.panel.title = `mevedel: ${this.state.displayName ?? 'chat'}`;
    } catch (error) {
      void showAdvice(this.context, describePromptFailure(error));
    }
    this.scheduleRender();
  }

  // Rendering ------------------------------------------------------------------------

  private scheduleRender(): void {
    if (this.renderTimer) return;
    this.renderTimer = setTimeout(() => {
      this.renderTimer = undefined;
      this.render();
    }, RENDER_INTERVAL_MS);
  }

  private render(): void {
    if (this.disposed) return;
    const parts = renderParts(this.state);
    this.post({
      type: 'render',
      parts: { ...parts, queue: renderQueue(this.queue), attachments: renderAttachments(this.attachments.map((a) => a.label)), options: renderOptions(this.options, false) },
      busy: this.busy,
    });
  }

  // The webview's messages ---------------------------------------------------------------

  private async received(message: WebviewMessage): Promise<void> {
    switch (message.type) {
      case 'ready':
        this.render();
        return;
      case 'history':
        return this.sendInputHistory();
      case 'prompt':
        await this.prompt(message.text);
        return;
      case 'steer':
        await this.prompt(message.text, { steer: true });
        return;
      case 'action':
        await this.action(message);
        return;
    }
  }

  private async action(message: { action: string; turn?: number; boundary?: string; index?: number; entry?: string }): Promise<void> {
    switch (message.action) {
      case 'cancel':
        return this.cancel();
      case 'pickAgent':
        return void (await this.pickAgent());
      case 'pickOption':
        return this.pickOption();
      case 'refresh':
        return this.refresh();
      case 'attach':
        return this.pickAttachment();
      case 'detach':
        if (message.index !== undefined) this.attachments.splice(message.index, 1);
        return this.scheduleRender();
      case 'rewind':
        if (message.turn === undefined || (message.boundary !== 'before' && message.boundary !== 'after')) return;
        return this.rewind(message.turn, message.boundary);
      case 'fork':
        if (message.turn === undefined) return;
        return this.fork(message.turn);
      case 'redo':
        return this.redo();
      case 'queueEdit':
      case 'queueCancel':
      case 'queueSend':
        if (message.entry === undefined) return;
        return this.queueAction(message.action, message.entry);
      case 'review':
        if (message.turn === undefined || !this.state.sessionId) return;
        return reviewChanges(this.context, { workspaceFolder: this.state.workspaceFolder, sessionId: this.state.sessionId }, {
          first: message.turn,
          last: message.turn,
        });
    }
  }

  // The input's history, for the page's ArrowUp/ArrowDown (an empty one when
  // it cannot be read, said once).
  private async sendInputHistory(): Promise<void> {
    let entries: string[] = [];
    try {
      const found = await inputHistory(await this.context.sender(), this.state.workspaceFolder);
      entries = found.entries;
      if (found.warning) void vscode.window.showWarningMessage(`mevedel: ${found.warning}`);
    } catch (error) {
      void vscode.window.showWarningMessage(`mevedel: the input history could not be read: ${error instanceof Error ? error.message : String(error)}`);
    }
    this.post({ type: 'inputHistory', entries });
  }

  // Prompting ---------------------------------------------------------------------------------

  // The agent for the next prompt: remembered for the session, the only
  // one, or picked. Undefined when the user dismissed the picker.
  private async agentFor(sender: RequestSender): Promise<{ agent: string | undefined } | undefined> {
    const { workspaceFolder, sessionId } = this.scope;
    const listing = await listAgents(sender, { workspaceFolder });
    const remembered = (sessionId && this.context.memory.get<string>(agentMemoryKey(workspaceFolder, sessionId))) || this.state.agent;
    const choice = chooseAgent(listing, remembered);
    if ('agent' in choice) return choice;
    return this.pickAmong(choice.choices);
  }

  private async pickAmong(choices: Parameters<typeof agentPickItems>[0]): Promise<{ agent: string } | undefined> {
    const picked = await vscode.window.showQuickPick(agentPickItems(choices), {
      title: 'mevedel: Which agent answers in this session?',
      placeHolder: 'Remembered for the session',
      matchOnDetail: true,
      ...STAYS_OPEN,
    });
    return picked && { agent: picked.agent };
  }

  private async remember(sessionId: string, agent: string): Promise<void> {
    await this.context.memory.update(agentMemoryKey(this.state.workspaceFolder, sessionId), agent);
  }

  async pickAgent(): Promise<void> {
    const sender = await this.context.sender();
    const listing = await listAgents(sender, { workspaceFolder: this.state.workspaceFolder });
    if (listing.agents.length === 0) {
      await showAdvice(this.context, {
        message: 'no agent is configured: add one to the setting mevedel.agents (see the README for Claude, Codex, Gemini...)',
        actions: [{ title: 'Open Settings', setting: 'mevedel.agents' }],
      });
      return;
    }
    const picked = await this.pickAmong(chooseAgentList(listing.agents));
    if (!picked) return;
    this.state = { ...this.state, agent: picked.agent };
    if (this.state.sessionId) await this.remember(this.state.sessionId, picked.agent);
    this.scheduleRender();
  }

  // The agent's mode, model or another option: what to change, then its
  // value; sent to a running agent at once, else with the next prompt. A
  // value the agent refuses is said, naming it and the agent.
  async pickOption(): Promise<void> {
    try {
      const sender = await this.context.sender();
      const options = await getOptions(sender, this.scope);
      this.options = options;
      this.scheduleRender();
      if (!options.known) {
        void vscode.window.showInformationMessage(`mevedel: agent ${options.agent} has not said yet which modes and models it offers; send a prompt first`);
        return;
      }
      const targets = optionTargets(options);
      if (targets.length === 0) {
        void vscode.window.showInformationMessage(`mevedel: agent ${options.agent} offers no modes and no options`);
        return;
      }
      const target = await vscode.window.showQuickPick(targets, {
        title: `mevedel: Change (agent ${options.agent})`,
        placeHolder: 'What to change',
        ...STAYS_OPEN,
      });
      if (!target) return;
      const value = await vscode.window.showQuickPick(valueItems(options, target), {
        title: `mevedel: ${target.label} (agent ${options.agent})`,
        placeHolder: `Now ${target.description}`,
        matchOnDetail: true,
        ...STAYS_OPEN,
      });
      if (!value) return;
      this.options = await setOption(sender, { ...this.scope, ...value.params });
      this.scheduleRender();
      vscode.window.setStatusBarMessage(`mevedel: ${target.label}: ${value.label}${this.options.running ? '' : ' (applied with the next prompt)'}`, 10_000);
    } catch (error) {
      await showAdvice(this.context, describePromptFailure(error));
    }
  }

  async prompt(text: string, how: { steer?: boolean } = {}): Promise<void> {
    if (!text.trim()) return;
    if (this.busy || how.steer) return this.queuePrompt(text, how.steer === true);
    let sender: RequestSender;
    let agent: { agent: string | undefined } | undefined;
    try {
      sender = await this.context.sender();
      agent = await this.agentFor(sender);
    } catch (error) {
      return showAdvice(this.context, describePromptFailure(error));
    }
    if (!agent) return;
    const attachments = this.attachments;
    const params = this.promptFor(text, agent.agent);
    this.attachments = [];
    this.state = promptSent(this.state, params.text);
    this.post({ type: 'sent' });
    this.scheduleRender();
    try {
      const result = await promptTurn(sender, params);
      await this.remember(result.sessionId, result.agent);
      if (result.error) void showAdvice(this.context, describeTurnError(result.error));
      else vscode.window.setStatusBarMessage(`mevedel: ${describeOutcome(result)}`, 10_000);
    } catch (error) {
      // Refused before the turn began: nothing was recorded; the draft's
      // attachments come back.
      this.attachments = attachments;
      this.state = { ...this.state, pendingPrompt: undefined };
      this.scheduleRender();
      await showAdvice(this.context, describePromptFailure(error));
    }
  }

  async cancel(): Promise<void> {
    try {
      const result = await cancelTurn(await this.context.sender(), this.scope);
      if (!result.cancelled) void vscode.window.showInformationMessage('mevedel: no agent turn is running in this session');
    } catch (error) {
      await showAdvice(this.context, describePromptFailure(error));
    }
  }

  private async pickAttachment(): Promise<void> {
    const editor = vscode.window.visibleTextEditors.find((e) => e === vscode.window.activeTextEditor) ?? vscode.window.visibleTextEditors[0];
    type Item = vscode.QuickPickItem & { run: () => Promise<Attachment | undefined> };
    const items: Item[] = [];
    if (editor && !editor.selection.isEmpty) {
      const quoted = attachmentFrom(editor, false);
      if (quoted) items.push({ label: 'The selection', description: quoted.label, run: async () => quoted });
    }
    if (editor) {
      const file = attachmentFrom(editor, true);
      if (file) items.push({ label: 'The current file', description: file.label, run: async () => file });
    }
    items.push({
      label: 'A workspace file…',
      run: async () => {
        const chosen = await vscode.window.showOpenDialog({ canSelectMany: false, defaultUri: vscode.workspace.workspaceFolders?.[0]?.uri });
        if (!chosen?.[0]) return undefined;
        const path = vscode.workspace.asRelativePath(chosen[0], false);
        return { label: path, attachment: path };
      },
    });
    items.push({
      label: 'An address…',
      description: 'work://, mevedel://, memory://…',
      run: async () => {
        const address = await vscode.window.showInputBox({ title: 'mevedel: Attach an address', placeHolder: 'work://shared/notes.md', ...STAYS_OPEN });
        return address?.trim() ? { label: address.trim(), attachment: address.trim() } : undefined;
      },
    });
    const chosen = await vscode.window.showQuickPick(items, { title: 'mevedel: Attach to the prompt', ...STAYS_OPEN });
    const item = chosen && (await chosen.run());
    if (item) this.attach(item);
    this.focusComposer();
  }

  // Rewind, Fork, Redo --------------------------------------------------------------------------

  private async lifecycle(body: (sender: RequestSender, where: Scope & { sessionId: string }) => Promise<void>): Promise<void> {
    const sessionId = this.state.sessionId;
    if (!sessionId) return;
    const where = { workspaceFolder: this.state.workspaceFolder, sessionId };
    await runGuarded(this.context, where, async () => body(await this.context.sender(), where));
    await this.refresh();
  }

  private rewind(turn: number, boundary: Boundary): Promise<void> {
    return this.lifecycle(async (sender, where) => {
      const outcome = await rewind(sender, { ...where, turn, boundary }, confirmModal);
      if (!outcome.committed) return void vscode.window.showInformationMessage('mevedel: rewind cancelled; nothing changed');
      void vscode.window.showInformationMessage(`mevedel: ${describeInPlace('rewound', outcome.result)}`);
    });
  }

  private fork(turn: number): Promise<void> {
    return this.lifecycle(async (sender, where) => {
      const outcome = await fork(sender, { ...where, turn }, confirmModal);
      if (!outcome.committed) return void vscode.window.showInformationMessage('mevedel: fork cancelled; nothing was created');
      // The child is the current session now: the panel follows it.
      void vscode.window.showInformationMessage(`mevedel: ${describeChild('forked', outcome.result)}`);
    });
  }

  private redo(): Promise<void> {
    return this.lifecycle(async (sender, where) => {
      const listing = await listRedo(sender, where);
      if (listing.states.length === 0) {
        return void vscode.window.showInformationMessage(`mevedel: ${listing.sessionId} has no earlier state to return to`);
      }
      const chosen = await vscode.window.showQuickPick(
        listing.states.map((state) => ({ label: redoLabel(state), description: new Date(state.updatedAt * 1000).toLocaleString(), state })),
        { title: `mevedel: Redo (${listing.sessionId})`, placeHolder: 'The state to return to', ...STAYS_OPEN },
      );
      if (!chosen) return;
      const outcome = await redo(sender, { ...where, publicationId: chosen.state.publicationId }, confirmModal);
      if (!outcome.committed) return void vscode.window.showInformationMessage('mevedel: redo cancelled; nothing changed');
      void vscode.window.showInformationMessage(`mevedel: ${describeInPlace('redone', outcome.result)}`);
    });
  }

  // The queue -------------------------------------------------------------------------------

  private queueChanged(queue: QueueDidChangeParams): void {
    if (this.state.workspaceFolder && queue.workspaceFolder !== this.state.workspaceFolder) return;
    if (this.state.sessionId && queue.sessionId !== this.state.sessionId) return;
    this.queue = queue;
    // A queued prompt being sent: its turn starts next, with its text. One
    // the server could not send comes back for review: nothing starts.
    const sending = sendingEntry(queue);
    if (sending && !this.state.live) {
      this.state = promptSent(this.state, sending.text);
      this.sendingQueued = sending.text;
    } else if (!sending && this.sendingQueued !== undefined) {
      if (!this.state.live && this.state.pendingPrompt === this.sendingQueued) this.state = { ...this.state, pendingPrompt: undefined };
      this.sendingQueued = undefined;
    }
    this.scheduleRender();
  }

  // While a turn runs the prompt waits in the session's queue; steering
  // cancels the turn and goes now.
  private async queuePrompt(text: string, steering: boolean): Promise<void> {
    try {
      const sender = await this.context.sender();
      const params = this.promptFor(text, this.state.agent);
      if (steering) await steer(sender, params);
      else await addToQueue(sender, params);
      this.attachments = [];
      this.post({ type: 'sent' });
      vscode.window.setStatusBarMessage(
        steering ? 'mevedel: steering: the running turn is cancelled and this goes next' : 'mevedel: queued: sent when the running turn settles',
        10_000,
      );
      this.scheduleRender();
    } catch (error) {
      await showAdvice(this.context, describePromptFailure(error));
    }
  }

  private async queueAction(action: string, entryId: string): Promise<void> {
    const entry = this.queue?.entries.find((e) => e.entryId === entryId);
    if (!entry) return;
    try {
      const sender = await this.context.sender();
      const where = { ...this.scope, entryId };
      if (action === 'queueEdit') {
        const text = await vscode.window.showInputBox({
          title: 'mevedel: Edit the queued prompt',
          value: entry.text,
          prompt: 'It is sent when the running turn settles',
          validateInput: (value) => (value.trim() ? undefined : 'A blank prompt is not sent; Cancel drops the queued one'),
          ...STAYS_OPEN,
        });
        if (text === undefined) return;
        await editQueued(sender, { ...where, text });
      } else if (action === 'queueCancel') {
        this.queue = await cancelQueued(sender, where);
        void vscode.window.showInformationMessage('mevedel: the queued prompt was cancelled; it is not sent');
      } else {
        await steer(sender, where);
      }
      this.scheduleRender();
    } catch (error) {
      await showAdvice(this.context, describePromptFailure(error));
    }
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    if (ChatPanel.current === this) ChatPanel.current = undefined;
    if (this.renderTimer) clearTimeout(this.renderTimer);
    if (this.refreshTimer) clearTimeout(this.refreshTimer);
    for (const d of this.disposables.splice(0)) d.dispose();
    this.panel.dispose();
  }
}

// Every configured agent for an explicit pick, the default first.
function chooseAgentList(agents: Parameters<typeof agentPickItems>[0]): Parameters<typeof agentPickItems>[0] {
  return [...agents].sort((a, b) => Number(b.default) - Number(a.default));
}
