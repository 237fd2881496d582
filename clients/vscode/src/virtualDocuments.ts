import * as vscode from 'vscode';
import { describeFailure, SessionDidChangeParams, VIRTUAL_SCHEME } from './protocol';
import { publishedDocuments, SessionDidPublishParams } from './follow';
import { staleDocuments } from './sessions';

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

  // Re-reads every open virtual document (after a server restart).
  refreshAll(): void {
    for (const document of vscode.workspace.textDocuments) {
      if (document.uri.scheme === VIRTUAL_SCHEME) this.changed.fire(document.uri);
    }
  }

  // Re-reads one document; VS Code keeps the cursor and scroll position of
  // its editors where the text did not change.
  refresh(uri: vscode.Uri): void {
    this.changed.fire(uri);
  }

  // Re-reads the open documents a session change made stale.
  sessionChanged(change: SessionDidChangeParams): void {
    const open = vscode.workspace.textDocuments
      .filter((document) => document.uri.scheme === VIRTUAL_SCHEME)
      .map((document) => document.uri);
    const stale = new Set(staleDocuments(open.map((uri) => uri.toString()), change));
    for (const uri of open) {
      if (stale.has(uri.toString())) this.changed.fire(uri);
    }
  }

  // Re-reads the open documents of a followed session that advanced.
  sessionPublished(published: SessionDidPublishParams): void {
    const open = vscode.workspace.textDocuments
      .filter((document) => document.uri.scheme === VIRTUAL_SCHEME)
      .map((document) => document.uri);
    const stale = new Set(publishedDocuments(open.map((uri) => uri.toString()), published));
    for (const uri of open) {
      if (stale.has(uri.toString())) this.changed.fire(uri);
    }
  }

  dispose(): void {
    this.changed.dispose();
  }
}
