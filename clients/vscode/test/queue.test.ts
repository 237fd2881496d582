// The queue's fragment of the chat: each queued prompt with its state and
// buttons (none while it is being sent), why one waits for review, and the
// person's text shown as text, never as markup.
import assert from 'node:assert/strict';
import { describe as suite, test } from 'node:test';
import { QueueState, renderQueue, sendingEntry } from '../src/queue';

const HOSTILE = '<script>alert(1)</script><img src=x onerror="alert(2)">';

function state(entries: QueueState['entries'], paused = false): QueueState {
  return { sessionId: 'S', entries, paused };
}

suite('the queue in the chat', () => {
  test('nothing queued shows nothing', () => {
    assert.equal(renderQueue(undefined), '');
    assert.equal(renderQueue(state([])), '');
  });

  test('entries show in order with their buttons; one being sent has none; review says why', () => {
    const html = renderQueue(
      state(
        [
          { entryId: 'a'.repeat(32), kind: 'steer', state: 'review', text: 'steer me', queuedAt: 1, host: 'h', reason: 'the server stopped' },
          { entryId: 'b'.repeat(32), kind: 'follow-up', state: 'queued', text: 'second', queuedAt: 2, host: 'h', attachments: ['notes.md'] },
          { entryId: 'c'.repeat(32), kind: 'follow-up', state: 'sending', text: 'going now', queuedAt: 3, host: 'h' },
        ],
        true,
      ),
    );
    assert.match(html, /Queued \(3\) · paused: an entry needs review/);
    assert.ok(html.indexOf('steer me') < html.indexOf('second') && html.indexOf('second') < html.indexOf('going now'));
    assert.match(html, /steering, needs review/);
    assert.match(html, /the server stopped/);
    assert.match(html, /attached: notes\.md/);
    assert.equal((html.match(/data-action="queueEdit"/g) ?? []).length, 2);
    assert.equal((html.match(/data-action="queueSend"/g) ?? []).length, 2);
    assert.match(html, new RegExp(`data-action="queueCancel" data-entry="${'b'.repeat(32)}"`));
    assert.equal(sendingEntry(state([]))?.text, undefined);
  });

  test('the text is shown, never run', () => {
    const html = renderQueue(state([{ entryId: 'd'.repeat(32), kind: 'follow-up', state: 'queued', text: HOSTILE, queuedAt: 1, host: HOSTILE }]));
    assert.ok(!html.includes('<script>') && !html.includes('<img'));
    assert.ok(html.includes('&lt;script&gt;'));
  });
});
