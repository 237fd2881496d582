// The extension's session layer against the real mevedel-lsp: listing rows
// as the picker shows them, opening with each action's mode, the transcript
// view, turns, rename, the didChange that makes a view stale, and the
// takeover question. The workspace holds sessions another client left
// behind (tests/clients/test_vscode.py makes it); without it the suite is
// skipped, which that test refuses.
import assert from 'node:assert/strict';
import { after, before, describe as suite, test as nodeTest } from 'node:test';
import { URI } from 'vscode-uri';
import {
  abandonPublication,
  closeSession,
  createSession,
  describeFailure,
  listSessions,
  listTurns,
  readDocument,
  renameSession,
  retryPublication,
  saveSession,
  SessionDidChangeParams,
  showTurn,
} from '../src/protocol';
import { openListed, OPEN_MODES, pickerEntries, staleDocuments, transcriptUri, turnLine, uriSession } from '../src/sessions';
import { ServerSession, startServer } from './session';

const workspace = process.env.MEVEDEL_TEST_SESSION_WORKSPACE;
const expired = process.env.MEVEDEL_TEST_EXPIRED_SESSION ?? '';
const held = process.env.MEVEDEL_TEST_HELD_SESSION ?? '';
const otherHost = process.env.MEVEDEL_TEST_OTHER_HOST ?? '';
const notASession = process.env.MEVEDEL_TEST_NOT_A_SESSION ?? '';
const skip = workspace ? false : 'needs MEVEDEL_TEST_SESSION_WORKSPACE (tests/clients/test_vscode.py sets it)';

const test = (name: string, body: () => Promise<void> | void) => nodeTest(name, { timeout: 30_000, skip }, body);

let server: ServerSession;

async function settle(sessionId: string, prompt: string): Promise<void> {
  await server.connection.sendRequest('mevedel/turn/begin', { sessionId, prompt });
  await server.connection.sendRequest('mevedel/turn/append', { sessionId, kind: 'response', text: `answer to ${prompt}` });
  await server.connection.sendRequest('mevedel/turn/settle', { sessionId });
}

async function entryOf(sessionId: string) {
  const entry = pickerEntries(await listSessions(server.connection)).find((e) => e.session?.sessionId === sessionId);
  assert.ok(entry, `${sessionId} is not listed`);
  return entry;
}

function didChange(match: (change: SessionDidChangeParams) => boolean): Promise<SessionDidChangeParams> {
  return server
    .notification((n) => n.method === 'mevedel/session/didChange' && match(n.params))
    .then((n) => n.params as SessionDidChangeParams);
}

suite('sessions', { skip }, () => {
  before(async () => {
    server = await startServer(workspace!, {}, {});
  });

  after(async () => {
    await server?.close();
  });

  test('a created session is listed with its action, opens, and its transcript follows didChange', async () => {
    const created = await createSession(server.connection, { name: 'VS Code session' });
    const sessionId = created.sessionId;
    await settle(sessionId, 'First prompt from VS Code');

    const entry = await entryOf(sessionId);
    assert.equal(entry.label, 'VS Code session');
    assert.equal(entry.description, 'Switch · current');
    assert.match(entry.detail, new RegExp(`^1 turn · host \\S+ · ${sessionId} · First prompt from VS Code$`));
    const opened = await openListed(server.connection, entry.session!);
    assert.equal(opened.action, 'switch');

    // The transcript view, as VS Code hands its URI to the provider.
    const uri = URI.parse(await transcriptUri(server.connection, { sessionId })).toString();
    assert.equal(uriSession(uri), sessionId);
    const first = await readDocument(server.connection, { uri });
    assert.match(first.text, /^> First prompt from VS Code$/m);

    const renamed = await renameSession(server.connection, { sessionId, name: '  Renamed   by VS Code ' });
    assert.equal(renamed.displayName, 'Renamed by VS Code');
    assert.equal((await entryOf(sessionId)).label, 'Renamed by VS Code');

    // Another settled turn: the notification makes exactly this session's
    // open views stale, and reading again shows the new prompt.
    const listing = URI.parse((await server.connection.sendRequest<any>('mevedel/address/describe', { address: 'mevedel://' })).uri).toString();
    const settled = didChange((c) => c.sessionId === sessionId && c.reason === 'settled' && c.settledTurns === 2);
    await settle(sessionId, 'Second prompt from VS Code');
    const change = await settled;
    assert.equal(change.access, 'writable');
    assert.deepEqual(staleDocuments([uri, listing], change), [uri]);
    const second = await readDocument(server.connection, { uri });
    assert.match(second.text, /^> Second prompt from VS Code$/m);
    assert.ok(second.text.startsWith(first.text.trimEnd()), 'the earlier turn changed');

    // Turns, and where each starts in the transcript.
    const turns = await listTurns(server.connection, { sessionId });
    assert.deepEqual(
      turns.turns.map((t) => [t.turn, t.state, t.prompt]),
      [
        [1, 'completed', 'First prompt from VS Code'],
        [2, 'completed', 'Second prompt from VS Code'],
      ],
    );
    const shown = await showTurn(server.connection, { sessionId, turn: 2 });
    assert.equal(shown.prompt, 'Second prompt from VS Code');
    const line = turnLine(second.text, shown);
    assert.ok(line !== undefined, 'turn 2 has no heading in the transcript');
    assert.match(second.text.split('\n')[line], /^## Turn 2 /);

    const saved = await saveSession(server.connection, { sessionId });
    assert.equal(saved.committed, true);
    const closed = didChange((c) => c.sessionId === sessionId && c.reason === 'closed');
    assert.equal((await closeSession(server.connection, { sessionId })).sessionId, sessionId);
    assert.deepEqual(staleDocuments([uri], await closed), []);
    assert.equal((await entryOf(sessionId)).session!.action, 'Resume');
  });

  test('a session whose lease expired is taken over only when the user says so', async () => {
    const entry = await entryOf(expired);
    assert.equal(entry.session!.action, 'Take over');
    assert.equal(OPEN_MODES[entry.session!.action], 'takeover');
    assert.match(entry.detail, new RegExp(`host ${otherHost}`));

    server.answer = () => 'Cancel';
    await assert.rejects(openListed(server.connection, entry.session!), (error: unknown) => {
      assert.match(describeFailure(error), new RegExp(`^${expired}: .*not confirmed`));
      return true;
    });
    const question = server.questions.at(-1)!;
    assert.match(question.message, new RegExp(otherHost));
    assert.deepEqual(question.actions?.map((a) => a.title), ['Take over', 'Cancel']);
    assert.equal((await entryOf(expired)).session!.action, 'Take over');

    server.answer = (asked) => asked.actions?.find((a) => a.title === 'Take over')?.title;
    const opened = await openListed(server.connection, entry.session!);
    assert.equal(opened.action, 'takeover');
    assert.equal(opened.session.access, 'writable');
    const transcript = await readDocument(server.connection, { uri: await transcriptUri(server.connection, { sessionId: expired }) });
    assert.match(transcript.text, /expired prompt/);
    assert.equal((await entryOf(expired)).description, 'Switch · current');
  });

  test('a live foreign lease joins read-only; inspect rows carry their reason', async () => {
    const entries = pickerEntries(await listSessions(server.connection));
    const inspect = entries.find((e) => e.inspect);
    assert.ok(inspect, JSON.stringify(entries));
    assert.equal(inspect.label, notASession);
    assert.equal(inspect.description, 'Inspect only');
    assert.match(inspect.detail, /is not a session ID/);
    assert.equal(inspect.session, undefined);

    const entry = await entryOf(held);
    assert.equal(entry.session!.action, 'Join');
    const joined = await openListed(server.connection, entry.session!);
    assert.equal(joined.action, 'join');
    assert.equal(joined.session.access, 'read-only');
    await assert.rejects(renameSession(server.connection, { sessionId: held, name: 'Mine' }), (error: unknown) => {
      assert.match(describeFailure(error), new RegExp(`^${held}: .*read-only`));
      return true;
    });
  });

  test('publication commands answer with the server words', async () => {
    const { sessionId } = await createSession(server.connection, {});
    await assert.rejects(retryPublication(server.connection, { sessionId }), (error: unknown) => {
      assert.match(describeFailure(error), new RegExp(`^${sessionId}: .*no pending publication`));
      return true;
    });
    assert.equal((await abandonPublication(server.connection, { sessionId })).abandoned, false);
  });
});
