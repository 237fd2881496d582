import * as vscode from 'vscode';
import { describeFailure, listTurns, RequestSender, Scope } from './protocol';
import {
  comparable,
  DIFF_SCHEME,
  noDiffMessage,
  parseRange,
  ReviewDocuments,
  reviewItems,
  reviewSummary,
  span,
  turnDiff,
} from './review';

// "mevedel: Review Changes" and the turn actions that review one turn: a
// quick pick of the paths the turns changed, with the server's
// descriptions; a text file opens in VS Code's diff editor (`vscode.diff`)
// over two read-only `mevedel-diff:` documents holding its text before and
// after; any other path (a binary or large file, a mode change, a link, a
// directory, a capture gap) shows its description instead.

export interface ReviewContext {
  sender(): Promise<RequestSender>;
  workspaceFolder(): string | undefined;
}

// The sides of every file reviewed in this window.
const documents = new ReviewDocuments();

class ReviewDocumentProvider implements vscode.TextDocumentContentProvider {
  provideTextDocumentContent(uri: vscode.Uri): string {
    const text = documents.text(uri.path);
    if (text === undefined) throw new Error(`${uri.path}: this review is no longer open; review the turn again`);
    return text;
  }
}

// The provider of `mevedel-diff:` documents, and forgetting a side once
// VS Code closed its document.
export function registerReviewDocuments(): vscode.Disposable[] {
  return [
    vscode.workspace.registerTextDocumentContentProvider(DIFF_SCHEME, new ReviewDocumentProvider()),
    vscode.workspace.onDidCloseTextDocument((document) => {
      if (document.uri.scheme === DIFF_SCHEME) documents.forget(document.uri.path);
    }),
  ];
}

type RangeItem = vscode.QuickPickItem & { range?: { first?: number; last?: number }; typed?: boolean };

// Which turns to review: a turn (newest first), every turn, or a range typed.
async function pickRange(sender: RequestSender, where: Scope): Promise<{ sessionId: string; first?: number; last?: number } | undefined> {
  const listing = await listTurns(sender, where);
  if (listing.turns.length === 0) {
    void vscode.window.showInformationMessage(`mevedel: ${listing.sessionId} has no turns yet`);
    return undefined;
  }
  const latest = listing.turns[listing.turns.length - 1].turn;
  const items: RangeItem[] = [
    ...[...listing.turns].reverse().map((turn) => ({
      label: `Turn ${turn.turn}`,
      description: turn.state,
      detail: turn.prompt,
      range: { first: turn.turn, last: turn.turn },
    })),
    { label: 'All turns', description: `since the session began (1..${latest})`, range: { first: 1 } },
    { label: 'A range…', description: 'N..M, N.., ..M', typed: true },
  ];
  const chosen = await vscode.window.showQuickPick(items, {
    title: `mevedel: Review Changes (${listing.sessionId})`,
    placeHolder: 'What the turn changed in the tree',
    matchOnDetail: true,
  });
  if (!chosen) return undefined;
  if (!chosen.typed) return { sessionId: listing.sessionId, ...chosen.range };
  const typed = await vscode.window.showInputBox({
    title: 'mevedel: Review Changes',
    prompt: 'Turns: N, N..M, N.., ..M or all',
    validateInput: (text) => {
      try {
        parseRange(text);
        return undefined;
      } catch (error) {
        return (error as Error).message;
      }
    },
  });
  return typed === undefined ? undefined : { sessionId: listing.sessionId, ...parseRange(typed) };
}

// Reviews turns FIRST..LAST of the session WHERE names (none given: picked).
export async function reviewChanges(context: ReviewContext, where: Scope, range?: { first?: number; last?: number }): Promise<void> {
  try {
    const sender = await context.sender();
    let scope: Scope = where;
    if (!range) {
      const picked = await pickRange(sender, where);
      if (!picked) return;
      scope = { ...where, sessionId: picked.sessionId };
      range = { first: picked.first, last: picked.last };
    }
    const result = await turnDiff(sender, { ...scope, ...range, contents: true });
    if (result.files.length === 0) {
      void vscode.window.showInformationMessage(`mevedel: ${reviewSummary(result)}`);
      return;
    }
    const chosen = await vscode.window.showQuickPick(
      reviewItems(result).map((item) => ({ ...item, iconPath: new vscode.ThemeIcon(comparable(item.file) ? 'diff' : 'info') })),
      {
        title: `mevedel: Review Changes, ${span(result)} of ${result.sessionId}`,
        placeHolder: reviewSummary(result),
        matchOnDescription: true,
        matchOnDetail: true,
      },
    );
    if (!chosen) return;
    if (!comparable(chosen.file)) {
      void vscode.window.showInformationMessage(`mevedel: ${noDiffMessage(chosen.file)}`);
      return;
    }
    const opened = documents.add(result, chosen.file);
    await vscode.commands.executeCommand('vscode.diff', vscode.Uri.parse(opened.before, true), vscode.Uri.parse(opened.after, true), opened.title, {
      preview: true,
    });
  } catch (error) {
    void vscode.window.showErrorMessage(`mevedel: ${describeFailure(error)}`);
  }
}
