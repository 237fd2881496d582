// The artifacts view and item editors as the extension runs them
// (src/artifacts.ts; artifactsView.ts only hands VS Code what it returns)
// against the real mevedel-lsp: the list by title with the session's items
// marked, an item opened, edited and saved through mevedel/artifact/write,
// a save over a change the editor never saw refused and reloaded, versions
// and restore, attach, detach, duplicate, comment and delete, and an item
// a second server process on the same workspace holds, which opens
// read-only and offers asking for it. The workspace comes from
// tests/clients/test_vscode.py; without it the suite is skipped, which that
// test refuses.
import assert from 'node:assert/strict';
import { after, before, describe as suite, test as nodeTest } from 'node:test';
import {
  ArtifactDidChangeParams,
  ArtifactFiles,
  ArtifactMethods,
  ArtifactRef,
  artifactRef,
  artifactRows,
  artifactUriParts,
  artifactVersions,
  ASK_FOR_IT,
  AskedItems,
  attachArtifact,
  changedRefs,
  commentOnArtifact,
  createArtifact,
  deleteArtifact,
  detachArtifact,
  duplicateArtifact,
  errorKind,
  itemActions,
  listArtifacts,
  needsReload,
  readArtifact,
  readOnlyNotice,
  requestHandover,
  restoreArtifact,
  saveArtifactVersion,
  versionRows,
  writeArtifact,
} from '../src/artifacts';
import { createSession, describeFailure } from '../src/protocol';
import { ServerSession, startServer } from './session';

const workspace = process.env.MEVEDEL_TEST_ARTIFACT_WORKSPACE;
const skip = workspace ? false : 'needs MEVEDEL_TEST_ARTIFACT_WORKSPACE (tests/clients/test_vscode.py sets it)';
const test = (name: string, body: () => Promise<void> | void) => nodeTest(name, { timeout: 60_000, skip }, body);

let server: ServerSession;
let files: ArtifactFiles;

const text = (bytes: Uint8Array) => Buffer.from(bytes).toString('utf8');

// What the editor of a listed item opens: the ref its URI carries, as VS
// Code's Uri hands its decoded path and query back.
function opened(id: string, item: { title: string; kind: 'document' | 'whiteboard' | 'artifact'; primary: string }): ArtifactRef {
  const parts = artifactUriParts({ id }, item);
  const ref = artifactRef(parts.path, parts.query);
  assert.ok(ref, `${parts.path} names no item`);
  return ref;
}

async function row(id: string) {
  return artifactRows(await listArtifacts(server.connection)).find((r) => r.entry.id === id);
}

function didChange(match: (change: ArtifactDidChangeParams) => boolean): Promise<ArtifactDidChangeParams> {
  return server
    .notification((n) => n.method === ArtifactMethods.didChange && match(n.params))
    .then((n) => n.params as ArtifactDidChangeParams);
}

function refusedWith(kind: string, pattern: RegExp) {
  return (error: unknown) => {
    assert.equal(errorKind(error), kind, describeFailure(error));
    const shown = describeFailure(error);
    assert.match(shown, pattern);
    assert.doesNotMatch(shown, /Traceback|\bat .*\.js:\d+/);
    return true;
  };
}

suite('artifacts', { skip }, () => {
  before(async () => {
    server = await startServer(workspace!, {}, {});
    files = new ArtifactFiles(async () => server.connection);
  });

  after(async () => {
    await server?.close();
  });

  test('a new document is listed by title and marked attached to the session that created it', async () => {
    const { sessionId } = await createSession(server.connection, { name: 'Artifacts from VS Code' });
    const plan = await createArtifact(server.connection, { kind: 'document', title: 'Release plan', content: '# Release plan\n' });
    const other = await createArtifact(server.connection, { kind: 'document', title: 'Release plan' });
    const board = await createArtifact(server.connection, { kind: 'whiteboard', title: 'Architecture sketch' });
    assert.notEqual(plan.id, other.id);

    const rows = artifactRows(await listArtifacts(server.connection));
    const titles = rows.map((r) => r.label);
    assert.deepEqual(titles, [...titles].sort((a, b) => a.localeCompare(b)));
    const planRow = rows.find((r) => r.entry.id === plan.id)!;
    assert.equal(planRow.label, 'Release plan');
    assert.equal(planRow.description, 'document · attached');
    assert.equal(planRow.contextValue, 'artifact.attached');
    assert.match(planRow.detail, new RegExp(`^1 version · document\\.md · ${plan.id}$`));
    // Two items with one title are two rows.
    assert.equal(rows.filter((r) => r.label === 'Release plan').length, 2);
    assert.equal((await row(board.id))!.description, 'whiteboard · attached');

    // Detached, the mark goes; attached again, it comes back.
    const detached = await detachArtifact(server.connection, { id: plan.id });
    assert.deepEqual([detached.sessionId, detached.attached], [sessionId, false]);
    assert.equal((await row(plan.id))!.description, 'document');
    assert.equal((await row(plan.id))!.contextValue, 'artifact.detached');
    assert.equal((await attachArtifact(server.connection, { id: plan.id })).attached, true);
    assert.equal((await row(plan.id))!.description, 'document · attached');
  });

  test('an opened document is edited and saved through mevedel/artifact/write; the server reads the new content', async () => {
    const entry = await createArtifact(server.connection, { kind: 'document', title: 'Meeting notes', content: '# Notes\n' });
    const ref = opened(entry.id, entry);
    assert.equal(artifactUriParts({ id: entry.id }, entry).path, `/${entry.id}/Meeting notes.md`);

    const loaded = await files.load(ref);
    assert.equal(text(loaded.bytes), '# Notes\n');
    assert.equal(loaded.item.writable, true);
    assert.equal(readOnlyNotice(loaded.item), undefined);
    assert.deepEqual(itemActions(loaded.item), []);
    const before = await files.stat(ref);
    assert.equal(before.writable, true);

    const written = didChange((c) => c.id === entry.id && c.reason === 'written');
    const saved = await files.save(ref, Buffer.from('# Notes\n\n- ship it\n'));
    assert.notEqual(saved.revision, loaded.item.revision);
    const read = await readArtifact(server.connection, { id: entry.id });
    assert.equal(read.content, '# Notes\n\n- ship it\n');
    assert.equal(read.revision, saved.revision);

    // The editor of that item reads it again; another item's does not.
    const change = await written;
    const other = { id: 'someOtherItem' };
    assert.deepEqual(changedRefs([ref, other], change), [ref]);
    const after = await files.stat(ref);
    assert.ok(after.mtime > before.mtime, 'a new revision is a newer file');
    assert.equal((await files.stat(ref)).mtime, after.mtime, 'the same revision is the same file');

    // A second save goes on from the revision the first one made.
    await files.save(ref, Buffer.from('# Notes\n\n- ship it\n- tell everyone\n'));
    assert.equal((await readArtifact(server.connection, { id: entry.id })).content, '# Notes\n\n- ship it\n- tell everyone\n');
  });

  test('a save over a change the editor never saw is refused with the server words, and reloading shows that change', async () => {
    const entry = await createArtifact(server.connection, { kind: 'document', title: 'Shared draft', content: 'first\n' });
    const ref = opened(entry.id, entry);
    await files.load(ref);
    const elsewhere = await writeArtifact(server.connection, { id: entry.id, content: 'changed elsewhere\n' });

    let refusal: unknown;
    await assert.rejects(files.save(ref, Buffer.from('my edit\n')), (error: unknown) => {
      refusal = error;
      return refusedWith('conflict', new RegExp(entry.id))(error);
    });
    assert.equal(needsReload(refusal), true);
    assert.equal((await readArtifact(server.connection, { id: entry.id })).content, 'changed elsewhere\n');

    const reloaded = await files.load(ref);
    assert.equal(text(reloaded.bytes), 'changed elsewhere\n');
    assert.equal(files.baseRevision(ref), elsewhere.revision);
    await files.save(ref, Buffer.from('changed elsewhere\nand mine\n'));
    assert.equal((await readArtifact(server.connection, { id: entry.id })).content, 'changed elsewhere\nand mine\n');
  });

  test('a whiteboard opens as its JSON text, an HTML artifact as HTML, an image as its bytes', async () => {
    const board = await createArtifact(server.connection, { kind: 'whiteboard', title: 'Flow' });
    const boardRef = opened(board.id, board);
    assert.match(artifactUriParts({ id: board.id }, board).path, /\/Flow\.excalidraw\.json$/);
    const scene = JSON.parse(text((await files.load(boardRef)).bytes));
    assert.equal(typeof scene, 'object');
    const edited = JSON.stringify({ ...scene, elements: [] }, null, 2) + '\n';
    await files.save(boardRef, Buffer.from(edited));
    assert.equal((await readArtifact(server.connection, { id: board.id })).content, edited);

    const page = await createArtifact(server.connection, {
      kind: 'artifact',
      title: 'Status page',
      fileName: 'status.html',
      content: '<h1>ok</h1>\n',
    });
    assert.match(artifactUriParts({ id: page.id }, page).path, /\/Status page\.html$/);
    const pageRef = opened(page.id, page);
    assert.equal(text((await files.load(pageRef)).bytes), '<h1>ok</h1>\n');
    await files.save(pageRef, Buffer.from('<h1>still ok</h1>\n'));
    assert.equal((await readArtifact(server.connection, { id: page.id })).content, '<h1>still ok</h1>\n');

    const pixel = Buffer.from('89504e470d0a1a0a0000000d4948445200000001000000010806000000', 'hex');
    const image = await createArtifact(server.connection, {
      kind: 'artifact',
      title: 'Pixel',
      fileName: 'pixel.png',
      content: pixel.toString('base64'),
      encoding: 'base64',
    });
    assert.match(artifactUriParts({ id: image.id }, image).path, /\/Pixel\.png$/);
    assert.deepEqual(Buffer.from((await files.load(opened(image.id, image))).bytes), pixel);
  });

  test('versions are listed newest first; restoring one brings its content back', async () => {
    const entry = await createArtifact(server.connection, { kind: 'document', title: 'Versioned', content: 'one\n' });
    const ref = opened(entry.id, entry);
    await files.load(ref);
    await files.save(ref, Buffer.from('two\n'));
    const saved = await saveArtifactVersion(server.connection, { id: entry.id });
    assert.equal(saved.reason, 'saved');

    const rows = versionRows(await artifactVersions(server.connection, { id: entry.id }));
    assert.deepEqual(
      rows.map((r) => r.label),
      rows.map((r) => `Version ${r.version.number}`),
    );
    assert.ok(rows.length >= 2, JSON.stringify(rows));
    assert.equal(rows[0].version.number, saved.number);
    assert.match(rows[0].description, /^saved · 4 bytes$/);
    const created = rows.find((r) => r.version.reason === 'created')!;
    assert.match(created.description, /^created · 4 bytes$/);

    const restored = didChange((c) => c.id === entry.id && c.reason === 'restored');
    await restoreArtifact(server.connection, { id: entry.id, version: created.version.number });
    assert.deepEqual(changedRefs([ref], await restored), [ref]);
    // The open editor reads it again and shows the restored content.
    assert.equal(text((await files.load(ref)).bytes), 'one\n');
    const after = versionRows(await artifactVersions(server.connection, { id: entry.id }));
    assert.match(after[0].description, /^restored/);
  });

  test('item URIs: one path component named by the title, the folder carried, didChange matched by id and folder', () => {
    const doc = { kind: 'document' as const, primary: 'document.md' };
    assert.equal(artifactUriParts({ id: 'a1' }, { ...doc, title: 'Q3/Q4 plan' }).path, '/a1/Q3-Q4 plan.md');
    assert.equal(artifactUriParts({ id: 'a1' }, { ...doc, title: 'notes.md' }).path, '/a1/notes.md');
    assert.equal(artifactUriParts({ id: 'a1' }, { ...doc, title: '..' }).path, '/a1/document.md');
    const folder = 'file:///work/project';
    const parts = artifactUriParts({ id: 'a1', workspaceFolder: folder }, { ...doc, title: 'Plan' });
    assert.deepEqual(artifactRef(parts.path, parts.query), { id: 'a1', workspaceFolder: folder });
    assert.equal(artifactRef('/a1', ''), undefined);
    assert.equal(artifactRef('/../x/Plan.md', ''), undefined);
    const change: ArtifactDidChangeParams = { workspaceFolder: folder, id: 'a1', reason: 'written' };
    const here = { id: 'a1', workspaceFolder: `${folder}/` };
    const elsewhere = { id: 'a1', workspaceFolder: 'file:///work/other' };
    assert.deepEqual(changedRefs([here, elsewhere, { id: 'a1' }, { id: 'b2' }], change), [here, { id: 'a1' }]);
  });

  test('an item asked for is said to be handed over once, when the news that it is free comes, before or after the answer', () => {
    const folder = 'file:///work/project';
    const ref = { id: 'a1', workspaceFolder: folder };
    const about = { id: 'a1', workspaceFolder: `${folder}/` };
    const asked = new AskedItems();

    // The answer first (held), then the news: told once, by the news.
    asked.asking(ref, 'Plan');
    assert.equal(asked.answered(ref, true), 'asked');
    assert.equal(asked.free({ id: 'b2', workspaceFolder: folder }), undefined);
    assert.equal(asked.free(about), 'Plan');
    assert.equal(asked.free(about), undefined);

    // The news first (an idle holder hands over at once): told by the
    // news, the answer adds nothing.
    asked.asking(ref, 'Plan');
    assert.equal(asked.free(about), 'Plan');
    assert.equal(asked.free(about), undefined);
    assert.equal(asked.answered(ref, true), 'told');
    assert.equal(asked.free(about), undefined);

    // Not held: nothing is awaited; deleted or failed: forgotten.
    asked.asking(ref, 'Plan');
    assert.equal(asked.answered(ref, false), 'not-held');
    assert.equal(asked.free(about), undefined);
    asked.asking(ref, 'Plan');
    assert.equal(asked.answered(ref, true), 'asked');
    asked.forget(about);
    assert.equal(asked.free(about), undefined);
    asked.asking(ref, 'Plan');
    asked.drop(ref);
    assert.equal(asked.answered(ref, true), 'asked');
    assert.equal(asked.free(about), undefined);
  });

  test('duplicate, comment and delete', async () => {
    const entry = await createArtifact(server.connection, { kind: 'document', title: 'Original', content: 'text\n' });
    const copy = await duplicateArtifact(server.connection, { id: entry.id, title: 'Copy of original' });
    assert.notEqual(copy.id, entry.id);
    assert.equal((await row(copy.id))!.label, 'Copy of original');
    assert.equal((await readArtifact(server.connection, { id: copy.id })).content, 'text\n');

    const comment = await commentOnArtifact(server.connection, { id: entry.id, text: 'Please shorten the intro' });
    assert.equal(comment.number, 1);
    assert.equal(comment.author, 'user');
    const read = await readArtifact(server.connection, { id: entry.id });
    assert.deepEqual(read.comments?.map((c) => c.text), ['Please shorten the intro']);
    await assert.rejects(commentOnArtifact(server.connection, { id: entry.id, text: '   ' }), refusedWith('invalid-params', /text/));

    const deleted = didChange((c) => c.id === entry.id && c.reason === 'deleted');
    assert.equal((await deleteArtifact(server.connection, { id: entry.id })).id, entry.id);
    await deleted;
    assert.equal(await row(entry.id), undefined);
    assert.ok(await row(copy.id), 'the copy is independent');
    // An editor still showing it reads it again and is told it is gone.
    await assert.rejects(files.load(opened(entry.id, entry)), refusedWith('missing-target', new RegExp(entry.id)));
  });

  test('an item another server process holds opens read-only, names its host, and offers asking for it, which makes it writable', async () => {
    const entry = await createArtifact(server.connection, { kind: 'document', title: 'Contested', content: 'v1\n' });
    const ref = opened(entry.id, entry);
    await files.load(ref);

    // A second server on the same workspace writes it first: its lease
    // (renewed every second, so it hands the item over soon after it has
    // been idle for 10 seconds).
    const quick = { leaseSeconds: 3 };
    const other = await startServer(workspace!, quick, quick);
    try {
      await writeArtifact(other.connection, { id: entry.id, content: 'v2 from the other process\n' });

      const stat = await files.stat(ref);
      assert.equal(stat.writable, false);
      const holder = stat.item.holderHost;
      assert.ok(holder, JSON.stringify(stat.item));
      const loaded = await files.load(ref);
      assert.equal(text(loaded.bytes), 'v2 from the other process\n');
      const notice = readOnlyNotice(loaded.item)!;
      assert.match(notice, new RegExp(`^"Contested" is read-only here: another mevedel server on ${holder} holds it`));
      assert.deepEqual(itemActions(loaded.item), [ASK_FOR_IT]);
      const listed = (await row(entry.id))!;
      assert.match(listed.description, new RegExp(`held by ${holder}$`));
      assert.match(listed.contextValue, /\.held$/);

      await assert.rejects(files.save(ref, Buffer.from('mine\n')), (error: unknown) => {
        assert.equal(needsReload(error), true);
        return refusedWith('item-held', new RegExp(entry.id))(error);
      });
      assert.equal((await readArtifact(other.connection, { id: entry.id })).content, 'v2 from the other process\n');

      // Asking for it: the holder hands it over once idle, and this server
      // (it watches the item its editor read) says so; nothing is polled.
      // The editor, reading it again, finds it writable and saves.
      const handedOver = didChange((c) => c.id === entry.id && c.reason === 'elsewhere' && c.writable === true);
      const asking = new AskedItems();
      asking.asking(ref, 'Contested');
      const asked = await requestHandover(server.connection, { id: entry.id });
      assert.equal(asked.id, entry.id);
      assert.equal(asked.holderHost, holder);
      assert.equal(asking.answered(ref, Boolean(asked.holderHost)), 'asked');
      const told = await handedOver;
      assert.deepEqual(changedRefs([ref], told), [ref]);
      assert.equal(told.holderHost, undefined);
      assert.equal(asking.free(told), 'Contested');
      const now = await files.stat(ref);
      assert.equal(now.writable, true);
      assert.equal(readOnlyNotice(now.item), undefined);
      await files.save(ref, Buffer.from('v3, mine again\n'));
      assert.equal((await readArtifact(other.connection, { id: entry.id })).content, 'v3, mine again\n');
      await assert.rejects(
        writeArtifact(other.connection, { id: entry.id, content: 'late\n' }),
        refusedWith('item-held', new RegExp(entry.id)),
      );
    } finally {
      await other.close();
    }
  });
});
