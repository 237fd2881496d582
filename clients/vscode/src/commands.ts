import * as vscode from 'vscode';
import { describe, describeFailure } from './protocol';
import { announceRecovery, lifecycleCommands } from './lifecycleCommands';
import { scope, sessionCommands } from './sessionCommands';
import { agentCommands } from './agentCommands';
import { ChatContext, ChatEvents } from './chatPanel';
import { Artifacts } from './artifactsView';
import { restoreReviewedFile, reviewChanges } from './reviewCommands';
import { STAYS_OPEN } from './staysOpen';

export interface CommandContext extends ChatContext {
  restart(): Promise<void>;
  showOutput(): void;
  events: ChatEvents;
  artifacts: Artifacts;
}

// Every palette command, by id; package.json's `contributes.commands` lists
// the same ids (the packaging test checks both ways).
// (The server's own `mevedel.session.*` commands are registered by the
// language client from executeCommandProvider, so these ids differ.)
export function commandTable(context: CommandContext): Record<string, (...args: any[]) => Promise<void> | void> {
  const lifecycleContext = { ...context, scope: () => scope(context) };
  const sessions = sessionCommands({
    ...context,
    opened: (state, workspaceFolder) => announceRecovery(lifecycleContext, state, workspaceFolder),
  });
  const lifecycle = lifecycleCommands(lifecycleContext);
  const agents = agentCommands(context, context.events);
  const artifacts = context.artifacts.commands();
  return {
    'mevedel.promptAgent': agents.promptAgent,
    'mevedel.openChat': agents.openChat,
    'mevedel.cancelTurn': agents.cancelTurn,
    'mevedel.readAddress': () => readAddress(context),
    'mevedel.restartServer': () => context.restart(),
    'mevedel.showOutput': () => context.showOutput(),
    'mevedel.pickSession': sessions.pickSession,
    'mevedel.newSession': sessions.newSession,
    'mevedel.renameSession': sessions.renameSession,
    'mevedel.saveSession': sessions.saveSession,
    'mevedel.closeSession': sessions.closeSession,
    'mevedel.retryPublication': sessions.retryPublication,
    'mevedel.abandonPublication': sessions.abandonPublication,
    'mevedel.abortTurn': sessions.abortTurn,
    'mevedel.showTranscript': sessions.showTranscript,
    'mevedel.listTurns': sessions.listTurns,
    'mevedel.reviewChanges': () => reviewChanges(context, scope(context)),
    'mevedel.restoreReviewedFile': (uri?: vscode.Uri) => restoreReviewedFile(context, uri),
    'mevedel.rewind': lifecycle.rewind,
    'mevedel.redo': lifecycle.redo,
    'mevedel.fork': lifecycle.fork,
    'mevedel.worktreeFork': lifecycle.worktreeFork,
    'mevedel.forkVariants': lifecycle.forkVariants,
    'mevedel.saveAs': lifecycle.saveAs,
    'mevedel.retryRecovery': lifecycle.retryRecovery,
    'mevedel.abandonRecovery': lifecycle.abandonRecovery,
    'mevedel.takeControl': lifecycle.takeControl,
    'mevedel.releaseControl': lifecycle.releaseControl,
    'mevedel.grantControl': lifecycle.grantControl,
    'mevedel.keepControl': lifecycle.keepControl,
    'mevedel.toggleFollow': lifecycle.toggleFollow,
    'mevedel.refreshSession': lifecycle.refreshSession,
    'mevedel.compactSession': lifecycle.compactSession,
    'mevedel.clearSession': lifecycle.clearSession,
    'mevedel.openArtifact': artifacts.openArtifact,
    'mevedel.newDocument': artifacts.newDocument,
    'mevedel.newWhiteboard': artifacts.newWhiteboard,
    'mevedel.refreshArtifacts': artifacts.refreshArtifacts,
    'mevedel.artifactVersions': artifacts.artifactVersions,
    'mevedel.saveArtifactVersion': artifacts.saveArtifactVersion,
    'mevedel.attachArtifact': artifacts.attachArtifact,
    'mevedel.detachArtifact': artifacts.detachArtifact,
    'mevedel.duplicateArtifact': artifacts.duplicateArtifact,
    'mevedel.deleteArtifact': artifacts.deleteArtifact,
    'mevedel.commentOnArtifact': artifacts.commentOnArtifact,
    'mevedel.requestArtifactHandover': artifacts.requestArtifactHandover,
  };
}

export function registerCommands(context: CommandContext): vscode.Disposable[] {
  return Object.entries(commandTable(context)).map(([id, run]) => vscode.commands.registerCommand(id, run));
}

// Opens what an address names: the backing file of a file-backed address,
// else the server's read-only virtual document for it.
async function readAddress(context: CommandContext): Promise<void> {
  const address = await vscode.window.showInputBox({
    title: 'mevedel: Read Address',
    prompt: 'A resource address to open',
    placeHolder: 'work://shared/notes.md',
    ...STAYS_OPEN,
  });
  if (!address?.trim()) return;
  try {
    const described = await describe(await context.sender(), {
      address: address.trim(),
      workspaceFolder: context.workspaceFolder(),
    });
    if (!described.uri) {
      const why = described.reason ?? `${described.status}, nothing to open`;
      void vscode.window.showWarningMessage(`mevedel: ${described.canonical}: ${why}`);
      return;
    }
    if (described.status === 'missing') {
      void vscode.window.showWarningMessage(`mevedel: ${described.canonical} does not exist`);
      return;
    }
    const document = await vscode.workspace.openTextDocument(vscode.Uri.parse(described.uri, true));
    await vscode.window.showTextDocument(document, { preview: false });
  } catch (error) {
    void vscode.window.showErrorMessage(`mevedel: ${describeFailure(error)}`);
  }
}
