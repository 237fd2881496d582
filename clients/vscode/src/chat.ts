// The chat panel's state: the session's settled turns (read with
// `mevedel/turn/list` and `mevedel/turn/show`) and the turn in flight, folded
// from `mevedel/turn/didUpdate` in the order the server sent them. Pure
// functions from what the server says to what the panel shows; no `vscode`
// import (the Node tests fold real notifications with them).
import { TurnDidUpdateParams, TurnError, TurnEvent, TurnOutcome, ToolDiff } from './agents';
import { listTurns, RequestSender, Scope, showTurn, TurnItem, TurnShowResult, TurnSummary } from './protocol';

export interface ToolCallView {
  callId: string;
  title?: string;
  toolKind?: string;
  status?: string;
  arguments?: string;
  output?: string;
  isError?: boolean;
  diffs?: ToolDiff[];
  // The sub-agents' tasks this call started (the `Agent` tool).
  agents?: SubAgentView[];
}

export type SubAgentState = 'starting' | 'running' | TurnOutcome;

// A retained sub-agent's task, folded from the updates with its agentPath:
// shown under the caller's tool call that started it, or at the end of the
// turn when that call is not known.
export interface SubAgentView {
  path: string;
  // Its label, `reviewer (codex)`.
  label: string;
  state: SubAgentState;
  // Why its task was interrupted or failed, as the task records it.
  reason?: string;
  blocks: Block[];
  // Its own sub-agents whose call is not known.
  agents?: SubAgentView[];
}

// A text block is `closed` once something else happened after it (a tool
// call or its update, a plan, a question): more text starts a new block, as
// the server starts a new record.
export type Block =
  | { kind: 'response'; text: string; closed?: boolean }
  | { kind: 'reasoning'; text: string; closed?: boolean }
  | { kind: 'plan'; text: string }
  | { kind: 'tool_call'; call: ToolCallView }
  | { kind: 'permission'; question: string; decision?: string; allowed?: boolean; callId?: string }
  | { kind: 'mail'; text: string; sender?: string };

export type TurnState = 'starting' | 'running' | 'cancelling' | TurnOutcome;

export interface ChatTurn {
  // Null while the agent starts (no turn yet), and for a prompt refused
  // before its turn began.
  turn: number | null;
  turnId: string | null;
  prompt: string;
  agent?: string;
  state: TurnState;
  stopReason?: string;
  error?: TurnError;
  // Why an errored or interrupted turn ended, as turn/list words it.
  reason?: string;
  blocks: Block[];
  // Sub-agents' tasks whose caller's tool call is not known.
  agents?: SubAgentView[];
  // Seen live here: its view has what the records lack (diffs, statuses).
  observed?: boolean;
}

export type Activity = 'idle' | 'starting' | 'running' | 'cancelling';

export interface ChatState {
  workspaceFolder?: string;
  sessionId?: string;
  displayName?: string;
  // Settled turns, oldest first.
  turns: ChatTurn[];
  // The turn in flight (or starting).
  live?: ChatTurn;
  // The prompt sent and not yet seen starting, shown with the live turn.
  pendingPrompt?: string;
  // A prompt refused before its turn began (its error), until the next one.
  refused?: TurnError;
  // The agent the next prompt goes to, when known.
  agent?: string;
}

export function emptyChat(scope: Scope & { displayName?: string } = {}): ChatState {
  return { workspaceFolder: scope.workspaceFolder, sessionId: scope.sessionId, displayName: scope.displayName, turns: [] };
}

export function activity(state: ChatState): Activity {
  const live = state.live;
  if (!live) return 'idle';
  if (live.state === 'starting' || live.state === 'running' || live.state === 'cancelling') return live.state;
  return 'idle';
}

// Folding the live stream ----------------------------------------------------------

// The sentence saying why a turn was interrupted (began false: its prompt
// was aborted before its turn began), from the reason the server recorded.
export function whyInterrupted(reason: string, began = true): string {
  return `${began ? 'Interrupted' : 'Aborted before it reached the agent'}: ${reason}${reason.endsWith('.') ? '' : '.'}`;
}

function nonNull<T>(value: T | null | undefined): T | undefined {
  return value === null ? undefined : value;
}

// Marks the last block closed when it is text.
function closeText(blocks: Block[]): Block[] {
  const last = blocks[blocks.length - 1];
  if (!last || (last.kind !== 'response' && last.kind !== 'reasoning') || last.closed) return blocks;
  return [...blocks.slice(0, -1), { ...last, closed: true }];
}

function foldEvent(blocks: Block[], event: TurnEvent): Block[] {
  const last = blocks[blocks.length - 1];
  if (event.kind !== 'response' && event.kind !== 'reasoning') blocks = closeText(blocks);
  switch (event.kind) {
    case 'response':
    case 'reasoning': {
      const text = event.text ?? '';
      if (last && last.kind === event.kind && !last.closed) return [...blocks.slice(0, -1), { kind: event.kind, text: last.text + text }];
      return [...blocks, { kind: event.kind, text }];
    }
    case 'plan': {
      // One plan per turn, updated where it first appeared.
      const at = blocks.findIndex((b) => b.kind === 'plan');
      const plan: Block = { kind: 'plan', text: event.text ?? '' };
      if (at < 0) return [...blocks, plan];
      return blocks.map((b, i) => (i === at ? plan : b));
    }
    case 'tool_call': {
      const callId = event.callId ?? '';
      const at = blocks.findIndex((b) => b.kind === 'tool_call' && b.call.callId === callId);
      const before: ToolCallView = at >= 0 ? (blocks[at] as { call: ToolCallView }).call : { callId };
      const call: ToolCallView = {
        ...before,
        title: nonNull(event.title) ?? before.title,
        toolKind: nonNull(event.toolKind) ?? before.toolKind,
        status: nonNull(event.status) ?? before.status,
        output: nonNull(event.output) ?? before.output,
        // A later update without diffs (its output only) keeps the edits shown.
        diffs: event.diffs?.length ? event.diffs : before.diffs,
      };
      if (call.status === 'failed') call.isError = true;
      if (at < 0) return [...blocks, { kind: 'tool_call', call }];
      return blocks.map((b, i) => (i === at ? { kind: 'tool_call', call } : b));
    }
    case 'permission':
      return [
        ...blocks,
        {
          kind: 'permission',
          question: event.text ?? '',
          decision: nonNull(event.decision),
          allowed: nonNull(event.allowed),
          callId: nonNull(event.callId),
        },
      ];
    default:
      return blocks;
  }
}

function settledState(update: TurnDidUpdateParams): TurnState {
  if (update.outcome) return update.outcome;
  return update.error ? 'errored' : 'completed';
}

// Nesting sub-agents ------------------------------------------------------------------

// What holds sub-agents: a turn (the root agent's) or a sub-agent's task.
interface Holder {
  blocks: Block[];
  agents?: SubAgentView[];
}

function parentPath(path: string): string {
  const at = path.lastIndexOf('/');
  return at < 0 ? '' : path.slice(0, at);
}

function settledView(state: SubAgentState): boolean {
  return state !== 'starting' && state !== 'running';
}

// The sub-agents a holder shows, under its calls and at its end.
function children(holder: Holder): SubAgentView[] {
  const under = holder.blocks.flatMap((b) => (b.kind === 'tool_call' ? b.call.agents ?? [] : []));
  return [...under, ...(holder.agents ?? [])];
}

function replaceChild<H extends Holder>(holder: H, old: SubAgentView, next: SubAgentView): H {
  const swap = (list?: SubAgentView[]) => list?.map((v) => (v === old ? next : v));
  return {
    ...holder,
    blocks: holder.blocks.map((b) =>
      b.kind === 'tool_call' && b.call.agents?.includes(old) ? { kind: 'tool_call', call: { ...b.call, agents: swap(b.call.agents) } } : b,
    ),
    agents: swap(holder.agents),
  };
}

function foldView(view: SubAgentView, update: TurnDidUpdateParams): SubAgentView {
  let state: SubAgentState = view.state;
  if (update.phase === 'starting') state = 'starting';
  else if (update.phase === 'running' || update.phase === 'cancelling') state = settledView(state) ? state : 'running';
  let blocks = view.blocks;
  for (const event of update.events ?? []) blocks = foldEvent(blocks, event);
  if (update.phase !== 'settled') return { ...view, label: update.agent, state, blocks };
  state = update.outcome ?? (update.error ? 'errored' : 'completed');
  return { ...view, label: update.agent, state, blocks, reason: nonNull(update.reason) };
}

// The task in a list the update belongs to: the newest of its path, unless
// that one settled and this update starts a new task.
function foldInto(list: SubAgentView[], update: TurnDidUpdateParams, path: string): SubAgentView[] {
  const at = list.map((v) => v.path).lastIndexOf(path);
  if (at < 0 || (update.phase === 'starting' && settledView(list[at].state))) {
    return [...list, foldView({ path, label: update.agent, state: 'starting', blocks: [] }, update)];
  }
  return list.map((v, i) => (i === at ? foldView(v, update) : v));
}

// The update folded into `holder` (whose own path is `path`, '' for the
// root), at the caller's call when it is shown, else at the holder's end;
// undefined when the caller is not shown under this holder.
function nest<H extends Holder>(holder: H, path: string, update: TurnDidUpdateParams, agentPath: string): H | undefined {
  const caller = parentPath(agentPath);
  if (path === caller) {
    const callId = update.parentCallId;
    const at = callId ? holder.blocks.findIndex((b) => b.kind === 'tool_call' && b.call.callId === callId) : -1;
    if (at >= 0) {
      const call = (holder.blocks[at] as { call: ToolCallView }).call;
      const agents = foldInto(call.agents ?? [], update, agentPath);
      return { ...holder, blocks: holder.blocks.map((b, i) => (i === at ? { kind: 'tool_call', call: { ...call, agents } } : b)) };
    }
    return { ...holder, agents: foldInto(holder.agents ?? [], update, agentPath) };
  }
  // Down through the caller's ancestors, the newest task first.
  for (const child of children(holder).reverse()) {
    if (child.path !== caller && !caller.startsWith(child.path + '/')) continue;
    const next = nest(child, child.path, update, agentPath);
    if (next) return replaceChild(holder, child, next);
  }
  return undefined;
}

// A sub-agent's update: folded into its root turn (in flight, or settled
// already when the sub-agent's last word comes after it), never changing
// that turn's state or agent.
function applyNested(state: ChatState, update: TurnDidUpdateParams, agentPath: string): ChatState {
  const turn = nonNull(update.turn) ?? null;
  const into = <T extends ChatTurn>(t: T): T =>
    nest(t, '', update, agentPath) ?? { ...t, agents: foldInto(t.agents ?? [], update, agentPath) };
  const live = state.live;
  if (live && (live.turn === null || turn === null || live.turn === turn)) return { ...state, live: into(live) };
  const settled = turn !== null ? state.turns.find((t) => t.turn === turn) : undefined;
  if (settled) return { ...state, turns: state.turns.map((t) => (t === settled ? into(t) : t)) };
  // Seen before its root turn's own updates (a panel opened mid-turn).
  const started: ChatTurn = { turn, turnId: nonNull(update.turnId) ?? null, prompt: state.pendingPrompt ?? '', state: 'running', blocks: [] };
  return { ...state, live: into(started) };
}

// The state after one `mevedel/turn/didUpdate`. Updates of another session
// change nothing; a panel without a session takes the first one's (a prompt
// that created the session).
export function applyUpdate(state: ChatState, update: TurnDidUpdateParams): ChatState {
  if (state.workspaceFolder && update.workspaceFolder && update.workspaceFolder !== state.workspaceFolder) return state;
  if (state.sessionId && update.sessionId !== state.sessionId) return state;
  let next: ChatState = { ...state, sessionId: update.sessionId, workspaceFolder: state.workspaceFolder ?? update.workspaceFolder };
  if (update.agentPath) return applyNested(next, update, update.agentPath);
  let live = next.live;
  const turn = nonNull(update.turn) ?? null;
  if (!live || (live.turn !== null && turn !== null && live.turn !== turn)) {
    // A panel opened mid-turn has the turn from turn/show as in flight:
    // it continues from there.
    const shown = turn !== null ? next.turns.find((t) => t.turn === turn && t.state === 'running') : undefined;
    if (shown) next = { ...next, turns: next.turns.filter((t) => t !== shown) };
    live = shown ?? { turn, turnId: nonNull(update.turnId) ?? null, prompt: next.pendingPrompt ?? '', state: 'starting', blocks: [] };
  }
  live = { ...live, agent: update.agent, turn: live.turn ?? turn, turnId: live.turnId ?? nonNull(update.turnId) ?? null };
  if (update.phase === 'starting') {
    next = { ...next, refused: undefined };
    live = { ...live, state: 'starting' };
  } else if (update.phase === 'running') {
    // Batches sent after a cancel still say running; the cancel stands.
    if (live.state !== 'cancelling') live = { ...live, state: 'running' };
  } else if (update.phase === 'cancelling') {
    live = { ...live, state: 'cancelling' };
  }
  for (const event of update.events ?? []) live = { ...live, blocks: foldEvent(live.blocks, event) };
  if (update.phase !== 'settled') return { ...next, live, agent: update.agent };
  live = {
    ...live,
    state: settledState(update),
    stopReason: nonNull(update.stopReason),
    error: nonNull(update.error),
    reason: nonNull(update.reason),
    observed: true,
  };
  next = { ...next, live: undefined, pendingPrompt: undefined, agent: update.agent };
  if (live.turn === null && live.state === 'interrupted') {
    // Aborted while its agent started: it never reached the agent.
    const message = whyInterrupted(live.reason ?? 'aborted', false);
    return { ...next, refused: { kind: live.error?.kind ?? 'prompt-aborted', message, action: live.error?.action } };
  }
  if (live.turn === null) return { ...next, refused: live.error };
  return { ...next, turns: [...next.turns.filter((t) => t.turn !== live!.turn), live] };
}

// Marks the prompt just sent, shown as the live turn's prompt once it starts.
export function promptSent(state: ChatState, text: string): ChatState {
  return { ...state, pendingPrompt: text, refused: undefined };
}

// History -------------------------------------------------------------------------

const SUMMARY_STATES: Record<TurnSummary['state'], TurnState> = {
  'in-flight': 'running',
  completed: 'completed',
  errored: 'errored',
  interrupted: 'interrupted',
};

// Whether a tool call's title names the Agent tool (`Agent`,
// `mcp__mevedel__Agent`, `mcp Agent`...).
function namesAgentTool(title?: string): boolean {
  return (title ?? '').split(/[^A-Za-z0-9]+/).includes('Agent');
}

function itemBlocks(items: TurnItem[]): Holder {
  let blocks: Block[] = [];
  const agents: SubAgentView[] = [];
  // Sub-sub-agents' tasks, settled (recorded) before their caller's.
  let waiting: SubAgentView[] = [];
  for (const item of items) {
    switch (item.kind) {
      case 'agent_task': {
        // A sub-agent's task, recorded when it settled: under the call that
        // started it (parentCallId; a record that names none: the newest
        // Agent call still waiting for its answer, a guess parallel calls
        // defeat), its own sub-agents' tasks under it.
        const path = item.name ?? '';
        const view: SubAgentView = {
          path,
          label: item.sender ? `${path} (${item.sender})` : path,
          // How it ended and why, as its settled update said (a server
          // that does not send them says only whether it failed).
          state: item.outcome ?? (item.isError ? 'errored' : 'completed'),
          reason: nonNull(item.reason),
          blocks: item.output ? [{ kind: 'response', text: item.output, closed: true }] : [],
        };
        const own = waiting.filter((v) => parentPath(v.path) === path);
        if (own.length) view.agents = own;
        waiting = waiting.filter((v) => parentPath(v.path) !== path);
        if (path.includes('/')) {
          waiting.push(view);
          break;
        }
        let at = -1;
        if (item.parentCallId) {
          at = blocks.findIndex((b) => b.kind === 'tool_call' && b.call.callId === item.parentCallId);
        } else {
          blocks.forEach((b, i) => {
            if (b.kind === 'tool_call' && !b.call.status && namesAgentTool(b.call.title)) at = i;
          });
        }
        if (at < 0) {
          agents.push(view);
          break;
        }
        const call = (blocks[at] as { call: ToolCallView }).call;
        blocks = blocks.map((b, i) => (i === at ? { kind: 'tool_call', call: { ...call, agents: [...(call.agents ?? []), view] } } : b));
        break;
      }
      case 'response':
      case 'reasoning':
        // Separate records stay separate blocks (the fold merges only the
        // pieces of one run).
        blocks = [...blocks, { kind: item.kind, text: item.text ?? '', closed: true }];
        break;
      case 'plan':
        blocks = foldEvent(blocks, { kind: 'plan', text: item.text });
        break;
      case 'tool_call':
        blocks = [
          ...blocks,
          { kind: 'tool_call', call: { callId: item.callId ?? '', title: item.name, arguments: item.arguments || undefined } },
        ];
        break;
      case 'tool_result': {
        const at = blocks.findIndex((b) => b.kind === 'tool_call' && b.call.callId === item.callId);
        const call: ToolCallView = {
          ...(at >= 0 ? (blocks[at] as { call: ToolCallView }).call : { callId: item.callId ?? '' }),
          status: item.isError ? 'failed' : 'completed',
          output: item.output,
          isError: item.isError ?? false,
        };
        blocks = at >= 0 ? blocks.map((b, i) => (i === at ? { kind: 'tool_call', call } : b)) : [...blocks, { kind: 'tool_call', call }];
        break;
      }
      case 'permission':
        blocks = [
          ...blocks,
          { kind: 'permission', question: item.text ?? '', decision: item.output, allowed: !item.isError, callId: item.callId },
        ];
        break;
      case 'mail':
        blocks = [...blocks, { kind: 'mail', text: item.text ?? '', sender: item.sender }];
        break;
    }
  }
  const unplaced = [...agents, ...waiting];
  return unplaced.length ? { blocks, agents: unplaced } : { blocks };
}

// A recorded turn as the panel shows it.
export function turnFromShow(shown: TurnShowResult): ChatTurn {
  return {
    turn: shown.summary.turn,
    turnId: shown.summary.turnId,
    prompt: shown.prompt,
    state: SUMMARY_STATES[shown.summary.state],
    reason: shown.summary.reason,
    ...itemBlocks(shown.items),
  };
}

// The session's turns as the panel shows them, oldest first: the newest
// `limit` of turn/list, each read with turn/show unless `known` has it
// settled already (same identity, same state).
export async function loadHistory(
  sender: RequestSender,
  scope: Scope,
  known: readonly ChatTurn[] = [],
  limit = 200,
): Promise<{ sessionId: string; turns: ChatTurn[] }> {
  const listing = await listTurns(sender, scope);
  const turns: ChatTurn[] = [];
  for (const summary of listing.turns.slice(-limit)) {
    const state = SUMMARY_STATES[summary.state];
    const have = known.find((t) => t.turnId === summary.turnId && t.state === state && state !== 'running');
    if (have && have.prompt) {
      turns.push({ ...have, turn: summary.turn, reason: summary.reason });
      continue;
    }
    const shown = await showTurn(sender, { workspaceFolder: scope.workspaceFolder, sessionId: listing.sessionId, turn: summary.turn });
    turns.push(turnFromShow(shown));
  }
  return { sessionId: listing.sessionId, turns };
}

// The state with the history read from the server; a turn in flight seen
// live is kept (its live view has more than the records so far).
export function withHistory(state: ChatState, sessionId: string, turns: ChatTurn[]): ChatState {
  const sameSession = state.sessionId === sessionId;
  const live = sameSession ? state.live : undefined;
  const merged = turns
    .filter((t) => !(live && live.turn !== null && t.turn === live.turn))
    .map((t) => {
      const seen = sameSession ? state.turns.find((s) => s.observed && s.turnId === t.turnId) : undefined;
      return seen ? { ...seen, turn: t.turn, prompt: t.prompt, reason: t.reason, state: t.state } : t;
    });
  return { ...state, sessionId, turns: merged, live, refused: sameSession ? state.refused : undefined };
}
