// The chat panel's pure parts: folding mevedel/turn/didUpdate into the chat
// state (as the server words it: fields at their default left out), the
// HTML it renders (agents are untrusted: nothing they say becomes markup),
// the page's Content Security Policy, prompts as composed, and finding the
// server. agents.test.ts runs the same functions on a real server's stream.
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { describe as suite, test } from 'node:test';
import * as vm from 'node:vm';
import { composePrompt, describeTurnError, TurnDidUpdateParams } from '../src/agents';
import { activity, applyUpdate, ChatState, ChatTurn, emptyChat, promptSent, turnFromShow } from '../src/chat';
import { contentSecurityPolicy, escapeHtml, lineDiff, makeNonce, renderPage, renderParts, renderText } from '../src/chatView';
import { discoverServer, DiscoveryProbes, hasServerModule, isMissing, missingServerMessage, which } from '../src/serverDiscovery';

const FOLDER = 'file:///work';
const HOSTILE = '<script>alert(1)</script><img src=x onerror="alert(2)"><a href=\'javascript:alert(3)\'>x</a>&amp;';

function update(phase: TurnDidUpdateParams['phase'], rest: Partial<TurnDidUpdateParams> = {}): TurnDidUpdateParams {
  return { workspaceFolder: FOLDER, sessionId: 'S', agent: 'claude', phase, ...rest };
}

function fold(...updates: TurnDidUpdateParams[]): ChatState {
  return updates.reduce(applyUpdate, promptSent(emptyChat({ workspaceFolder: FOLDER, sessionId: 'S' }), 'Do it'));
}

suite('folding the live stream', () => {
  test('a turn streams in order: starting, running with text, tools, plan, permission; settled last', () => {
    const starting = fold(update('starting'));
    assert.equal(activity(starting), 'starting');
    assert.equal(starting.live?.turn, null);
    assert.equal(starting.live?.prompt, 'Do it');

    const steps = [
      update('starting'),
      // Fields at their default are absent on the wire: no events here.
      update('running', { turn: 4, turnId: 't4' }),
      update('running', { turn: 4, turnId: 't4', events: [{ kind: 'reasoning', text: 'Hm' }, { kind: 'response', text: 'Hel' }] }),
      update('running', { turn: 4, turnId: 't4', events: [{ kind: 'response', text: 'lo' }] }),
      update('running', {
        turn: 4,
        turnId: 't4',
        events: [
          { kind: 'tool_call', callId: 'c1', title: 'Edit a.txt', toolKind: 'edit', status: 'pending' },
          { kind: 'plan', text: '- [ ] one' },
        ],
      }),
      update('running', {
        turn: 4,
        turnId: 't4',
        events: [
          { kind: 'tool_call', callId: 'c1', status: 'completed', diffs: [{ path: '/w/a.txt', newText: 'b\n', oldText: 'a\n' }] },
          { kind: 'plan', text: '- [x] one' },
          { kind: 'permission', callId: 'c1', text: 'Run it?', decision: 'refused: declined' },
          { kind: 'response', text: ' again' },
        ],
      }),
    ];
    const running = fold(...steps);
    assert.equal(activity(running), 'running');
    assert.equal(running.live?.turn, 4);
    assert.deepEqual(running.live?.blocks, [
      { kind: 'reasoning', text: 'Hm' },
      { kind: 'response', text: 'Hello', closed: true },
      {
        kind: 'tool_call',
        call: { callId: 'c1', title: 'Edit a.txt', toolKind: 'edit', status: 'completed', output: undefined, diffs: [{ path: '/w/a.txt', newText: 'b\n', oldText: 'a\n' }] },
      },
      { kind: 'plan', text: '- [x] one' },
      // `allowed` false is left out on the wire.
      { kind: 'permission', question: 'Run it?', decision: 'refused: declined', allowed: undefined, callId: 'c1' },
      { kind: 'response', text: ' again' },
    ]);
    // The streamed text is shown before the turn settles.
    assert.match(renderParts(running).live, /Hello/);
    assert.equal(running.turns.length, 0);

    const settled = fold(...steps, update('settled', { turn: 4, turnId: 't4', outcome: 'completed', stopReason: 'end_turn' }));
    assert.equal(activity(settled), 'idle');
    assert.equal(settled.live, undefined);
    assert.equal(settled.pendingPrompt, undefined);
    assert.equal(settled.turns.length, 1);
    assert.equal(settled.turns[0].state, 'completed');
    assert.equal(settled.turns[0].prompt, 'Do it');
    assert.equal(settled.turns[0].observed, true);
  });

  test('cancelling stays until settled; another session is ignored; a refused prompt is a notice', () => {
    const cancelling = fold(
      update('starting'),
      update('running', { turn: 1, turnId: 't1' }),
      update('cancelling', { turn: 1, turnId: 't1' }),
      update('running', { turn: 1, turnId: 't1', events: [{ kind: 'response', text: 'late' }] }),
    );
    assert.equal(activity(cancelling), 'cancelling');
    assert.match(renderParts(cancelling).header, /data-action="cancel"[^>]*disabled/);
    const other = applyUpdate(cancelling, update('settled', { sessionId: 'OTHER', turn: 1, outcome: 'completed' }));
    assert.equal(other, cancelling);
    const interrupted = applyUpdate(
      cancelling,
      update('settled', { turn: 1, turnId: 't1', outcome: 'interrupted', stopReason: 'cancelled', reason: 'aborted' }),
    );
    assert.equal(interrupted.turns[0].state, 'interrupted');
    assert.match(renderParts(interrupted).turns, /<div class="why">Interrupted: aborted\.<\/div>/);

    // A prompt aborted while its agent started: no turn, the notice says so.
    const aborted = fold(
      update('starting'),
      update('cancelling'),
      update('settled', { outcome: 'interrupted', reason: 'the user gave up', error: { kind: 'prompt-aborted', message: 'the prompt: was aborted' } }),
    );
    assert.equal(activity(aborted), 'idle');
    assert.equal(aborted.turns.length, 0);
    assert.match(renderParts(aborted).notice, /Aborted before it reached the agent: the user gave up\./);

    const refused = fold(update('starting'), update('settled', { error: { kind: 'agent-needs-login', message: "agent 'x': asks for a login", action: 'run x login' } }));
    assert.equal(activity(refused), 'idle');
    assert.equal(refused.turns.length, 0);
    assert.equal(refused.refused?.kind, 'agent-needs-login');
    assert.match(renderParts(refused).notice, /run x login/);
    assert.equal(fold(update('starting'), update('settled', { error: refused.refused }), update('starting')).refused, undefined);
  });

  test('a panel without a session takes the prompt\'s new one; a panel opened mid-turn continues the recorded turn', () => {
    const adopted = applyUpdate(emptyChat({ workspaceFolder: FOLDER }), update('starting', { sessionId: 'NEW' }));
    assert.equal(adopted.sessionId, 'NEW');

    const inFlight: ChatTurn = turnFromShow({
      sessionId: 'S',
      summary: { turn: 2, turnId: 't2', segment: 1, prompt: 'p', state: 'in-flight', beganAt: 0, toolCalls: 0, reminder: false },
      prompt: 'the prompt',
      items: [{ kind: 'response', text: 'so far' }],
      markdown: '',
    });
    const opened: ChatState = { ...emptyChat({ workspaceFolder: FOLDER, sessionId: 'S' }), turns: [inFlight] };
    assert.equal(activity(opened), 'idle');
    const continued = applyUpdate(opened, update('running', { turn: 2, turnId: 't2', events: [{ kind: 'response', text: ' and more' }] }));
    assert.equal(activity(continued), 'running');
    assert.equal(continued.turns.length, 0);
    assert.equal(continued.live?.prompt, 'the prompt');
    assert.deepEqual(
      continued.live?.blocks.map((b) => (b.kind === 'response' ? b.text : b.kind)),
      ['so far', ' and more'],
    );
  });

  test('recorded turns become blocks: results join their calls, permissions keep their decision', () => {
    const turn = turnFromShow({
      sessionId: 'S',
      summary: { turn: 1, turnId: 't1', segment: 1, prompt: 'p', state: 'errored', beganAt: 0, toolCalls: 1, reminder: false, reason: 'agent crashed' },
      prompt: 'p',
      items: [
        { kind: 'reasoning', text: 'think' },
        { kind: 'tool_call', callId: 'r1', name: 'Run ls', arguments: '{"cmd":"ls"}' },
        { kind: 'permission', callId: 'r1', text: 'Run ls?', output: 'Reject', isError: true },
        { kind: 'tool_result', callId: 'r1', output: 'not finished', isError: true },
        { kind: 'plan', text: '- [ ] a' },
        { kind: 'plan', text: '- [x] a' },
      ],
      markdown: '',
    });
    assert.equal(turn.state, 'errored');
    assert.equal(turn.reason, 'agent crashed');
    assert.deepEqual(turn.blocks, [
      { kind: 'reasoning', text: 'think', closed: true },
      { kind: 'tool_call', call: { callId: 'r1', title: 'Run ls', arguments: '{"cmd":"ls"}', status: 'failed', output: 'not finished', isError: true } },
      { kind: 'permission', question: 'Run ls?', decision: 'Reject', allowed: false, callId: 'r1' },
      { kind: 'plan', text: '- [x] a' },
    ]);
    assert.match(renderParts({ turns: [turn] }).turns, /agent crashed/);
  });
});

suite('sub-agents nest under the call that started them', () => {
  const root = (phase: TurnDidUpdateParams['phase'], rest: Partial<TurnDidUpdateParams> = {}) => update(phase, { turn: 2, turnId: 't2', ...rest });
  const sub = (path: string, phase: TurnDidUpdateParams['phase'], rest: Partial<TurnDidUpdateParams> = {}) =>
    root(phase, { agent: `${path} (codex)`, agentPath: path, ...rest });
  const call = (callId: string, status: string) => ({ kind: 'tool_call' as const, callId, title: 'mcp__mevedel__Agent', status });

  test('streamed under the caller\'s call, a sub-sub-agent under its caller\'s call; settled never ends the root turn', () => {
    const steps = [
      root('starting'),
      root('running', { events: [{ kind: 'response', text: 'Asking.' }, call('a1', 'in_progress')] }),
      sub('reviewer', 'starting', { parentCallId: 'a1' }),
      sub('reviewer', 'running', { parentCallId: 'a1', events: [{ kind: 'response', text: 'Rev' }] }),
      sub('reviewer', 'running', { parentCallId: 'a1', events: [{ kind: 'response', text: 'iewing' }, call('b1', 'in_progress')] }),
      sub('reviewer/search', 'starting', { parentCallId: 'b1' }),
      sub('reviewer/search', 'running', { parentCallId: 'b1', events: [{ kind: 'response', text: 'Found it.' }] }),
    ];
    const working = fold(...steps);
    assert.equal(activity(working), 'running');
    assert.equal(working.live?.agent, 'claude');
    const a1 = working.live!.blocks[1] as { kind: 'tool_call'; call: { agents?: unknown[] } };
    assert.deepEqual(a1.call.agents, [
      {
        path: 'reviewer',
        label: 'reviewer (codex)',
        state: 'running',
        blocks: [
          { kind: 'response', text: 'Reviewing', closed: true },
          {
            kind: 'tool_call',
            call: {
              callId: 'b1', title: 'mcp__mevedel__Agent', toolKind: undefined, status: 'in_progress', output: undefined, diffs: undefined,
              agents: [{ path: 'reviewer/search', label: 'reviewer/search (codex)', state: 'running', blocks: [{ kind: 'response', text: 'Found it.' }] }],
            },
          },
        ],
      },
    ]);
    // Shown open while they work, streamed text in place.
    const live = renderParts(working).live;
    assert.match(live, /<details class="subagent" data-path="reviewer" data-key="[^"]*" open><summary>.*reviewer \(codex\)/);
    assert.match(live, /data-path="reviewer\/search"[^>]* open>.*Found it\./);

    // The sub-agents settle: folded, the root turn still running.
    const settledSubs = fold(
      ...steps,
      sub('reviewer/search', 'settled', { parentCallId: 'b1', outcome: 'completed' }),
      sub('reviewer', 'running', { parentCallId: 'a1', events: [call('b1', 'completed')] }),
      sub('reviewer', 'settled', { parentCallId: 'a1', outcome: 'interrupted' }),
    );
    assert.equal(activity(settledSubs), 'running');
    assert.equal(settledSubs.live?.state, 'running');
    assert.equal(settledSubs.turns.length, 0);
    const folded = renderParts(settledSubs).live;
    assert.match(folded, /<details class="subagent settled" data-path="reviewer" data-key="[^"]*:settled"><summary>.*interrupted/);
    assert.match(folded, /<details class="subagent settled" data-path="reviewer\/search"[^>]*><summary>/);
    assert.doesNotMatch(folded, /class="subagent settled"[^>]* open/);

    // The root's own settled ends the turn, the sub-agents kept in it.
    const done = applyUpdate(settledSubs, root('settled', { outcome: 'completed', events: [call('a1', 'completed')] }));
    assert.equal(activity(done), 'idle');
    assert.equal(done.turns[0].state, 'completed');
    assert.match(renderParts(done).turns, /Found it\./);
  });

  test('a settled task says why it was interrupted or failed, below its fold, as the turn says its own reason', () => {
    const state = fold(
      root('running', { events: [call('a1', 'in_progress'), call('a2', 'in_progress'), call('a3', 'in_progress')] }),
      sub('slow', 'starting', { parentCallId: 'a1' }),
      sub('slow', 'running', { parentCallId: 'a1', events: [{ kind: 'response', text: 'Started.' }] }),
      sub('slow', 'settled', { parentCallId: 'a1', outcome: 'interrupted', reason: "cancelled with its caller's turn" }),
      sub('broken', 'starting', { parentCallId: 'a2' }),
      sub('broken', 'settled', { parentCallId: 'a2', outcome: 'errored', reason: 'could not start: the agent is not installed' }),
      sub('fine', 'starting', { parentCallId: 'a3' }),
      sub('fine', 'settled', { parentCallId: 'a3', outcome: 'completed' }),
    );
    const html = renderParts(state).live;
    // After the folded task, so it shows without opening it.
    assert.match(html, /data-path="slow"[^>]*><summary>.*?<\/details><div class="why subagent-why">Interrupted: cancelled with its caller&#39;s turn\.<\/div>/);
    assert.match(html, /data-path="broken"[^>]*><summary>.*?<\/details><div class="error subagent-why"><div>could not start: the agent is not installed<\/div><\/div>/);
    assert.doesNotMatch(html, /data-path="fine"[^>]*><summary>.*?<\/details><div class="[^"]*subagent-why/);
    // A later task of the same name starts without the last one's reason.
    const again = applyUpdate(state, sub('slow', 'starting', { parentCallId: 'a1' }));
    assert.equal(renderParts(again).live.match(/Interrupted: cancelled/g)?.length, 1);
  });

  test('without a known call: at the end of the turn under its name; a second task of the same name is a new one', () => {
    const state = fold(
      root('running', { events: [{ kind: 'response', text: 'Hi' }] }),
      sub('helper', 'starting'),
      sub('helper', 'running', { events: [{ kind: 'response', text: 'first' }] }),
      sub('helper', 'settled', { outcome: 'completed' }),
      // Its call is named but not shown here (a panel opened mid-turn).
      sub('helper', 'starting', { parentCallId: 'gone' }),
      sub('helper', 'running', { parentCallId: 'gone', events: [{ kind: 'response', text: 'second' }] }),
    );
    assert.deepEqual(
      state.live?.agents?.map((v) => [v.path, v.state, v.blocks]),
      [
        ['helper', 'completed', [{ kind: 'response', text: 'first' }]],
        ['helper', 'running', [{ kind: 'response', text: 'second' }]],
      ],
    );
    const html = renderParts(state).live;
    assert.ok(html.indexOf('Hi') < html.indexOf('Sub-agent</span><span class="subagent-label">helper (codex)'), html);
    // A sub-agent's last word after its root turn settled still lands in that turn.
    const late = applyUpdate(applyUpdate(state, root('settled', { outcome: 'interrupted' })), sub('helper', 'settled', { parentCallId: 'gone', outcome: 'interrupted' }));
    assert.equal(late.live, undefined);
    assert.deepEqual(late.turns[0].agents?.map((v) => v.state), ['completed', 'interrupted']);
    assert.equal(late.turns[0].state, 'interrupted');
  });

  test('a recorded turn shows its sub-agents\' tasks, folded, under the Agent call that waited for them', () => {
    const turn = turnFromShow({
      sessionId: 'S',
      summary: { turn: 1, turnId: 't1', segment: 1, prompt: 'p', state: 'completed', beganAt: 0, toolCalls: 1, reminder: false },
      prompt: 'p',
      items: [
        { kind: 'tool_call', callId: 'a1', name: 'mcp Agent', arguments: '{"name":"outer"}' },
        { kind: 'agent_task', name: 'outer/inner', sender: 'searcher', text: 'Go deeper', output: 'Inner found it.' },
        { kind: 'agent_task', name: 'outer', sender: 'helper', text: 'Delegate', output: 'Outer done.', isError: true },
        { kind: 'tool_result', callId: 'a1', output: 'mcp Agent: Outer done.' },
      ],
      markdown: '',
    });
    const call = (turn.blocks[0] as { call: { agents?: { path: string; state: string; agents?: { path: string }[] }[]; status?: string } }).call;
    assert.equal(call.status, 'completed');
    assert.deepEqual(call.agents?.map((v) => [v.path, v.state, v.agents?.map((w) => w.path)]), [['outer', 'errored', ['outer/inner']]]);
    assert.equal(turn.agents, undefined);
    const html = renderParts({ turns: [turn] }).turns;
    assert.match(html, /class="subagent settled" data-path="outer"/);
    assert.match(html, /Inner found it\./);
  });

  test('a recorded turn nests each task under the call it names, though parallel calls were open when it was recorded', () => {
    const turn = turnFromShow({
      sessionId: 'S',
      summary: { turn: 1, turnId: 't1', segment: 1, prompt: 'p', state: 'completed', beganAt: 0, toolCalls: 2, reminder: false },
      prompt: 'p',
      items: [
        { kind: 'tool_call', callId: 'a1', name: 'mcp Agent' },
        { kind: 'tool_call', callId: 'a2', name: 'mcp Agent' },
        { kind: 'agent_task', name: 'first', sender: 'helper', text: 'First', output: 'First done.', parentCallId: 'a1' },
        { kind: 'tool_result', callId: 'a1', output: 'mcp Agent: First done.' },
        { kind: 'agent_task', name: 'second', sender: 'helper', text: 'Second', output: 'Second done.', parentCallId: 'a2' },
        { kind: 'tool_result', callId: 'a2', output: 'mcp Agent: Second done.' },
      ],
      markdown: '',
    });
    const calls = turn.blocks.flatMap((b) => (b.kind === 'tool_call' ? [[b.call.callId, (b.call.agents ?? []).map((v) => v.path)]] : []));
    assert.deepEqual(calls, [['a1', ['first']], ['a2', ['second']]]);
  });

  test("a recorded turn's interrupted sub-agent task says why below its fold, in the sentence its settled update was said in", () => {
    const interrupted = { kind: 'agent_task', name: 'slow', sender: 'helper', text: 'Take your time', output: 'Started.', isError: true };
    const turn = (reason?: string) =>
      turnFromShow({
        sessionId: 'S',
        summary: { turn: 1, turnId: 't1', segment: 1, prompt: 'p', state: 'interrupted', beganAt: 0, toolCalls: 1, reminder: false },
        prompt: 'p',
        items: [
          { kind: 'tool_call', callId: 'a1', name: 'mcp Agent' },
          { ...interrupted, outcome: 'interrupted', reason },
        ],
        markdown: '',
      });
    const html = renderParts({ turns: [turn("cancelled with its caller's turn")] }).turns;
    assert.match(html, /data-path="slow"[^>]*><summary>.*?state-interrupted">interrupted<\/span><\/summary>.*?<\/details><div class="why subagent-why">Interrupted: cancelled with its caller&#39;s turn\.<\/div>/s);
    // A task recorded before tasks kept a reason: its outcome, nothing more.
    const old = renderParts({ turns: [turn(undefined)] }).turns;
    assert.match(old, /state-interrupted">interrupted</);
    assert.doesNotMatch(old, /subagent-why/);
  });
});

// Every tag and attribute the renderer writes; anything else would be markup
// that came from the data.
const TAGS = new Set(['div', 'span', 'pre', 'details', 'summary', 'section', 'button']);
const ATTRIBUTES = new Set(['class', 'title', 'disabled', 'open', 'data-key', 'data-path', 'data-action', 'data-turn', 'data-boundary', 'data-index']);

function assertInert(html: string): void {
  for (const [, name] of html.matchAll(/<\/?([A-Za-z][\w-]*)/g)) assert.ok(TAGS.has(name.toLowerCase()), `tag <${name}> in ${html}`);
  for (const [, attributes] of html.matchAll(/<[A-Za-z][\w-]*((?:\s[^>]*)?)>/g)) {
    const stripped = attributes.replace(/"[^"]*"/g, '""');
    for (const [, name] of stripped.matchAll(/([^\s=]+)(?:="")?/g)) assert.ok(ATTRIBUTES.has(name), `attribute ${name} in ${html}`);
  }
  assert.doesNotMatch(html, /<script|<img|<a\s|javascript:alert\(3\)'>/i);
}


type Listener = (event: any) => void;
const on = (registry: Record<string, Listener[]>) => (type: string, listener: Listener) => (registry[type] ??= []).push(listener);

// Runs the chat page's script against ELEMENTS (by id): what it posted, its
// listeners on the document and the window, and the webview state it saved.
function runPageScript(elements: Record<string, any>) {
  const page = renderPage({ nonce: 'n0nce', cspSource: 'vscode-webview://abc' });
  const source = /<script nonce="n0nce">([\s\S]*?)<\/script>/.exec(page)![1];
  const received: any[] = [];
  const listeners: Record<string, Listener[]> = {};
  const windowListeners: Record<string, Listener[]> = {};
  let saved: any;
  vm.runInContext(
    source,
    vm.createContext({
      acquireVsCodeApi: () => ({ postMessage: (m: unknown) => received.push(m), getState: () => saved, setState: (s: unknown) => (saved = s) }),
      document: { getElementById: (id: string) => elements[id], addEventListener: on(listeners), body: { scrollHeight: 100 } },
      window: { addEventListener: on(windowListeners), innerHeight: 100, scrollY: 0, scrollTo() {} },
      Map,
      Object,
      Number,
    }),
  );
  return { received, listeners, windowListeners, state: () => saved };
}
suite('rendering', () => {
  test('agent text is escaped everywhere it appears: a <script> is inert text', () => {
    const everything = fold(
      update('starting', { agent: HOSTILE }),
      update('running', {
        agent: HOSTILE,
        turn: 1,
        turnId: HOSTILE,
        events: [
          { kind: 'reasoning', text: HOSTILE },
          { kind: 'response', text: `${HOSTILE}\n\`\`\`${HOSTILE}\n${HOSTILE}\n\`\`\`\n` },
          { kind: 'plan', text: HOSTILE },
          {
            kind: 'tool_call',
            callId: HOSTILE,
            title: HOSTILE,
            toolKind: HOSTILE,
            status: HOSTILE,
            output: HOSTILE,
            diffs: [{ path: HOSTILE, oldText: `${HOSTILE}\nsame\n`, newText: `${HOSTILE}!\nsame\n` }],
          },
          { kind: 'permission', callId: HOSTILE, text: HOSTILE, decision: HOSTILE, allowed: true },
        ],
      }),
    );
    const nested = [
      update('running', { agent: HOSTILE, agentPath: HOSTILE, parentCallId: HOSTILE, turn: 1, turnId: HOSTILE, events: [{ kind: 'response', text: HOSTILE }] }),
      update('running', { agent: HOSTILE, agentPath: 'x', turn: 1, turnId: HOSTILE, events: [{ kind: 'response', text: HOSTILE }] }),
    ].reduce(applyUpdate, everything);
    const state: ChatState = { ...nested, displayName: HOSTILE, live: { ...nested.live!, prompt: HOSTILE, error: { kind: 'x', message: HOSTILE, action: HOSTILE } } };
    const live = renderParts(state);
    for (const html of [live.header, live.live]) assertInert(html);
    assert.ok(live.live.includes(escapeHtml('<script>alert(1)</script>')));

    const settled = applyUpdate(everything, update('settled', { agent: HOSTILE, turn: 1, turnId: HOSTILE, outcome: 'errored', error: { kind: HOSTILE, message: HOSTILE, action: HOSTILE } }));
    const withMail: ChatState = {
      ...settled,
      refused: { kind: HOSTILE, message: HOSTILE, action: HOSTILE },
      turns: [...settled.turns, { ...settled.turns[0], turn: 2, reason: HOSTILE, stopReason: HOSTILE, blocks: [{ kind: 'mail', text: HOSTILE, sender: HOSTILE }] }],
    };
    const parts = renderParts(withMail);
    for (const html of Object.values(parts)) assertInert(html);
    assert.equal(escapeHtml(`"'<>&`), '&quot;&#39;&lt;&gt;&amp;');
  });

  test('the page: strict CSP with a nonce, one nonce\'d script, no remote resources, theme colours', () => {
    const nonce = makeNonce((n) => new Uint8Array(n).map((_, i) => i * 7));
    assert.match(nonce, /^[A-Za-z0-9]{32}$/);
    const page = renderPage({ nonce, cspSource: 'vscode-webview://abc' });
    const policy = contentSecurityPolicy({ nonce, cspSource: 'vscode-webview://abc' });
    assert.equal(policy, `default-src 'none'; style-src 'nonce-${nonce}'; script-src 'nonce-${nonce}'; img-src vscode-webview://abc; font-src vscode-webview://abc`);
    assert.ok(page.includes(`<meta http-equiv="Content-Security-Policy" content="${escapeHtml(policy)}">`));
    assert.doesNotMatch(policy, /unsafe-inline|unsafe-eval|\*/);
    const scripts = [...page.matchAll(/<script([^>]*)>/g)].map((m) => m[1]);
    assert.deepEqual(scripts, [` nonce="${nonce}"`]);
    assert.ok(page.includes(`<style nonce="${nonce}">`));
    assert.doesNotMatch(page, /https?:\/\/|\ssrc=|<link|\sstyle=|\son[a-z]+=/i);
    assert.match(page, /var\(--vscode-editor-background\)/);
    // The page's script never turns data into markup itself: it only swaps
    // in the fragments the extension rendered.
    assert.doesNotMatch(page, /eval\(|new Function|document\.write/);
  });

  test('the page\'s script swaps in fragments, and posts clicks and prompts back', () => {
    // Just enough of a DOM for the script.
    const elements: Record<string, any> = {};
    for (const id of ['header', 'turns', 'live', 'queue', 'notice', 'attachments', 'prompt', 'send', 'steer']) {
      const own: Record<string, Listener[]> = {};
      elements[id] = { id, innerHTML: '', value: '', textContent: '', hidden: true, disabled: false, listeners: own, addEventListener: on(own), focus() {}, querySelectorAll: () => [] };
    }
    const { received, listeners, windowListeners, state } = runPageScript(elements);
    // A plain copy of a posted message (the script's objects are of the
    // sandbox's realm).
    const posted = (i: number) => JSON.parse(JSON.stringify(received[i]));
    assert.deepEqual(posted(0), { type: 'ready' });
    assert.equal(received.length, 1);
    // A render message sets the fragments as given, and the send button.
    windowListeners.message[0]({ data: { type: 'render', parts: { turns: '<div class="text">a</div>', live: '', queue: '<ol></ol>' }, busy: true } });
    assert.equal(elements.turns.innerHTML, '<div class="text">a</div>');
    assert.equal(elements.queue.innerHTML, '<ol></ol>');
    // Busy: the button queues, Steer shows; Ctrl+Enter posts the prompt (the
    // extension queues it), Steer posts steering.
    assert.equal(elements.send.textContent, 'Queue');
    assert.equal(elements.steer.hidden, false);
    elements.prompt.value = 'Fix the bug';
    const keydown = { key: 'Enter', ctrlKey: true, preventDefault() {} };
    elements.prompt.listeners.keydown[0](keydown);
    assert.deepEqual(posted(1), { type: 'prompt', text: 'Fix the bug' });
    elements.steer.listeners.click[0]({});
    assert.deepEqual(posted(2), { type: 'steer', text: 'Fix the bug' });
    received.splice(1, 2);
    windowListeners.message[0]({ data: { type: 'render', parts: {}, busy: false } });
    assert.equal(elements.send.textContent, 'Send');
    assert.equal(elements.steer.hidden, true);
    elements.prompt.listeners.keydown[0](keydown);
    assert.deepEqual(posted(1), { type: 'prompt', text: 'Fix the bug' });
    // The extension says it went: the box empties, and the draft with it.
    windowListeners.message[0]({ data: { type: 'sent' } });
    assert.equal(elements.prompt.value, '');
    assert.equal(state().draft, '');
    // A click on a button posts its action.
    const button = { disabled: false, dataset: { action: 'rewind', turn: '3', boundary: 'before' } };
    listeners.click[0]({ target: { closest: () => button } });
    assert.deepEqual(posted(2), { type: 'action', action: 'rewind', turn: 3, boundary: 'before' });
  });

  test('the page\'s script keeps a <details> as the user set it across renders, and leaves a fragment whose HTML is the same alone', () => {
    // A fragment whose innerHTML makes one element per <details> (its key
    // and its open attribute), as a browser would; writes are counted.
    const fragment = () => {
      let html = '';
      let details: Array<{ dataset: { key: string }; open: boolean }> = [];
      return {
        writes: 0,
        listeners: {} as Record<string, Listener[]>,
        get innerHTML() {
          return html;
        },
        set innerHTML(value: string) {
          html = value;
          this.writes++;
          details = [...value.matchAll(/<details([^>]*)>/g)].map((m) => ({ dataset: { key: /data-key="([^"]*)"/.exec(m[1])![1] }, open: /\sopen(\s|$)/.test(m[1]) }));
        },
        get details() {
          return details;
        },
        querySelectorAll: () => details,
        addEventListener(type: string, listener: Listener) {
          (this.listeners[type] ??= []).push(listener);
        },
        focus() {},
        value: '',
        textContent: '',
        hidden: true,
      };
    };
    const elements: Record<string, ReturnType<typeof fragment>> = {};
    for (const id of ['header', 'turns', 'live', 'queue', 'notice', 'options', 'attachments', 'prompt', 'send', 'steer']) elements[id] = fragment();
    const { listeners, windowListeners, state } = runPageScript(elements);
    const render = (turns: string) => windowListeners.message[0]({ data: { type: 'render', parts: { turns } } });
    const folded = '<details class="subagent settled" data-key="t1:1#0@reviewer:settled"><summary>reviewer</summary></details>';
    render(folded);
    const turns = elements.turns;
    assert.equal(turns.details[0].open, false);
    // The user expands it; its toggle event is still queued when the next
    // renders come.
    turns.details[0].open = true;
    const expanded = turns.details[0];
    // The same HTML again (a refresh that found nothing new): the elements
    // under the user's pointer stay as they are.
    render(folded);
    assert.equal(turns.writes, 1);
    assert.equal(turns.details[0], expanded);
    // New HTML (the turn's buttons change): the sub-agent is open still.
    render(`${folded}<button>Rewind</button>`);
    assert.equal(turns.writes, 2);
    assert.notEqual(turns.details[0], expanded);
    assert.equal(turns.details[0].open, true);
    // Closed again by the user (its toggle event seen this time): it stays
    // closed through the next render, and the page's saved state says so.
    turns.details[0].open = false;
    listeners.toggle[0]({ target: turns.details[0] });
    render(folded);
    assert.equal(turns.details[0].open, false);
    assert.deepEqual(JSON.parse(JSON.stringify(state().opened)), { 't1:1#0@reviewer:settled': false });
  });

  test('text and diffs', () => {
    assert.equal(renderText('a <b>\n```js\nx < y\n```\nafter'), '<div class="text">a &lt;b&gt;</div><pre class="code">x &lt; y</pre><div class="text">after</div>');
    const diff = lineDiff(['1', '2', '3', '4', '5', '6', '7', '8', '9', '10'].join('\n') + '\n', ['1', '2', '3', '4', 'five', '6', '7', '8', '9', '10'].join('\n') + '\n');
    assert.deepEqual(diff, [
      { op: '…', count: 1 },
      { op: ' ', text: '2' },
      { op: ' ', text: '3' },
      { op: ' ', text: '4' },
      { op: '-', text: '5' },
      { op: '+', text: 'five' },
      { op: ' ', text: '6' },
      { op: ' ', text: '7' },
      { op: ' ', text: '8' },
      { op: '…', count: 2 },
    ]);
    assert.deepEqual(lineDiff(null, 'new\n'), [{ op: '+', text: 'new' }]);
  });

  test('a prompt quotes a selection in a fence longer than its backticks', () => {
    const text = composePrompt({ text: '  Why?  ', selections: [{ path: 'a.md', startLine: 2, endLine: 2, text: 'use ```code```' }] });
    assert.equal(text, 'Why?\n\nFrom a.md (line 2):\n````\nuse ```code```\n````');
    assert.equal(composePrompt({ text: 'plain' }), 'plain');
  });

  test('a failed turn offers its log', () => {
    const advice = describeTurnError({
      kind: 'agent-failed',
      message: "agent 'claude': exited with status 3 during the turn",
      action: 'the next prompt restarts it; its log is /home/u/.local/state/mevedel/logs/agent-claude.log',
    });
    assert.deepEqual(advice.actions, [{ title: 'Open Agent Log', path: '/home/u/.local/state/mevedel/logs/agent-claude.log' }]);
    assert.match(advice.message, /^the agent failed: agent 'claude': exited with status 3 during the turn \(the next prompt/);
  });
});

suite('finding the server', () => {
  const fake = (found: Record<string, string>, executables: string[], modules: string[], interpreter?: string): DiscoveryProbes => ({
    which: (program) => found[program],
    executable: (file) => executables.includes(file),
    hasServerModule: async (python) => modules.includes(python),
    pythonInterpreter: async () => interpreter,
  });
  const settings = (values: Record<string, unknown>) => (key: string) => values[key];

  test('the setting, then mevedel-lsp on PATH, then the Python extension, then python3 -m mevedel_server', async () => {
    const everywhere = fake({ 'mevedel-lsp': '/bin/mevedel-lsp', python3: '/usr/bin/python3' }, ['/opt/m/bin/mevedel-lsp', '/bin/mevedel-lsp'], ['/usr/bin/python3', '/venv/bin/python'], '/venv/bin/python');
    assert.deepEqual(await discoverServer(settings({ 'server.path': '/opt/m/bin/mevedel-lsp', 'server.args': ['--log', 'x'] }), everywhere), {
      command: '/opt/m/bin/mevedel-lsp',
      args: ['--log', 'x'],
      source: 'setting',
    });
    // The older setting name still counts.
    assert.equal(((await discoverServer(settings({ 'server.command': '/opt/m/bin/mevedel-lsp' }), everywhere)) as { source: string }).source, 'setting');
    assert.deepEqual(await discoverServer(settings({}), everywhere), { command: '/bin/mevedel-lsp', args: [], source: 'path' });
    const noScript = fake({ python3: '/usr/bin/python3' }, [], ['/usr/bin/python3', '/venv/bin/python'], '/venv/bin/python');
    assert.deepEqual(await discoverServer(settings({}), noScript), { command: '/venv/bin/python', args: ['-m', 'mevedel_server'], source: 'python-extension' });
    const venvScript = fake({}, ['/venv/bin/mevedel-lsp'], [], '/venv/bin/python');
    assert.deepEqual(await discoverServer(settings({}), venvScript), { command: '/venv/bin/mevedel-lsp', args: [], source: 'python-extension' });
    const onlyPython3 = fake({ python3: '/usr/bin/python3' }, [], ['/usr/bin/python3'], '/other/python');
    assert.deepEqual(await discoverServer(settings({}), onlyPython3), { command: '/usr/bin/python3', args: ['-m', 'mevedel_server'], source: 'python3' });
  });

  test('when absent, the message says how to install it; a wrong setting is named', async () => {
    const nothing = fake({ python3: '/usr/bin/python3' }, [], [], '/venv/bin/python');
    const missing = await discoverServer(settings({}), nothing);
    assert.ok(isMissing(missing));
    const message = missingServerMessage(missing);
    assert.match(message, /mevedel-lsp on PATH, the Python extension's interpreter \(\/venv\/bin\/python\), python3 -m mevedel_server/);
    assert.match(message, /`pipx install <checkout>` or `uv tool install <checkout>`/);
    const wrong = await discoverServer(settings({ 'server.path': '/nowhere/mevedel-lsp' }), nothing);
    assert.ok(isMissing(wrong));
    assert.match(missingServerMessage(wrong), /`\/nowhere\/mevedel-lsp` \(setting mevedel.server.path\) is not an executable file/);
  });

  test('the real probes: PATH lookup, and an interpreter with mevedel installed', async () => {
    const node = which('node');
    assert.ok(node && path.isAbsolute(node), String(node));
    assert.equal(which('mevedel-no-such-program'), undefined);
    const python = process.env.MEVEDEL_TEST_PYTHON;
    assert.ok(python, 'MEVEDEL_TEST_PYTHON is not set (tests/clients/test_vscode.py sets it)');
    assert.equal(await hasServerModule(python), true);
    assert.equal(await hasServerModule('/nonexistent/python3'), false);
  });
});
