import * as vscode from 'vscode';
import { describeFailure, VIRTUAL_SCHEME } from './protocol';

// Serves `mevedel-resource:` documents (directory listings, discovery views,
// anything that is not a real file) by reading them through the server. VS
// Code shows provider documents read-only, which is what they are.
export class VirtualDocumentProvider implements vscode.TextDocumentContentProvider {
  private readonly changed = new vscode.EventEmitter<vscode.Uri>();
  readonly onDidChange = this.changed.event;

  // `read` returns the whole plain text of a virtual URI (the extension
  // reads it through the server, showing the server's progress).
  constructor(private readonly read: (uri: string) => Promise<string>) {}

  async provideTextDocumentContent(uri: vscode.Uri): Promise<string> {
    try {
      return await this.read(uri.toString());
    } catch (error) {
      // VS Code reports a rejected open to the user; give it the server's
      // wording, which names the address, instead of a JSON-RPC dump.
      throw new Error(describeFailure(error));
    }
  }

  // Re-reads every open virtual document (session updates will call this
  // when what they show changes).
  refreshAll(): void {
    for (const document of vscode.workspace.textDocuments) {
      if (document.uri.scheme === VIRTUAL_SCHEME) this.changed.fire(document.uri);
    }
  }

  dispose(): void {
    this.changed.dispose();
  }
}
