// Prompting an ACP agent as the VS Code client speaks it: the wire types of
// `mevedel/turn/prompt`, `mevedel/turn/cancel`, `mevedel/agent/list` and the
// live `mevedel/turn/didUpdate`; which agent a prompt goes to; what a prompt
// carries from the editor (a quoted selection, attachments); and what a
// failure tells the user to do. No `vscode` import: the Node tests run all of
// it against the real server driving the scripted ACP agent.
import { describeFailure, isErrorData, RequestSender, Scope } from './protocol';

export const AgentMethods = {
  prompt: 'mevedel/turn/prompt',
  cancel: 'mevedel/turn/cancel',
  list: 'mevedel/agent/list',
  didUpdate: 'mevedel/turn/didUpdate',
} as const;

export interface TurnPromptParams extends Scope {
  text: string;
  agent?: string;
  attachments?: string[];
}

// Why a turn failed (or a prompt was refused), and what to do about it.
export interface TurnError {
  kind: string;
  message: string;
  action?: string | null;
}

export type TurnOutcome = 'completed' | 'errored' | 'interrupted';

export interface TurnPromptResult {
  sessionId: string;
  turn: number;
  turnId: string;
  agent: string;
  outcome: TurnOutcome;
  stopReason?: string | null;
  error?: TurnError | null;
}

export interface TurnCancelResult {
  cancelled: boolean;
}

export interface AgentEntry {
  name: string;
  command: string[];
  found: boolean;
  default: boolean;
}

export interface AgentListResult {
  agents: AgentEntry[];
  defaultAgent?: string | null;
}

export interface ToolDiff {
  path: string;
  newText: string;
  oldText?: string | null;
}

export type TurnEventKind = 'response' | 'reasoning' | 'tool_call' | 'plan' | 'permission';

// Fields with their default value (null, an empty list, false) are left out
// on the wire, so every one but `kind` may be absent.
export interface TurnEvent {
  kind: TurnEventKind;
  text?: string | null;
  callId?: string | null;
  title?: string | null;
  toolKind?: string | null;
  status?: string | null;
  output?: string | null;
  diffs?: ToolDiff[] | null;
  decision?: string | null;
  allowed?: boolean | null;
}

export type TurnPhase = 'starting' | 'running' | 'cancelling' | 'settled';

export interface TurnDidUpdateParams {
  workspaceFolder: string;
  sessionId: string;
  agent: string;
  phase: TurnPhase;
  turn?: number | null;
  turnId?: string | null;
  events?: TurnEvent[];
  outcome?: TurnOutcome | null;
  stopReason?: string | null;
  error?: TurnError | null;
  // A retained sub-agent's activity: its path (`reviewer`,
  // `reviewer/search`); absent for the root agent's own. Its phases are its
  // task's, never the root turn's.
  agentPath?: string | null;
  // With agentPath: the callId of its caller's tool call that started it
  // (the root's, or the calling sub-agent's); absent when unknown.
  parentCallId?: string | null;
  // With settled: why the turn was interrupted or errored, as its
  // settlement recorded it (`aborted`, `cancelled by the user`...).
  reason?: string | null;
}

export function promptTurn(sender: RequestSender, params: TurnPromptParams): Promise<TurnPromptResult> {
  return sender.sendRequest<TurnPromptResult>(AgentMethods.prompt, params);
}

export function cancelTurn(sender: RequestSender, scope: Scope = {}): Promise<TurnCancelResult> {
  return sender.sendRequest<TurnCancelResult>(AgentMethods.cancel, scope);
}

export function listAgents(sender: RequestSender, params: { workspaceFolder?: string } = {}): Promise<AgentListResult> {
  return sender.sendRequest<AgentListResult>(AgentMethods.list, params);
}

// Which agent --------------------------------------------------------------------

// What the prompt flow does about the agent: send with this one (undefined:
// let the server choose, which refuses when none is configured), or ask the
// user among `choices`.
export type AgentChoice = { agent: string | undefined } | { choices: AgentEntry[] };

// The agent remembered for the session when it is still configured, else the
// only one, else a pick among all of them (the default first). With none
// configured the server's own refusal (agent-not-configured, naming how to
// add one) is what the user sees.
export function chooseAgent(listing: AgentListResult, remembered?: string): AgentChoice {
  const agents = listing.agents;
  if (remembered && agents.some((a) => a.name === remembered)) return { agent: remembered };
  if (agents.length === 0) return { agent: undefined };
  if (agents.length === 1) return { agent: agents[0].name };
  const ordered = [...agents].sort((a, b) => Number(b.default) - Number(a.default));
  return { choices: ordered };
}

export interface AgentPickItem {
  label: string;
  description: string;
  detail: string;
  agent: string;
}

// The agent picker's rows: the name, whether it is the default and whether
// its program is found, and its command.
export function agentPickItems(choices: AgentEntry[]): AgentPickItem[] {
  return choices.map((entry) => ({
    label: entry.name,
    description: [entry.default ? 'default' : '', entry.found ? '' : 'program not found on PATH'].filter(Boolean).join(' · '),
    detail: entry.command.join(' '),
    agent: entry.name,
  }));
}

// The key under which the agent chosen for a session is remembered (the
// extension keeps it in workspaceState).
export function agentMemoryKey(workspaceFolder: string | undefined, sessionId: string): string {
  return `mevedel.agent:${workspaceFolder ?? ''}:${sessionId}`;
}

// What a prompt carries -------------------------------------------------------------

export interface QuotedSelection {
  // Workspace-relative (or the document's name when it has no file).
  path: string;
  // 1-based, inclusive.
  startLine: number;
  endLine: number;
  text: string;
  languageId?: string;
}

export interface Draft {
  text: string;
  selections?: QuotedSelection[];
  attachments?: string[];
}

// A fence longer than any run of backticks in the quoted text.
function fence(text: string): string {
  let longest = 0;
  for (const run of text.match(/`+/g) ?? []) longest = Math.max(longest, run.length);
  return '`'.repeat(Math.max(3, longest + 1));
}

// The prompt text the agent receives: what the user wrote, then each quoted
// selection as a fenced block naming where it is from. Attachments go
// separately (the server reads them and sends their content).
export function composePrompt(draft: Draft): string {
  const parts = [draft.text.trim()];
  for (const quoted of draft.selections ?? []) {
    const lines = quoted.startLine === quoted.endLine ? `line ${quoted.startLine}` : `lines ${quoted.startLine}-${quoted.endLine}`;
    const marks = fence(quoted.text);
    const body = quoted.text.endsWith('\n') ? quoted.text : `${quoted.text}\n`;
    parts.push(`From ${quoted.path} (${lines}):\n${marks}${quoted.languageId ?? ''}\n${body}${marks}`);
  }
  return parts.filter((part) => part !== '').join('\n\n');
}

export function promptParams(draft: Draft, scope: Scope, agent: string | undefined): TurnPromptParams {
  const params: TurnPromptParams = { text: composePrompt(draft), ...scope };
  if (agent) params.agent = agent;
  if (draft.attachments?.length) params.attachments = [...draft.attachments];
  return params;
}

// Failures ----------------------------------------------------------------------------

// The buttons a failure offers; the extension runs them.
export type FailureAction =
  | { title: 'Open Settings'; setting: string }
  | { title: 'Open Agent Log'; path: string }
  | { title: 'Open Terminal' }
  | { title: 'Show Server Output' };

export interface Advice {
  message: string;
  actions: FailureAction[];
}

const AGENTS_SETTING = 'mevedel.agents';

// The agent log a reason or action names (`its log is /path/agent-x.log`).
function logPath(text: string): string | undefined {
  const found = /its log is (\S+?\.log)\b/.exec(text);
  return found?.[1];
}

function adviceFor(kind: string, message: string, also: string): Advice {
  const actions: FailureAction[] = [];
  const log = logPath(`${message} ${also}`);
  switch (kind) {
    case 'agent-not-configured':
      actions.push({ title: 'Open Settings', setting: AGENTS_SETTING });
      break;
    case 'agent-not-installed':
      actions.push({ title: 'Open Settings', setting: AGENTS_SETTING });
      break;
    case 'agent-needs-login':
      // The login runs in a terminal (`codex login`, `claude` then /login...).
      actions.push({ title: 'Open Terminal' });
      break;
    case 'agent-failed':
      if (log) actions.push({ title: 'Open Agent Log', path: log });
      else actions.push({ title: 'Show Server Output' });
      break;
  }
  const lead = {
    'agent-not-configured': 'no agent to prompt',
    'agent-not-installed': 'the agent is not installed',
    'agent-needs-login': 'the agent needs you to log in',
    'agent-failed': 'the agent failed',
    'attachment-refused': 'an attachment cannot go with the prompt',
    'agent-option-refused': 'the agent did not take the mode or option chosen',
  }[kind];
  return { message: lead ? `${lead}: ${message}` : message, actions };
}

// What a refused prompt (a ResponseError) tells the user, and the buttons
// that do what it says.
export function describePromptFailure(error: unknown): Advice {
  const data = (error as { data?: unknown } | null)?.data;
  if (!isErrorData(data)) return { message: describeFailure(error), actions: [] };
  return adviceFor(data.kind, `${data.authored}: ${data.reason}`, '');
}

// What a settled turn's error tells the user (the server's message, then
// its action), and the buttons.
export function describeTurnError(error: TurnError): Advice {
  const advice = adviceFor(error.kind, error.message, error.action ?? '');
  const action = error.action ? ` (${error.action})` : '';
  return { message: `${advice.message}${action}`, actions: advice.actions };
}

// One sentence about how a prompt ended.
export function describeOutcome(result: TurnPromptResult): string {
  const where = `turn ${result.turn} of ${result.sessionId} (${result.agent})`;
  if (result.outcome === 'completed') {
    const stop = result.stopReason && result.stopReason !== 'end_turn' ? `, stopped: ${result.stopReason}` : '';
    return `${where} completed${stop}`;
  }
  if (result.outcome === 'interrupted') return `${where} was interrupted; what arrived is kept`;
  return `${where} failed${result.error ? `: ${result.error.message}` : ''}`;
}
