// The chat input's history (`mevedel/input/history`): the prompts sent in
// the workspace, from any editor or `mevedel prompt`. The chat's webview
// asks for it at the first ArrowUp of its input and steps through it there
// (chatView.ts); the server records each prompt when it is sent.

import type { RequestSender } from './protocol';

export const INPUT_HISTORY_METHOD = 'mevedel/input/history';

export interface InputHistoryResult {
  // Oldest first.
  entries: string[];
  // A history file the server could not read, renamed aside (said once).
  warning?: string | null;
}

export async function inputHistory(sender: RequestSender, workspaceFolder: string | undefined): Promise<InputHistoryResult> {
  const result = await sender.sendRequest<InputHistoryResult>(INPUT_HISTORY_METHOD, workspaceFolder ? { workspaceFolder } : {});
  const entries = Array.isArray(result?.entries) ? result.entries.filter((e): e is string => typeof e === 'string') : [];
  return { entries, warning: typeof result?.warning === 'string' ? result.warning : null };
}

// `entries` (newest first) with `text` sent: moved to the front, never twice
// (the server's rule, so the page need not ask again after each send).
export function withSent(entries: string[], text: string): string[] {
  return text.trim() ? [text, ...entries.filter((e) => e !== text)] : entries;
}
