// Rewind, Redo, Fork, Worktree Fork, Save As and recovery as the extension
// runs them (src/lifecycle.ts), against the real mevedel-lsp in a real Git
// work tree: the impact the user is shown, declining that changes nothing,
// confirming that changes the session. The workspace (a Git repository
// holding two sessions a crashed Rewind left in recovery) is made by
// tests/clients/test_vscode.py; without it the suite is skipped, which that
// test refuses.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, before, describe as suite, test as nodeTest } from 'node:test';
import {
  abandonRecovery,
  fork,
  forkVariants,
  Impact,
  isRecoveryPending,
  listRedo,
  redo,
  retryRecovery,
  rewind,
  openVariant,
  recoveryNotice,
  saveAs,
  variantEntries,
  worktreeFork,
} from '../src/lifecycle';
import { createSession, describeFailure, listSessions, listTurns, openSession, readDocument, showTurn } from '../src/protocol';
import { turnLine } from '../src/sessions';
import { ServerSession, startServer } from './session';

const workspace = process.env.MEVEDEL_TEST_LIFECYCLE_WORKSPACE;
const retrySession = process.env.MEVEDEL_TEST_RECOVERY_RETRY ?? '';
const retryFile = process.env.MEVEDEL_TEST_RECOVERY_RETRY_FILE ?? '';
const abandonSession = process.env.MEVEDEL_TEST_RECOVERY_ABANDON ?? '';
const editedSession = process.env.MEVEDEL_TEST_RECOVERY_EDITED ?? '';
const editedFile = process.env.MEVEDEL_TEST_RECOVERY_EDITED_FILE ?? '';
const skip = workspace ? false : 'needs MEVEDEL_TEST_LIFECYCLE_WORKSPACE (tests/clients/test_vscode.py sets it)';
const test = (name: string, body: () => Promise<void> | void) => nodeTest(name, { timeout: 60_000, skip }, body);

const TRACKED = 'lifecycle.txt';
let server: ServerSession;

function tracked(): string {
  return fs.readFileSync(path.join(workspace!, TRACKED), 'utf8');
}

async function editTurn(sessionId: string, prompt: string, content: string): Promise<void> {
  const send = (method: string, params: object) => server.connection.sendRequest(method, { sessionId, ...params });
  await send('mevedel/turn/begin', { prompt });
  await send('mevedel/turn/capture', { path: TRACKED });
  fs.writeFileSync(path.join(workspace!, TRACKED), content);
  await send('mevedel/turn/append', { kind: 'response', text: `answer to ${prompt}` });
  await send('mevedel/turn/settle', {});
}

async function threeTurns(name: string): Promise<string> {
  const { sessionId } = await createSession(server.connection, { name });
  for (const n of [1, 2, 3]) await editTurn(sessionId, `${name} step ${n}`, `${name} v${n}\n`);
  return sessionId;
}

async function turnCount(sessionId: string): Promise<number> {
  return (await listTurns(server.connection, { sessionId })).turns.length;
}

async function transcript(sessionId: string): Promise<string> {
  return (await readDocument(server.connection, { address: 'history://root' }, { sessionId })).text;
}

async function sessionIds(): Promise<string[]> {
  return (await listSessions(server.connection)).sessions.map((s) => s.sessionId).sort();
}

// The user at the modal dialog: records what it showed, answers `yes`.
function answering(yes: boolean, shown: Impact[]) {
  return async (impact: Impact) => {
    shown.push(impact);
    return yes;
  };
}

suite('lifecycle', { skip }, () => {
  before(async () => {
    server = await startServer(workspace!, {}, {});
  });

  after(async () => {
    await server?.close();
  });

  test('rewind shows what it discards and restores; declining changes nothing, confirming rewinds; redo returns', async () => {
    const sessionId = await threeTurns('Rewound');
    const shown: Impact[] = [];

    const declined = await rewind(server.connection, { sessionId, turn: 1, boundary: 'after' }, answering(false, shown));
    assert.equal(declined.committed, false);
    const impact = shown[0];
    assert.equal(impact.summary, `Rewind ${sessionId} to after the response of turn 1: 1 turn kept.`);
    assert.equal(impact.action, 'Rewind');
    assert.deepEqual(impact.details.slice(0, 3), ['Discards 2 prompts:', '  turn 2: Rewound step 2', '  turn 3: Rewound step 3']);
    assert.ok(impact.details.some((line) => /^ {2}lifecycle\.txt \(post-turn of turn 1: 11 bytes\)$/.test(line)), impact.details.join('\n'));
    // The file is in the Git index with its committed content.
    assert.deepEqual(impact.details.slice(-2), ['Git index will differ from the restored files:', '  lifecycle.txt']);
    assert.equal(await turnCount(sessionId), 3);
    assert.equal(tracked(), 'Rewound v3\n');

    // The before boundary of the first prompt would empty the session.
    await rewind(server.connection, { sessionId, turn: 1, boundary: 'before' }, answering(false, shown));
    assert.equal(shown[1].summary, `Rewind ${sessionId} to before the prompt of turn 1: 0 turns kept.`);
    assert.equal(shown[1].details[0], 'Discards 3 prompts:');
    assert.equal(await turnCount(sessionId), 3);

    // Changed outside the session: the impact says the commit overwrites it.
    fs.writeFileSync(path.join(workspace!, TRACKED), 'edited outside\n');
    const done = await rewind(server.connection, { sessionId, turn: 1, boundary: 'after' }, answering(true, shown));
    const outside = shown[2].details;
    const at = outside.indexOf('Changed outside the session since recorded (the commit overwrites them):');
    assert.ok(at >= 0, outside.join('\n'));
    assert.equal(outside[at + 1], '  lifecycle.txt (recorded by turn 3)');
    assert.ok(done.committed);
    assert.equal(done.result.settledTurns, 1);
    assert.deepEqual(done.result.written, [TRACKED]);
    assert.equal(await turnCount(sessionId), 1);
    assert.equal(tracked(), 'Rewound v1\n');
    assert.doesNotMatch(await transcript(sessionId), /Rewound step 2/);

    // Rewinding to where the session already is changes nothing, and says so.
    await rewind(server.connection, { sessionId, turn: 1, boundary: 'after' }, answering(false, shown));
    assert.deepEqual(shown[3].details, ['Nothing changes.']);

    // Redo offers the replaced three-turn state and brings it back.
    const states = await listRedo(server.connection, { sessionId });
    const three = states.states.find((s) => s.turnCount === 3);
    assert.ok(three, JSON.stringify(states));
    assert.equal(three.lastTurn?.preview, 'Rewound step 3');
    const notNow = await redo(server.connection, { sessionId, publicationId: three.publicationId }, answering(false, shown));
    assert.equal(notNow.committed, false);
    assert.equal(shown[4].summary, `Redo ${sessionId}: return to the state with 3 turns.`);
    assert.deepEqual(shown[4].details.slice(0, 3), ['Brings back 2 turns:', '  turn 2: Rewound step 2', '  turn 3: Rewound step 3']);
    assert.equal(await turnCount(sessionId), 1);
    assert.equal(tracked(), 'Rewound v1\n');
    const redone = await redo(server.connection, { sessionId, publicationId: three.publicationId }, answering(true, shown));
    assert.ok(redone.committed && redone.result.settledTurns === 3);
    assert.equal(await turnCount(sessionId), 3);
    assert.equal(tracked(), 'Rewound v3\n');
    assert.match(await transcript(sessionId), /Rewound step 3/);
  });

  test('a commit whose session moved since the prepare is refused with the server words', async () => {
    const sessionId = await threeTurns('Moved');
    await assert.rejects(
      rewind(server.connection, { sessionId, turn: 1, boundary: 'before' }, async () => {
        await editTurn(sessionId, 'Moved step 4', 'Moved v4\n');
        return true;
      }),
      (error: unknown) => {
        assert.match(describeFailure(error), new RegExp(`^${sessionId}: .*prepare`, 'i'));
        return true;
      },
    );
    assert.equal(await turnCount(sessionId), 4);
    assert.equal(tracked(), 'Moved v4\n');
  });

  test('fork and save as create a new session only when confirmed', async () => {
    const sessionId = await threeTurns('Forked');
    const shown: Impact[] = [];
    const before = await sessionIds();

    assert.equal((await fork(server.connection, { sessionId, turn: 2 }, answering(false, shown))).committed, false);
    assert.equal(shown[0].summary, `Fork ${sessionId} after the response of turn 2 (Forked step 2): a new session with 2 turns.`);
    assert.equal(shown[0].details.at(-1), 'The source session is not changed.');
    assert.deepEqual(await sessionIds(), before);
    const forked = await fork(server.connection, { sessionId, turn: 2 }, answering(true, shown));
    assert.ok(forked.committed);
    const child = forked.result.session;
    assert.notEqual(child.sessionId, sessionId);
    assert.equal(child.settledTurns, 2);
    assert.equal(forked.result.sourceId, sessionId);
    assert.deepEqual(await sessionIds(), [...before, child.sessionId].sort());
    assert.equal(await turnCount(child.sessionId), 2);
    assert.equal(await turnCount(sessionId), 3);

    const named = await saveAs(server.connection, { sessionId, name: ' Saved   from VS Code ' }, answering(false, shown));
    assert.equal(named.committed, false);
    assert.equal(shown[2].summary, `Save ${sessionId} as "Saved from VS Code": a new session with 3 turns.`);
    assert.equal((await sessionIds()).length, before.length + 1);
    const saved = await saveAs(server.connection, { sessionId, name: 'Saved from VS Code' }, answering(true, shown));
    assert.ok(saved.committed);
    const rows = (await listSessions(server.connection)).sessions;
    const copy = rows.find((row) => row.sessionId === saved.result.session.sessionId);
    assert.equal(copy?.displayName, 'Saved from VS Code');
    assert.equal(copy?.turns, 3);
  });

  test('fork variants list the source, then the forks oldest first; the chosen fork opens at the turn', async () => {
    const sessionId = await threeTurns('Variants');
    const shown: Impact[] = [];
    const older = await fork(server.connection, { sessionId, turn: 2 }, answering(true, shown));
    // Creation times are whole seconds; same-second forks order by ID.
    await new Promise((resolve) => setTimeout(resolve, 1100));
    const newer = await fork(server.connection, { sessionId, turn: 2 }, answering(true, shown));
    assert.ok(older.committed && newer.committed);
    const olderId = older.result.session.sessionId;
    const newerId = newer.result.session.sessionId;

    const group = await forkVariants(server.connection, { sessionId: olderId, turn: 2 });
    assert.equal(group.sourceId, sessionId);
    const entries = variantEntries(group);
    assert.deepEqual(
      entries.map((e) => [e.variant.sessionId, e.variant.role, e.variant.isCurrent]),
      [
        [sessionId, 'source', false],
        [olderId, 'conversation', true],
        [newerId, 'conversation', false],
      ],
    );
    assert.equal(entries[0].label, 'source: Variants');
    assert.equal(entries[0].detail, 'Variants step 3');
    assert.ok(entries[1].label.startsWith('$(check) conversation: '), entries[1].label);
    assert.equal(entries[1].description, `${olderId} · current`);

    const opened = await openVariant(server.connection, entries[2].variant);
    assert.equal(opened.session.sessionId, newerId);
    const row = (await listSessions(server.connection)).sessions.find((s) => s.sessionId === newerId);
    assert.equal(row?.current, true);
    const text = await transcript(newerId);
    const line = turnLine(text, await showTurn(server.connection, { sessionId: newerId, turn: 2 }));
    assert.ok(line !== undefined && text.split('\n').slice(line).join('\n').includes('Variants step 2'), text);
  });

  test('worktree fork creates the Git worktree with the turn content only when confirmed', async () => {
    const sessionId = await threeTurns('Branched');
    const shown: Impact[] = [];
    const directory = path.join(workspace!, '.worktrees', 'from-vscode');
    const declined = await worktreeFork(server.connection, { sessionId, turn: 2, name: 'from-vscode' }, answering(false, shown));
    assert.equal(declined.committed, false);
    assert.match(shown[0].details[0], /^Creates the Git worktree \.worktrees\/from-vscode on the new branch \S+ at [0-9a-f]{12} \(HEAD of \.\)$/);
    assert.ok(shown[0].details.includes("Writes the turn's content of: .worktrees/from-vscode/lifecycle.txt"), shown[0].details.join('\n'));
    assert.equal(fs.existsSync(directory), false);

    const made = await worktreeFork(server.connection, { sessionId, turn: 2, name: 'from-vscode' }, answering(true, shown));
    assert.ok(made.committed);
    assert.equal(made.result.worktree.directory, '.worktrees/from-vscode');
    assert.equal(fs.readFileSync(path.join(directory, TRACKED), 'utf8'), 'Branched v2\n');
    assert.equal(tracked(), 'Branched v3\n');
    assert.equal(await turnCount(made.result.session.sessionId), 2);
  });

  test('a session in recovery refuses lifecycle changes until the recovery is retried or abandoned', async () => {
    const opened = await openSession(server.connection, { sessionId: retrySession, mode: 'resume' });
    assert.match(opened.session.recoveryPending ?? '', /^[0-9a-f]{32}$/);
    const shown: Impact[] = [];
    await assert.rejects(
      rewind(server.connection, { sessionId: retrySession, turn: 1, boundary: 'after' }, answering(true, shown)),
      (error: unknown) => {
        assert.ok(isRecoveryPending(error), describeFailure(error));
        assert.match(describeFailure(error), new RegExp(`^${retrySession}: .*retry or abandon`));
        return true;
      },
    );
    assert.equal(shown.length, 0);
    const retried = await retryRecovery(server.connection, { sessionId: retrySession });
    assert.equal(retried.recoveryId, opened.session.recoveryPending);
    // The crash came before the commit point, so the files go back.
    assert.equal(retried.resolution, 'rolled-back');
    const told = recoveryNotice(retried);
    assert.match(told.text, /content from before the interrupted transaction/);
    assert.equal(told.severity, 'information');
    assert.equal(fs.readFileSync(path.join(workspace!, retryFile), 'utf8'), 'Crashed retry v2\n');
    const now = await rewind(server.connection, { sessionId: retrySession, turn: 1, boundary: 'after' }, answering(true, shown));
    assert.ok(now.committed && now.result.settledTurns === 1);

    await openSession(server.connection, { sessionId: abandonSession, mode: 'resume' });
    const abandoned = await abandonRecovery(server.connection, { sessionId: abandonSession });
    assert.equal(abandoned.resolution, 'abandoned');
    await assert.rejects(retryRecovery(server.connection, { sessionId: abandonSession }), (error: unknown) => {
      assert.match(describeFailure(error), new RegExp(`^${abandonSession}: `));
      return true;
    });
    assert.equal((await fork(server.connection, { sessionId: abandonSession, turn: 1 }, answering(true, shown))).committed, true);
  });

  test('a retried recovery leaves a file edited outside the session as it is and names it', async () => {
    const edited = fs.readFileSync(path.join(workspace!, editedFile), 'utf8');
    await openSession(server.connection, { sessionId: editedSession, mode: 'resume' });
    const retried = await retryRecovery(server.connection, { sessionId: editedSession });
    assert.equal(retried.resolution, 'rolled-back');
    // A warning, in the words of the CLI and every client.
    const told = recoveryNotice(retried);
    assert.ok(
      told.text.endsWith(`; left as it is, changed outside the session since the transaction was interrupted: ${editedFile}`),
      told.text,
    );
    assert.equal(told.severity, 'warning');
    assert.equal(fs.readFileSync(path.join(workspace!, editedFile), 'utf8'), edited);
  });
});
