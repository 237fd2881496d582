;;; mevedel-lsp-subagent-test.el --- ERT tests of a sub-agent's activity in the chat  -*- lexical-binding: t; -*-

;; Run by tests/clients/test_emacs.py after mevedel-lsp-test.el and
;; mevedel-lsp-chat-test.el (whose helpers and server it shares), against
;; the real server and two scripted ACP agents: the parent calls the
;; `Agent' tool through the official MCP client, which runs the helper as
;; a sub-agent in the same turn.  What a user sees and presses: the
;; sub-agent's activity streamed under the call that started it, folded
;; once it is done (TAB shows it), the root's turn going on after it, the
;; task read back from the server, and the Rewind impact naming it.

;;; Code:

(require 'ert)
(require 'mevedel-lsp)

(defun mevedel-subagent-test--release (file)
  "Let a scripted agent waiting on FILE go on."
  (with-temp-file file (insert "go")))

(defun mevedel-subagent-test--shown (buffer text)
  "Non-nil when BUFFER holds TEXT and its first character is not invisible."
  (with-current-buffer buffer
    (save-excursion
      (goto-char (point-min))
      (and (search-forward text nil t) (not (invisible-p (match-beginning 0)))))))

(defun mevedel-subagent-test--visible (buffer)
  "BUFFER's text as it shows: without its invisible (folded) text."
  (with-current-buffer buffer
    (let ((pos (point-min)) (parts nil))
      (while (< pos (point-max))
        (let ((next (next-single-char-property-change pos 'invisible nil (point-max))))
          (unless (invisible-p pos)
            (push (buffer-substring-no-properties pos next) parts))
          (setq pos next)))
      (apply #'concat (nreverse parts)))))

(defun mevedel-subagent-test--unfold (buffer heading)
  "TAB on the first HEADING of BUFFER: its fold shows, or hides."
  (with-current-buffer buffer
    (goto-char (point-min))
    (search-forward heading))
  (mevedel-chat-test--press buffer "TAB"))

(defun mevedel-subagent-test--read-again (chat session)
  "CHAT gone, SESSION's chat read back from the server in a new buffer
(as after a restart), shown and logged; that buffer."
  (kill-buffer chat)
  (let ((again (mevedel-lsp-chat-buffer session (mevedel-test--server))))
    (pop-to-buffer again)
    (mevedel-test--log "chat read again:\n%s" (mevedel-chat-test--text again))
    again))

(defun mevedel-subagent-test--count (text needle)
  "How many times TEXT holds NEEDLE."
  (let ((count 0) (at 0))
    (while (setq at (string-search needle text at))
      (setq count (1+ count) at (+ at (length needle))))
    count))

(ert-deftest mevedel-lsp-test-subagent-activity-nests-under-its-call-and-folds ()
  "The parent's Agent call runs the helper: its reasoning, words and tool
call stream indented under the call while it runs; once it settles they
fold under a heading naming it (TAB shows them, TAB hides them) and the
root turn goes on streaming; read back from the server the turn shows as
it did live, the task folded under its call (its recorded conversation
in the fold); the Rewind impact names the sub-agent beside the file it
wrote."
  (mevedel-chat-test--write "notes.txt" "original notes\n")
  (let* ((child-release (expand-file-name (make-temp-name "mevedel-child-") temporary-file-directory))
         (root-release (expand-file-name (make-temp-name "mevedel-root-") temporary-file-directory))
         (parent (mevedel-chat-test--script
                  (vector (vector (list :say "Asking the helper. ")
                                  (list :mcp_call (list :id "call-reviewer" :tool "Agent"
                                                        :arguments (list :name "reviewer" :agent "helper"
                                                                         :prompt "Review the notes")))
                                  (list :say "Thanks, helper. ")
                                  (list :wait_file root-release)
                                  (list :say "All done.")))))
         (helper (mevedel-chat-test--script
                  (vector (vector (list :think "Reading the notes.")
                                  (list :say "Reviewing. ")
                                  (list :tool_call (list :id "t1" :title "Check the notes" :kind "read" :status "completed"))
                                  (list :write (list :path "notes.txt" :content "reviewed notes\n"))
                                  (list :wait_file child-release)
                                  (list :say "Review done.")))))
         (session (mevedel-chat-test--session "ERT sub-agent")))
    (mevedel-chat-test--with-settings
      (mevedel-chat-test--configure parent (list "helper" (append mevedel-chat-test-agent (list helper))))
      (let ((chat (mevedel-lsp-chat-send (mevedel-test--server) "Get a review" :session session)))
        (pop-to-buffer chat)
        ;; While the helper runs: its activity streams, indented under the
        ;; parent's call, not folded; the turn runs.
        (mevedel-test--wait (lambda () (mevedel-chat-test--has chat "Reviewing.")) "the helper's words" 60)
        (mevedel-test--wait (lambda () (mevedel-chat-test--has chat "Check the notes")) "the helper's tool call" 60)
        (let ((text (mevedel-chat-test--text chat)))
          (mevedel-test--log "chat while the helper runs:\n%s" text)
          (should (string-match-p "^Tool mcp Agent  \\[in_progress\\]\n    Agent reviewer (helper)  \\[running\\]\n" text))
          (should (string-search "\n        Reasoning (TAB shows or hides it)" text))
          (should (string-search "\n        Reviewing. \n" text))
          (should (string-search "\n        Tool Check the notes  [read · completed]" text))
          (should (< (string-search "Asking the helper." text) (string-search "Agent reviewer" text))))
        (should (mevedel-subagent-test--shown chat "Reviewing."))
        (should-not (mevedel-subagent-test--shown chat "Reading the notes."))
        (should (equal (mevedel-chat-test--phase chat) ":running"))
        ;; The helper settles: folded under its heading; the root goes on.
        (mevedel-subagent-test--release child-release)
        (mevedel-test--wait (lambda () (mevedel-chat-test--has chat "Thanks, helper.")) "the root's words after the helper" 60)
        (let ((text (mevedel-chat-test--text chat)))
          (mevedel-test--log "chat after the helper settled:\n%s" text)
          (should (string-search "    Agent reviewer (helper)  [completed]  (TAB shows or hides it)" text))
          (should (string-search "\n        wrote notes.txtReview done." text))
          (should (< (string-search "Agent reviewer" text) (string-search "Thanks, helper." text))))
        (should-not (mevedel-subagent-test--shown chat "Reviewing."))
        (should-not (mevedel-subagent-test--shown chat "        wrote notes.txtReview done."))
        (should (mevedel-subagent-test--shown chat "Thanks, helper."))
        ;; The helper's settling did not end the root's turn.
        (should (equal (mevedel-chat-test--phase chat) ":running"))
        (should (mevedel-chat-test--has chat "── Turn 1 · scripted · running ──"))
        ;; TAB on the heading shows the activity, TAB again hides it.
        (mevedel-subagent-test--unfold chat "Agent reviewer (helper)")
        (should (mevedel-subagent-test--shown chat "Reviewing."))
        (should (mevedel-subagent-test--shown chat "        wrote notes.txtReview done."))
        ;; Its own reasoning stays folded inside it.
        (should-not (mevedel-subagent-test--shown chat "Reading the notes."))
        (mevedel-chat-test--press chat "TAB")
        (should-not (mevedel-subagent-test--shown chat "        wrote notes.txtReview done."))
        ;; The root settles.
        (mevedel-subagent-test--release root-release)
        (mevedel-chat-test--wait-idle chat "the root turn to settle")
        (let ((text (mevedel-chat-test--text chat)))
          (should (string-search "── Turn 1 · scripted · completed ──" text))
          (should (string-search "All done." text)))
        (should (equal (mevedel-chat-test--file "notes.txt") "reviewed notes\n"))
        ;; Read back from the server in a new chat: the turn as it showed
        ;; live, the task folded under its call; in the fold, its
        ;; conversation as the record keeps it.
        (let ((live (mevedel-subagent-test--visible chat)))
          (mevedel-test--log "chat live, as it shows:\n%s" live)
          (let ((again (mevedel-subagent-test--read-again chat session)))
            (let ((text (mevedel-chat-test--text again)))
              (should (equal (mevedel-subagent-test--visible again) live))
              (should (string-search "\n        > Review the notes\n" text)))
            (should-not (mevedel-subagent-test--shown again "> Review the notes"))
            (mevedel-subagent-test--unfold again "Agent reviewer (helper)")
            (should (mevedel-subagent-test--shown again "> Review the notes"))
            (should (mevedel-subagent-test--shown again "Reviewing."))
            ;; Rewind to before the turn, declined: the impact names the
            ;; sub-agent beside the file it wrote.
            (with-current-buffer again
              (goto-char (point-min))
              (search-forward "── Turn 1"))
            (should (null (mevedel-test--answering nil '("^Before the prompt of turn 1")
                            (mevedel-chat-test--press again "w"))))
            (let ((impact (mevedel-test--impact)))
              (mevedel-test--log "impact:\n%s" impact)
              (should (string-match-p "^  notes\\.txt (pre-turn of turn 1: 15 bytes), changed by sub-agent reviewer$" impact)))
            (should (equal (mevedel-chat-test--file "notes.txt") "reviewed notes\n"))))))))

(ert-deftest mevedel-lsp-test-subagent-nested-sub-agents-and-an-unknown-call ()
  "A sub-agent's own sub-agent nests inside it under its call, folded
inside its fold (TAB opens one level); a sub-agent called through no
reported call shows under its name after the turn's text so far.  Read
back from the server the call shows as it did live, the outer task
folded under it, the inner task inside the outer's fold after its
recorded conversation."
  (let* ((searcher (mevedel-chat-test--script
                    (vector (vector (list :say "Inner found it.")) (vector (list :say "Inner found it.")))))
         (helper (mevedel-chat-test--script
                  (vector (vector (list :tool_call (list :id "look" :title "Look around" :kind "read" :status "completed"))
                                  (list :say "Outer at work. ")
                                  (list :mcp_call (list :id "call-inner" :tool "Agent"
                                                        :arguments (list :name "inner" :agent "searcher" :prompt "Go deeper")))
                                  (list :say "Outer done.")))))
         (parent (mevedel-chat-test--script
                  (vector (vector (list :say "Asking. ")
                                  (list :mcp_call (list :id "call-outer" :tool "Agent"
                                                        :arguments (list :name "outer" :agent "helper" :prompt "Delegate further")))
                                  ;; Called without reporting an ACP tool call: no call to nest under.
                                  (list :mcp_call (list :tool "Agent"
                                                        :arguments (list :name "quiet" :agent "searcher" :prompt "Say little")))
                                  (list :say "All answered.")))))
         (session (mevedel-chat-test--session "ERT nested sub-agents"))
         (live nil))
    (mevedel-chat-test--with-settings
      (mevedel-chat-test--configure parent (list "helper" (append mevedel-chat-test-agent (list helper)))
                                    (list "searcher" (append mevedel-chat-test-agent (list searcher))))
      (let ((chat (mevedel-lsp-chat-send (mevedel-test--server) "Delegate twice" :session session)))
        (pop-to-buffer chat)
        (mevedel-chat-test--wait-idle chat "the turn to settle")
        (let ((text (mevedel-chat-test--text chat)))
          (mevedel-test--log "chat:\n%s" text)
          (should (string-search (concat "Tool mcp Agent  [completed]\n    mcp Agent: mcp Agent: Inner found it.Outer done.\n"
                                         "    Agent outer (helper)  [completed]  (TAB shows or hides it)\n"
                                         "        Tool Look around  [read · completed]\n"
                                         "        Outer at work. \n"
                                         "        Tool mcp Agent  [completed]\n"
                                         "            mcp Agent: Inner found it.\n"
                                         "            Agent outer/inner (searcher)  [completed]  (TAB shows or hides it)\n"
                                         "                Inner found it.\n"
                                         "        mcp Agent: Inner found it.Outer done.\n")
                                 text))
          (should (string-search (concat "Outer done.\n\nAgent quiet (searcher)  [completed]  (TAB shows or hides it)\n"
                                         "    Inner found it.\n\nmcp Agent: Inner found it.All answered.")
                                 text)))
        (should-not (mevedel-subagent-test--shown chat "        Tool Look around"))
        (should-not (mevedel-subagent-test--shown chat "            Agent outer/inner"))
        (should-not (mevedel-subagent-test--shown chat "    Inner found it."))
        (setq live (mevedel-subagent-test--visible chat))
        ;; TAB on outer: its activity shows, outer/inner stays folded.
        (mevedel-subagent-test--unfold chat "Agent outer (helper)")
        (should (mevedel-subagent-test--shown chat "        Tool Look around"))
        (should (mevedel-subagent-test--shown chat "            Agent outer/inner"))
        (should-not (mevedel-subagent-test--shown chat "                Inner found it."))
        ;; TAB on outer/inner shows it; quiet stays folded.
        (mevedel-subagent-test--unfold chat "Agent outer/inner")
        (should (mevedel-subagent-test--shown chat "                Inner found it."))
        (should-not (mevedel-subagent-test--shown chat "\n    Inner found it."))
        ;; Read back from the server in a new chat: the call as it showed
        ;; live.  (Not quiet's place: the turn records the root's words
        ;; around it as one response after its task.)
        (let* ((again (mevedel-subagent-test--read-again chat session))
               (text (mevedel-chat-test--text again))
               (call (lambda (shown)
                       (and (string-match (concat "^Tool mcp Agent .*\n\\(?:    .*\n\\)*?"
                                                  (regexp-quote "    Agent outer (helper)  [completed]  (TAB shows or hides it)\n"))
                                          shown)
                            (match-string 0 shown)))))
          (should (funcall call live))
          (should (equal (funcall call (mevedel-subagent-test--visible again)) (funcall call live)))
          ;; In outer's fold, after its conversation, outer/inner's task.
          (should (string-match-p (concat (regexp-quote "\n    Agent outer (helper)  [completed]  (TAB shows or hides it)\n")
                                          "\\(?:        .*\n\\)*"
                                          (regexp-quote "        > Delegate further\n")
                                          "\\(?:        .*\n\\)*"
                                          (regexp-quote "        Agent outer/inner (searcher)  [completed]  (TAB shows or hides it)\n")
                                          "\\(?:            .*\n\\)*"
                                          (regexp-quote "            > Go deeper\n"))
                                  text))
          (mevedel-subagent-test--unfold again "Agent outer (helper)")
          (should (mevedel-subagent-test--shown again "        Agent outer/inner"))
          (should-not (mevedel-subagent-test--shown again "            > Go deeper")))))))

(ert-deftest mevedel-lsp-test-subagent-interrupted-says-why ()
  "C-c C-c while the helper works cancels the parent's turn and the
helper's task with it: the helper's folded block says why under its
heading, in the sentence the turn's own reason uses, shown while its
activity stays folded; read back, as it showed live."
  (let* ((helper (mevedel-chat-test--script
                  (vector (vector (list :say "Started. ") (list :wait_cancel 60) (list :say "never said either")))))
         (parent (mevedel-chat-test--script
                  (vector (vector (list :mcp_call (list :id "call-slow" :tool "Agent"
                                                        :arguments (list :name "slow" :agent "helper" :prompt "Take your time")))
                                  (list :wait_cancel 60)
                                  (list :say "never said")))))
         (session (mevedel-chat-test--session "ERT interrupted sub-agent")))
    (mevedel-chat-test--with-settings
      (mevedel-chat-test--configure parent (list "helper" (append mevedel-chat-test-agent (list helper))))
      (let ((chat (mevedel-lsp-chat-send (mevedel-test--server) "Delegate something slow" :session session)))
        (pop-to-buffer chat)
        (mevedel-test--wait (lambda () (mevedel-chat-test--has chat "Started.")) "the helper's words" 60)
        (should (eq (plist-get (mevedel-chat-test--press chat "C-c C-c") :cancelled) t))
        (mevedel-chat-test--wait-idle chat "the cancelled turn to settle")
        (let ((text (mevedel-chat-test--text chat)))
          (mevedel-test--log "chat after the cancel:\n%s" text)
          (should (string-search (concat "    Agent slow (helper)  [interrupted]  (TAB shows or hides it)\n"
                                         "        Started. \n"
                                         "        Interrupted: cancelled with its caller's turn.")
                                 text))
          (should (string-search "Interrupted: cancelled by the user." text))
          (should-not (string-search "never said" text)))
        (should (mevedel-subagent-test--shown chat "        Interrupted: cancelled with its caller's turn."))
        (should-not (mevedel-subagent-test--shown chat "        Started."))
        ;; Read back from the server in a new chat: as it showed live, why
        ;; said as often.
        (let ((live (mevedel-subagent-test--visible chat))
              (text (mevedel-chat-test--text chat))
              (why "cancelled with its caller's turn"))
          (let* ((again (mevedel-subagent-test--read-again chat session))
                 (read (mevedel-chat-test--text again)))
            (should (equal (mevedel-subagent-test--visible again) live))
            (should (= (mevedel-subagent-test--count read why) (mevedel-subagent-test--count text why)))))))))

(defun mevedel-subagent-test--said-under (buffer heading sentence)
  "Non-nil when BUFFER shows SENTENCE on the line after the fold under
HEADING's line, while the fold stays closed."
  (with-current-buffer buffer
    (save-excursion
      (goto-char (point-min))
      (and (let ((case-fold-search nil)) (search-forward heading nil t))
           (let ((case-fold-search nil)) (search-forward sentence nil t))
           (not (invisible-p (match-beginning 0)))))))

(ert-deftest mevedel-lsp-test-subagent-failed-task-read-back-says-why ()
  "The helper's prompt fails: its folded task says why under its heading
while the root turn goes on; read back from the server in a new chat, the
turn shows as it did live: the task under its call, folded, why it failed
said once (not again at the end of its recorded conversation)."
  (let* ((helper (mevedel-chat-test--script
                  (vector (vector (list :say "Trying. ")
                                  (list :error (list :code -32603 :message "the model is overloaded"))))))
         (parent (mevedel-chat-test--script
                  (vector (vector (list :mcp_call (list :id "call-broken" :tool "Agent"
                                                        :arguments (list :name "broken" :agent "helper" :prompt "Try this")))
                                  (list :say "Carried on.")))))
         (session (mevedel-chat-test--session "ERT failed sub-agent"))
         (why "failed the prompt: the model is overloaded")
         ;; Under its call: its heading, its folded activity, then why.
         (said (concat (regexp-quote "Tool mcp Agent  [failed]\n")
                       "\\(?:    .*\n\\)*"
                       (regexp-quote (concat "    Agent broken (helper)  [errored]  (TAB shows or hides it)\n"))
                       "\\(?:        .*\n\\)*"
                       (regexp-quote (concat "        Error: " why "\n")))))
    (mevedel-chat-test--with-settings
      (mevedel-chat-test--configure parent (list "helper" (append mevedel-chat-test-agent (list helper))))
      (let ((chat (mevedel-lsp-chat-send (mevedel-test--server) "Delegate to a failing helper" :session session)))
        (pop-to-buffer chat)
        (mevedel-chat-test--wait-idle chat "the turn to settle")
        (let ((text (mevedel-chat-test--text chat))
              (live (mevedel-subagent-test--visible chat)))
          (mevedel-test--log "chat live:\n%s" text)
          (should (string-search "Carried on." text))
          (should (string-match-p said text))
          (should (mevedel-subagent-test--said-under chat "Agent broken (helper)" "Error: failed the prompt"))
          (should-not (mevedel-subagent-test--shown chat "        Trying."))
          ;; Read back from the server in a new chat, as after a restart.
          (let* ((again (mevedel-subagent-test--read-again chat session))
                 (read (mevedel-chat-test--text again)))
            (should (equal (mevedel-subagent-test--visible again) live))
            (should (string-match-p said read))
            (should-not (string-search "did not complete" read))
            ;; Unfolded, the reason is said as often as live (once for the
            ;; task; the call's answer and the root's words say it too).
            (should (= (mevedel-subagent-test--count read why) (mevedel-subagent-test--count text why)))
            (should (mevedel-subagent-test--said-under again "Agent broken (helper)" "Error: failed the prompt"))
            (should-not (mevedel-subagent-test--shown again "> Try this"))
            (mevedel-subagent-test--unfold again "Agent broken (helper)")
            (should (mevedel-subagent-test--shown again "        > Try this"))
            (should (mevedel-subagent-test--shown again "        Trying."))))))))

;; The parent calls Agent twice at once.  The first task ends once the
;; second one started (its call matched, so recorded), the second after
;; the first one's answer: the first task is recorded while both calls
;; wait for theirs (the newest such call is the second one).
(ert-deftest mevedel-lsp-test-subagent-parallel-calls-each-nest-their-own-task ()
  "Two Agent calls made at once: live, each task shows under its own
call; read back from the server in a new chat, the same (the first task
under the first call, though it settled while both calls were open)."
  (let* ((answered (make-temp-name "first-answered-"))
         (started (make-temp-name "second-started-"))
         (helper (mevedel-chat-test--script (vector (vector (list :wait_file started) (list :say "First done.")))))
         (searcher (mevedel-chat-test--script (vector (vector (list :write (list :path started :content "yes\n"))
                                                              (list :wait_file answered) (list :say "Second done.")))))
         (parent (mevedel-chat-test--script
                  (vector (vector (list :say "Asking both. ")
                                  (list :together
                                        (vector (vector (list :mcp_call (list :id "call-first" :tool "Agent"
                                                                              :arguments (list :name "first" :agent "helper"
                                                                                               :prompt "First task")))
                                                        (list :write (list :path answered :content "yes\n")))
                                                (vector (list :mcp_call (list :id "call-second" :tool "Agent"
                                                                              :arguments (list :name "second" :agent "searcher"
                                                                                               :prompt "Second task"))))))
                                  (list :say "Both answered.")))))
         (session (mevedel-chat-test--session "ERT parallel sub-agents"))
         (under (lambda (answer agent)
                  ;; A call whose answer is ANSWER, with the task AGENT under it.
                  (concat (regexp-quote (concat "Tool mcp Agent  [completed]\n    mcp Agent: " answer "\n"))
                          (regexp-quote (concat "    Agent " agent "  [completed]  (TAB shows or hides it)\n"))))))
    (mevedel-chat-test--with-settings
      (mevedel-chat-test--configure parent (list "helper" (append mevedel-chat-test-agent (list helper)))
                                    (list "searcher" (append mevedel-chat-test-agent (list searcher))))
      (let ((chat (mevedel-lsp-chat-send (mevedel-test--server) "Delegate two at once" :session session)))
        (pop-to-buffer chat)
        (mevedel-chat-test--wait-idle chat "the turn to settle")
        (let ((text (mevedel-chat-test--text chat))
              (live (mevedel-subagent-test--visible chat)))
          (mevedel-test--log "chat live:\n%s" text)
          (should (string-match-p (funcall under "First done." "first (helper)") live))
          (should (string-match-p (funcall under (concat "wrote " started "Second done.") "second (searcher)") live))
          (let ((again (mevedel-subagent-test--visible (mevedel-subagent-test--read-again chat session)))
                (calls (lambda (shown)
                         ;; SHOWN up to the second call's task.  (Not the
                         ;; root's words after it: the turn records them
                         ;; around the tasks, in more responses.)
                         (and (string-match (funcall under (concat "wrote " started "Second done.") "second (searcher)") shown)
                              (substring shown 0 (match-end 0))))))
            (should (string-match-p (funcall under "First done." "first (helper)") again))
            (should (string-match-p (funcall under (concat "wrote " started "Second done.") "second (searcher)") again))
            (should (equal (funcall calls again) (funcall calls live)))))))))

(provide 'mevedel-lsp-subagent-test)
;;; mevedel-lsp-subagent-test.el ends here
