import * as vscode from 'vscode';
import { describeFailure, listTurns, RequestSender, Scope } from './protocol';
import {
  comparable,
  DIFF_SCHEME,
  noDiffMessage,
  parseRange,
  PathChange,
  restoreFromReview,
  ReviewDocuments,
  ReviewItem,
  reviewItems,
  reviewSummary,
  span,
  turnDiff,
} from './review';
import { STAYS_OPEN } from './staysOpen';

// "mevedel: Review Changes" and the turn actions that review one turn: a
// quick pick of the paths the turns changed, with the server's
// descriptions; a text file opens in VS Code's diff editor (`vscode.diff`)
// over two read-only `mevedel-diff:` documents holding its text before and
// after; any other path (a binary or large file, a mode change, a link, a
// directory, a capture gap) shows its description instead. Each path's
// "Restore this file" button (and "mevedel: Restore Reviewed File" on a
// diff editor of the review) restores it to its state before the review's
// first turn that changed it, after a modal warning that says what the
// restore does; the review then opens again, read anew. Each step stays
// open when the focus moves (staysOpen.ts).

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
    ...STAYS_OPEN,
  });
  if (!chosen) return undefined;
  if (!chosen.typed) return { sessionId: listing.sessionId, ...chosen.range };
  const typed = await vscode.window.showInputBox({
    title: 'mevedel: Review Changes',
    prompt: 'Turns: N, N..M, N.., ..M or all',
    ...STAYS_OPEN,
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

const RESTORE_BUTTON: vscode.QuickInputButton = { iconPath: new vscode.ThemeIcon('discard'), tooltip: 'Restore this file to its state before the review' };

type PathItem = vscode.QuickPickItem & ReviewItem;

// The quick pick of the reviewed paths: the path chosen (to open) or whose
// Restore button was pressed; undefined when dismissed.
function pickPath(items: PathItem[], title: string, placeholder: string): Promise<{ item: PathItem; restore: boolean } | undefined> {
  return new Promise((resolve) => {
    const pick = vscode.window.createQuickPick<PathItem>();
    pick.items = items.map((item) => ({ ...item, buttons: [RESTORE_BUTTON] }));
    pick.title = title;
    pick.placeholder = placeholder;
    pick.matchOnDescription = true;
    pick.matchOnDetail = true;
    pick.ignoreFocusOut = STAYS_OPEN.ignoreFocusOut;
    let answer: { item: PathItem; restore: boolean } | undefined;
    pick.onDidAccept(() => {
      const item = pick.selectedItems[0];
      if (item) answer = { item, restore: false };
      pick.hide();
    });
    pick.onDidTriggerItemButton((event) => {
      answer = { item: event.item, restore: true };
      pick.hide();
    });
    pick.onDidHide(() => {
      pick.dispose();
      resolve(answer);
    });
    pick.show();
  });
}

// Restores FILE of a review of WHERE after the modal warning; true when
// it was restored.
async function restore(sender: RequestSender, where: Scope, file: PathChange): Promise<boolean> {
  const outcome = await restoreFromReview(sender, where, file, async (question) => {
    const answer = await vscode.window.showWarningMessage(question.message, { modal: true, detail: question.detail }, 'Restore');
    return answer === 'Restore';
  });
  void vscode.window.showInformationMessage(`mevedel: ${outcome.message}`);
  return outcome.kind === 'restored';
}

// "mevedel: Restore Reviewed File": the file of the review's diff editor
// (either side) back to its state before the review's first turn that
// changed it.
export async function restoreReviewedFile(context: ReviewContext, uri?: vscode.Uri): Promise<void> {
  try {
    const target = uri ?? vscode.window.activeTextEditor?.document.uri;
    const reviewed = target && target.scheme === DIFF_SCHEME ? documents.reviewed(target.path) : undefined;
    if (!reviewed) {
      void vscode.window.showInformationMessage('mevedel: open a file of a review (mevedel: Review Changes) to restore it');
      return;
    }
    const sender = await context.sender();
    await restore(sender, { workspaceFolder: context.workspaceFolder(), sessionId: reviewed.sessionId }, reviewed.file);
  } catch (error) {
    void vscode.window.showErrorMessage(`mevedel: ${describeFailure(error)}`);
  }
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
    const picked = await pickPath(
      reviewItems(result).map((item) => ({ ...item, iconPath: new vscode.ThemeIcon(comparable(item.file) ? 'diff' : 'info') })),
      `mevedel: Review Changes, ${span(result)} of ${result.sessionId}`,
      reviewSummary(result),
    );
    if (!picked) return;
    const chosen = picked.item;
    if (picked.restore) {
      const reviewed = { ...scope, sessionId: result.sessionId };
      if (await restore(sender, reviewed, chosen.file)) {
        // The review again, read anew; one of the latest turn stays on the
        // turn it showed, not the restore's own turn.
        const again = range.first === undefined ? { first: result.first, last: result.first } : range;
        return reviewChanges(context, reviewed, again);
      }
      return;
    }
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
