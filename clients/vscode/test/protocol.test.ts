// The extension's protocol layer against the real mevedel-lsp: the same
// module the extension uses, over the transport vscode-languageclient uses.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, before, describe as suite, test as nodeTest } from 'node:test';
import { pathToFileURL } from 'node:url';
import { URI } from 'vscode-uri';
import { describe, describeFailure, isVirtualUri, read, readDocument } from '../src/protocol';
import { serverSettings } from '../src/settings';
import { makeWorkspace, ServerSession, startServer } from './session';

const LONG_LINE = Array.from({ length: 900 }, (_, i) => String(i).padStart(5, '0') + ' ').join('');
const LONG_FILE = Array.from({ length: 2500 }, (_, i) => `line ${i + 1}\n`).join('') + LONG_LINE + '\nlast\n';

const DOCUMENT = [
  'See work://shared/notes.md for the notes.',
  'Odd spelling: work://shared/%6Eotes.md here.',
  'Complete here: work://shared/',
].join('\n');

// A test that waits for a message the server never sends fails, not hangs.
const test = (name: string, body: () => Promise<void> | void) => nodeTest(name, { timeout: 30_000 }, body);

let session: ServerSession;
let root: string;

before(async () => {
  root = fs.realpathSync(
    makeWorkspace({
      '.mevedel/shared/notes.md': '# Shared notes\n\nalpha beta\n',
      '.mevedel/shared/plans/first.md': 'first plan\n',
      '.mevedel/shared/plans/second.md': 'second plan\n',
      '.mevedel/shared/long.txt': LONG_FILE,
    }),
  );
  session = await startServer(root, {}, {});
});

after(async () => {
  await session?.close();
  fs.rmSync(root, { recursive: true, force: true });
});

suite('reading resources', () => {
  test('readDocument pages through a long file and continues cut lines', async () => {
    const document = await readDocument(session.connection, { address: 'work://shared/long.txt' });
    assert.equal(document.canonical, 'work://shared/long.txt');
    assert.equal(document.kind, 'file');
    assert.equal(document.text.length, LONG_FILE.length);
    assert.equal(document.text, LONG_FILE);
  });

  test('describe leads a file-backed address to its backing file', async () => {
    const described = await describe(session.connection, { address: 'work://shared/notes.md' });
    assert.equal(described.status, 'exists');
    assert.equal(described.uri, pathToFileURL(path.join(root, '.mevedel/shared/notes.md')).href);
  });

  test('a directory is a virtual document, readable after VS Code re-encodes its URI', async () => {
    const described = await describe(session.connection, { address: 'work://shared/plans/' });
    assert.ok(described.uri && isVirtualUri(described.uri), `expected a virtual URI, got ${described.uri}`);
    // What VS Code hands a TextDocumentContentProvider is its own URI
    // object's string form, not the server's spelling.
    const asVsCodeSends = URI.parse(described.uri).toString();
    const document = await readDocument(session.connection, { uri: asVsCodeSends });
    assert.equal(document.canonical, 'work://shared/plans');
    assert.match(document.text, /first\.md/);
    assert.match(document.text, /second\.md/);
  });

  test('a failed read reports the authored address and the reason', async () => {
    await assert.rejects(read(session.connection, { address: 'work://shared/missing.md' }), (error: unknown) => {
      const text = describeFailure(error);
      assert.match(text, /^work:\/\/shared\/missing\.md: /);
      assert.doesNotMatch(text, new RegExp(root.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')));
      return true;
    });
  });

  test('a read with a progress token reports $/progress begin and end', async () => {
    const token = 'mevedel-test-progress';
    await readDocument(session.connection, { address: 'work://shared/notes.md' }, {}, token);
    const begin = await session.notification((n) => n.method === '$/progress' && n.params.token === token && n.params.value.kind === 'begin');
    assert.match(begin.params.value.title, /work:\/\/shared\/notes\.md/);
    await session.notification((n) => n.method === '$/progress' && n.params.token === token && n.params.value.kind === 'end');
  });
});

suite('address features in a document', () => {
  let uri: string;
  before(async () => {
    uri = await session.open('doc.md', 'markdown', DOCUMENT);
  });

  test('completion offers the entries of a real directory', async () => {
    const result: any = await session.connection.sendRequest('textDocument/completion', {
      textDocument: { uri },
      position: { line: 2, character: 'Complete here: work://shared/'.length },
    });
    const items: any[] = Array.isArray(result) ? result : result.items;
    const inserted = items.map((item) => item.textEdit?.newText ?? item.insertText ?? item.label);
    assert.ok(inserted.some((text) => text.endsWith('notes.md')), `no notes.md in ${JSON.stringify(inserted)}`);
    assert.ok(inserted.some((text) => /plans\/?$/.test(text)), `no plans in ${JSON.stringify(inserted)}`);
  });

  test('hover shows the canonical form of a non-canonical spelling', async () => {
    const hover: any = await session.connection.sendRequest('textDocument/hover', {
      textDocument: { uri },
      position: { line: 1, character: 'Odd spelling: work://sh'.length },
    });
    const contents = hover.contents;
    const text = typeof contents === 'string' ? contents : contents.value ?? JSON.stringify(contents);
    assert.match(text, /work:\/\/shared\/notes\.md/);
  });

  test('definition of a file-backed address is the backing file', async () => {
    const result: any = await session.connection.sendRequest('textDocument/definition', {
      textDocument: { uri },
      position: { line: 0, character: 'See work://sh'.length },
    });
    const locations: any[] = Array.isArray(result) ? result : [result];
    const targets = locations.map((l) => l.targetUri ?? l.uri);
    assert.deepEqual(targets, [pathToFileURL(path.join(root, '.mevedel/shared/notes.md')).href]);
  });
});

suite('virtual documents as VS Code shows them', () => {
  test('document links lead to the backing file or to a virtual document', async () => {
    const uri = await session.open('links.md', 'markdown', 'Notes work://shared/notes.md and plans work://shared/plans/\n');
    const links: any[] = await session.connection.sendRequest('textDocument/documentLink', { textDocument: { uri } });
    const targets = links.map((link) => link.target as string);
    assert.ok(targets.includes(pathToFileURL(path.join(root, '.mevedel/shared/notes.md')).href), JSON.stringify(targets));
    const virtual = targets.filter(isVirtualUri);
    assert.equal(virtual.length, 1, JSON.stringify(targets));
    const listing = await readDocument(session.connection, { uri: URI.parse(virtual[0]).toString() });
    assert.equal(listing.canonical, 'work://shared/plans');
  });

  test('an open virtual document has hover like any other document', async () => {
    const described = await describe(session.connection, { address: 'work://shared/plans' });
    // The provider's text, opened under the URI VS Code gives the document.
    const uri = URI.parse(described.uri!).toString();
    const listing = await readDocument(session.connection, { uri });
    await session.connection.sendNotification('textDocument/didOpen', {
      textDocument: { uri, languageId: 'plaintext', version: 1, text: listing.text },
    });
    const lines = listing.text.split('\n');
    const line = lines.findIndex((text) => text.includes('first.md'));
    assert.ok(line >= 0, listing.text);
    const hover: any = await session.connection.sendRequest('textDocument/hover', {
      textDocument: { uri },
      position: { line, character: lines[line].indexOf('first.md') },
    });
    assert.match(hover.contents.value ?? String(hover.contents), /work:\/\/shared\/plans\/first\.md/);
  });
});

suite('settings', () => {
  test('every server setting has a VS Code setting, and nothing else is sent', () => {
    const manifest = JSON.parse(fs.readFileSync(path.join(__dirname, '../../package.json'), 'utf8'));
    const schema = JSON.parse(
      fs.readFileSync(path.join(__dirname, '../../../../protocol/schema/mevedel-protocol.schema.json'), 'utf8'),
    );
    const contributed: Record<string, any> = manifest.contributes.configuration.properties;
    const values: Record<string, unknown> = {};
    for (const [key, property] of Object.entries(contributed)) {
      values[key.replace(/^mevedel\./, '')] = property.type === 'integer' ? 7 : property.enum ? property.enum[0] : 'x';
    }
    const sent = serverSettings((key) => values[key]);
    assert.deepEqual(Object.keys(sent).sort(), Object.keys(schema.$defs.Settings.properties).sort());
  });

  test('remote workspaces reach the server: a malformed entry is named, a listed one is a workspace folder', async () => {
    const remote = 'ssh://127.0.0.1:1/srv/project';
    const malformed = serverSettings((key) => ({ remoteWorkspaces: [remote, 'ftp://elsewhere/x'] })[key]);
    const own = await startServer(root, malformed, malformed);
    try {
      const shown = await own.notification((n) => n.method === 'window/showMessage' && /remoteWorkspaces/.test(n.params.message));
      assert.match(shown.params.message, /remoteWorkspaces: \[1\] 'ftp:\/\/elsewhere\/x'/);
      await assert.rejects(own.connection.sendRequest('mevedel/session/list', { workspaceFolder: remote }), (error: unknown) => {
        assert.equal((error as { data: { kind: string } }).data.kind, 'invalid-params');
        return true;
      });
      await own.connection.sendNotification('workspace/didChangeConfiguration', {
        settings: { mevedel: serverSettings((key) => ({ remoteWorkspaces: [remote] })[key]) },
      });
      // Now a workspace folder: the request goes to the host, which refuses.
      await assert.rejects(own.connection.sendRequest('mevedel/session/list', { workspaceFolder: remote }), (error: unknown) => {
        assert.equal((error as { data: { kind: string } }).data.kind, 'unavailable');
        assert.match(describeFailure(error), /127\.0\.0\.1/);
        return true;
      });
    } finally {
      await own.close();
    }
  });

  test('the settings the extension sends are accepted, and a change applies', async () => {
    const settings = serverSettings((key) =>
      ({ completionLimit: 50, 'diagnostics.unknownSchemes': 'all', memoryRoots: [], skillRoots: [] })[key],
    );
    const own = await startServer(root, settings, settings);
    try {
      const uri = await own.open('other.md', 'markdown', 'An odd one: foo://bar\n');
      const flagged = await own.notification(
        (n) => n.method === 'textDocument/publishDiagnostics' && n.params.uri === uri && n.params.diagnostics.length > 0,
      );
      assert.match(flagged.params.diagnostics[0].message, /foo:\/\//);
      await own.connection.sendNotification('workspace/didChangeConfiguration', {
        settings: { mevedel: serverSettings((key) => ({ 'diagnostics.unknownSchemes': 'off' })[key]) },
      });
      await own.notification(
        (n) => n.method === 'textDocument/publishDiagnostics' && n.params.uri === uri && n.params.diagnostics.length === 0,
      );
      const complaints = own.notifications.filter((n) => n.method === 'window/showMessage');
      assert.deepEqual(complaints, []);
    } finally {
      await own.close();
    }
  });
});
