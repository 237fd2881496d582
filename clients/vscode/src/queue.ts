// Prompts queued behind a session's running turn, and steering
// (`mevedel/queue/*`, `mevedel/queue/didChange`). A prompt sent while the
// chat's turn runs is queued: the server keeps it durably and sends it when
// the turn settles. The chat shows the queue under the running turn with
// Edit, Cancel and Send now (steering: the running turn is cancelled) on
// each entry. Pure: no `vscode` import (the Node tests render with it).
import { escapeHtml } from './chatView';
import { RequestSender, Scope } from './protocol';

export const QueueMethods = {
  list: 'mevedel/queue/list',
  add: 'mevedel/queue/add',
  edit: 'mevedel/queue/edit',
  cancel: 'mevedel/queue/cancel',
  steer: 'mevedel/queue/steer',
  didChange: 'mevedel/queue/didChange',
} as const;

export interface QueueEntry {
  entryId: string;
  kind: 'follow-up' | 'steer';
  state: 'queued' | 'sending' | 'review';
  text: string;
  queuedAt: number;
  host: string;
  agent?: string | null;
  attachments?: string[];
  reason?: string | null;
}

export interface QueueState {
  sessionId: string;
  entries: QueueEntry[];
  paused: boolean;
  problems?: string[];
}

export interface QueueDidChangeParams extends QueueState {
  workspaceFolder: string;
}

export function listQueue(sender: RequestSender, scope: Scope): Promise<QueueState> {
  return sender.sendRequest(QueueMethods.list, scope);
}

export function addToQueue(sender: RequestSender, params: Scope & { text: string; agent?: string; attachments?: string[] }): Promise<QueueEntry> {
  return sender.sendRequest(QueueMethods.add, params);
}

export function editQueued(sender: RequestSender, params: Scope & { entryId: string; text: string }): Promise<QueueEntry> {
  return sender.sendRequest(QueueMethods.edit, params);
}

export function cancelQueued(sender: RequestSender, params: Scope & { entryId: string }): Promise<QueueState> {
  return sender.sendRequest(QueueMethods.cancel, params);
}

export function steer(
  sender: RequestSender,
  params: Scope & ({ text: string; agent?: string; attachments?: string[] } | { entryId: string }),
): Promise<QueueEntry> {
  return sender.sendRequest(QueueMethods.steer, params);
}

// The entry being sent now (its turn starting), if any.
export function sendingEntry(state: QueueState | undefined): QueueEntry | undefined {
  return state?.entries.find((e) => e.state === 'sending');
}

const STATE_WORDS: Record<QueueEntry['state'], string> = { queued: 'queued', sending: 'sending', review: 'needs review' };

function entryButton(action: string, label: string, title: string, entry: string): string {
  return `<button class="action" data-action="${escapeHtml(action)}" data-entry="${escapeHtml(entry)}" title="${escapeHtml(title)}">${escapeHtml(label)}</button>`;
}

// The queue's fragment of the chat: each entry with its state, text,
// attachments, why it waits for review, and its buttons (none while it is
// being sent). Entry text is the person's, shown as text, never markup.
export function renderQueue(state: QueueState | undefined): string {
  if (!state || (state.entries.length === 0 && !(state.problems ?? []).length)) return '';
  const paused = state.paused ? ' · paused: an entry needs review' : '';
  const rows = state.entries.map((entry) => {
    const kind = entry.kind === 'steer' ? 'steering, ' : '';
    const attached = (entry.attachments ?? []).map((a) => `<div class="queue-attached">attached: ${escapeHtml(a)}</div>`).join('');
    const why = entry.reason ? `<div class="queue-reason">${escapeHtml(entry.reason)}</div>` : '';
    const buttons =
      entry.state === 'sending'
        ? ''
        : [
            entryButton('queueEdit', 'Edit', 'Change the text of this queued prompt', entry.entryId),
            entryButton('queueCancel', 'Cancel', 'Drop this queued prompt: it is never sent', entry.entryId),
            entryButton('queueSend', 'Send now', 'Send it now: the running turn is cancelled (steering)', entry.entryId),
          ].join('');
    return (
      `<li class="queue-entry queue-${escapeHtml(entry.state)}" data-entry="${escapeHtml(entry.entryId)}">` +
      `<span class="queue-state">${escapeHtml(kind + STATE_WORDS[entry.state])}</span>` +
      `<div class="queue-text">${escapeHtml(entry.text)}</div>${attached}${why}<div class="queue-actions">${buttons}</div></li>`
    );
  });
  const problems = (state.problems ?? []).map((p) => `<li class="queue-problem error">${escapeHtml(p)}</li>`).join('');
  return (
    `<section class="queue"><div class="queue-head">Queued (${state.entries.length})${escapeHtml(paused)} — sent when the running turn settles</div>` +
    `<ol class="queue-list">${rows.join('')}${problems}</ol></section>`
  );
}
