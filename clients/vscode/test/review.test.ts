// Reviewing what a turn changed as the extension does it (src/review.ts,
// the Review changes button of src/chatView.ts), against the real mevedel-lsp
// driving the scripted ACP agent (tests/agents/scripted_agent.py): a turn
// writes a file through fs/write_text_file and runs a shell command that
// adds, deletes, renames and chmods; the quick pick's rows name every
// change, a text file's two sides are the documents the diff editor opens,
// and the other paths say why they open none; a path restored from the
// review asks first, and No or Escape changes nothing. The workspace and the agent's
// command come from tests/clients/test_vscode.py; without them the suite is
// skipped, which that test refuses.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, describe as suite, test as nodeTest } from 'node:test';
import { promptParams, promptTurn } from '../src/agents';
import { ChatTurn } from '../src/chat';
import { renderTurn } from '../src/chatView';
import { createSession } from '../src/protocol';
import { comparable, DIFF_SCHEME, parseRange, restoreFromReview, ReviewDocuments, reviewItems, reviewSummary, turnDiff } from '../src/review';
import { serverSettings } from '../src/settings';
import { ServerSession, startServer } from './session';

const workspace = process.env.MEVEDEL_TEST_REVIEW_WORKSPACE;
const agentCommand: string[] = JSON.parse(process.env.MEVEDEL_TEST_AGENT_COMMAND ?? '[]');
const skip = workspace && agentCommand.length ? false : 'needs MEVEDEL_TEST_REVIEW_WORKSPACE and MEVEDEL_TEST_AGENT_COMMAND (tests/clients/test_vscode.py)';
const test = (name: string, body: () => Promise<void> | void) => nodeTest(name, { timeout: 60_000, skip }, body);

const SHELL =
  "set -e; chmod 755 run.sh; mv old.txt renamed.txt; rm gone.txt; mkdir built; " +
  "ln -s app.py link.py; printf 'new\\n' > added.txt; printf '\\000\\001\\002binary' > blob.bin; rmdir emptydir";

let server: ServerSession;
let reviewed: string;

function write(relative: string, text: string, mode = 0o644): void {
  fs.writeFileSync(path.join(workspace!, relative), text);
  fs.chmodSync(path.join(workspace!, relative), mode);
}

// The path of a mevedel-diff: URI, decoded, as VS Code gives the provider.
function uriPath(uri: string): string {
  assert.ok(uri.startsWith(`${DIFF_SCHEME}:/`), uri);
  return decodeURIComponent(new URL(uri).pathname);
}

suite('review', { skip }, () => {
  before(async () => {
    const scripts = fs.mkdtempSync(path.join(os.tmpdir(), 'mevedel-vscode-review-'));
    const script = path.join(scripts, 'review.json');
    fs.writeFileSync(
      script,
      JSON.stringify({
        turns: [
          [
            { write: { path: 'app.py', content: "print('one')\nprint('TWO')\nprint('three')\n" } },
            { terminal: { command: 'sh', args: ['-c', SHELL] } },
            { say: 'changed things' },
          ],
          [{ write: { path: 'added.txt', content: 'new\nand more\n' } }, { say: 'added more' }],
        ],
      }),
    );
    const values: Record<string, unknown> = { agents: { scripted: { command: [...agentCommand, script] } }, defaultAgent: 'scripted' };
    const settings = serverSettings((key) => values[key]);
    server = await startServer(workspace!, settings, settings);
  });

  after(async () => {
    await server?.close();
  });

  test('the review of a turn names every change its fs write and shell command made, and opens the text files side by side', async () => {
    fs.mkdirSync(path.join(workspace!, 'emptydir'));
    write('app.py', "print('one')\nprint('two')\n");
    write('run.sh', '#!/bin/sh\necho run\n');
    write('old.txt', 'the same bytes move\n');
    write('gone.txt', 'bye\n');
    const { sessionId } = await createSession(server.connection, { name: 'review' });
    reviewed = sessionId;
    const result = await promptTurn(server.connection, promptParams({ text: 'Change things' }, { sessionId }, 'scripted'));
    assert.equal(result.outcome, 'completed');

    const diff = await turnDiff(server.connection, { sessionId, first: 1, last: 1, contents: true });
    assert.equal(reviewSummary(diff), `turn 1 of ${sessionId}: 9 paths changed, +3 -2`);
    const rows = Object.fromEntries(reviewItems(diff).map((item) => [item.label, item]));
    assert.deepEqual(
      Object.fromEntries(Object.entries(rows).map(([label, item]) => [label, item.description])),
      {
        'added.txt': 'added (mode 644) · +1 -0',
        'app.py': 'modified · +2 -1',
        'blob.bin': 'added (mode 644)',
        built: 'directory created (mode 755)',
        emptydir: 'directory removed',
        'gone.txt': 'deleted · +0 -1',
        'link.py': 'link created -> app.py',
        'old.txt -> renamed.txt': 'renamed',
        'run.sh': 'mode changed (644 -> 755)',
      },
    );
    // What opens the diff editor and what says why not.
    assert.deepEqual(
      Object.entries(rows)
        .filter(([, item]) => comparable(item.file))
        .map(([label]) => label),
      ['added.txt', 'app.py', 'gone.txt', 'old.txt -> renamed.txt'],
    );
    assert.equal(rows['blob.bin'].detail, 'blob.bin: added (mode 644): a binary file (0 -> 9 bytes)');
    assert.equal(rows['run.sh'].detail, 'run.sh: mode changed (644 -> 755)');

    // app.py's two sides, as the diff editor's documents.
    const documents = new ReviewDocuments();
    const app = documents.add(diff, rows['app.py'].file);
    assert.equal(app.title, 'app.py (turn 1: before ↔ after)');
    assert.equal(documents.text(uriPath(app.before)), "print('one')\nprint('two')\n");
    assert.equal(documents.text(uriPath(app.after)), "print('one')\nprint('TWO')\nprint('three')\n");
    assert.ok(uriPath(app.before).endsWith('/before-turn-1/app.py') && uriPath(app.after).endsWith('/after-turn-1/app.py'));
    // A deleted file is compared with an empty side; a rename, old name with new.
    const gone = documents.add(diff, rows['gone.txt'].file);
    assert.equal(documents.text(uriPath(gone.after)), '');
    const moved = documents.add(diff, rows['old.txt -> renamed.txt'].file);
    assert.ok(uriPath(moved.before).endsWith('/old.txt') && uriPath(moved.after).endsWith('/renamed.txt'));
    assert.equal(documents.text(uriPath(moved.after)), 'the same bytes move\n');
    assert.throws(() => documents.add(diff, rows['blob.bin'].file), /a binary file/);
    // Either side names the reviewed file (the diff editor's Restore action).
    assert.equal(documents.reviewed(uriPath(app.after))?.file.path, 'app.py');
    assert.equal(documents.reviewed(uriPath(app.before))?.sessionId, sessionId);
    // Closed, a side is forgotten; both closed, the file too.
    documents.forget(uriPath(app.before));
    assert.equal(documents.text(uriPath(app.before)), undefined);
    assert.equal(documents.reviewed(uriPath(app.after))?.file.path, 'app.py');
    documents.forget(uriPath(app.after));
    assert.equal(documents.reviewed(uriPath(app.after)), undefined);

    // The second turn; a range says which turns touched each path.
    const second = await promptTurn(server.connection, promptParams({ text: 'Add more' }, { sessionId }, 'scripted'));
    assert.equal(second.outcome, 'completed');
    const latest = await turnDiff(server.connection, { sessionId, contents: true });
    assert.deepEqual(
      reviewItems(latest).map((item) => [item.label, item.description]),
      [['added.txt', 'modified · +1 -0']],
    );
    const range = await turnDiff(server.connection, { sessionId, ...parseRange('1..2'), contents: true });
    const ranged = Object.fromEntries(reviewItems(range).map((item) => [item.label, item.description]));
    assert.equal(ranged['added.txt'], 'added (mode 644) · +2 -0 · turns 1..2');
    assert.equal(ranged['app.py'], 'modified · +2 -1 · turn 1');
    const all = await turnDiff(server.connection, { sessionId, ...parseRange('all') });
    assert.equal(reviewSummary(all), `turns 1..2 of ${sessionId}: 9 paths changed, +4 -2`);
  });

  test('a path restored from a range review: asked first, No and Escape change nothing, Restore brings back its content or mode as a new turn', async () => {
    const sessionId = reviewed;
    const mode = (relative: string) => fs.statSync(path.join(workspace!, relative)).mode & 0o777;
    const read = (relative: string) => fs.readFileSync(path.join(workspace!, relative), 'utf8');
    const diff = await turnDiff(server.connection, { sessionId, ...parseRange('1..'), contents: true });
    const rows = Object.fromEntries(reviewItems(diff).map((item) => [item.label, item.file]));
    const asked: { message: string; detail: string }[] = [];
    const answering = (answer: boolean | undefined) => async (question: { message: string; detail: string }) => {
      asked.push(question);
      return answer;
    };
    const where = { sessionId };
    // Escape: nothing, after the question said what the restore does.
    const escaped = await restoreFromReview(server.connection, where, rows['app.py'], answering(undefined));
    assert.deepEqual(escaped, { kind: 'cancelled', message: 'restore of app.py cancelled; nothing changed' });
    assert.equal(asked[0].message, 'Restore app.py to its state before turn 1?');
    assert.match(asked[0].detail, /^app\.py: modified\n--- a\/app\.py\n\+\+\+ b\/app\.py\n/);
    assert.ok(asked[0].detail.includes("-print('TWO')\n-print('three')\n+print('two')"), asked[0].detail);
    assert.ok(asked[0].detail.endsWith('Rewind to before that turn undoes it.'), asked[0].detail);
    assert.equal(read('app.py'), "print('one')\nprint('TWO')\nprint('three')\n");
    // No: nothing either.
    const declined = await restoreFromReview(server.connection, where, rows['run.sh'], answering(false));
    assert.equal(declined.kind, 'cancelled');
    assert.equal(asked[1].detail.split('\n')[0], 'run.sh: mode changed (755 -> 644)');
    assert.equal(mode('run.sh'), 0o755);
    // Restore: app.py's content is back as turn 3; the other files stay.
    const added = read('added.txt');
    const done = await restoreFromReview(server.connection, where, rows['app.py'], answering(true));
    assert.deepEqual(done, {
      kind: 'restored',
      turn: 3,
      message: 'restored app.py to its state before turn 1 as turn 3 (Rewind to before turn 3 undoes it)',
    });
    assert.equal(read('app.py'), "print('one')\nprint('two')\n");
    assert.equal(read('added.txt'), added);
    assert.equal(mode('run.sh'), 0o755);
    // run.sh: its mode is back, its content the same.
    assert.equal((await restoreFromReview(server.connection, where, rows['run.sh'], answering(true))).kind, 'restored');
    assert.equal(mode('run.sh'), 0o644);
    assert.equal(read('run.sh'), '#!/bin/sh\necho run\n');
    // added.txt was made in turn 1 of the range: before it, it did not exist.
    assert.equal((await restoreFromReview(server.connection, where, rows['added.txt'], answering(true))).kind, 'restored');
    assert.ok(!fs.existsSync(path.join(workspace!, 'added.txt')));
    assert.equal(read('app.py'), "print('one')\nprint('two')\n");
    // Already as wanted: nothing is asked.
    const count = asked.length;
    const again = await restoreFromReview(server.connection, where, rows['app.py'], answering(true));
    assert.deepEqual(again, { kind: 'nothing-to-do', message: 'app.py is already as it was before turn 1; nothing to do' });
    assert.equal(asked.length, count);
    // The review read again no longer lists the restored paths.
    const labels = reviewItems(await turnDiff(server.connection, { sessionId, ...parseRange('1..') })).map((item) => item.label);
    for (const gone of ['app.py', 'run.sh', 'added.txt']) assert.ok(!labels.includes(gone), labels.join(', '));
    assert.ok(labels.includes('old.txt -> renamed.txt'), labels.join(', '));
  });

  test('ranges a person types, and the chat turn button', () => {
    assert.deepEqual(parseRange(''), {});
    assert.deepEqual(parseRange(' 3 '), { first: 3, last: 3 });
    assert.deepEqual(parseRange('2..4'), { first: 2, last: 4 });
    assert.deepEqual(parseRange('2..'), { first: 2, last: undefined });
    assert.deepEqual(parseRange('..4'), { first: 1, last: 4 });
    assert.deepEqual(parseRange('all'), { first: 1 });
    assert.throws(() => parseRange('two'), /"two" is not a turn or a range \(N, N\.\.M, N\.\., \.\.M or all\)/);
    const turn: ChatTurn = { turnId: 't', turn: 2, state: 'completed', prompt: 'p', blocks: [] };
    const html = renderTurn(turn, { actions: true });
    assert.match(html, /<button class="action" data-action="review" data-turn="2" title="What turn 2 changed in the tree[^"]*">Review changes<\/button>/);
  });
});
