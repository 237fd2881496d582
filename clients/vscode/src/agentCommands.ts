// The agent commands: Prompt Agent…, Open Chat, Cancel Turn; and the
// running-turn indicator (a status bar item, and the `mevedel.turnRunning`
// context key the Cancel Turn key binding and menus use).
import * as vscode from 'vscode';
import { cancelTurn, describePromptFailure, TurnDidUpdateParams } from './agents';
import { Attachment, attachmentFrom, ChatContext, ChatEvents, ChatPanel, showAdvice } from './chatPanel';
import { scope } from './sessionCommands';

// Which sessions have an agent turn starting or running, from the live
// stream; shown in the status bar (a click opens the chat).
export class TurnIndicator implements vscode.Disposable {
  private readonly running = new Map<string, string>();
  private readonly item = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Left, 50);
  private readonly subscription: vscode.Disposable;

  constructor(events: ChatEvents) {
    this.item.command = 'mevedel.openChat';
    this.subscription = events.updates.event((update) => this.updated(update));
  }

  private updated(update: TurnDidUpdateParams): void {
    // A sub-agent's activity is within its root turn: its settled is not the turn's.
    if (update.agentPath) return;
    const key = `${update.workspaceFolder} ${update.sessionId}`;
    if (update.phase === 'settled') this.running.delete(key);
    else this.running.set(key, `${update.agent}: ${update.phase}`);
    const busy = this.running.size > 0;
    void vscode.commands.executeCommand('setContext', 'mevedel.turnRunning', busy);
    if (!busy) {
      this.item.hide();
      return;
    }
    const [what] = [...this.running.values()].slice(-1);
    this.item.text = `$(sync~spin) mevedel ${what}`;
    this.item.tooltip = 'An agent turn is in flight: open the chat (mevedel: Cancel Turn cancels it)';
    this.item.show();
  }

  dispose(): void {
    this.subscription.dispose();
    this.item.dispose();
  }
}

async function reporting(context: ChatContext, body: () => Promise<void>): Promise<void> {
  try {
    await body();
  } catch (error) {
    await showAdvice(context, describePromptFailure(error));
  }
}

// What Prompt Agent… attaches: the active editor's selection; invoked from
// a context menu on a file (the explorer, or the editor without a
// selection), that file.
function invokedAttachments(target: unknown): Attachment[] {
  const editor = vscode.window.activeTextEditor;
  const menuUri = target instanceof vscode.Uri ? target : undefined;
  const onEditor = editor !== undefined && (!menuUri || menuUri.toString() === editor.document.uri.toString());
  if (editor && onEditor && !editor.selection.isEmpty) {
    const quoted = attachmentFrom(editor, false);
    return quoted ? [quoted] : [];
  }
  if (!menuUri) return [];
  if (editor && onEditor) {
    const whole = attachmentFrom(editor, true);
    return whole ? [whole] : [];
  }
  const path = vscode.workspace.asRelativePath(menuUri, false);
  return [{ label: path, attachment: path }];
}

export function agentCommands(context: ChatContext, events: ChatEvents): Record<string, (...args: unknown[]) => Promise<void>> {
  return {
    // The multi-line input is the chat's composer, with the selection (or
    // the file a menu named) attached.
    promptAgent: (target?: unknown) =>
      reporting(context, async () => {
        const attach = invokedAttachments(target);
        await ChatPanel.show(context, events, { focus: true, attach });
      }),
    openChat: () =>
      reporting(context, async () => {
        await ChatPanel.show(context, events, { focus: true });
      }),
    cancelTurn: () =>
      reporting(context, async () => {
        const where = ChatPanel.shown?.scope ?? scope(context);
        const result = await cancelTurn(await context.sender(), where);
        void vscode.window.showInformationMessage(
          result.cancelled ? 'mevedel: cancel sent; the turn ends with what arrived so far' : 'mevedel: no agent turn is running in this session',
        );
      }),
  };
}
