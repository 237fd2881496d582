// Starts the real mevedel-lsp over stdio and speaks to it with vscode-jsonrpc,
// the transport vscode-languageclient itself uses.
import { ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { pathToFileURL } from 'node:url';
import {
  createMessageConnection,
  MessageConnection,
  StreamMessageReader,
  StreamMessageWriter,
} from 'vscode-jsonrpc/node';

export interface Notification {
  method: string;
  params: any;
}

export interface Question {
  message: string;
  actions?: Array<{ title: string }>;
}

export class ServerSession {
  readonly notifications: Notification[] = [];
  readonly stderr: string[] = [];
  // The server's window/showMessageRequest questions, and who answers them
  // (the user, in VS Code: the language client shows them as notifications
  // with buttons). No answer is JSON null, as when a notification is closed.
  readonly questions: Question[] = [];
  // May take its time (a user reads the question first).
  answer: (question: Question) => string | undefined | Promise<string | undefined> = () => undefined;
  private waiters: Array<() => void> = [];

  constructor(
    readonly connection: MessageConnection,
    readonly child: ChildProcessWithoutNullStreams,
    readonly root: string,
  ) {}

  uri(relative: string): string {
    return pathToFileURL(path.join(this.root, relative)).href;
  }

  record(method: string, params: any): void {
    this.notifications.push({ method, params });
    for (const wake of this.waiters.splice(0)) wake();
  }

  // Waits until a notification satisfying `match` has arrived (the test's
  // own timeout bounds the wait).
  async notification(match: (n: Notification) => boolean): Promise<Notification> {
    for (;;) {
      const found = this.notifications.find(match);
      if (found) return found;
      await new Promise<void>((wake) => this.waiters.push(wake));
    }
  }

  async open(relative: string, languageId: string, text: string): Promise<string> {
    const uri = this.uri(relative);
    await this.connection.sendNotification('textDocument/didOpen', {
      textDocument: { uri, languageId, version: 1, text },
    });
    return uri;
  }

  async close(): Promise<void> {
    try {
      await this.connection.sendRequest('shutdown');
      await this.connection.sendNotification('exit');
    } finally {
      this.connection.dispose();
      if (this.child.exitCode === null) {
        await new Promise<void>((done) => {
          const timer = setTimeout(() => this.child.kill(), 5000);
          this.child.once('exit', () => {
            clearTimeout(timer);
            done();
          });
        });
      }
    }
  }
}

export function serverCommand(): string[] {
  const configured = process.env.MEVEDEL_LSP_COMMAND;
  return configured ? JSON.parse(configured) : ['mevedel-lsp'];
}

export function makeWorkspace(files: Record<string, string>): string {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'mevedel-vscode-'));
  for (const [relative, text] of Object.entries(files)) {
    const file = path.join(root, relative);
    fs.mkdirSync(path.dirname(file), { recursive: true });
    fs.writeFileSync(file, text);
  }
  return root;
}

export async function startServer(root: string, initializationOptions: unknown, settings: unknown): Promise<ServerSession> {
  const [command, ...args] = serverCommand();
  const child = spawn(command, args, { cwd: root, stdio: ['pipe', 'pipe', 'pipe'] });
  const failedToStart = new Promise<never>((_, reject) => {
    child.once('error', (error) => reject(new Error(`cannot start the server ${JSON.stringify([command, ...args])}: ${error.message}`)));
    // A server that dies before answering initialize says why on stderr.
    child.once('exit', (code, signal) =>
      reject(new Error(`the server exited (${code ?? signal}) before answering initialize:\n${session.stderr.join('')}`)),
    );
  });
  const connection = createMessageConnection(new StreamMessageReader(child.stdout), new StreamMessageWriter(child.stdin));
  const session = new ServerSession(connection, child, root);
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (chunk: string) => session.stderr.push(chunk));
  // Answer what a real client answers; record every notification.
  connection.onRequest('workspace/configuration', (params: { items: Array<{ section?: string }> }) =>
    params.items.map((item) => (item.section === 'mevedel' ? settings : null)),
  );
  connection.onRequest('window/workDoneProgress/create', () => null);
  connection.onRequest('client/registerCapability', () => null);
  connection.onRequest('window/showMessageRequest', async (question: Question) => {
    // Starting a session beside those a suite left open asks once per server
    // whether to start it anyway (both share the project's files): the suites
    // start sessions side by side, so the user accepts.
    if (question.message.includes("share this project's files")) return { title: 'Start anyway' };
    session.questions.push(question);
    const title = await session.answer(question);
    return title === undefined ? null : { title };
  });
  connection.onNotification((method: string, params: any) => session.record(method, params));
  // vscode-jsonrpc routes $/progress to per-token handlers, not the catch-all.
  connection.onUnhandledProgress((params) => session.record('$/progress', params));
  connection.listen();
  const folder = pathToFileURL(root).href;
  const initialized = connection.sendRequest('initialize', {
    processId: process.pid,
    rootUri: folder,
    workspaceFolders: [{ uri: folder, name: path.basename(root) }],
    initializationOptions,
    capabilities: {
      workspace: { configuration: true, workspaceFolders: true },
      window: { workDoneProgress: true },
      textDocument: {
        completion: { completionItem: { snippetSupport: false } },
        hover: { contentFormat: ['markdown', 'plaintext'] },
        definition: { linkSupport: true },
        documentLink: {},
        publishDiagnostics: {},
      },
    },
  });
  await Promise.race([initialized, failedToStart]);
  await connection.sendNotification('initialized', {});
  return session;
}
