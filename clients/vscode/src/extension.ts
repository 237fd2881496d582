import * as vscode from 'vscode';
import {
  DidChangeConfigurationNotification,
  LanguageClient,
  LanguageClientOptions,
  ServerOptions,
  TransportKind,
  WorkDoneProgress,
} from 'vscode-languageclient/node';
import { TurnIndicator } from './agentCommands';
import { AgentOptions, OptionMethods } from './agentOptions';
import { AgentMethods, TurnDidUpdateParams } from './agents';
import { QueueDidChangeParams, QueueMethods } from './queue';
import { ArtifactDidChangeParams, ArtifactMethods } from './artifacts';
import { Artifacts } from './artifactsView';
import { ChatEvents } from './chatPanel';
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
import { discoverServer, isMissing, missingServerMessage, realProbes, ServerCommand, ServerMissing } from './serverDiscovery';
import { serverSettings } from './settings';
import { VirtualDocumentProvider } from './virtualDocuments';
import { registerReviewDocuments } from './reviewCommands';

let client: LanguageClient | undefined;
let starting: Promise<void> | undefined;
// Why there is no client: the server was not found, or did not start.
let notRunning = 'the mevedel server is not running';

function configuration(scope?: vscode.ConfigurationScope): (key: string) => unknown {
  const section = vscode.workspace.getConfiguration(CONFIGURATION_SECTION, scope);
  return (key) => section.get(key);
}

function createClient(
  { command, args }: ServerCommand,
  output: vscode.OutputChannel,
  documents: VirtualDocumentProvider,
  events: ChatEvents,
  artifacts: Artifacts,
): LanguageClient {
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
  created.onNotification(AgentMethods.didUpdate, (update: TurnDidUpdateParams) => events.updates.fire(update));
  created.onNotification(OptionMethods.didChange, (options: AgentOptions) => events.options.fire(options));
  created.onNotification(QueueMethods.didChange, (queue: QueueDidChangeParams) => events.queues.fire(queue));
  created.onNotification(Notifications.sessionDidChange, (change: SessionDidChangeParams) => {
    documents.sessionChanged(change);
    events.changes.fire(change);
    artifacts.sessionChanged();
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
  created.onNotification(ArtifactMethods.didChange, (change: ArtifactDidChangeParams) => void artifacts.didChange(change));
  created.onNotification(ControlMethods.didChange, (change: ControlDidChangeParams) => {
    showControlStep(change);
  });
  return created;
}

function showControlStep(change: ControlDidChangeParams): void {
  vscode.window.setStatusBarMessage(`mevedel: ${change.message}`, 15_000);
}

async function ready(): Promise<LanguageClient> {
  // A start or restart in progress first; its failure is `notRunning`.
  await starting?.catch(() => undefined);
  if (!client) throw new Error(notRunning);
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

// The interpreter the Python extension has selected for the workspace, when
// that extension is installed.
async function pythonExtensionInterpreter(): Promise<string | undefined> {
  const extension = vscode.extensions.getExtension('ms-python.python');
  if (!extension) return undefined;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const api: any = extension.isActive ? extension.exports : await extension.activate();
  const resource = vscode.workspace.workspaceFolders?.[0]?.uri;
  const environments = api?.environments;
  if (environments?.getActiveEnvironmentPath) {
    const active = environments.getActiveEnvironmentPath(resource);
    const resolved = await environments.resolveEnvironment?.(active);
    const executable: string | undefined = resolved?.executable?.uri?.fsPath ?? active?.path;
    if (executable) return executable;
  }
  const command: unknown = api?.settings?.getExecutionDetails?.(resource)?.execCommand?.[0];
  return typeof command === 'string' ? command : undefined;
}

async function offerInstall(context: vscode.ExtensionContext, missing: ServerMissing): Promise<void> {
  const chosen = await vscode.window.showErrorMessage(missingServerMessage(missing), 'Open Install Guide', 'Open Settings');
  if (chosen === 'Open Install Guide') {
    await vscode.commands.executeCommand('markdown.showPreview', vscode.Uri.joinPath(context.extensionUri, 'README.md'));
  } else if (chosen === 'Open Settings') {
    await vscode.commands.executeCommand('workbench.action.openSettings', `${CONFIGURATION_SECTION}.server.path`);
  }
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const output = vscode.window.createOutputChannel('mevedel');
  const documents = new VirtualDocumentProvider((uri) => readWithProgress({ uri }));
  const events = new ChatEvents();
  const workspaceFolder = (): string | undefined => {
    const active = vscode.window.activeTextEditor?.document.uri;
    const folder = active ? vscode.workspace.getWorkspaceFolder(active) : vscode.workspace.workspaceFolders?.[0];
    return folder?.uri.toString();
  };
  const artifacts = new Artifacts({ sender: (): Promise<RequestSender> => ready(), workspaceFolder });

  // Finds the server and starts a client for it; without one, says how to
  // install it.
  const start = async (): Promise<void> => {
    const found = await discoverServer(configuration(), { ...realProbes, pythonInterpreter: pythonExtensionInterpreter });
    if (isMissing(found)) {
      client = undefined;
      notRunning = missingServerMessage(found);
      output.appendLine(notRunning);
      void offerInstall(context, found);
      return;
    }
    output.appendLine(`mevedel: starting ${[found.command, ...found.args].join(' ')} (found by: ${found.source})`);
    client = createClient(found, output, documents, events, artifacts);
    starting = client.start();
    try {
      await starting;
    } catch (error) {
      client = undefined;
      notRunning = `mevedel: could not start the server \`${found.command}\` (setting mevedel.server.path): ${String(error)}`;
      void vscode.window.showErrorMessage(notRunning, 'Show Server Output').then((chosen) => chosen && output.show(true));
    }
  };

  const restart = async (): Promise<void> => {
    const old = client;
    client = undefined;
    starting = (async () => {
      await old?.stop();
      await start();
    })();
    await starting;
    documents.refreshAll();
    artifacts.serverRestarted();
  };

  context.subscriptions.push(
    output,
    documents,
    events,
    artifacts,
    new TurnIndicator(events),
    vscode.workspace.registerTextDocumentContentProvider(VIRTUAL_SCHEME, documents),
    ...registerReviewDocuments(),
    ...registerCommands({
      sender: (): Promise<RequestSender> => ready(),
      restart,
      showOutput: () => output.show(true),
      refresh: (uri) => documents.refresh(uri),
      workspaceFolder,
      memory: context.workspaceState,
      events,
      artifacts,
    }),
    vscode.workspace.onDidChangeConfiguration(async (event) => {
      if (!event.affectsConfiguration(CONFIGURATION_SECTION)) return;
      if (event.affectsConfiguration(`${CONFIGURATION_SECTION}.server`)) {
        // A different program or arguments means a different process.
        await restart();
        return;
      }
      const running = await ready().catch(() => undefined);
      if (!running) return;
      await running.sendNotification(DidChangeConfigurationNotification.type, {
        settings: { [CONFIGURATION_SECTION]: serverSettings(configuration()) },
      });
    }),
    { dispose: () => void client?.stop() },
  );

  starting = start();
  await starting;
}

export async function deactivate(): Promise<void> {
  await client?.stop();
  client = undefined;
}
