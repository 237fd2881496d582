// Following a session owned elsewhere as the extension runs it (src/follow.ts)
// against the real mevedel-lsp, with the mevedel CLI owning the session: the
// joined transcript advances on didPublish, following off leaves it to a
// refresh, compaction and /clear change an own session's transcript. The
// workspace and the CLI command come from tests/clients/test_vscode.py;
// without them the suite is skipped, which that test refuses.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { after, before, describe as suite, test as nodeTest } from 'node:test';
import { URI } from 'vscode-uri';
import { clearSession, compactSession, FollowMethods, publishedDocuments, refreshSession, SessionDidPublishParams, setFollow } from '../src/follow';
import { createSession, listSessions, openSession, readDocument } from '../src/protocol';
import { transcriptUri } from '../src/sessions';
import { ServerSession, startServer } from './session';

const workspace = process.env.MEVEDEL_TEST_FOLLOW_WORKSPACE;
const cliCommand: string[] = JSON.parse(process.env.MEVEDEL_CLI_COMMAND ?? '[]');
const skip = workspace && cliCommand.length ? false : 'needs MEVEDEL_TEST_FOLLOW_WORKSPACE and MEVEDEL_CLI_COMMAND (tests/clients/test_vscode.py)';
const test = (name: string, body: () => Promise<void> | void) => nodeTest(name, { timeout: 180_000, skip }, body);

let server: ServerSession;

async function cli(...args: string[]): Promise<any> {
  const [command, ...rest] = cliCommand;
  const child = spawn(command, [...rest, ...args, '--json'], { cwd: workspace, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk) => (stdout += chunk));
  child.stderr.on('data', (chunk) => (stderr += chunk));
  const status = await new Promise<number>((done) => child.on('exit', (code) => done(code ?? -1)));
  assert.equal(status, 0, `${args.join(' ')}: ${stdout} ${stderr}`);
  return JSON.parse(stdout);
}

async function cliTurn(sessionId: string, prompt: string): Promise<void> {
  await cli('turn', 'begin', '--session', sessionId, prompt);
  await cli('turn', 'append', 'response', '--text', `cli answer to ${prompt}`, '--session', sessionId);
  await cli('turn', 'settle', '--session', sessionId);
}

function published(sessionId: string, settledTurns: number): Promise<SessionDidPublishParams> {
  return server
    .notification((n) => n.method === FollowMethods.didPublish && n.params.sessionId === sessionId && n.params.settledTurns === settledTurns)
    .then((n) => n.params as SessionDidPublishParams);
}

suite('following', { skip }, () => {
  before(async () => {
    server = await startServer(workspace!, {}, {});
  });

  after(async () => {
    await server?.close();
  });

  test('a joined transcript follows the owner; with following off only a refresh advances it', async () => {
    const sessionId = (await cli('turn', 'begin', '--new', '--name', 'Owned by the CLI', 'CLI prompt 1')).session_id;
    await cli('turn', 'settle', '--session', sessionId);
    const row = (await listSessions(server.connection)).sessions.find((s) => s.sessionId === sessionId);
    assert.equal(row?.action, 'Join');
    const joined = await openSession(server.connection, { sessionId, mode: 'join' });
    assert.equal(joined.session.access, 'read-only');
    const uri = URI.parse(await transcriptUri(server.connection, { sessionId })).toString();
    assert.match((await readDocument(server.connection, { uri })).text, /CLI prompt 1/);

    const second = published(sessionId, 2);
    await cliTurn(sessionId, 'CLI prompt 2');
    const change = await second;
    assert.deepEqual(change.turns.map((t) => [t.turn, t.change, t.prompt]), [[2, 'new', 'CLI prompt 2']]);
    assert.deepEqual(publishedDocuments([uri], change), [uri]);
    assert.match((await readDocument(server.connection, { uri })).text, /cli answer to CLI prompt 2/);

    const off = await setFollow(server.connection, { sessionId, enabled: false });
    assert.equal(off.enabled, false);
    assert.equal(off.following, false);
    await cliTurn(sessionId, 'CLI prompt 3');
    const refreshed = await refreshSession(server.connection, { sessionId });
    assert.equal(refreshed.status, 'advanced');
    assert.equal(refreshed.publication?.settledTurns, 3);
    assert.match((await readDocument(server.connection, { uri })).text, /CLI prompt 3/);
    assert.equal((await refreshSession(server.connection, { sessionId })).status, 'unchanged');

    const on = await setFollow(server.connection, { sessionId, enabled: true });
    assert.equal(on.following, true);
    const fourth = published(sessionId, 4);
    await cliTurn(sessionId, 'CLI prompt 4');
    await fourth;
    assert.match((await readDocument(server.connection, { uri })).text, /cli answer to CLI prompt 4/);
  });

  test('compact and clear start a new segment of an own session', async () => {
    const { sessionId } = await createSession(server.connection, { name: 'VS Code compacted' });
    const send = (method: string, params: object) => server.connection.sendRequest(method, { sessionId, ...params });
    await send('mevedel/turn/begin', { prompt: 'Before the compaction' });
    await send('mevedel/turn/settle', {});
    const uri = await transcriptUri(server.connection, { sessionId });
    const compacted = await compactSession(server.connection, { sessionId, summary: 'The summary written by VS Code' });
    assert.equal(compacted.segment, compacted.previousSegment + 1);
    assert.match((await readDocument(server.connection, { uri })).text, /The summary written by VS Code/);
    await send('mevedel/turn/begin', { prompt: 'After the compaction' });
    await send('mevedel/turn/settle', {});
    const cleared = await clearSession(server.connection, { sessionId });
    assert.equal(typeof cleared.chapter, 'number');
    assert.doesNotMatch((await readDocument(server.connection, { uri })).text, /After the compaction/);
  });
});
