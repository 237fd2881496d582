;;; mevedel-lsp-chat-test.el --- ERT tests of the chat against the real server and a scripted agent  -*- lexical-binding: t; -*-

;; Run by tests/clients/test_emacs.py after mevedel-lsp-test.el (whose
;; helpers and server it shares), with MEVEDEL_TEST_AGENT_COMMAND set to
;; the scripted ACP agent's command (a JSON array; the script's path is
;; appended).  Each test starts its own session, so each gets its own agent
;; process, and drives the chat the way a user does: the prompt buffer and
;; its keys, the chat buffer and its keys, the minibuffer questions
;; (`completing-read' and `yes-or-no-p', answered by stubs that record what
;; they were asked).

;;; Code:

(require 'ert)
(require 'json)
(require 'mevedel-lsp)

(unless (fboundp 'mevedel-test--document-buffer)
  (load (expand-file-name "mevedel-lsp-test.el" (file-name-directory (or load-file-name buffer-file-name)))))

(defvar mevedel-chat-test-agent
  (append (json-parse-string (getenv "MEVEDEL_TEST_AGENT_COMMAND") :array-type 'list) nil)
  "The scripted agent's command, without its script.")

(defun mevedel-chat-test--script (turns &rest more)
  "Write a scripted-agent script playing TURNS (a vector of vectors of
steps, each a plist) with MORE keys; return its file name."
  (let ((file (make-temp-file "mevedel-script-" nil ".json")))
    (with-temp-file file
      (insert (json-serialize (append (list :turns turns) more))))
    file))

(defun mevedel-chat-test--configure (script &rest agents)
  "Make the scripted agent playing SCRIPT the default agent; AGENTS are more
\(NAME COMMAND) entries of the `agents' setting."
  (customize-set-variable
   'mevedel-lsp-settings
   (list :agents (append (list :scripted (list :command (vconcat mevedel-chat-test-agent (list script))))
                         (apply #'append (mapcar (lambda (agent)
                                                   (list (intern (concat ":" (car agent)))
                                                         (list :command (vconcat (cadr agent)))))
                                                 agents)))
         :defaultAgent "scripted")))

(defun mevedel-chat-test--session (name)
  "A new session called NAME, made current; return its id."
  (plist-get (mevedel-test--from-document #'mevedel-lsp-create-session name) :sessionId))

(defun mevedel-chat-test--text (buffer)
  "BUFFER's text, without properties."
  (with-current-buffer buffer (buffer-substring-no-properties (point-min) (point-max))))

(defun mevedel-chat-test--has (buffer text)
  "Non-nil when BUFFER contains TEXT."
  (string-search text (mevedel-chat-test--text buffer)))

(defun mevedel-chat-test--construct (construct)
  "The text of mode-line CONSTRUCT (strings, lists and :eval forms), in the
current buffer.  `format-mode-line' gives nothing in batch Emacs."
  (cond ((stringp construct) construct)
        ((and (consp construct) (eq (car construct) :eval))
         (mevedel-chat-test--construct (eval (cadr construct) t)))
        ((consp construct) (mapconcat #'mevedel-chat-test--construct construct ""))
        (t "")))

(defun mevedel-chat-test--phase (buffer)
  "What BUFFER's mode line says of its turn."
  (with-current-buffer buffer (mevedel-chat-test--construct mode-line-process)))

(defun mevedel-chat-test--header (buffer)
  "BUFFER's header line, as shown."
  (with-current-buffer buffer (mevedel-chat-test--construct header-line-format)))

(defun mevedel-chat-test--wait-idle (buffer what)
  "Wait until the chat BUFFER's turn settled (WHAT names it)."
  (mevedel-test--wait (lambda () (equal (mevedel-chat-test--phase buffer) ":idle")) what 60))

(defun mevedel-chat-test--press (buffer key)
  "Press KEY in BUFFER, as the user would there; return what the command returned.
Afterwards the current buffer is the selected window's, as after a command."
  (set-buffer buffer)
  (let ((command (key-binding (kbd key))))
    (mevedel-test--log "%s in %s runs %s" key (buffer-name buffer) command)
    (prog1 (call-interactively command)
      (set-buffer (window-buffer (selected-window))))))

(defun mevedel-chat-test--file (name)
  "The content of the workspace file NAME."
  (with-temp-buffer
    (insert-file-contents (expand-file-name name mevedel-test-root))
    (buffer-string)))

(defun mevedel-chat-test--write (name content)
  (with-temp-file (expand-file-name name mevedel-test-root) (insert content)))

(defmacro mevedel-chat-test--with-settings (&rest body)
  "Run BODY, then give the server its default settings again."
  (declare (indent 0))
  `(unwind-protect (progn ,@body)
     (customize-set-variable 'mevedel-lsp-settings nil)))

(defun mevedel-chat-test--log-events (log event)
  "The EVENT records of the scripted agent's LOG, as JSON text."
  (with-temp-buffer
    (insert-file-contents log)
    (mapconcat #'identity
               (seq-filter (lambda (line) (string-search (format "\"event\": \"%s\"" event) line))
                           (split-string (buffer-string) "\n" t))
               "\n")))

(defconst mevedel-chat-test--options
  (vector (list :id "allow" :name "Allow once" :kind "allow_once")
          (list :id "reject" :name "Reject" :kind "reject_once")))


(ert-deftest mevedel-lsp-test-chat-prompt-runs-a-turn ()
  "The prompt buffer (region attached, agent picked) sends a turn; the chat
shows it all: response, folded reasoning, the tool call with its diff, the
plan, the permission decision (asked in the minibuffer with the agent's
options); a buffer of the file the agent wrote shows its new text; the next
prompt does not ask the agent again."
  (mevedel-chat-test--write "chat.txt" "before\n")
  (let* ((visiting (find-file-noselect (expand-file-name "chat.txt" mevedel-test-root)))
         (log (make-temp-file "mevedel-agent-" nil ".jsonl"))
         (script (mevedel-chat-test--script
                  (vector
                   (vector (list :think "Pondering the request.")
                           (list :say "Hello from the scripted agent.")
                           (list :tool_call (list :id "c1" :title "Write chat.txt" :kind "edit" :status "pending"))
                           (list :write (list :path "chat.txt" :content "written by the agent\n"))
                           (list :tool_update (list :id "c1" :status "completed" :text "wrote it"
                                                    :diff (list :path "chat.txt" :old "before\n"
                                                                :new "written by the agent\n")))
                           (list :plan (vector (list :content "write chat.txt" :status "completed" :priority "high")
                                               (list :content "report" :status "in_progress" :priority "low")))
                           (list :permission (list :tool_call_id "c2" :title "Run make clean"
                                                   :options mevedel-chat-test--options))
                           (list :say "Done after the question."))
                   (vector (list :say "The second answer.")))
                  :log log))
         (session (mevedel-chat-test--session "ERT chat"))
         (agent-questions nil)
         (permission-questions nil))
    (mevedel-chat-test--with-settings
      (mevedel-chat-test--configure script '("spare" ("mevedel-no-such-agent-program")))
      (cl-letf (((symbol-function 'completing-read)
                 (lambda (prompt collection &rest _)
                   (let ((offered (all-completions "" collection)))
                     (mevedel-test--log "asked %S offering %S" prompt offered)
                     (cond ((string-prefix-p "Agent" prompt)
                            (push offered agent-questions)
                            (seq-find (lambda (c) (string-prefix-p "scripted" c)) offered))
                           ((string-prefix-p "[mevedel]" prompt)
                            (push (cons prompt offered) permission-questions)
                            ;; The user takes their time.  The agent's write
                            ;; changed the session (a checkpoint): that change
                            ;; is not read while the question is open, since a
                            ;; request's answer would throw through it.
                            (mevedel-test--wait (lambda () mevedel-lsp--pending-changes)
                                                "the checkpoint's session change")
                            (should-not (mevedel-lsp--quiet-p))
                            (let ((until (+ (float-time) 0.3)))
                              (while (< (float-time) until) (accept-process-output nil 0.05)))
                            (should mevedel-lsp--pending-changes)
                            "Allow once")
                           (t (ert-fail (format "an unexpected question: %s" prompt))))))))
        ;; From the document, with a region: the file goes as an attachment.
        (let ((prompt-buffer
               (let ((transient-mark-mode t))
                 (set-buffer (mevedel-test--document-buffer))
                 (goto-char (point-min))
                 (set-mark (point))
                 (forward-line 1)
                 (activate-mark)
                 (mevedel-test--from-document #'call-interactively #'mevedel-lsp-prompt))))
          (should (eq (current-buffer) prompt-buffer))
          (should (derived-mode-p 'mevedel-lsp-prompt-mode))
          (should (equal mevedel-lsp-prompt--attachments '("doc.txt")))
          (should (equal mevedel-lsp-prompt--agent "scripted"))
          (should (equal (car agent-questions) '("scripted" "spare  (not installed)")))
          (should (string-match-p "attached: doc\\.txt" (mevedel-chat-test--header prompt-buffer)))
          (insert "Please write chat.txt\nand report back.")
          (let ((chat (mevedel-chat-test--press prompt-buffer "C-c C-c")))
            (should-not (buffer-live-p prompt-buffer))
            (should (eq (current-buffer) chat))
            (should (derived-mode-p 'mevedel-lsp-chat-mode))
            (mevedel-chat-test--wait-idle chat "the turn to settle")
            (let ((text (mevedel-chat-test--text chat)))
              (mevedel-test--log "chat:\n%s" text)
              (should (string-search "── Turn 1 · scripted · completed ──\nYou: Please write chat.txt\n     and report back.\nAttached: doc.txt" text))
              (should (string-search "Hello from the scripted agent." text))
              (should (string-search "Tool Write chat.txt  [edit · completed]\n    --- chat.txt\n    +++ chat.txt\n    -before\n    +written by the agent\n    wrote it" text))
              (should (string-search "Plan\n    - [x] write chat.txt\n    - [~] report" text))
              (should (string-search "Permission Run make clean → Allow once" text))
              (should (string-search "Done after the question.\n\n── completed (end_turn)" text)))
            ;; The question: the agent's options, in the minibuffer.
            (should (= (length permission-questions) 1))
            (should (string-match-p "scripted asks permission: Run make clean" (caar permission-questions)))
            (should (string-match-p "Answer (Allow once, Reject)" (caar permission-questions)))
            (should (equal (cdar permission-questions) '("Allow once" "Reject")))
            ;; Reasoning is folded away; TAB shows it, TAB again hides it.
            (with-current-buffer chat
              (goto-char (point-min))
              (search-forward "Pondering the request.")
              (let ((thought (match-beginning 0)))
                (should (invisible-p thought))
                (goto-char (point-min))
                (search-forward "Reasoning (TAB shows or hides it)")
                (mevedel-chat-test--press chat "TAB")
                (should-not (invisible-p thought))
                (mevedel-chat-test--press chat "TAB")
                (should (invisible-p thought))))
            (should (equal (mevedel-chat-test--file "chat.txt") "written by the agent\n"))
            (should (equal (mevedel-chat-test--text visiting) "written by the agent\n"))
            ;; The region's file went with the prompt.
            (should (string-search "Plans live in work://shared/plans/ now." (mevedel-chat-test--log-events log "prompt")))
            ;; The next prompt, from the chat: the agent is not asked again.
            (let ((again (mevedel-chat-test--press chat "p")))
              (should (derived-mode-p 'mevedel-lsp-prompt-mode))
              (should (equal mevedel-lsp-prompt--agent "scripted"))
              (should (equal mevedel-lsp-prompt--session session))
              (should (null mevedel-lsp-prompt--attachments))
              ;; C-c C-a attaches an address, C-c C-d drops one.
              (cl-letf (((symbol-function 'read-string) (lambda (&rest _) "work://shared/notes.md")))
                (mevedel-chat-test--press again "C-c C-a"))
              (cl-letf (((symbol-function 'read-string) (lambda (&rest _) "doc.txt")))
                (mevedel-chat-test--press again "C-c C-a"))
              (should (equal mevedel-lsp-prompt--attachments '("work://shared/notes.md" "doc.txt")))
              (cl-letf (((symbol-function 'completing-read) (lambda (&rest _) "doc.txt")))
                (mevedel-chat-test--press again "C-c C-d"))
              (should (equal mevedel-lsp-prompt--attachments '("work://shared/notes.md")))
              (insert "And again?")
              (mevedel-chat-test--press again "C-c C-c"))
            (should (= (length agent-questions) 1))
            (mevedel-chat-test--wait-idle chat "the second turn to settle")
            (let ((text (mevedel-chat-test--text chat)))
              (should (string-search "── Turn 2 · scripted · completed ──\nYou: And again?\nAttached: work://shared/notes.md" text))
              (should (string-search "The second answer." text))
              (should (< (string-search "Turn 1 " text) (string-search "Turn 2 " text))))
            ;; M-n and M-p move between the turns' headings.
            (with-current-buffer chat
              (goto-char (point-min))
              (mevedel-chat-test--press chat "M-n")
              (should (looking-at-p "── Turn 2 "))
              (search-forward "The second answer.")
              (mevedel-chat-test--press chat "M-p")
              (should (looking-at-p "── Turn 2 "))
              (mevedel-chat-test--press chat "M-p")
              (should (looking-at-p "── Turn 1 ")))
            ;; The address's content went with the second prompt.
            (should (string-search "alpha beta" (mevedel-chat-test--log-events log "prompt")))))))))

(ert-deftest mevedel-lsp-test-chat-streams-while-running-and-cancels ()
  "The response shows in the chat while the turn runs (the agent waits for
a cancel); C-c C-c in the chat cancels it and the chat says how it ended,
and why."
  (let* ((script (mevedel-chat-test--script
                  (vector (vector (list :say "Partial answer") (list :wait_cancel 30) (list :say "never said")))))
         (session (mevedel-chat-test--session "ERT cancel")))
    (mevedel-chat-test--with-settings
      (mevedel-chat-test--configure script)
      (let ((chat (mevedel-lsp-chat-send (mevedel-test--server) "Take your time" :session session)))
        (mevedel-test--wait (lambda () (mevedel-chat-test--has chat "Partial answer")) "the streamed response")
        ;; The turn is still running: the text came with didUpdate.
        (should (equal (mevedel-chat-test--phase chat) ":running"))
        (should (equal (mapcar (lambda (turn) (plist-get turn :state))
                               (plist-get (mevedel-test--call :mevedel/turn/list :sessionId session) :turns))
                       '("in-flight")))
        (should (mevedel-chat-test--has chat "── Turn 1 · scripted · running ──\nYou: Take your time"))
        (should (string-match-p "C-c C-c cancel" (mevedel-chat-test--header chat)))
        (let ((answer (mevedel-chat-test--press chat "C-c C-c")))
          (should (eq (plist-get answer :cancelled) t)))
        (mevedel-chat-test--wait-idle chat "the cancelled turn to settle")
        (let ((text (mevedel-chat-test--text chat)))
          (mevedel-test--log "chat:\n%s" text)
          (should (string-search "── Turn 1 · scripted · interrupted ──" text))
          (should (string-search "Partial answer\n\n── interrupted (cancelled)\nInterrupted: cancelled by the user." text))
          (should-not (string-search "never said" text)))
        (should (equal (mapcar (lambda (turn) (plist-get turn :state))
                               (plist-get (mevedel-test--call :mevedel/turn/list :sessionId session) :turns))
                       '("interrupted")))
        (let ((answer (mevedel-lsp-cancel session)))
          (should (eq (plist-get answer :cancelled) :json-false)))))))

;; The agent's initialize never answers: the abort comes while it starts.
(ert-deftest mevedel-lsp-test-chat-a-prompt-aborted-while-its-agent-starts-says-so ()
  "Aborting while the agent still starts stops the prompt before it reaches
the agent: the chat shows it as an aborted prompt, saying why, and no turn
is recorded."
  (let* ((log (make-temp-file "mevedel-agent-" nil ".jsonl"))
         (script (mevedel-chat-test--script (vector (vector (list :say "never said")))
                                            :log log
                                            :on_initialize (vector (list :wait_file (concat log ".never")))))
         (session (mevedel-chat-test--session "ERT abort while starting")))
    (mevedel-chat-test--with-settings
      (mevedel-chat-test--configure script)
      (customize-set-variable 'mevedel-lsp-settings (append mevedel-lsp-settings '(:cancelTimeoutSeconds 1)))
      (let ((chat (mevedel-lsp-chat-send (mevedel-test--server) "Never sent" :session session)))
        (mevedel-test--wait (lambda () (not (string-empty-p (mevedel-chat-test--log-events log "initialize"))))
                            "the agent's initialize")
        (mevedel-lsp-abort-turn session "the user gave up")
        (mevedel-chat-test--wait-idle chat "the aborted prompt to settle")
        (let ((text (mevedel-chat-test--text chat)))
          (mevedel-test--log "chat:\n%s" text)
          (should (string-search "── Aborted prompt · scripted ──\nYou: Never sent" text))
          (should (string-search "Aborted before it reached the agent: the user gave up." text))
          (should-not (string-search "Refused prompt" text)))
        (should (string-empty-p (mevedel-chat-test--log-events log "prompt")))
        (should (seq-empty-p (plist-get (mevedel-test--call :mevedel/turn/list :sessionId session) :turns)))))))

(ert-deftest mevedel-lsp-test-chat-rewind-redo-and-fork ()
  "From the chat, on a turn: Rewind to before it puts the agent's file back
\(and a buffer visiting it shows so), Redo brings its state back, Fork shows
that the files stay as they are; each impact names what happens to the
agent's own history."
  (mevedel-chat-test--write "rewound.txt" "original\n")
  (let* ((visiting (find-file-noselect (expand-file-name "rewound.txt" mevedel-test-root)))
         (script (mevedel-chat-test--script
                  (vector (vector (list :write (list :path "rewound.txt" :content "agent v1\n"))
                                  (list :say "wrote v1")))))
         (session (mevedel-chat-test--session "ERT chat rewind")))
    (mevedel-chat-test--with-settings
      (mevedel-chat-test--configure script)
      (let ((chat (mevedel-lsp-chat-send (mevedel-test--server) "Write version one" :session session)))
        (mevedel-chat-test--wait-idle chat "the turn to settle")
        (should (equal (mevedel-chat-test--file "rewound.txt") "agent v1\n"))
        (should (equal (mevedel-chat-test--text visiting) "agent v1\n"))
        (pop-to-buffer chat)
        ;; Fork after turn 1, declined: the impact says the files stay as
        ;; they are, and the new session does not continue the agent's history.
        (with-current-buffer chat
          (goto-char (point-min))
          (search-forward "── Turn 1"))
        (let ((before (mevedel-test--session-ids)))
          (should (null (mevedel-test--answering nil nil (mevedel-chat-test--press chat "f"))))
          (let ((impact (mevedel-test--impact)))
            (mevedel-test--log "fork impact:\n%s" impact)
            (should (string-prefix-p (format "Fork %s after the response of turn 1" session) impact))
            (should (string-match-p "^The working files are left as they are" impact))
            (should (string-match-p "only a Worktree Fork gives the new session its own files" impact))
            (should (string-match-p "^Agent history: the new session does not continue agent scripted's own history" impact)))
          (should (equal (mevedel-test--session-ids) before)))
        ;; Rewind to before turn 1, from its text.
        (with-current-buffer chat
          (goto-char (point-min))
          (search-forward "wrote v1"))
        (let ((result (mevedel-test--answering t '("^Before the prompt of turn 1")
                        (mevedel-chat-test--press chat "w"))))
          (should (eq (plist-get result :committed) t)))
        (let ((impact (mevedel-test--impact)))
          (mevedel-test--log "impact:\n%s" impact)
          (should (string-prefix-p (format "Rewind %s to before the prompt of turn 1: 0 turns kept." session) impact))
          (should (string-match-p "^  rewound\\.txt (pre-turn of turn 1: 9 bytes)$" impact))
          (should (string-match-p "^Agent history: agent scripted's own history of this conversation will be detached" impact)))
        (should (equal (mevedel-chat-test--file "rewound.txt") "original\n"))
        (should (equal (mevedel-chat-test--text visiting) "original\n"))
        (mevedel-test--wait (lambda () (not (mevedel-chat-test--has chat "wrote v1"))) "the chat to drop the rewound turn")
        (should (mevedel-chat-test--has chat "No turns yet."))
        ;; Redo: the state with the turn comes back, file and chat.
        (mevedel-test--answering t '("^1 turn")
          (mevedel-chat-test--press chat "y"))
        (should (equal (mevedel-chat-test--file "rewound.txt") "agent v1\n"))
        (should (equal (mevedel-chat-test--text visiting) "agent v1\n"))
        (mevedel-test--wait (lambda () (mevedel-chat-test--has chat "wrote v1")) "the chat to show the redone turn")
        ;; Fork, confirmed: the new session's chat shows, the files are as they were.
        (with-current-buffer chat
          (goto-char (point-min))
          (search-forward "── Turn 1"))
        (let* ((forked (mevedel-test--answering t nil (mevedel-chat-test--press chat "f")))
               (child (plist-get (plist-get forked :session) :sessionId)))
          (should (derived-mode-p 'mevedel-lsp-chat-mode))
          (should (equal mevedel-lsp--session-id child))
          (should (mevedel-chat-test--has (current-buffer) "wrote v1")))
        (should (equal (mevedel-chat-test--file "rewound.txt") "agent v1\n"))))))

(ert-deftest mevedel-lsp-test-chat-errors-say-what-to-do ()
  "A refused prompt and a failed turn show in the chat with what to do."
  (let ((session (mevedel-chat-test--session "ERT chat errors"))
        (server (mevedel-test--server)))
    (mevedel-chat-test--with-settings
      ;; No agent configured.
      (customize-set-variable 'mevedel-lsp-settings nil)
      (let ((chat (mevedel-lsp-chat-send server "Anyone there?" :session session)))
        (mevedel-chat-test--wait-idle chat "the refusal")
        (let ((text (mevedel-chat-test--text chat)))
          (mevedel-test--log "chat:\n%s" text)
          (should (string-search "── Refused prompt ──\nYou: Anyone there?\n\nError (agent-not-configured): " text))
          (should (string-search "What to do: add the agent to :agents in `mevedel-lsp-settings'" text)))
        (should (mevedel-test--contains "*Messages*" "mevedel: the prompt was refused")))
      ;; An agent whose program is missing.
      (customize-set-variable 'mevedel-lsp-settings
                              '(:agents (:ghost (:command ["mevedel-no-such-agent-program"])) :defaultAgent "ghost"))
      (let ((chat (mevedel-lsp-chat-send server "Hello ghost" :session session)))
        (mevedel-chat-test--wait-idle chat "the second refusal")
        (let ((text (mevedel-chat-test--text chat)))
          (should (string-search "Error (agent-not-installed): " text))
          (should (string-search "mevedel-no-such-agent-program" text))
          (should (string-search "What to do: install" text))
          ;; Only the last refusal shows.
          (should-not (string-search "agent-not-configured" text))))
      ;; An agent that crashes mid-turn: the turn settles errored, what arrived is kept.
      (mevedel-chat-test--configure
       (mevedel-chat-test--script (vector (vector (list :say "About to fall over")
                                                  (list :stderr "out of cheese")
                                                  (list :crash 3)))))
      (let ((chat (mevedel-lsp-chat-send server "Crash please" :session session)))
        (mevedel-chat-test--wait-idle chat "the failed turn")
        (let ((text (mevedel-chat-test--text chat)))
          (mevedel-test--log "chat:\n%s" text)
          (should (string-search "── Turn 1 · scripted · errored ──" text))
          (should (string-search "About to fall over\n\n── errored\nError (agent-failed): " text))
          (should (string-search "out of cheese" text))
          (should (string-match-p "^What to do: " text))
          (should-not (string-search "Hello ghost" text)))))))

(ert-deftest mevedel-lsp-test-chat-a-prompt-sent-as-a-refusal-shows-stands ()
  "A prompt sent the moment the chat shows a refusal (the refusal's settled
didUpdate read, the refused prompt's answer not yet) runs as itself: the
late answer does not mark it refused with the earlier prompt's error."
  (let* ((session (mevedel-chat-test--session "ERT chat after a refusal"))
         (server (mevedel-test--server))
         (script (mevedel-chat-test--script (vector (vector (list :say "Here after all")))))
         (next nil)
         (send-next (lambda (_server params)
                      ;; Right where the chat settled the refusal, before
                      ;; the filter reads the answer behind it.
                      (when (and (equal (plist-get params :phase) "settled") (not next))
                        (mevedel-chat-test--configure script)
                        (setq next (mevedel-lsp-chat-send server "Second try" :session session))))))
    (mevedel-chat-test--with-settings
      (customize-set-variable 'mevedel-lsp-settings
                              '(:agents (:ghost (:command ["mevedel-no-such-agent-program"])) :defaultAgent "ghost"))
      (advice-add 'mevedel-lsp-chat--update :after send-next)
      (unwind-protect
          (progn
            (mevedel-lsp-chat-send server "Hello ghost" :session session)
            (mevedel-test--wait (lambda () next) "the second prompt sent as the refusal showed")
            (mevedel-test--wait (lambda () (mevedel-chat-test--has next "── completed")) "the second prompt's turn")
            (let ((text (mevedel-chat-test--text next)))
              (mevedel-test--log "chat:\n%s" text)
              (should (string-search "── Turn 1 · scripted · completed ──\nYou: Second try\n" text))
              (should-not (string-search "Refused prompt" text))
              (should-not (string-search "agent-not-installed" text))))
        (advice-remove 'mevedel-lsp-chat--update send-next)))))

(defconst mevedel-chat-test--answer-then-silence
  "import json, sys
def read():
    length = None
    while True:
        line = sys.stdin.buffer.readline()
        if not line:
            sys.exit(0)
        if line.strip() == b'':
            break
        name, _, value = line.decode().partition(':')
        if name.strip().lower() == 'content-length':
            length = int(value)
    return json.loads(sys.stdin.buffer.read(length))
def frame(message):
    body = json.dumps(message).encode()
    return b'Content-Length: %d\\r\\n\\r\\n' % len(body) + body
while True:
    message = read()
    if 'id' in message:
        sys.stdout.buffer.write(frame({'jsonrpc': '2.0', 'id': message['id'], 'result': {'cancelled': True}})
                                + frame({'jsonrpc': '2.0', 'method': 'mevedel/turn/didUpdate', 'params': {'phase': 'settled'}}))
        sys.stdout.buffer.flush()
"
  "A JSON-RPC peer that answers each request and, in the same write, sends a
notification behind the answer; then writes nothing until asked again.")

(ert-deftest mevedel-lsp-test-chat-a-message-right-behind-an-answer-is-read ()
  "What the server writes right behind the answer to a waiting request (a
turn's last didUpdate behind the answer to `mevedel/turn/cancel') is
read, though the server writes nothing more.  (Emacs 28's jsonrpc left
it unread: the turn never settled in the chat.)"
  (let* ((seen nil)
         (process (make-process :name "mevedel-answer-then-silence" :noquery t
                                :connection-type 'pipe :coding 'utf-8-emacs-unix
                                :command (list (car mevedel-chat-test-agent) "-c"
                                               mevedel-chat-test--answer-then-silence)))
         (connection (jsonrpc-process-connection
                      :name "answer-then-silence" :process process
                      :notification-dispatcher (lambda (_connection method params)
                                                 (push (cons method params) seen)))))
    (unwind-protect
        (progn
          (should (eq (plist-get (jsonrpc-request connection :mevedel/turn/cancel (list :sessionId "s")) :cancelled) t))
          (mevedel-test--wait (lambda () seen) "the notification written right behind the answer" 10)
          (should (equal (caar seen) 'mevedel/turn/didUpdate))
          (should (equal (plist-get (cdar seen) :phase) "settled")))
      (jsonrpc-shutdown connection t))))

;;; mevedel-lsp-chat-test.el ends here

(ert-deftest mevedel-lsp-test-chat-mode-and-model-picker ()
  "The chat's header line shows the agent's mode and options; o in the chat
\(C-c C-o in the prompt buffer) chooses in the minibuffer: a choice reaches
the running agent at once and the next turn runs with it; a value the agent
refuses is said, naming it and the agent, and not taken; C-g sends nothing."
  (let* ((log (make-temp-file "mevedel-agent-" nil ".jsonl"))
         (script (mevedel-chat-test--script
                  (vector (vector (list :echo_options t)))
                  :log log
                  :modes (list :current "ask" :available (vector (list :id "ask" :name "Ask") (list :id "plan" :name "Plan")))
                  :config_options (vector (list :id "model" :name "Model" :category "model" :current "small"
                                                :options (vector (list :value "small" :name "Small")
                                                                 (list :value "large" :name "Large")))
                                          (list :id "fast" :name "Fast" :type "boolean" :current :false))
                  :refuse (vector "model=large")))
         (session (mevedel-chat-test--session "ERT chat options"))
         (server (mevedel-test--server))
         (answers nil)
         (asked nil))
    (mevedel-chat-test--with-settings
      (mevedel-chat-test--configure script)
      (let ((chat (mevedel-lsp-chat-send server "One" :session session)))
        (mevedel-chat-test--wait-idle chat "the first turn")
        (should (mevedel-chat-test--has chat "options: mode=ask model=small fast=false"))
        (mevedel-test--wait (lambda () (string-search "mode Ask · Model Small · Fast off" (mevedel-chat-test--header chat)))
                            "the header line's mode and options")
        (cl-letf (((symbol-function 'completing-read)
                   (lambda (prompt collection &rest _)
                     (push (cons prompt (all-completions "" collection)) asked)
                     (mevedel-test--log "asked %S" (car asked))
                     (let ((answer (pop answers)))
                       (if (eq answer 'quit) (signal 'quit nil) answer)))))
          ;; o in the chat: the mode, then Plan.
          (setq answers (list "Mode: Ask" "Plan"))
          (mevedel-chat-test--press chat "o")
          (should (equal (reverse asked) '(("Change (agent scripted): " "Mode: Ask" "Model: Small" "Fast: off")
                                           ("Mode (now Ask): " "Ask" "Plan"))))
          (should (string-search "\"modeId\": \"plan\"" (mevedel-chat-test--log-events log "set_mode")))
          (should (string-search "mode Plan" (mevedel-chat-test--header chat)))
          ;; A value the agent refuses: said, naming it and the agent.
          (setq answers (list "Model: Small" "Large"))
          (let ((err (should-error (mevedel-chat-test--press chat "o") :type 'user-error)))
            (mevedel-test--log "refused: %s" (cadr err))
            (should (string-match-p "model=large" (cadr err)))
            (should (string-match-p "agent 'scripted'" (cadr err)))
            (should (string-match-p "not available now" (cadr err))))
          (should (string-search "Model Small" (mevedel-chat-test--header chat)))
          ;; C-g at the first question: nothing is sent.
          (setq answers (list 'quit))
          (let ((before (mevedel-chat-test--log-events log "set_config_option")))
            (should (eq (condition-case nil (progn (mevedel-chat-test--press chat "o") nil) (quit 'quit)) 'quit))
            (should (equal (mevedel-chat-test--log-events log "set_config_option") before)))
          ;; In the prompt buffer: C-c C-o, Fast on; then the turn runs with it all.
          (let ((prompt-buffer (mevedel-chat-test--press chat "p")))
            (should (eq (current-buffer) prompt-buffer))
            (setq answers (list "Fast: off" "on"))
            (mevedel-chat-test--press prompt-buffer "C-c C-o")
            (should (string-search "\"configId\": \"fast\", \"value\": true" (mevedel-chat-test--log-events log "set_config_option")))
            (insert "Two")
            (mevedel-chat-test--press prompt-buffer "C-c C-c")))
        (mevedel-chat-test--wait-idle chat "the second turn")
        (should (mevedel-chat-test--has chat "options: mode=plan model=small fast=true"))
        (should (string-search "mode Plan · Model Small · Fast on" (mevedel-chat-test--header chat)))))))
