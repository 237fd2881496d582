// Control transfer as the extension runs it (src/control.ts) against the real
// mevedel-lsp, with the mevedel CLI as the other client of the workspace: the
// owner's Grant/Keep question reaches the user (the language client shows
// window/showMessageRequest with its buttons), Keep refuses, Grant hands
// over, take and release pass the session back. The workspace and the CLI
// command come from tests/clients/test_vscode.py; without them the suite is
// skipped, which that test refuses.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { after, before, describe as suite, test as nodeTest } from 'node:test';
import { ControlDidChangeParams, ControlMethods, describeTake, GRANT, KEEP, releaseControl, takeControl } from '../src/control';
import { createSession, describeFailure, listSessions, renameSession } from '../src/protocol';
import { ServerSession, startServer } from './session';

const workspace = process.env.MEVEDEL_TEST_CONTROL_WORKSPACE;
const cliCommand: string[] = JSON.parse(process.env.MEVEDEL_CLI_COMMAND ?? '[]');
const skip = workspace && cliCommand.length ? false : 'needs MEVEDEL_TEST_CONTROL_WORKSPACE and MEVEDEL_CLI_COMMAND (tests/clients/test_vscode.py)';
const test = (name: string, body: () => Promise<void> | void) => nodeTest(name, { timeout: 180_000, skip }, body);

let server: ServerSession;

// Runs the CLI with ARGS and --json; the server keeps answering meanwhile.
async function cli(...args: string[]): Promise<{ status: number; result: any }> {
  const [command, ...rest] = cliCommand;
  const child = spawn(command, [...rest, ...args, '--json'], { cwd: workspace, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk) => (stdout += chunk));
  child.stderr.on('data', (chunk) => (stderr += chunk));
  const status = await new Promise<number>((done) => child.on('exit', (code) => done(code ?? -1)));
  assert.doesNotMatch(stderr, /Traceback/, stderr);
  return { status, result: JSON.parse(stdout) };
}

function phases(sessionId: string): string[] {
  return server.notifications
    .filter((n) => n.method === ControlMethods.didChange && n.params.sessionId === sessionId)
    .map((n) => (n.params as ControlDidChangeParams).phase);
}

async function action(sessionId: string): Promise<string | undefined> {
  return (await listSessions(server.connection)).sessions.find((s) => s.sessionId === sessionId)?.action;
}

suite('control', { skip }, () => {
  before(async () => {
    // A granted release stays reserved for its requester this long.
    const settings = { controlTransfer: { promptTimeoutSeconds: 60, fenceSeconds: 1 } };
    server = await startServer(workspace!, settings, settings);
  });

  after(async () => {
    await server?.close();
  });

  test('another client asks for control: Keep refuses, Grant hands over; take and release pass it back', async () => {
    const { sessionId } = await createSession(server.connection, { name: 'VS Code control' });
    await server.connection.sendRequest('mevedel/turn/begin', { sessionId, prompt: 'Owned by VS Code' });
    await server.connection.sendRequest('mevedel/turn/append', { sessionId, kind: 'response', text: 'mine' });
    await server.connection.sendRequest('mevedel/turn/settle', { sessionId });

    server.answer = () => KEEP;
    const kept = await cli('session', 'take-control', sessionId, '--wait', '60');
    assert.equal(kept.status, 1);
    assert.equal(kept.result.error.kind, 'rejected');
    const question = server.questions.at(-1)!;
    assert.match(question.message, new RegExp(`asks for control of session ${sessionId}`));
    assert.deepEqual(question.actions?.map((a) => a.title), [GRANT, KEEP]);
    assert.ok(phases(sessionId).includes('asking') && phases(sessionId).includes('kept'), phases(sessionId).join());
    assert.equal(await action(sessionId), 'Switch');

    server.answer = () => GRANT;
    const granted = await cli('session', 'take-control', sessionId, '--wait', '60');
    assert.equal(granted.status, 0);
    assert.equal(granted.result.outcome, 'acquired');
    await server.notification((n) => n.method === ControlMethods.didChange && n.params.sessionId === sessionId && n.params.phase === 'released');
    await assert.rejects(renameSession(server.connection, { sessionId, name: 'Mine again' }), (error: unknown) => {
      assert.match(describeFailure(error), /read-only/);
      return true;
    });

    assert.equal((await cli('session', 'release-control', '--session', sessionId)).status, 0);
    // The grant's reservation was the CLI's, and the CLI took it.
    const taken = await takeControl(server.connection, { sessionId });
    assert.equal(taken.outcome, 'acquired');
    assert.equal(describeTake(taken), `${sessionId}: you have control (writable here)`);
    assert.equal((await renameSession(server.connection, { sessionId, name: 'Mine again' })).displayName, 'Mine again');

    const released = await releaseControl(server.connection, { sessionId });
    assert.equal(released.state.access, 'read-only');
    assert.equal(await action(sessionId), 'Resume');
    assert.equal((await takeControl(server.connection, { sessionId })).outcome, 'acquired');
  });
});
