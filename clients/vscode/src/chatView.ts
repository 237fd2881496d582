// The chat panel's HTML: the page (strict Content Security Policy, one
// nonce'd script, no remote resources, VS Code's theme colours through its
// `--vscode-*` CSS variables) and the fragments the panel swaps in as the
// state changes. Everything an agent or a session supplies is untrusted:
// it only ever reaches the HTML through `escapeHtml`. No `vscode` import:
// the Node tests render real turns with it.
import { ToolDiff } from './agents';
import { activity, Block, ChatState, ChatTurn, SubAgentView, ToolCallView, whyInterrupted } from './chat';

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

// Text as HTML text or as a double-quoted attribute value.
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ESCAPES[c]);
}

// Text with its fenced code blocks set apart; everything escaped.
export function renderText(text: string): string {
  const parts: string[] = [];
  const fences = /^(`{3,}|~{3,})[^\n]*\n([\s\S]*?)^\1[ \t]*$/gm;
  let at = 0;
  for (let found = fences.exec(text); found; found = fences.exec(text)) {
    if (found.index > at) parts.push(prose(text.slice(at, found.index)));
    parts.push(`<pre class="code">${escapeHtml(found[2].replace(/\n$/, ''))}</pre>`);
    at = found.index + found[0].length;
  }
  if (at < text.length) parts.push(prose(text.slice(at)));
  return parts.join('');
}

function prose(text: string): string {
  const trimmed = text.replace(/^\n+|\n+$/g, '');
  return trimmed ? `<div class="text">${escapeHtml(trimmed)}</div>` : '';
}

// Diffs ---------------------------------------------------------------------------

export type DiffLine = { op: ' ' | '-' | '+'; text: string } | { op: '…'; count: number };

// Larger inputs are shown as all old lines removed, all new ones added.
const LCS_LIMIT = 1_000_000;
// Unchanged lines shown around each change.
const CONTEXT = 3;

function splitLines(text: string): string[] {
  if (text === '') return [];
  const lines = text.split('\n');
  if (lines[lines.length - 1] === '') lines.pop();
  return lines;
}

// A line diff of two texts (longest common subsequence), with runs of
// unchanged lines beyond CONTEXT of a change folded into a count.
export function lineDiff(oldText: string | null | undefined, newText: string): DiffLine[] {
  const a = splitLines(oldText ?? '');
  const b = splitLines(newText);
  let lines: Array<{ op: ' ' | '-' | '+'; text: string }> = [];
  if (a.length * b.length > LCS_LIMIT) {
    lines = [...a.map((text) => ({ op: '-' as const, text })), ...b.map((text) => ({ op: '+' as const, text }))];
  } else {
    const n = a.length;
    const m = b.length;
    const table: Uint32Array[] = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
    for (let i = n - 1; i >= 0; i--) {
      for (let j = m - 1; j >= 0; j--) {
        table[i][j] = a[i] === b[j] ? table[i + 1][j + 1] + 1 : Math.max(table[i + 1][j], table[i][j + 1]);
      }
    }
    let i = 0;
    let j = 0;
    while (i < n && j < m) {
      if (a[i] === b[j]) {
        lines.push({ op: ' ', text: a[i] });
        i++;
        j++;
      } else if (table[i + 1][j] >= table[i][j + 1]) {
        lines.push({ op: '-', text: a[i++] });
      } else {
        lines.push({ op: '+', text: b[j++] });
      }
    }
    while (i < n) lines.push({ op: '-', text: a[i++] });
    while (j < m) lines.push({ op: '+', text: b[j++] });
  }
  const near = lines.map(() => false);
  lines.forEach((line, k) => {
    if (line.op === ' ') return;
    for (let d = Math.max(0, k - CONTEXT); d <= Math.min(lines.length - 1, k + CONTEXT); d++) near[d] = true;
  });
  const out: DiffLine[] = [];
  for (let k = 0; k < lines.length; k++) {
    if (near[k] || lines[k].op !== ' ') {
      out.push(lines[k]);
      continue;
    }
    let count = 0;
    while (k < lines.length && !near[k] && lines[k].op === ' ') {
      count++;
      k++;
    }
    k--;
    out.push({ op: '…', count });
  }
  return out;
}

export function renderDiff(diff: ToolDiff): string {
  const header = `${diff.oldText === null || diff.oldText === undefined ? 'new file ' : ''}${diff.path}`;
  const rows = lineDiff(diff.oldText, diff.newText).map((line) => {
    if (line.op === '…') return `<span class="diff-skip">… ${line.count} unchanged line${line.count === 1 ? '' : 's'}</span>`;
    const cls = line.op === '+' ? 'diff-add' : line.op === '-' ? 'diff-del' : 'diff-same';
    return `<span class="${cls}">${line.op} ${escapeHtml(line.text)}</span>`;
  });
  return `<div class="diff"><div class="diff-path">${escapeHtml(header)}</div><pre class="diff-body">${rows.join('')}</pre></div>`;
}

// Turns -------------------------------------------------------------------------------

const STATUS_LABELS: Record<string, string> = {
  pending: 'pending',
  in_progress: 'running',
  completed: 'done',
  failed: 'failed',
};

function renderToolCall(call: ToolCallView, key: string): string {
  const status = call.status ?? 'pending';
  const label = STATUS_LABELS[status] ?? status;
  const kind = call.toolKind ? `<span class="tool-kind">${escapeHtml(call.toolKind)}</span>` : '';
  const title = escapeHtml(call.title ?? call.callId ?? 'tool');
  const parts: string[] = [];
  if (call.arguments) parts.push(`<pre class="tool-args">${escapeHtml(call.arguments)}</pre>`);
  for (const diff of call.diffs ?? []) parts.push(renderDiff(diff));
  if (call.output) parts.push(`<pre class="tool-output${call.isError ? ' error' : ''}">${escapeHtml(call.output)}</pre>`);
  const body = parts.join('');
  const summary = `<span class="status status-${escapeHtml(status.replace(/[^a-z_]/gi, ''))}">${escapeHtml(label)}</span>${kind}<span class="tool-title">${title}</span>`;
  // A call with diffs shows them; anything else opens on demand.
  const open = call.diffs?.length ? ' open' : '';
  const tool = body
    ? `<details class="tool" data-key="${escapeHtml(key)}"${open}><summary>${summary}</summary>${body}</details>`
    : `<div class="tool">${summary}</div>`;
  // The sub-agents it started (the Agent tool), under it.
  return call.agents?.length ? `<div class="tool-agents">${tool}${renderSubAgents(call.agents, key)}</div>` : tool;
}

const SUB_AGENT_STATES: Record<string, string> = {
  starting: 'starting…',
  running: 'working',
  completed: 'done',
  errored: 'failed',
  interrupted: 'interrupted',
};

// A sub-agent's task: open while it works, folded once settled (its own
// key then, so the fold is not undone by the open state the page kept of
// it while it worked; the user's own toggle of the settled one is kept).
function renderSubAgent(view: SubAgentView, key: string): string {
  const done = view.state !== 'starting' && view.state !== 'running';
  const own = `${key}@${view.path}`;
  const blocks = view.blocks.map((block, i) => renderBlock(block, `${own}:${i}`)).join('');
  const state = `<span class="subagent-state state-${escapeHtml(view.state)}">${escapeHtml(SUB_AGENT_STATES[view.state] ?? view.state)}</span>`;
  const summary = `<span class="label">Sub-agent</span><span class="subagent-label">${escapeHtml(view.label)}</span>${state}`;
  const body = `<div class="subagent-body">${blocks}${renderSubAgents(view.agents ?? [], own)}</div>`;
  const details = `<details class="subagent${done ? ' settled' : ''}" data-path="${escapeHtml(view.path)}" data-key="${escapeHtml(`${own}:${done ? 'settled' : 'live'}`)}"${done ? '' : ' open'}><summary>${summary}</summary>${body}</details>`;
  return details + subAgentWhy(view);
}

// Why a settled task was interrupted or failed, below its fold so it shows
// folded or not, in the sentence the turn's own reason is said in.
function subAgentWhy(view: SubAgentView): string {
  if (!view.reason || view.state === 'completed' || view.state === 'starting' || view.state === 'running') return '';
  if (view.state === 'interrupted') return `<div class="why subagent-why">${escapeHtml(whyInterrupted(view.reason))}</div>`;
  return `<div class="error subagent-why"><div>${escapeHtml(view.reason)}</div></div>`;
}

function renderSubAgents(views: SubAgentView[], key: string): string {
  return views.map((view, i) => renderSubAgent(view, `${key}#${i}`)).join('');
}

function renderBlock(block: Block, key: string): string {
  switch (block.kind) {
    case 'response':
      return `<div class="response">${renderText(block.text)}</div>`;
    case 'reasoning':
      return `<details class="reasoning" data-key="${escapeHtml(key)}"><summary>Reasoning</summary>${renderText(block.text)}</details>`;
    case 'plan':
      return `<div class="plan"><div class="label">Plan</div><pre>${escapeHtml(block.text)}</pre></div>`;
    case 'tool_call':
      return renderToolCall(block.call, key);
    case 'permission': {
      const decided =
        block.decision === undefined
          ? '<span class="pending">waiting for your answer</span>'
          : `<span class="${block.allowed ? 'allowed' : 'refused'}">${escapeHtml(block.decision)}</span>`;
      return `<div class="permission"><span class="label">Permission</span> ${escapeHtml(block.question)} → ${decided}</div>`;
    }
    case 'mail':
      return `<div class="mail"><span class="label">Mail${block.sender ? ` from ${escapeHtml(block.sender)}` : ''}</span>${renderText(block.text)}</div>`;
  }
}

const STATE_LABELS: Record<string, string> = {
  starting: 'starting the agent…',
  running: 'running',
  cancelling: 'cancelling…',
  completed: 'completed',
  errored: 'failed',
  interrupted: 'interrupted',
};

export interface TurnOptions {
  // Rewind, Fork, Review changes buttons (off while a turn runs).
  actions: boolean;
}

function button(action: string, label: string, title: string, data: Record<string, string | number> = {}, disabled = false): string {
  const attributes = Object.entries(data)
    .map(([name, value]) => ` data-${name}="${escapeHtml(String(value))}"`)
    .join('');
  return `<button class="action" data-action="${escapeHtml(action)}"${attributes} title="${escapeHtml(title)}"${disabled ? ' disabled' : ''}>${escapeHtml(label)}</button>`;
}

export function renderTurn(turn: ChatTurn, options: TurnOptions): string {
  const id = turn.turnId ?? 'live';
  const number = turn.turn === null ? '' : `Turn ${turn.turn}`;
  const agent = turn.agent ? ` · ${escapeHtml(turn.agent)}` : '';
  const state = `<span class="turn-state state-${escapeHtml(turn.state)}">${escapeHtml(STATE_LABELS[turn.state] ?? turn.state)}</span>`;
  // Sub-agents whose call is not known come last, each under its name.
  const blocks = turn.blocks.map((block, i) => renderBlock(block, `${id}:${i}`)).join('') + renderSubAgents(turn.agents ?? [], `${id}:end`);
  const parts = [
    `<div class="turn-head"><span class="turn-number">${escapeHtml(number)}</span>${agent}${state}</div>`,
    `<div class="prompt">${renderText(turn.prompt)}</div>`,
    blocks,
  ];
  if (turn.error) {
    const action = turn.error.action ? `<div class="error-action">${escapeHtml(turn.error.action)}</div>` : '';
    parts.push(`<div class="error"><div>${escapeHtml(turn.error.message)}</div>${action}</div>`);
  } else if (turn.reason && turn.state === 'interrupted') {
    parts.push(`<div class="why">${escapeHtml(whyInterrupted(turn.reason))}</div>`);
  } else if (turn.reason && turn.state !== 'completed') {
    parts.push(`<div class="error"><div>${escapeHtml(turn.reason)}</div></div>`);
  }
  if (turn.stopReason && turn.stopReason !== 'end_turn') parts.push(`<div class="stop">stopped: ${escapeHtml(turn.stopReason)}</div>`);
  const settled = turn.turn !== null && !['starting', 'running', 'cancelling'].includes(turn.state);
  if (settled && options.actions) {
    const n = turn.turn as number;
    const buttons = [
      button('rewind', 'Rewind before', `Rewind to before the prompt of turn ${n} (discard it too)`, { turn: n, boundary: 'before' }),
      button('rewind', 'Rewind after', `Rewind to after the response of turn ${n} (keep it)`, { turn: n, boundary: 'after' }),
    ];
    if (turn.state === 'completed') buttons.push(button('fork', 'Fork', `A new session ending at the response of turn ${n}`, { turn: n }));
    buttons.push(button('review', 'Review changes', `What turn ${n} changed in the tree, file by file, in the diff editor`, { turn: n }));
    parts.push(`<div class="turn-actions">${buttons.join('')}</div>`);
  }
  return `<section class="turn${turn.turn === null ? '' : ` turn-${turn.turn}`}">${parts.join('')}</section>`;
}

// The panel's fragments ----------------------------------------------------------------

export interface ChatParts {
  header: string;
  turns: string;
  live: string;
  notice: string;
}

const ACTIVITY_LABELS = { idle: 'idle', starting: 'starting', running: 'running', cancelling: 'cancelling' } as const;

export function renderHeader(state: ChatState): string {
  const now = activity(state);
  const busy = now !== 'idle';
  const name = state.displayName ?? state.sessionId ?? 'no session yet';
  const agent = state.agent ?? state.live?.agent;
  return [
    `<div class="session"><span class="indicator indicator-${now}" title="${ACTIVITY_LABELS[now]}"></span>`,
    `<span class="session-name">${escapeHtml(name)}</span>`,
    `<span class="activity">${ACTIVITY_LABELS[now]}</span></div>`,
    '<div class="header-actions">',
    button('pickAgent', `Agent: ${agent ?? 'choose…'}`, 'The agent this session prompts', {}, busy),
    busy ? button('cancel', 'Cancel', 'Cancel the turn in flight', {}, now === 'cancelling') : '',
    button('redo', 'Redo…', 'Return to an earlier state of the session', {}, busy),
    button('refresh', 'Refresh', 'Read the session again', {}, false),
    '</div>',
  ].join('');
}

export function renderNotice(state: ChatState): string {
  if (!state.refused) return '';
  const action = state.refused.action ? `<div class="error-action">${escapeHtml(state.refused.action)}</div>` : '';
  return `<div class="error"><div>${escapeHtml(state.refused.message)}</div>${action}</div>`;
}

export function renderParts(state: ChatState): ChatParts {
  const idle = activity(state) === 'idle';
  const turns = state.turns.map((turn) => renderTurn(turn, { actions: idle })).join('');
  let live = '';
  if (state.live) live = renderTurn({ ...state.live, prompt: state.live.prompt || state.pendingPrompt || '' }, { actions: false });
  const empty = !turns && !live ? '<div class="empty">No turns yet. Write a prompt below; the agent answers here.</div>' : '';
  return { header: renderHeader(state), turns: turns || empty, live, notice: renderNotice(state) };
}

export function renderAttachments(labels: string[]): string {
  return labels
    .map((label, index) => `<span class="chip">${escapeHtml(label)}${button('detach', '×', `Remove ${label}`, { index })}</span>`)
    .join('');
}

// The page --------------------------------------------------------------------------------

export interface PageOptions {
  // A fresh random value per page load.
  nonce: string;
  // The webview's own resource origin (webview.cspSource).
  cspSource: string;
}

export function contentSecurityPolicy(options: PageOptions): string {
  return [
    "default-src 'none'",
    `style-src 'nonce-${options.nonce}'`,
    `script-src 'nonce-${options.nonce}'`,
    `img-src ${options.cspSource}`,
    `font-src ${options.cspSource}`,
  ].join('; ');
}

const STYLE = `
body { font-family: var(--vscode-font-family); font-size: var(--vscode-font-size); color: var(--vscode-foreground); background: var(--vscode-editor-background); margin: 0; padding: 0; }
header { position: sticky; top: 0; z-index: 1; display: flex; flex-wrap: wrap; justify-content: space-between; align-items: center; gap: 6px; padding: 6px 12px; background: var(--vscode-sideBar-background, var(--vscode-editor-background)); border-bottom: 1px solid var(--vscode-panel-border, transparent); }
.session { display: flex; align-items: center; gap: 8px; }
.session-name { font-weight: bold; }
.activity { color: var(--vscode-descriptionForeground); }
.indicator { display: inline-block; width: 9px; height: 9px; border-radius: 50%; background: var(--vscode-descriptionForeground); }
.indicator-running { background: var(--vscode-charts-green, var(--vscode-testing-iconPassed)); }
.indicator-starting, .indicator-cancelling { background: var(--vscode-charts-yellow, var(--vscode-editorWarning-foreground)); }
main { padding: 8px 12px 12px; }
button.action { font-family: inherit; font-size: 0.9em; color: var(--vscode-button-secondaryForeground); background: var(--vscode-button-secondaryBackground); border: 1px solid var(--vscode-button-border, transparent); border-radius: 2px; padding: 2px 8px; margin-right: 4px; cursor: pointer; }
button.action:hover { background: var(--vscode-button-secondaryHoverBackground); }
button.action:disabled { opacity: 0.5; cursor: default; }
button.primary { color: var(--vscode-button-foreground); background: var(--vscode-button-background); border: none; padding: 4px 12px; cursor: pointer; }
button.primary:hover { background: var(--vscode-button-hoverBackground); }
.turn { border-bottom: 1px solid var(--vscode-panel-border, var(--vscode-widget-border, transparent)); padding: 8px 0; }
.turn-head { color: var(--vscode-descriptionForeground); font-size: 0.9em; display: flex; gap: 8px; }
.turn-state { margin-left: auto; }
.state-errored, .error, .refused, .tool-output.error { color: var(--vscode-errorForeground); }
.state-running, .state-starting, .state-cancelling { color: var(--vscode-charts-yellow, var(--vscode-editorWarning-foreground)); }
.prompt { margin: 6px 0; padding: 6px 8px; border-left: 3px solid var(--vscode-textLink-foreground); background: var(--vscode-textBlockQuote-background); }
.text { white-space: pre-wrap; word-wrap: break-word; margin: 4px 0; }
pre { white-space: pre-wrap; word-wrap: break-word; font-family: var(--vscode-editor-font-family); font-size: var(--vscode-editor-font-size); margin: 4px 0; }
pre.code, .plan pre, .tool-args, .tool-output { background: var(--vscode-textCodeBlock-background); padding: 6px; }
details { margin: 4px 0; }
summary { cursor: pointer; color: var(--vscode-descriptionForeground); }
.tool { margin: 4px 0; }
.subagent { margin: 4px 0 4px 1.2em; padding-left: 8px; border-left: 2px solid var(--vscode-textLink-foreground); }
.subagent-label { font-weight: bold; margin-right: 6px; }
.subagent-state { font-size: 0.85em; }
.subagent-why { margin-left: calc(1.2em + 10px); }
.subagent.settled { border-left-color: var(--vscode-panel-border, var(--vscode-descriptionForeground)); }
.tool-kind { font-size: 0.85em; color: var(--vscode-descriptionForeground); margin-right: 6px; }
.tool-title { font-family: var(--vscode-editor-font-family); }
.status { display: inline-block; min-width: 4em; margin-right: 6px; font-size: 0.85em; padding: 0 4px; border-radius: 2px; color: var(--vscode-badge-foreground); background: var(--vscode-badge-background); text-align: center; }
.status-failed { background: var(--vscode-inputValidation-errorBackground, var(--vscode-badge-background)); }
.diff { margin: 4px 0; border: 1px solid var(--vscode-panel-border, var(--vscode-widget-border, transparent)); }
.diff-path { font-family: var(--vscode-editor-font-family); padding: 2px 6px; color: var(--vscode-descriptionForeground); }
.diff-body { margin: 0; }
.diff-body span { display: block; }
.diff-add { background: var(--vscode-diffEditor-insertedTextBackground); }
.diff-del { background: var(--vscode-diffEditor-removedTextBackground); }
.diff-skip { color: var(--vscode-descriptionForeground); font-style: italic; }
.label { font-weight: bold; margin-right: 4px; }
.allowed { color: var(--vscode-charts-green, var(--vscode-foreground)); }
.pending, .stop, .empty, .why { color: var(--vscode-descriptionForeground); }
.turn-actions { margin-top: 6px; }
.error { margin: 6px 0; padding: 6px 8px; border: 1px solid var(--vscode-inputValidation-errorBorder, var(--vscode-errorForeground)); }
.error-action { color: var(--vscode-foreground); margin-top: 4px; }
footer { position: sticky; bottom: 0; padding: 8px 12px; background: var(--vscode-editor-background); border-top: 1px solid var(--vscode-panel-border, transparent); }
textarea { width: 100%; box-sizing: border-box; min-height: 5em; resize: vertical; font-family: var(--vscode-editor-font-family); font-size: var(--vscode-editor-font-size); color: var(--vscode-input-foreground); background: var(--vscode-input-background); border: 1px solid var(--vscode-input-border, transparent); padding: 4px; }
textarea:focus { outline: 1px solid var(--vscode-focusBorder); }
.composer-actions { display: flex; gap: 6px; align-items: center; margin-top: 4px; }
.chip { display: inline-flex; align-items: center; gap: 2px; margin: 0 4px 4px 0; padding: 0 0 0 6px; border-radius: 2px; color: var(--vscode-badge-foreground); background: var(--vscode-badge-background); }
.chip button.action { margin: 0; padding: 0 4px; }
.hint { color: var(--vscode-descriptionForeground); font-size: 0.85em; margin-left: auto; }
.queue { margin: 8px 0; padding: 6px 8px; border: 1px dashed var(--vscode-panel-border, var(--vscode-widget-border, var(--vscode-descriptionForeground))); }
.queue-head { color: var(--vscode-descriptionForeground); font-size: 0.9em; }
.queue-list { margin: 4px 0; padding-left: 1.4em; }
.queue-entry { margin: 4px 0; }
.queue-state { font-size: 0.85em; color: var(--vscode-descriptionForeground); }
.queue-text { white-space: pre-wrap; word-wrap: break-word; }
.queue-review .queue-state, .queue-reason { color: var(--vscode-editorWarning-foreground, var(--vscode-errorForeground)); }
.queue-attached { font-size: 0.85em; color: var(--vscode-descriptionForeground); }
`;

// The page's script: swaps in the fragments the extension renders (one whose
// HTML did not change is left alone), keeps each reasoning, tool and
// sub-agent <details> as the user opened or closed it across renders,
// follows the bottom while it is in view, and posts the user's clicks and
// prompts back. It never builds HTML from data itself.
const SCRIPT = `
(function () {
  const vscode = acquireVsCodeApi();
  const saved = vscode.getState() || {};
  const opened = new Map(Object.entries(saved.opened || {}));
  const prompt = document.getElementById('prompt');
  prompt.value = saved.draft || '';
  function save() { vscode.setState({ draft: prompt.value, opened: Object.fromEntries(opened) }); }
  document.addEventListener('toggle', function (event) {
    const details = event.target;
    if (details && details.dataset && details.dataset.key) { opened.set(details.dataset.key, details.open); save(); }
  }, true);
  // Each <details> remembers the state it was rendered in: one that differs
  // when its fragment is replaced was toggled by the user, whose toggle
  // event (queued, not dispatched yet) would go to the removed element and
  // be lost.
  function keep(root) {
    root.querySelectorAll('details[data-key]').forEach(function (details) {
      if (details.open !== details.rendered) { opened.set(details.dataset.key, details.open); save(); }
    });
  }
  function restore(root) {
    root.querySelectorAll('details[data-key]').forEach(function (details) {
      const known = opened.get(details.dataset.key);
      if (known !== undefined) details.open = known;
      details.rendered = details.open;
    });
  }
  // The HTML each fragment shows: a render that brings the same again
  // leaves its elements alone (replacing them under the pointer loses the
  // click in progress, the hover and the selection).
  const shown = {};
  window.addEventListener('message', function (event) {
    const message = event.data || {};
    if (message.type === 'render') {
      const bottom = window.innerHeight + window.scrollY >= document.body.scrollHeight - 40;
      for (const name of ['header', 'turns', 'live', 'queue', 'notice', 'options', 'attachments']) {
        const html = message.parts[name];
        if (typeof html === 'string' && html !== shown[name]) {
          const element = document.getElementById(name);
          keep(element);
          element.innerHTML = html;
          shown[name] = html;
          restore(element);
        }
      }
      if (typeof message.busy === 'boolean') {
        // While a turn runs, what is sent waits in the queue; Steer sends it now.
        document.getElementById('send').textContent = message.busy ? 'Queue' : 'Send';
        document.getElementById('steer').hidden = !message.busy;
      }
      if (bottom) window.scrollTo(0, document.body.scrollHeight);
    } else if (message.type === 'sent') {
      if (history !== null && lastSent.trim()) history = [lastSent].concat(history.filter(function (e) { return e !== lastSent; }));
      index = -1;
      prompt.value = '';
      save();
    } else if (message.type === 'inputHistory') {
      history = (Array.isArray(message.entries) ? message.entries : []).slice().reverse();
      const wanted = pending;
      pending = 0;
      for (let i = 0; i < Math.abs(wanted); i++) step(wanted > 0 ? 1 : -1);
    } else if (message.type === 'focus') {
      if (typeof message.draft === 'string' && !prompt.value) { prompt.value = message.draft; save(); }
      prompt.focus();
    }
  });
  document.addEventListener('click', function (event) {
    const target = event.target.closest('button[data-action]');
    if (!target || target.disabled) return;
    const data = target.dataset;
    vscode.postMessage({
      type: 'action',
      action: data.action,
      turn: data.turn === undefined ? undefined : Number(data.turn),
      boundary: data.boundary,
      index: data.index === undefined ? undefined : Number(data.index),
      entry: data.entry,
    });
  });
  function send() {
    const text = prompt.value;
    if (!text.trim() || document.getElementById('send').disabled) return;
    lastSent = text;
    vscode.postMessage({ type: 'prompt', text: text });
  }
  // The input history (newest first; null until the extension sent it):
  // ArrowUp on the first line goes back, ArrowDown on the last forward, to
  // the draft written before stepping in.
  let history = null;
  let index = -1;
  let draft = '';
  let pending = 0;
  let asked = false;
  let lastSent = '';
  // Asked once, when the box first gets the focus; steps taken before the
  // answer arrives are taken then, in order.
  function ask() { if (!asked) { asked = true; vscode.postMessage({ type: 'history' }); } }
  prompt.addEventListener('focus', ask);
  function step(n) {
    if (history === null) { pending += n; ask(); return; }
    const next = index + n;
    if (next < -1 || next >= history.length) return;
    if (index === -1) draft = prompt.value;
    index = next;
    prompt.value = index === -1 ? draft : history[index];
    const at = n > 0 ? 0 : prompt.value.length;
    prompt.setSelectionRange(at, at);
    save();
  }
  function plain(event) { return !event.shiftKey && !event.altKey && !event.ctrlKey && !event.metaKey && prompt.selectionStart === prompt.selectionEnd; }
  document.getElementById('send').addEventListener('click', send);
  document.getElementById('steer').addEventListener('click', function () {
    if (prompt.value.trim()) vscode.postMessage({ type: 'steer', text: prompt.value });
  });
  prompt.addEventListener('input', save);
  prompt.addEventListener('keydown', function (event) {
    if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) { event.preventDefault(); send(); }
    else if (event.key === 'ArrowUp' && plain(event) && prompt.value.slice(0, prompt.selectionStart).indexOf('\\n') === -1) { event.preventDefault(); step(1); }
    else if (event.key === 'ArrowDown' && plain(event) && prompt.value.slice(prompt.selectionEnd).indexOf('\\n') === -1) { event.preventDefault(); step(-1); }
  });
  vscode.postMessage({ type: 'ready' });
})();
`;

// The whole page: the fragments start empty and arrive by message.
export function renderPage(options: PageOptions): string {
  const nonce = escapeHtml(options.nonce);
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="${escapeHtml(contentSecurityPolicy(options))}">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<title>mevedel chat</title>
<style nonce="${nonce}">${STYLE}</style>
</head>
<body>
<header id="header"></header>
<main><div id="turns"></div><div id="live"></div><div id="queue"></div><div id="notice"></div></main>
<footer>
<div id="options"></div>
<div id="attachments"></div>
<textarea id="prompt" placeholder="Prompt the agent (Ctrl+Enter sends)" aria-label="Prompt"></textarea>
<div class="composer-actions"><button id="send" class="primary">Send</button><button id="steer" class="action" hidden title="Cancel the running turn and send this now">Steer</button><button class="action" data-action="attach" title="Attach the selection, the current file or an address">Attach…</button><span class="hint">Ctrl+Enter to send</span></div>
</footer>
<script nonce="${nonce}">${SCRIPT}</script>
</body>
</html>`;
}

// A nonce: 32 characters from a CSP-safe alphabet, from `random` (crypto in
// the extension).
export function makeNonce(randomBytes: (size: number) => Uint8Array): string {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
  return Array.from(randomBytes(32), (byte) => alphabet[byte % alphabet.length]).join('');
}
