;;; mevedel-lsp-queue-test.el --- ERT tests of the chat's queue and steering  -*- lexical-binding: t; -*-

;; Run by tests/clients/test_emacs.py after mevedel-lsp-test.el and
;; mevedel-lsp-chat-test.el (whose helpers and server it shares), against
;; the real server and the scripted ACP agent.  Driven by the keys a
;; person presses: `p' in the chat while a turn runs queues the prompt,
;; `e' and `k' on a queued entry edit and cancel it, `S' steers.

;;; Code:

(require 'ert)
(require 'mevedel-lsp)

(ert-deftest mevedel-lsp-test-queue-prompts-wait-behind-the-turn-and-steering-goes-at-once ()
  "A prompt written while the turn runs is queued and shown above it; e
edits it in the prompt buffer, k cancels one (off an entry, k says so);
it goes as the next turn when the running one settles.  S off an entry
writes steering: the running turn is cancelled and the steering is sent."
  (let* ((release (expand-file-name (make-temp-name "mevedel-release-") temporary-file-directory))
         (script (mevedel-chat-test--script
                  (vector (vector (list :say "Working on it.") (list :wait_file release) (list :say " Finished."))
                          (vector (list :echo_prompt t))
                          (vector (list :say "The wrong way.") (list :wait_cancel 60) (list :say "never said"))
                          (vector (list :echo_prompt t)))))
         (session (mevedel-chat-test--session "ERT queue"))
         (server (mevedel-test--server)))
    (mevedel-chat-test--with-settings
      (mevedel-chat-test--configure script)
      (let ((chat (mevedel-lsp-chat-send server "Start the long one" :session session)))
        (mevedel-test--wait (lambda () (mevedel-chat-test--has chat "Working on it.")) "the running turn")
        ;; p while the turn runs: what is written is queued, not refused.
        (dolist (text '("First follow-up" "Second follow-up"))
          (let ((prompt (mevedel-chat-test--press chat "p")))
            (insert text)
            (mevedel-chat-test--press prompt "C-c C-c")))
        (mevedel-test--wait (lambda () (mevedel-chat-test--has chat "── Queued (2) ──")) "both prompts queued")
        (let ((text (mevedel-chat-test--text chat)))
          (mevedel-test--log "chat with the queue:\n%s" text)
          (should (string-search "  [queued] First follow-up\n  [queued] Second follow-up\n" text))
          ;; Above the running turn, which goes on at the end.
          (should (< (string-search "── Queued" text) (string-search "── Turn 1 · scripted · running" text))))
        ;; e on the first: its text in the prompt buffer; C-c C-c keeps the new text.
        (with-current-buffer chat
          (goto-char (point-min))
          (search-forward "[queued] First follow-up"))
        (let ((prompt (mevedel-chat-test--press chat "e")))
          (should (derived-mode-p 'mevedel-lsp-prompt-mode))
          (should (equal (buffer-string) "First follow-up"))
          (should (string-match-p "editing a queued prompt" (mevedel-chat-test--header prompt)))
          (goto-char (point-max))
          (insert ", edited")
          (mevedel-chat-test--press prompt "C-c C-c"))
        (mevedel-test--wait (lambda () (mevedel-chat-test--has chat "[queued] First follow-up, edited")) "the edited entry")
        ;; k on the second: gone, here and on the server.
        (with-current-buffer chat
          (goto-char (point-min))
          (search-forward "[queued] Second follow-up"))
        (mevedel-chat-test--press chat "k")
        (mevedel-test--wait (lambda () (not (mevedel-chat-test--has chat "Second follow-up"))) "the cancelled entry gone")
        (should (equal (mapcar (lambda (e) (plist-get e :text))
                               (plist-get (mevedel-test--call :mevedel/queue/list :sessionId session) :entries))
                       '("First follow-up, edited")))
        ;; k off any entry says so.
        (with-current-buffer chat (goto-char (point-max)))
        (should-error (mevedel-chat-test--press chat "k") :type 'user-error)
        ;; The turn settles: the queued prompt goes as turn 2.
        (with-temp-file release)
        (mevedel-test--wait
         (lambda () (mevedel-chat-test--has chat "── Turn 2 · scripted · completed ──\nYou: First follow-up, edited"))
         "the queued prompt's turn" 60)
        (mevedel-chat-test--wait-idle chat "the second turn to settle")
        (should-not (mevedel-chat-test--has chat "── Queued"))
        ;; S off an entry while a turn runs: steering.
        (mevedel-lsp-chat-send server "Go slowly" :session session)
        (mevedel-test--wait (lambda () (mevedel-chat-test--has chat "The wrong way.")) "the third turn running")
        (with-current-buffer chat (goto-char (point-max)))
        (let ((prompt (mevedel-chat-test--press chat "S")))
          (should (string-match-p "steering" (mevedel-chat-test--header prompt)))
          (insert "Turn left instead")
          (mevedel-chat-test--press prompt "C-c C-c"))
        (mevedel-test--wait
         (lambda () (mevedel-chat-test--has chat "── Turn 4 · scripted · completed ──\nYou: Turn left instead"))
         "the steering's turn" 60)
        (let ((text (mevedel-chat-test--text chat)))
          (mevedel-test--log "chat after steering:\n%s" text)
          (should (string-search "── Turn 3 · scripted · interrupted ──" text))
          (should-not (string-search "never said" text)))))))

;;; mevedel-lsp-queue-test.el ends here
