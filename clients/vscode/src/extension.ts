import * as vscode from 'vscode';
import {
  DidChangeConfigurationNotification,
  LanguageClient,
  LanguageClientOptions,
  ServerOptions,
  TransportKind,
  WorkDoneProgress,
} from 'vscode-languageclient/node';
import { registerCommands } from './commands';
import { ControlDidChangeParams, ControlMethods } from './control';
import { FollowMethods, SessionDidPublishParams } from './follow';
import {
  CONFIGURATION_SECTION,
  Notifications,
  readDocument,
  RequestSender,
  ResourceRef,
  SessionDidChangeParams,
  VIRTUAL_SCHEME,
} from './protocol';
import { serverCommand, serverSettings } from './settings';
import { VirtualDocumentProvider } from './virtualDocuments';

let client: LanguageClient | undefined;
let starting: Promise<void> | undefined;

function configuration(scope?: vscode.ConfigurationScope): (key: string) => unknown {
  const section = vscode.workspace.getConfiguration(CONFIGURATION_SECTION, scope);
  return (key) => section.get(key);
}

function createClient(output: vscode.OutputChannel, documents: VirtualDocumentProvider): LanguageClient {
  const { command, args } = serverCommand(configuration());
  const serverOptions: ServerOptions = { command, args, transport: TransportKind.stdio };
  const clientOptions: LanguageClientOptions = {
    documentSelector: [
      { scheme: 'file', language: 'markdown' },
      { scheme: 'file', language: 'plaintext' },
      { scheme: 'untitled', language: 'markdown' },
      { scheme: 'untitled', language: 'plaintext' },
      { scheme: VIRTUAL_SCHEME },
    ],
    initializationOptions: serverSettings(configuration()),
    outputChannel: output,
    middleware: {
      workspace: {
        // The `mevedel` section also holds the client-only `server.*` keys,
        // which the server would refuse; answer with the server's view.
        configuration: async (params, token, next) => {
          const answers = await next(params, token);
          if (!Array.isArray(answers)) return answers;
          return params.items.map((item, i) =>
            item.section === CONFIGURATION_SECTION
              ? serverSettings(configuration(item.scopeUri ? vscode.Uri.parse(item.scopeUri) : undefined))
              : answers[i],
          );
        },
      },
    },
  };
  const created = new LanguageClient('mevedel', 'mevedel', serverOptions, clientOptions);
  created.onNotification(Notifications.sessionDidChange, (change: SessionDidChangeParams) => {
    documents.sessionChanged(change);
    if (change.reason === 'read-only') {
      void vscode.window.showWarningMessage(
        `mevedel: session ${change.sessionId} is now read-only here (another client took it over)`,
      );
    } else if (change.reason === 'closed') {
      vscode.window.setStatusBarMessage(`mevedel: session ${change.sessionId} was closed; its views are no longer updated`, 10_000);
    }
  });
  // The server also shows each step a person should see (window/showMessage);
  // the status bar keeps the latest for a while.
  created.onNotification(FollowMethods.didPublish, (published: SessionDidPublishParams) => {
    documents.sessionPublished(published);
    if (published.heldBack) {
      void vscode.window.showWarningMessage(
        `mevedel: ${published.sessionId}: the owner published a newer state, not adopted here: ${published.heldBack}`,
      );
    }
  });
  created.onNotification(ControlMethods.didChange, (change: ControlDidChangeParams) => {
    showControlStep(change);
  });
  return created;
}

function showControlStep(change: ControlDidChangeParams): void {
  vscode.window.setStatusBarMessage(`mevedel: ${change.message}`, 15_000);
}

async function ready(): Promise<LanguageClient> {
  if (!client) throw new Error('the mevedel server is not running');
  await starting;
  return client;
}

let progressTokens = 0;

// Reads a whole resource, showing the server's `$/progress` for it in the
// status bar.
async function readWithProgress(ref: ResourceRef): Promise<string> {
  const running = await ready();
  const token = `mevedel-read-${++progressTokens}`;
  return vscode.window.withProgress({ location: vscode.ProgressLocation.Window, title: 'mevedel' }, async (progress) => {
    const listening = running.onProgress(WorkDoneProgress.type, token, (value) => {
      if (value.kind === 'begin') progress.report({ message: value.title });
      else if (value.message) progress.report({ message: value.message });
    });
    try {
      return (await readDocument(running, ref, {}, token)).text;
    } finally {
      listening.dispose();
    }
  });
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const output = vscode.window.createOutputChannel('mevedel');
  const documents = new VirtualDocumentProvider((uri) => readWithProgress({ uri }));
  client = createClient(output, documents);

  const restart = async (): Promise<void> => {
    const old = client;
    client = createClient(output, documents);
    starting = (async () => {
      await old?.stop();
      await client!.start();
    })();
    await starting;
    documents.refreshAll();
  };

  context.subscriptions.push(
    output,
    documents,
    vscode.workspace.registerTextDocumentContentProvider(VIRTUAL_SCHEME, documents),
    ...registerCommands({
      sender: (): Promise<RequestSender> => ready(),
      restart,
      showOutput: () => output.show(true),
      refresh: (uri) => documents.refresh(uri),
      workspaceFolder: () => {
        const active = vscode.window.activeTextEditor?.document.uri;
        const folder = active ? vscode.workspace.getWorkspaceFolder(active) : vscode.workspace.workspaceFolders?.[0];
        return folder?.uri.toString();
      },
    }),
    vscode.workspace.onDidChangeConfiguration(async (event) => {
      if (!client || !event.affectsConfiguration(CONFIGURATION_SECTION)) return;
      if (event.affectsConfiguration(`${CONFIGURATION_SECTION}.server`)) {
        // A different command or arguments means a different process.
        await restart();
        return;
      }
      await starting;
      await client.sendNotification(DidChangeConfigurationNotification.type, {
        settings: { [CONFIGURATION_SECTION]: serverSettings(configuration()) },
      });
    }),
    { dispose: () => void client?.stop() },
  );

  starting = client.start();
  try {
    await starting;
  } catch (error) {
    const { command } = serverCommand(configuration());
    void vscode.window.showErrorMessage(
      `mevedel: could not start the server \`${command}\` (setting mevedel.server.command): ${String(error)}`,
    );
  }
}

export async function deactivate(): Promise<void> {
  await client?.stop();
  client = undefined;
}
