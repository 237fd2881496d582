// Prompting an agent as the extension does it (src/agents.ts, src/chat.ts,
// src/chatView.ts, src/lifecycle.ts) against the real mevedel-lsp driving
// the scripted ACP agent (tests/agents/scripted_agent.py, a real subprocess
// on the official SDK): the chat state folded from mevedel/turn/didUpdate in
// the order the server sent it, the streamed text there before the turn
// settles, the permission question answered through
// window/showMessageRequest, cancel, Rewind restoring the file the agent
// wrote, and each failure with what to do. The workspace and the agent's
// command come from tests/clients/test_vscode.py; without them the suite is
// skipped, which that test refuses.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, describe as suite, test as nodeTest } from 'node:test';
import {
  AgentMethods,
  agentMemoryKey,
  agentPickItems,
  cancelTurn,
  chooseAgent,
  describePromptFailure,
  describeTurnError,
  listAgents,
  promptParams,
  promptTurn,
  TurnDidUpdateParams,
} from '../src/agents';
import { activity, applyUpdate, ChatState, ChatTurn, emptyChat, loadHistory, promptSent, withHistory } from '../src/chat';
import { renderParts } from '../src/chatView';
import { fork, Impact, rewind } from '../src/lifecycle';
import { createSession, listTurns } from '../src/protocol';
import { serverSettings } from '../src/settings';
import { ServerSession, startServer } from './session';

const workspace = process.env.MEVEDEL_TEST_AGENT_WORKSPACE;
const agentCommand: string[] = JSON.parse(process.env.MEVEDEL_TEST_AGENT_COMMAND ?? '[]');
const skip = workspace && agentCommand.length ? false : 'needs MEVEDEL_TEST_AGENT_WORKSPACE and MEVEDEL_TEST_AGENT_COMMAND (tests/clients/test_vscode.py)';
const test = (name: string, body: () => Promise<void> | void) => nodeTest(name, { timeout: 60_000, skip }, body);

const ALLOW = { id: 'allow', name: 'Allow once', kind: 'allow_once' };
const REJECT = { id: 'reject', name: 'Reject', kind: 'reject_once' };
const HOSTILE = '<script>alert(1)</script><img src=x onerror=alert(2)>';

// Each agent plays its own script; one process per session, so a new
// session replays turns[0].
const SCRIPTS: Record<string, unknown> = {
  stream: {
    turns: [
      [
        { think: 'Let me look.' },
        { say: 'Working ' },
        { say: `on it. ${HOSTILE}` },
        { plan: [{ content: 'edit the notes', status: 'in_progress', priority: 'high' }] },
        { tool_call: { id: 'c1', title: `Edit ${HOSTILE}`, kind: 'edit', status: 'pending' } },
        { tool_update: { id: 'c1', status: 'in_progress', diff: { path: 'stream.txt', old: 'original\n', new: 'streamed\n' } } },
        { permission: { tool_call_id: 'c1', title: 'Write stream.txt', options: [ALLOW, REJECT] } },
        { write: { path: 'stream.txt', content: 'streamed\n' } },
        { tool_update: { id: 'c1', status: 'completed', text: 'done' } },
        { say: ' Done.' },
      ],
    ],
  },
  writer: {
    turns: [
      [
        { tool_call: { id: 'w1', title: 'Write notes.txt', kind: 'edit', status: 'in_progress' } },
        { write: { path: 'notes.txt', content: 'the agent rewrote this\n' } },
        { tool_update: { id: 'w1', status: 'completed', diff: { path: 'notes.txt', old: 'original notes\n', new: 'the agent rewrote this\n' } } },
        { say: 'Rewrote the notes.' },
      ],
    ],
  },
  slow: { turns: [[{ say: 'Partial answer' }, { wait_cancel: 30 }, { say: 'never said' }]] },
  crasher: { turns: [[{ say: 'About to fall over' }, { stderr: 'out of cheese' }, { crash: 3 }]] },
  locked: {
    auth_required: true,
    auth_methods: [{ id: 'login', name: 'Log in', description: 'run `scripted login`' }],
    turns: [[{ say: 'hi' }]],
  },
  echo: { turns: [[{ echo_prompt: true }]] },
  // Asks `breaker`, whose prompt fails, for a task, then goes on.
  delegator: {
    turns: [
      [
        { mcp_call: { id: 'call-broken', tool: 'Agent', arguments: { name: 'broken', agent: 'breaker', prompt: 'Try this' } } },
        { say: 'Carried on.' },
      ],
    ],
  },
  breaker: { turns: [[{ say: 'Trying. ' }, { error: { code: -32603, message: 'the model is overloaded' } }]] },
  // Calls Agent twice at once. The first task ends once the second one
  // started (its call matched, so recorded), the second after the first
  // one's answer: the first task is recorded while both calls wait for
  // theirs (the newest such call is the second one).
  twofold: {
    turns: [
      [
        {
          together: [
            [
              { mcp_call: { id: 'call-first', tool: 'Agent', arguments: { name: 'first', agent: 'firstHelper', prompt: 'First task' } } },
              { write: { path: 'first-answered.txt', content: 'yes\n' } },
            ],
            [{ mcp_call: { id: 'call-second', tool: 'Agent', arguments: { name: 'second', agent: 'secondHelper', prompt: 'Second task' } } }],
          ],
        },
        { say: 'Both answered.' },
      ],
    ],
  },
  firstHelper: { turns: [[{ wait_file: 'second-started.txt' }, { say: 'First done.' }]] },
  secondHelper: {
    turns: [[{ write: { path: 'second-started.txt', content: 'yes\n' } }, { wait_file: 'first-answered.txt' }, { say: 'Second done.' }]],
  },
};

let server: ServerSession;
let scripts: string;

function agentSettings(): Record<string, unknown> {
  const agents: Record<string, unknown> = { ghost: { command: ['mevedel-no-such-agent-program'] } };
  for (const [name, script] of Object.entries(SCRIPTS)) {
    const file = path.join(scripts, `${name}.json`);
    fs.writeFileSync(file, JSON.stringify({ name, ...(script as object) }));
    agents[name] = { command: [...agentCommand, file] };
  }
  // As the extension sends them: every server setting, these set.
  const values: Record<string, unknown> = { agents, defaultAgent: 'stream', permissions: 'ask' };
  return serverSettings((key) => values[key]);
}

function file(relative: string): string {
  return fs.readFileSync(path.join(workspace!, relative), 'utf8');
}

function updates(sessionId: string): TurnDidUpdateParams[] {
  return server.notifications
    .filter((n) => n.method === AgentMethods.didUpdate && n.params.sessionId === sessionId)
    .map((n) => n.params as TurnDidUpdateParams);
}

// The chat panel's state after every update of the session so far, folded
// in the order they arrived.
function chat(sessionId: string, start: ChatState = emptyChat({ sessionId })): ChatState {
  return updates(sessionId).reduce(applyUpdate, start);
}

function responseText(state: ChatState, turn?: number): string {
  const shown = turn === undefined ? state.live : state.turns.find((t) => t.turn === turn);
  return (shown?.blocks ?? []).flatMap((b) => (b.kind === 'response' ? [b.text] : [])).join('');
}

async function sessionFor(agent: string): Promise<string> {
  return (await createSession(server.connection, { name: `with ${agent}` })).sessionId;
}

suite('agents', { skip }, () => {
  before(async () => {
    scripts = fs.mkdtempSync(path.join(os.tmpdir(), 'mevedel-vscode-agents-'));
    const settings = agentSettings();
    server = await startServer(workspace!, settings, settings);
  });

  after(async () => {
    await server?.close();
    if (scripts) fs.rmSync(scripts, { recursive: true, force: true });
  });

  test('the agent picker lists the configured agents; a remembered one is used, one is taken, several ask', async () => {
    const listing = await listAgents(server.connection);
    const names = listing.agents.map((a) => a.name).sort();
    assert.deepEqual(names, [
      'breaker', 'crasher', 'delegator', 'echo', 'firstHelper', 'ghost', 'locked', 'secondHelper', 'slow', 'stream', 'twofold', 'writer',
    ]);
    assert.equal(listing.defaultAgent, 'stream');
    assert.equal(listing.agents.find((a) => a.name === 'ghost')?.found, false);
    assert.equal(listing.agents.find((a) => a.name === 'writer')?.found, true);

    assert.deepEqual(chooseAgent(listing, 'writer'), { agent: 'writer' });
    const asked = chooseAgent(listing, 'forgotten');
    assert.ok('choices' in asked);
    const items = agentPickItems(asked.choices);
    assert.equal(items[0].label, 'stream');
    assert.equal(items[0].description, 'default');
    assert.equal(items.find((i) => i.label === 'ghost')?.description, 'program not found on PATH');
    assert.deepEqual(chooseAgent({ agents: [listing.agents[0]] }), { agent: listing.agents[0].name });
    assert.deepEqual(chooseAgent({ agents: [] }), { agent: undefined });
    assert.equal(agentMemoryKey('file:///w', 'S1'), 'mevedel.agent:file:///w:S1');
  });

  test('a prompt streams into the chat in order, visible before it settles; the permission question is answered', async () => {
    fs.writeFileSync(path.join(workspace!, 'stream.txt'), 'original\n');
    const sessionId = await sessionFor('stream');
    let seenBeforeAnswer: ChatState | undefined;
    server.answer = async (question) => {
      if (!/asks permission/.test(question.message)) return undefined;
      // The user reads the chat, then answers: the text streamed so far is
      // there, the turn is running, nothing has settled.
      await server.notification(
        (n) => n.method === AgentMethods.didUpdate && n.params.sessionId === sessionId && JSON.stringify(n.params).includes('on it.'),
      );
      seenBeforeAnswer = chat(sessionId, promptSent(emptyChat({ sessionId }), 'Edit the file'));
      return 'Allow once';
    };
    const params = promptParams({ text: 'Edit the file' }, { sessionId }, 'stream');
    const result = await promptTurn(server.connection, params);
    server.answer = () => undefined;

    assert.equal(result.outcome, 'completed');
    assert.equal(result.turn, 1);
    assert.equal(result.agent, 'stream');
    // The question as VS Code shows it: the agent's options as the buttons.
    const question = server.questions.find((q) => q.message.includes('Write stream.txt'));
    assert.ok(question, JSON.stringify(server.questions));
    assert.equal(question.message, 'stream asks permission: Write stream.txt');
    assert.deepEqual(question.actions?.map((a) => a.title), ['Allow once', 'Reject']);

    assert.ok(seenBeforeAnswer, 'the permission question never came');
    assert.equal(activity(seenBeforeAnswer), 'running');
    assert.equal(seenBeforeAnswer.live?.prompt, 'Edit the file');
    assert.match(responseText(seenBeforeAnswer), /^Working on it\./);
    assert.equal(seenBeforeAnswer.turns.length, 0);
    assert.match(renderParts(seenBeforeAnswer).live, /Working on it\./);

    // The whole stream: starting, running..., settled last.
    const phases = updates(sessionId).map((u) => u.phase);
    assert.equal(phases[0], 'starting');
    assert.equal(phases.at(-1), 'settled');
    assert.equal(phases.filter((p) => p === 'settled').length, 1);

    const state = chat(sessionId, promptSent(emptyChat({ sessionId }), 'Edit the file'));
    assert.equal(activity(state), 'idle');
    assert.equal(state.live, undefined);
    const [turn] = state.turns;
    assert.equal(turn.turn, 1);
    assert.equal(turn.state, 'completed');
    assert.equal(turn.prompt, 'Edit the file');
    // A text run ends where something else happened, as the records do.
    const KINDS = ['reasoning', 'response', 'plan', 'tool_call', 'permission', 'response', 'response'];
    assert.deepEqual(
      turn.blocks.map((b) => b.kind),
      KINDS,
    );
    const said = responseText(state, 1);
    assert.ok(said.startsWith(`Working on it. ${HOSTILE}`), said);
    assert.ok(said.includes('permission: selected allow'), said);
    assert.ok(said.endsWith(' Done.'), said);
    const call = turn.blocks.find((b) => b.kind === 'tool_call');
    assert.ok(call && call.kind === 'tool_call');
    assert.equal(call.call.status, 'completed');
    assert.equal(call.call.output, 'done');
    assert.equal(call.call.diffs?.[0].newText, 'streamed\n');
    const decision = turn.blocks.find((b) => b.kind === 'permission');
    assert.deepEqual(decision, { kind: 'permission', question: 'Write stream.txt', decision: 'Allow once', allowed: true, callId: 'c1' });
    assert.equal(file('stream.txt'), 'streamed\n');

    // Rendered: the agent's markup is text, never markup.
    const html = renderParts(state).turns;
    assert.doesNotMatch(html, /<script|<img/i);
    assert.ok(html.includes('&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;'), html);
    assert.match(html, /<details class="reasoning"[^>]*><summary>Reasoning<\/summary><div class="text">Let me look\.<\/div><\/details>/);
    assert.match(html, /class="diff-del">- original<\/span><span class="diff-add">\+ streamed<\/span>/);
    assert.match(html, /data-action="rewind" data-turn="1" data-boundary="before"/);
    assert.match(html, /data-action="fork" data-turn="1"/);

    // Read back as a panel opened later does: the same turn from the records.
    const history = await loadHistory(server.connection, { sessionId });
    assert.equal(history.sessionId, sessionId);
    const recorded = history.turns[0];
    assert.equal(recorded.prompt, 'Edit the file');
    assert.deepEqual(
      recorded.blocks.map((b) => b.kind),
      KINDS,
    );
    assert.equal(responseText({ turns: history.turns }, 1), responseText(state, 1));
    // The panel that saw it live keeps what the records lack (the diff).
    const merged = withHistory(state, history.sessionId, history.turns);
    const kept = merged.turns[0].blocks.find((b) => b.kind === 'tool_call');
    assert.ok(kept && kept.kind === 'tool_call' && kept.call.diffs?.length === 1);
  });

  test('rewinding before the agent turn restores the file it wrote; the impact names it and the agent history', async () => {
    fs.writeFileSync(path.join(workspace!, 'notes.txt'), 'original notes\n');
    const sessionId = await sessionFor('writer');
    const result = await promptTurn(server.connection, promptParams({ text: 'Rewrite the notes' }, { sessionId }, 'writer'));
    assert.equal(result.outcome, 'completed');
    assert.equal(file('notes.txt'), 'the agent rewrote this\n');

    const shown: Impact[] = [];
    // The Fork button's confirmation: the working files stay as they are.
    const forked = await fork(server.connection, { sessionId, turn: 1 }, async (impact) => {
      shown.push(impact);
      return false;
    });
    assert.equal(forked.committed, false);
    assert.match(shown[0].details[0], /^The working files are left as they are/);
    assert.ok(
      shown[0].details.some((line) => /^Agent history: the new session does not continue agent writer's own history/.test(line)),
      shown[0].details.join('\n'),
    );

    // The Rewind before button of turn 1.
    const done = await rewind(server.connection, { sessionId, turn: 1, boundary: 'before' }, async (impact) => {
      shown.push(impact);
      return true;
    });
    const impact = shown[1];
    assert.equal(impact.summary, `Rewind ${sessionId} to before the prompt of turn 1: 0 turns kept.`);
    assert.ok(impact.details.includes('Restores 1 file:'), impact.details.join('\n'));
    assert.ok(impact.details.includes('  notes.txt (pre-turn of turn 1: 15 bytes)'), impact.details.join('\n'));
    assert.match(impact.details.at(-1)!, /^Agent history: agent writer's own history of this conversation will be detached/);
    assert.ok(done.committed);
    assert.deepEqual(done.result.written, ['notes.txt']);
    assert.equal(file('notes.txt'), 'original notes\n');
    assert.equal((await listTurns(server.connection, { sessionId })).turns.length, 0);
    const history = await loadHistory(server.connection, { sessionId });
    assert.deepEqual(withHistory(chat(sessionId), sessionId, history.turns).turns, []);
  });

  test('cancel ends the turn interrupted, keeping what arrived', async () => {
    const sessionId = await sessionFor('slow');
    const running = promptTurn(server.connection, promptParams({ text: 'Take your time' }, { sessionId }, 'slow'));
    await server.notification(
      (n) => n.method === AgentMethods.didUpdate && n.params.sessionId === sessionId && JSON.stringify(n.params).includes('Partial answer'),
    );
    const during = chat(sessionId);
    assert.equal(activity(during), 'running');
    assert.match(renderParts(during).header, /data-action="cancel"/);
    assert.deepEqual(await cancelTurn(server.connection, { sessionId }), { cancelled: true });
    const result = await running;
    assert.equal(result.outcome, 'interrupted');
    assert.equal(result.stopReason, 'cancelled');
    const phases = updates(sessionId).map((u) => u.phase);
    assert.ok(phases.includes('cancelling'), phases.join(' '));
    const state = chat(sessionId);
    assert.equal(activity(state), 'idle');
    assert.equal(state.turns[0].state, 'interrupted');
    // Why, in the server's words.
    assert.match(renderParts(state).turns, /Interrupted: cancelled by the user\./);
    assert.equal(responseText(state, 1), 'Partial answer');
    assert.doesNotMatch(renderParts(state).header, /data-action="cancel"/);
    assert.deepEqual(await cancelTurn(server.connection, { sessionId }), { cancelled: false });
  });

  test("a sub-agent's failed task read back says why below its fold, as it did live", async () => {
    const sessionId = await sessionFor('delegator');
    const result = await promptTurn(server.connection, promptParams({ text: 'Delegate to a failing helper' }, { sessionId }, 'delegator'));
    assert.equal(result.outcome, 'completed');
    const why = /data-path="broken"[^>]*><summary>[\s\S]*?<\/details>(<div class="error subagent-why"><div>[^<]*<\/div><\/div>)/;
    const live = why.exec(renderParts(chat(sessionId)).turns);
    assert.ok(live, renderParts(chat(sessionId)).turns);
    assert.match(live[1], /the model is overloaded/);
    // A panel opened later reads the turn from the records: the same
    // sentence below the folded task.
    const history = await loadHistory(server.connection, { sessionId });
    const html = renderParts({ turns: history.turns }).turns;
    assert.match(html, /data-path="broken"[^>]*><summary>.*?<span class="subagent-state state-errored">/);
    assert.equal(why.exec(html)?.[1], live[1], html);
  });

  test('two Agent calls made at once each show their own task under them, live and read back', async () => {
    const sessionId = await sessionFor('twofold');
    const result = await promptTurn(server.connection, promptParams({ text: 'Delegate two at once' }, { sessionId }, 'twofold'));
    assert.equal(result.outcome, 'completed');
    // Each call with the paths of the tasks under it.
    const nested = (turn: ChatTurn) =>
      turn.blocks.flatMap((b) => (b.kind === 'tool_call' ? [[b.call.callId, (b.call.agents ?? []).map((v) => v.path)]] : []));
    const expected = [['call-first', ['first']], ['call-second', ['second']]];
    const live = chat(sessionId).turns[0];
    assert.deepEqual(nested(live), expected);
    // A panel opened later reads the turn from the records: the same.
    const history = await loadHistory(server.connection, { sessionId });
    assert.deepEqual(nested(history.turns[0]), expected);
    assert.equal(history.turns[0].agents, undefined);
  });

  test('failures say what to do: not configured, not installed, needs login, crashed mid-turn', async () => {
    const sessionId = await sessionFor('failures');
    const refusal = async (agent: string) => {
      const error = await promptTurn(server.connection, promptParams({ text: 'hello' }, { sessionId }, agent)).then(
        () => assert.fail(`agent ${agent} was not refused`),
        (e: unknown) => e,
      );
      return { kind: (error as { data: { kind: string } }).data.kind, advice: describePromptFailure(error) };
    };

    const unknown = await refusal('nobody');
    assert.equal(unknown.kind, 'agent-not-configured');
    assert.match(unknown.advice.message, /^no agent to prompt: /);
    assert.deepEqual(unknown.advice.actions, [{ title: 'Open Settings', setting: 'mevedel.agents' }]);

    const ghost = await refusal('ghost');
    assert.equal(ghost.kind, 'agent-not-installed');
    assert.match(ghost.advice.message, /^the agent is not installed: .*mevedel-no-such-agent-program/);
    assert.deepEqual(ghost.advice.actions, [{ title: 'Open Settings', setting: 'mevedel.agents' }]);

    const locked = await refusal('locked');
    assert.equal(locked.kind, 'agent-needs-login');
    assert.match(locked.advice.message, /scripted login/);
    assert.deepEqual(locked.advice.actions, [{ title: 'Open Terminal' }]);

    // A refused prompt records nothing; the chat says why until the next.
    assert.equal((await listTurns(server.connection, { sessionId })).turns.length, 0);
    const refused = chat(sessionId);
    assert.equal(activity(refused), 'idle');
    assert.equal(refused.turns.length, 0);
    assert.equal(refused.refused?.kind, 'agent-needs-login');
    assert.match(`${refused.refused?.message} ${refused.refused?.action}`, /scripted login/);
    assert.match(renderParts(refused).notice, /scripted login/);

    const crashed = await promptTurn(server.connection, promptParams({ text: 'Crash please' }, { sessionId }, 'crasher'));
    assert.equal(crashed.outcome, 'errored');
    assert.ok(crashed.error);
    const advice = describeTurnError(crashed.error);
    assert.match(advice.message, /^the agent failed: .*status 3/);
    assert.match(advice.message, /out of cheese/);
    const log = advice.actions.find((a) => a.title === 'Open Agent Log');
    assert.ok(log && 'path' in log && log.path.endsWith('agent-crasher.log'), JSON.stringify(advice.actions));
    const state = chat(sessionId);
    assert.equal(state.refused, undefined);
    assert.equal(state.turns[0].state, 'errored');
    assert.equal(responseText(state, 1), 'About to fall over');
    assert.match(renderParts(state).turns, /status 3/);
  });

  test('a quoted selection and attachments reach the agent', async () => {
    fs.writeFileSync(path.join(workspace!, 'attached.txt'), 'attached content\n');
    const sessionId = await sessionFor('echo');
    const params = promptParams(
      {
        text: 'Explain this',
        selections: [{ path: 'src/a.ts', startLine: 3, endLine: 4, text: 'const a = 1;\nconst b = 2;\n', languageId: 'typescript' }],
        attachments: ['attached.txt'],
      },
      { sessionId },
      'echo',
    );
    const result = await promptTurn(server.connection, params);
    assert.equal(result.outcome, 'completed');
    const said = responseText(chat(sessionId), 1);
    assert.ok(said.includes('Explain this\n\nFrom src/a.ts (lines 3-4):\n```typescript\nconst a = 1;\nconst b = 2;\n```'), said);
    assert.match(said, /\[resource file:\/\/\S*attached\.txt\]\nattached content/);
  });
});
