;;; mevedel-lsp-test.el --- ERT tests of mevedel-lsp.el against the real server  -*- lexical-binding: t; -*-

;; Run by tests/clients/test_emacs.py:
;;   emacs --batch -q -L clients/emacs -l tests/clients/emacs/mevedel-lsp-test.el \
;;         -f ert-run-tests-batch-and-exit
;; with MEVEDEL_TEST_WORKSPACE, MEVEDEL_TEST_DOCUMENT and MEVEDEL_LSP_COMMAND
;; (a JSON array) set.  Each test drives eglot the way a user does and checks
;; what the user would see.

;;; Code:

(require 'ert)
(require 'json)
(require 'mevedel-lsp)

(defvar eglot-report-progress)
(defvar mevedel-test-root (file-name-as-directory (getenv "MEVEDEL_TEST_WORKSPACE")))
(defvar mevedel-test-document (getenv "MEVEDEL_TEST_DOCUMENT"))
(defvar mevedel-test-long-line (getenv "MEVEDEL_TEST_LONG_LINE"))

(setq mevedel-lsp-server-command
      (append (json-parse-string (getenv "MEVEDEL_LSP_COMMAND") :array-type 'list) nil))
(setq eglot-sync-connect t
      eglot-connect-timeout 60
      ;; One server for the whole run; the tests share it like a user's session.
      eglot-autoshutdown nil)

(defun mevedel-test--log (format-string &rest args)
  "Print to stderr, which the pytest wrapper shows on failure."
  (princ (concat (apply #'format format-string args) "\n") #'external-debugging-output))

(defun mevedel-test--wait (predicate what &optional seconds)
  "Process events until PREDICATE holds; fail naming WHAT after SECONDS."
  (let ((deadline (+ (float-time) (or seconds 30))))
    (while (and (not (funcall predicate)) (< (float-time) deadline))
      (accept-process-output nil 0.05))
    (unless (funcall predicate)
      (ert-fail (format "timed out waiting for %s" what)))))

(defun mevedel-test--document-buffer ()
  "The test document, shown in the selected window and managed by
mevedel-lsp the way `mevedel-lsp-ensure' does it."
  (let ((buffer (find-file-noselect mevedel-test-document)))
    ;; eglot answers eldoc only for a buffer shown in a window.
    (switch-to-buffer buffer)
    (with-current-buffer buffer
      (unless (derived-mode-p 'text-mode) (text-mode))
      (unless (eglot-managed-p)
        (mevedel-lsp-ensure)
        ;; eglot-ensure connects from `post-command-hook'; batch runs no
        ;; commands, so run the hook as the command loop would.
        (run-hooks 'post-command-hook)
        (mevedel-test--wait #'eglot-managed-p "eglot to manage the document")
        ;; flymake starts its backends after a command, too.
        (flymake-start)))
    buffer))

(defmacro mevedel-test--in-document (&rest body)
  "Run BODY in the managed test document, restoring its text afterwards."
  (declare (indent 0))
  `(with-current-buffer (mevedel-test--document-buffer)
     (let ((original (buffer-string)))
       (unwind-protect (progn ,@body)
         (let ((inhibit-read-only t))
           (erase-buffer)
           (insert original)
           (set-buffer-modified-p nil))))))

(defun mevedel-test--flush-changes ()
  "Send pending edits now, as eglot's idle timer would; batch Emacs is never idle."
  (eglot--signal-textDocument/didChange))

(defun mevedel-test--goto (text &optional offset)
  "Put point OFFSET characters into the first occurrence of TEXT."
  (goto-char (point-min))
  (search-forward text)
  (goto-char (+ (match-beginning 0) (or offset 0))))

(defun mevedel-test--completion-candidates ()
  "The candidates `completion-at-point' would offer at point, and its region."
  (let* ((capf (run-hook-with-args-until-success 'completion-at-point-functions))
         (start (nth 0 capf))
         (candidates (and capf (all-completions (buffer-substring-no-properties start (point)) (nth 2 capf)))))
    (mevedel-test--log "completion region %S candidates %S"
                       (and capf (buffer-substring-no-properties start (point)))
                       (mapcar #'substring-no-properties candidates))
    candidates))

(defun mevedel-test--eldoc-text ()
  "What eldoc would show at point: every documentation function's answer."
  (let ((collected nil))
    (dolist (fn (if (boundp 'eldoc-documentation-functions)
                    (buffer-local-value 'eldoc-documentation-functions (current-buffer))
                  nil))
      (when (functionp fn)
        (let ((result (funcall fn (lambda (doc &rest _) (when (stringp doc) (push doc collected)) t))))
          (when (stringp result) (push result collected)))))
    (mevedel-test--wait (lambda () collected) "eldoc documentation")
    (mapconcat #'substring-no-properties collected "\n")))

(defun mevedel-test--kill-virtual-buffers ()
  (dolist (buffer (buffer-list))
    (when (buffer-local-value 'mevedel-lsp--uri buffer)
      (kill-buffer buffer))))


(ert-deftest mevedel-lsp-test-server-starts-for-text ()
  "`mevedel-lsp-ensure' starts mevedel-lsp through eglot for a text buffer."
  (with-current-buffer (mevedel-test--document-buffer)
    (let ((server (eglot-current-server)))
      (should (cl-typep server 'mevedel-lsp-server))
      (should (equal (plist-get (eglot--server-info server) :name) "mevedel-lsp")))))

(ert-deftest mevedel-lsp-test-completion-offers-directory-entries ()
  "Completion at point after work://shared/ offers the entries of the real directory."
  (mevedel-test--in-document
    (goto-char (point-max))
    (insert "Next: work://shared/")
    (let ((candidates (mevedel-test--completion-candidates)))
      (should (seq-some (lambda (c) (string-suffix-p "notes.md" c)) candidates))
      (should (seq-some (lambda (c) (string-match-p "plans/?\\'" c)) candidates)))))

(ert-deftest mevedel-lsp-test-completion-inserts-canonical-address ()
  "Choosing a candidate leaves the plain canonical address in the buffer."
  (mevedel-test--in-document
    (goto-char (point-max))
    (insert "Pick: work://shared/no")
    (let ((completion-styles '(basic))
          (completion-cycle-threshold nil))
      (completion-at-point))
    (should (equal (buffer-substring-no-properties (line-beginning-position) (point))
                   "Pick: work://shared/notes.md"))))

(ert-deftest mevedel-lsp-test-completion-of-scheme-prefixes ()
  "With no scheme yet, completion offers the address schemes."
  (mevedel-test--in-document
    (goto-char (point-max))
    (insert "Start: wo")
    (should (member "work://" (mevedel-test--completion-candidates)))))

(defun mevedel-test--complete-with-key (text)
  "On a new line, type TEXT and press C-M-i as a user would; return the line."
  (goto-char (point-max))
  (insert "\n" text)
  (let ((completion-styles '(basic partial-completion emacs22))
        (completion-cycle-threshold nil))
    (call-interactively (key-binding (kbd "C-M-i"))))
  (buffer-substring-no-properties (line-beginning-position) (point)))

(ert-deftest mevedel-lsp-test-completion-never-doubles-the-scheme ()
  "C-M-i completes addresses in a managed text buffer (Emacs 28's text modes
bind it to ispell's word completion); completing after work:// replaces
the whole token, so the scheme is never doubled (work://://), whatever came
before it on the line, even with items the server computed for older text."
  (mevedel-test--in-document
    (should (derived-mode-p 'text-mode))
    ;; Emacs 30 leaves C-M-i to the global `complete-symbol', which runs
    ;; `completion-at-point'.
    (should (memq (key-binding (kbd "C-M-i")) '(completion-at-point complete-symbol)))
    ;; Only this package's completion: eglot's takes the symbol before point.
    (should (memq #'mevedel-lsp-completion-at-point completion-at-point-functions))
    (should-not (memq #'eglot-completion-at-point completion-at-point-functions))
    (pcase-dolist (`(,typed . ,expected)
                   '(("See work://" . "See work://shared/")
                     ("work://" . "work://shared/")
                     ("wo" . "work://")
                     ("x work:" . "x work://")
                     ("work:/" . "work://")
                     ("[notes](work://" . "[notes](work://shared/")
                     ("(work://shared/no" . "(work://shared/notes.md")))
      (let ((line (mevedel-test--complete-with-key typed)))
        (mevedel-test--log "%S completes to %S" typed line)
        (should (equal line expected))
        (should-not (string-match-p "://.*://" line))))
    ;; Completing again after a completed scheme lists its entries.
    (let ((line (mevedel-test--complete-with-key "wo")))
      (should (equal line "work://"))
      (should (member "work://shared/" (mevedel-test--completion-candidates))))
    ;; Items the server computed for "wo", applied to "work://": the region is
    ;; the buffer's token, so the candidate replaces all of it.
    (goto-char (point-max))
    (insert "\nwo")
    (let ((stale (mevedel-lsp--completion-items (eglot-current-server))))
      (should (seq-some (lambda (item) (equal (plist-get (plist-get item :textEdit) :newText) "work://")) stale))
      (insert "rk://")
      (cl-letf (((symbol-function 'mevedel-lsp--completion-items) (lambda (_server) stale)))
        (call-interactively (key-binding (kbd "C-M-i"))))
      (should (equal (buffer-substring-no-properties (line-beginning-position) (point)) "work://")))))

(ert-deftest mevedel-lsp-test-hover-shows-canonical-form ()
  "Eldoc on a non-canonical spelling shows the canonical address."
  (mevedel-test--in-document
    (goto-char (point-max))
    (insert "Odd: work://shared/%6Eotes.md here\n")
    (mevedel-test--flush-changes)
    (mevedel-test--goto "work://shared/%6E" 3)
    (let ((text (mevedel-test--eldoc-text)))
      (mevedel-test--log "eldoc: %s" text)
      (should (string-match-p (regexp-quote "work://shared/notes.md") text))
      (should-not (string-match-p (regexp-quote mevedel-test-root) text)))))

(ert-deftest mevedel-lsp-test-definition-visits-backing-file ()
  "M-. on a file-backed address visits the backing file."
  (with-current-buffer (mevedel-test--document-buffer)
    (mevedel-test--goto "work://shared/notes.md" 5)
    (let ((origin (current-buffer)))
      (unwind-protect
          (progn
            (xref-find-definitions "LSP identifier at point")
            (should (equal (file-truename (buffer-file-name))
                           (file-truename (expand-file-name ".mevedel/shared/notes.md" mevedel-test-root))))
            (should (looking-at-p "# Shared notes")))
        (switch-to-buffer origin)))))

(ert-deftest mevedel-lsp-test-definition-opens-virtual-document ()
  "M-. on a directory address opens a read-only buffer read through the server."
  (mevedel-test--kill-virtual-buffers)
  (with-current-buffer (mevedel-test--document-buffer)
    (mevedel-test--goto "work://shared/plans/" 5)
    (let* ((origin (current-buffer))
           (server (eglot-current-server))
           ;; eglot 1.10+ (Emacs 30) shows progress in its mode-line
           ;; indicator unless told to use the echo area.
           (eglot-report-progress 'messages)
           (echoed nil)
           (echo (lambda (format-string &rest args)
                   (when format-string (push (apply #'format-message format-string args) echoed)))))
      (unwind-protect
          (progn
            (advice-add 'message :before echo)
            (unwind-protect (xref-find-definitions "LSP identifier at point")
              (advice-remove 'message echo))
            (should mevedel-lsp-virtual-mode)
            (should buffer-read-only)
            (should (mevedel-lsp-virtual-uri-p mevedel-lsp--uri))
            (should (string-match-p "first\\.md" (buffer-string)))
            (should (string-match-p "second\\.md" (buffer-string)))
            ;; The text is exactly the server's plain projection.
            (let ((page (jsonrpc-request server :mevedel/resource/read
                                         (list :uri mevedel-lsp--uri :view "plain"))))
              (should (equal (buffer-string) (concat (plist-get page :text) "\n"))))
            (should-error (insert "x") :type 'buffer-read-only)
            ;; The read's $/progress reached the echo area (Emacs 30's
            ;; progress reporter does not log it in *Messages*).
            (mevedel-test--log "echoed: %S" echoed)
            (should (seq-some (lambda (line) (string-search "Read work://shared/plans" line)) echoed)))
        (switch-to-buffer origin)))))

(ert-deftest mevedel-lsp-test-read-address-pages-long-file ()
  "`mevedel-lsp-read-address' on a file opens the file; on a listing, a virtual buffer."
  (mevedel-test--kill-virtual-buffers)
  (with-current-buffer (mevedel-test--document-buffer)
    (let ((origin (current-buffer)))
      (unwind-protect
          (progn
            (mevedel-lsp-read-address "work://shared/long.txt")
            (should (equal (file-truename (buffer-file-name))
                           (file-truename (expand-file-name ".mevedel/shared/long.txt" mevedel-test-root))))
            (switch-to-buffer origin)
            (mevedel-lsp-read-address "mevedel://")
            (should mevedel-lsp-virtual-mode)
            (should (string-match-p "mevedel://architecture\\.md" (buffer-string))))
        (switch-to-buffer origin)))))

(ert-deftest mevedel-lsp-test-read-document-continues-pages-and-lines ()
  "A whole read joins pages and continues lines cut at the page width."
  (with-current-buffer (mevedel-test--document-buffer)
    (let* ((document (mevedel-lsp-read-document (eglot-current-server)
                                                (list :address "work://shared/long.txt")))
           (expected (with-temp-buffer
                       (insert-file-contents (expand-file-name ".mevedel/shared/long.txt" mevedel-test-root))
                       (buffer-string))))
      (should (equal (plist-get document :kind) "file"))
      (should (= (length (plist-get document :text)) (length expected)))
      (should (equal (plist-get document :text) expected)))))

(ert-deftest mevedel-lsp-test-read-address-reports-server-reason ()
  "A failing address is reported with the authored address and the server's reason."
  (with-current-buffer (mevedel-test--document-buffer)
    (let ((err (should-error (mevedel-lsp-read-address "wrok://shared/x") :type 'user-error)))
      (mevedel-test--log "error: %s" (cadr err))
      (should (string-match-p (regexp-quote "wrok://shared/x") (cadr err)))
      (should-not (string-match-p (regexp-quote mevedel-test-root) (cadr err))))))

(ert-deftest mevedel-lsp-test-settings-reach-the-server ()
  "`mevedel-lsp-settings' changes what the server diagnoses."
  (mevedel-test--in-document
    (let ((server (eglot-current-server)))
      (unwind-protect
          (progn
            (customize-set-variable 'mevedel-lsp-settings '(:diagnostics (:unknownSchemes "all")))
            (goto-char (point-max))
            (insert "Elsewhere: foo://bar\n")
            (mevedel-test--flush-changes)
            (mevedel-test--wait
             (lambda () (seq-some (lambda (d) (string-match-p "foo://" (flymake-diagnostic-text d)))
                                  (flymake-diagnostics)))
             "a diagnostic on foo://")
            (customize-set-variable 'mevedel-lsp-settings '(:diagnostics (:unknownSchemes "off")))
            (mevedel-test--wait
             (lambda () (not (seq-some (lambda (d) (string-match-p "foo://" (flymake-diagnostic-text d)))
                                       (flymake-diagnostics))))
             "the foo:// diagnostic to go away"))
        (customize-set-variable 'mevedel-lsp-settings nil)
        (mevedel-lsp-send-settings server)))))


;;;; Sessions

(defvar mevedel-test-expired-session (getenv "MEVEDEL_TEST_EXPIRED_SESSION"))
(defvar mevedel-test-held-session (getenv "MEVEDEL_TEST_HELD_SESSION"))
(defvar mevedel-test-other-host (getenv "MEVEDEL_TEST_OTHER_HOST"))
(defvar mevedel-test-not-a-session (getenv "MEVEDEL_TEST_NOT_A_SESSION"))

(defun mevedel-test--server ()
  (with-current-buffer (mevedel-test--document-buffer) (eglot-current-server)))

(defun mevedel-test--from-document (command &rest args)
  "Run COMMAND with ARGS from the test document, as a user typing it there.
Afterwards the current buffer is the selected window's, as after a command.
Starting a session beside those earlier tests left open asks once per
server whether to start it anyway (both share the project's files): the
user accepts; any other question is asked as it would be."
  (set-buffer (mevedel-test--document-buffer))
  (let ((read (symbol-function 'completing-read)))
    (cl-letf (((symbol-function 'completing-read)
               (lambda (prompt collection &rest rest)
                 (if (string-match-p "share this project's files" prompt)
                     "Start anyway"
                   (apply read prompt collection rest)))))
      (prog1 (apply command args)
        (set-buffer (window-buffer (selected-window)))))))

(defun mevedel-test--run (command &rest args)
  "Run COMMAND with ARGS here; afterwards the current buffer is the selected window's."
  (prog1 (apply command args)
    (set-buffer (window-buffer (selected-window)))))

(defun mevedel-test--call (method &rest params)
  "Send the server METHOD directly, as an agent driving a turn would."
  (jsonrpc-request (mevedel-test--server) method (apply #'mevedel-lsp--object params)))

(defun mevedel-test--settle-turn (session prompt)
  "Run one whole turn with PROMPT in SESSION through the server's turn requests."
  (mevedel-test--call :mevedel/turn/begin :sessionId session :prompt prompt)
  (mevedel-test--call :mevedel/turn/append :sessionId session :kind "response" :text (concat "answer to " prompt))
  (mevedel-test--call :mevedel/turn/settle :sessionId session))

(defun mevedel-test--row (session)
  "SESSION's row in the server's listing."
  (seq-find (lambda (row) (equal (plist-get row :sessionId) session))
            (plist-get (mevedel-test--call :mevedel/session/list) :sessions)))

(defun mevedel-test--contains (buffer text)
  (with-current-buffer buffer
    (save-excursion (goto-char (point-min)) (search-forward text nil t))))

(defun mevedel-test--picker-choosing (session answers)
  "Open a session through `mevedel-lsp-open-session' as a user would.
The picker's completing-read chooses SESSION and records what it offered;
the server's question (if any) is answered with the next of ANSWERS.
Return (OFFERED QUESTIONS RESULT-OR-ERROR)."
  (let ((offered nil) (questions nil) (outcome nil))
    (cl-letf (((symbol-function 'completing-read)
               (lambda (prompt collection &rest _)
                 (if (string-prefix-p "Open session" prompt)
                     (let ((candidates (all-completions "" collection)))
                       (setq offered (mapcar (lambda (c) (concat (substring-no-properties c)
                                                                 (mevedel-lsp--row-annotation c)))
                                             candidates))
                       (or (seq-find (lambda (c) (string-match-p (regexp-quote session) c)) candidates)
                           (ert-fail (format "the picker does not offer %s: %S" session offered))))
                   (push prompt questions)
                   (or (pop answers) (ert-fail (format "an unexpected question: %s" prompt)))))))
      (setq outcome (condition-case err
                        (mevedel-test--from-document #'call-interactively #'mevedel-lsp-open-session)
                      (user-error (set-buffer (window-buffer (selected-window))) err))))
    (list offered (nreverse questions) outcome)))

(ert-deftest mevedel-lsp-test-session-round-trip ()
  "Create, list with its action, open its transcript, rename, refresh on didChange, turns."
  (let* ((state (mevedel-test--from-document #'mevedel-lsp-create-session "ERT session"))
         (session (plist-get state :sessionId)))
    (should (equal (plist-get state :displayName) "ERT session"))
    (mevedel-test--settle-turn session "First prompt from ERT")
    (kill-buffer (mevedel-lsp--transcript-name session))
    ;; The sessions list shows the row with its action and turn count.
    (mevedel-test--from-document #'mevedel-lsp-list-sessions)
    (let ((listing (current-buffer)))
      (should (derived-mode-p 'mevedel-lsp-sessions-mode))
      (goto-char (point-min))
      (should (search-forward session nil t))
      (let ((line (buffer-substring-no-properties (line-beginning-position) (line-end-position))))
        (mevedel-test--log "listing row: %s" line)
        (should (string-match-p "ERT session +Switch +1 " line)))
      ;; The completing-read picker offers it with the same facts; choosing
      ;; it opens the session and shows its transcript.
      (pcase-let ((`(,offered ,questions ,opened) (mevedel-test--picker-choosing session nil)))
        (mevedel-test--log "picker offered: %S" offered)
        (should (seq-some (lambda (o) (string-match-p
                                       (format "ERT session (%s)  \\[Switch\\]  1 turn " (regexp-quote session)) o))
                          offered))
        (should (seq-some (lambda (o) (string-match-p
                                       (format "\\[Take over\\].*host %s" (regexp-quote mevedel-test-other-host)) o))
                          offered))
        (should (null questions))
        (should (equal (plist-get opened :action) "switch")))
      (let ((transcript (get-buffer (mevedel-lsp--transcript-name session))))
        (should (eq (current-buffer) transcript))
        (should buffer-read-only)
        (should (mevedel-test--contains transcript "First prompt from ERT"))
        ;; Rename: the listing, refreshed by the didChange, shows the new name.
        (mevedel-lsp-rename-session "Renamed by ERT" session)
        (mevedel-test--wait (lambda () (mevedel-test--contains listing "Renamed by ERT")) "the new name in the listing")
        (should (equal (plist-get (mevedel-test--row session) :displayName) "Renamed by ERT"))
        ;; Another settled turn: the open transcript is read again, and point
        ;; stays on the line the reader was on.
        (with-current-buffer transcript
          (goto-char (point-min))
          (search-forward "First prompt from ERT")
          (set-window-point (get-buffer-window transcript) (point)))
        (mevedel-test--settle-turn session "Second prompt from ERT")
        (mevedel-test--wait (lambda () (mevedel-test--contains transcript "Second prompt from ERT"))
                            "the transcript to show the second turn")
        (with-current-buffer transcript
          (should (string-match-p "First prompt from ERT"
                                  (buffer-substring (line-beginning-position) (line-end-position))))
          (should (equal (buffer-string)
                         (plist-get (mevedel-lsp-read-document (mevedel-test--server) (list :uri mevedel-lsp--uri))
                                    :text))))
        ;; The turns list: RET jumps to the turn in the transcript, v shows it.
        (mevedel-test--run #'mevedel-lsp-list-turns session)
        (should (derived-mode-p 'mevedel-lsp-turns-mode))
        (should (mevedel-test--contains (current-buffer) "Second prompt from ERT"))
        (goto-char (point-min))
        (search-forward "First prompt from ERT")
        (mevedel-test--run #'mevedel-lsp-turns-visit)
        (should (eq (current-buffer) transcript))
        (should (string-match-p "^## Turn 1 "
                                (buffer-substring (line-beginning-position) (line-end-position))))
        (mevedel-test--run #'mevedel-lsp-list-turns session)
        (goto-char (point-min))
        (search-forward "Second prompt from ERT")
        (mevedel-test--run #'mevedel-lsp-turns-show)
        (should (string-match-p "Turn 2" (buffer-name)))
        (should (mevedel-test--contains (current-buffer) "> Second prompt from ERT"))
        (should (mevedel-test--contains (current-buffer) "answer to Second prompt from ERT"))
        (should buffer-read-only)
        ;; Save and close: the transcript says it is no longer followed.
        (should (eq (plist-get (mevedel-lsp-save-session session) :committed) t))
        (should (mevedel-test--contains "*Messages*" (format "mevedel: saved %s: published" session)))
        (should (equal (plist-get (mevedel-lsp-close-session session) :sessionId) session))
        (mevedel-test--wait (lambda () (with-current-buffer transcript
                                         (and (stringp header-line-format)
                                              (string-match-p "closed" header-line-format))))
                            "the transcript to say the session was closed")
        (should (equal (plist-get (mevedel-test--row session) :action) "Resume"))))))

(ert-deftest mevedel-lsp-test-takeover-question-is-asked ()
  "Opening a session whose lease expired asks the user; the server follows the answer."
  (should (equal (plist-get (mevedel-test--row mevedel-test-expired-session) :action) "Take over"))
  (pcase-let ((`(,_ ,questions ,outcome)
               (mevedel-test--picker-choosing mevedel-test-expired-session (list "Cancel"))))
    (mevedel-test--log "question: %S outcome: %S" questions outcome)
    (should (= (length questions) 1))
    (should (string-match-p (regexp-quote mevedel-test-other-host) (car questions)))
    (should (string-match-p "Take over, Cancel" (car questions)))
    ;; Cancel is an answer, not a failure: said as what was not done, and
    ;; no error left for Eglot's mode line to show.
    (should (eq (car outcome) 'user-error))
    (should (equal (cadr outcome) (format "mevedel: %s was not taken over" mevedel-test-expired-session)))
    (should-not (jsonrpc-last-error (mevedel-test--server))))
  (should (equal (plist-get (mevedel-test--row mevedel-test-expired-session) :action) "Take over"))
  (pcase-let ((`(,_ ,questions ,opened)
               (mevedel-test--picker-choosing mevedel-test-expired-session (list "Take over"))))
    (should (= (length questions) 1))
    (should (equal (plist-get opened :action) "takeover"))
    (should (equal (plist-get (plist-get opened :session) :access) "writable"))
    (should (mevedel-test--contains (current-buffer) "expired prompt")))
  (let ((row (mevedel-test--row mevedel-test-expired-session)))
    (should (equal (plist-get row :action) "Switch"))
    (should (eq (plist-get row :current) t))))

(ert-deftest mevedel-lsp-test-join-and-inspect-rows ()
  "A live foreign lease joins read-only; an Inspect row shows its reason and does not open."
  (mevedel-test--from-document #'mevedel-lsp-list-sessions)
  (goto-char (point-min))
  (should (search-forward mevedel-test-not-a-session nil t))
  (let ((line (buffer-substring-no-properties (line-beginning-position) (line-end-position))))
    (should (string-match-p "Inspect .*is not a session ID" line)))
  (let ((err (should-error (mevedel-test--run #'mevedel-lsp-sessions-open) :type 'user-error)))
    (should (string-match-p "can only be inspected: .*is not a session ID" (cadr err))))
  (goto-char (point-min))
  (search-forward mevedel-test-held-session)
  (let ((line (buffer-substring-no-properties (line-beginning-position) (line-end-position))))
    (should (string-match-p (format "Held elsewhere +Join +1 +%s" (regexp-quote mevedel-test-other-host)) line)))
  (let ((opened (mevedel-test--run #'mevedel-lsp-sessions-open)))
    (should (equal (plist-get opened :action) "join"))
    (should (equal (plist-get (plist-get opened :session) :access) "read-only")))
  (should (mevedel-test--contains (current-buffer) "held prompt"))
  ;; A write to a joined session is refused with the server's reason.
  (let ((err (should-error (mevedel-lsp-rename-session "Mine now") :type 'user-error)))
    (mevedel-test--log "rename error: %s" (cadr err))
    (should (string-match-p (regexp-quote mevedel-test-held-session) (cadr err)))
    (should (string-match-p "read-only" (cadr err)))))

(ert-deftest mevedel-lsp-test-session-command-errors-name-the-input ()
  "Refusals reach the user with the server's wording; nothing needs a traceback."
  (let* ((state (mevedel-test--from-document #'mevedel-lsp-create-session ""))
         (session (plist-get state :sessionId)))
    (should (eq (plist-get state :named) :json-false))
    (let ((err (should-error (mevedel-lsp-rename-session "   " session) :type 'user-error)))
      (should (string-match-p (regexp-quote "name \"   \": is blank") (cadr err))))
    (let ((err (should-error (mevedel-lsp-retry-publication session) :type 'user-error)))
      (should (string-match-p (format "%s: .*no pending publication" (regexp-quote session)) (cadr err))))
    (should (eq (plist-get (mevedel-lsp-abandon-publication session) :abandoned) :json-false))
    (let ((err (should-error (mevedel-lsp-abort-turn session) :type 'user-error)))
      (should (string-match-p (format "%s: has no turn in flight" (regexp-quote session)) (cadr err))))
    (mevedel-test--call :mevedel/turn/begin :sessionId session :prompt "to be stopped")
    (should (equal (plist-get (mevedel-lsp-abort-turn session "stopped by ERT") :turn) 1))
    (should (equal (mapcar (lambda (turn) (list (plist-get turn :state) (plist-get turn :reason)))
                           (plist-get (mevedel-test--call :mevedel/turn/list :sessionId session) :turns))
                   '(("interrupted" "stopped by ERT"))))
    (let ((err (should-error (mevedel-lsp-open-session "not-a-session-id!") :type 'user-error)))
      (should (string-match-p (regexp-quote "not-a-session-id!") (cadr err))))))

;;;; Rewind, Redo, Fork, Worktree Fork, Save As

(defvar mevedel-test-tracked "lifecycle.txt"
  "A file of the workspace's Git repository that the lifecycle turns edit.")

(defun mevedel-test--tracked ()
  (with-temp-buffer
    (insert-file-contents (expand-file-name mevedel-test-tracked mevedel-test-root))
    (buffer-string)))

(defun mevedel-test--edit-turn (session prompt content)
  "A turn with PROMPT that captures the tracked file and writes CONTENT to it."
  (mevedel-test--call :mevedel/turn/begin :sessionId session :prompt prompt)
  (mevedel-test--call :mevedel/turn/capture :sessionId session :path mevedel-test-tracked)
  (with-temp-file (expand-file-name mevedel-test-tracked mevedel-test-root) (insert content))
  (mevedel-test--call :mevedel/turn/append :sessionId session :kind "response" :text (concat "answer to " prompt))
  (mevedel-test--call :mevedel/turn/settle :sessionId session))

(defun mevedel-test--three-turns (name)
  (let ((session (plist-get (mevedel-test--from-document #'mevedel-lsp-create-session name) :sessionId)))
    (dolist (n '(1 2 3))
      (mevedel-test--edit-turn session (format "%s step %d" name n) (format "%s v%d\n" name n)))
    session))

(defun mevedel-test--turn-count (session)
  (length (plist-get (mevedel-test--call :mevedel/turn/list :sessionId session) :turns)))

(defun mevedel-test--session-ids ()
  (sort (mapcar (lambda (row) (plist-get row :sessionId))
                (plist-get (mevedel-test--call :mevedel/session/list) :sessions))
        #'string<))

(defun mevedel-test--impact ()
  "What the impact buffer shows now."
  (with-current-buffer mevedel-lsp-impact-buffer (buffer-string)))

(defvar mevedel-test--confirmations nil
  "The `yes-or-no-p' prompts the lifecycle commands asked, newest first.")

(defmacro mevedel-test--answering (answer choices &rest body)
  "Run BODY with `yes-or-no-p' answering ANSWER (a value or a function of
the prompt) and `completing-read' choosing, in turn, the first candidate
that matches each regexp of CHOICES."
  (declare (indent 2))
  `(let ((pending ,choices))
     (cl-letf (((symbol-function 'yes-or-no-p)
                (lambda (prompt)
                  (push prompt mevedel-test--confirmations)
                  (let ((a ,answer)) (if (functionp a) (funcall a prompt) a))))
               ((symbol-function 'completing-read)
                (lambda (prompt collection &rest _)
                  (let* ((wanted (or (pop pending) (ert-fail (format "an unexpected question: %s" prompt))))
                         (offered (all-completions "" collection)))
                    (mevedel-test--log "%s offered %S" prompt offered)
                    (or (seq-find (lambda (c) (string-match-p wanted c)) offered)
                        (ert-fail (format "%s offers nothing matching %s: %S" prompt wanted offered)))))))
       ,@body)))

(ert-deftest mevedel-lsp-test-rewind-and-redo-confirm-or-decline ()
  "Rewind and Redo show their impact; declining changes nothing, confirming changes the session."
  (let* ((session (mevedel-test--three-turns "ERT rewind"))
         (transcript (get-buffer (mevedel-lsp--transcript-name session))))
    ;; Declined: the impact names what would go, and nothing changes.
    (should (null (mevedel-test--answering nil nil (mevedel-lsp-rewind 1 "after" session))))
    (let ((impact (mevedel-test--impact)))
      (mevedel-test--log "impact:\n%s" impact)
      (should (string-prefix-p (format "Rewind %s to after the response of turn 1: 1 turn kept.\n" session) impact))
      (should (string-match-p "^Discards 2 prompts:\n  turn 2: ERT rewind step 2\n  turn 3: ERT rewind step 3$" impact))
      (should (string-match-p "^  lifecycle\\.txt (post-turn of turn 1: 14 bytes)$" impact))
      (should (string-match-p "^Git index will differ from the restored files:\n  lifecycle\\.txt$" impact)))
    (should (string-match-p "Rewind\\? \\'" (car mevedel-test--confirmations)))
    (should (= (mevedel-test--turn-count session) 3))
    (should (equal (mevedel-test--tracked) "ERT rewind v3\n"))
    ;; Changed outside the session: named; confirmed from the turns list,
    ;; picking the boundary, the session is rewound and its transcript follows.
    (with-temp-file (expand-file-name mevedel-test-tracked mevedel-test-root) (insert "edited outside\n"))
    (mevedel-test--run #'mevedel-lsp-list-turns session)
    (goto-char (point-min))
    (search-forward "ERT rewind step 1")
    (let ((result (mevedel-test--answering t '("^After the response of turn 1")
                    (mevedel-test--run #'call-interactively #'mevedel-lsp-rewind))))
      (should (string-match-p "^Changed outside the session since recorded (the commit overwrites them):\n  lifecycle\\.txt (recorded by turn 3)$"
                              (mevedel-test--impact)))
      (should (eq (plist-get result :committed) t))
      (should (= (plist-get result :settledTurns) 1)))
    (should (= (mevedel-test--turn-count session) 1))
    (should (equal (mevedel-test--tracked) "ERT rewind v1\n"))
    (should (mevedel-test--contains "*Messages*" (format "mevedel: rewound %s: now 1 settled turn; wrote lifecycle.txt" session)))
    (mevedel-test--wait (lambda () (not (mevedel-test--contains transcript "ERT rewind step 2")))
                        "the transcript to drop the rewound turns")
    ;; Nothing left to rewind: the impact says so.
    (mevedel-test--answering nil nil (mevedel-lsp-rewind 1 "after" session))
    (should (string-match-p "\n\nNothing changes\\.\n\\'" (mevedel-test--impact)))
    ;; Redo: the picker offers the replaced three-turn state; declined, then confirmed.
    (should (null (mevedel-test--answering nil '("^3 turns · ends at turn 3: ERT rewind step 3$")
                    (mevedel-test--from-document #'call-interactively #'mevedel-lsp-redo))))
    (should (string-match-p "^Brings back 2 turns:\n  turn 2: ERT rewind step 2\n  turn 3: ERT rewind step 3$" (mevedel-test--impact)))
    (should (= (mevedel-test--turn-count session) 1))
    (let ((redone (mevedel-test--answering t '("^3 turns")
                    (mevedel-test--from-document #'call-interactively #'mevedel-lsp-redo))))
      (should (= (plist-get redone :settledTurns) 3)))
    (should (= (mevedel-test--turn-count session) 3))
    (should (equal (mevedel-test--tracked) "ERT rewind v3\n"))
    (mevedel-test--wait (lambda () (mevedel-test--contains transcript "ERT rewind step 3"))
                        "the transcript to show the redone turns")
    ;; The before boundary of the first prompt would empty the session.
    (mevedel-test--answering nil nil (mevedel-lsp-rewind 1 "before" session))
    (should (string-prefix-p (format "Rewind %s to before the prompt of turn 1: 0 turns kept.\n\nDiscards 3 prompts:" session)
                             (mevedel-test--impact)))
    (should (= (mevedel-test--turn-count session) 3))))

(ert-deftest mevedel-lsp-test-a-moved-session-refuses-the-commit ()
  "A commit whose session moved since its prepare is refused with the server's words."
  (let* ((session (mevedel-test--three-turns "ERT moved"))
         (err (should-error
               (mevedel-test--answering (lambda (_) (mevedel-test--edit-turn session "ERT moved step 4" "ERT moved v4\n") t) nil
                 (mevedel-lsp-rewind 1 "before" session))
               :type 'user-error)))
    (mevedel-test--log "stale: %s" (cadr err))
    (should (string-match-p (format "\\`mevedel: %s: .*prepare" (regexp-quote session)) (cadr err)))
    (should (= (mevedel-test--turn-count session) 4))
    (should (equal (mevedel-test--tracked) "ERT moved v4\n"))))

(ert-deftest mevedel-lsp-test-fork-worktree-fork-and-save-as ()
  "Fork, Worktree Fork and Save As create a session only when confirmed."
  (let* ((session (mevedel-test--three-turns "ERT forked"))
         (before (mevedel-test--session-ids))
         (worktree (expand-file-name ".worktrees/from-emacs" mevedel-test-root)))
    (should (null (mevedel-test--answering nil nil (mevedel-lsp-fork 2 session))))
    (should (string-prefix-p (format "Fork %s after the response of turn 2 (ERT forked step 2): a new session with 2 turns." session)
                             (mevedel-test--impact)))
    (should (string-match-p "^The source session is not changed\\.$" (mevedel-test--impact)))
    (should (equal (mevedel-test--session-ids) before))
    ;; Confirmed from the turns list: the turn at point is the fork point.
    (mevedel-test--run #'mevedel-lsp-list-turns session)
    (goto-char (point-min))
    (search-forward "ERT forked step 2")
    (let* ((forked (mevedel-test--answering t nil (mevedel-test--run #'call-interactively #'mevedel-lsp-fork)))
           (child (plist-get (plist-get forked :session) :sessionId)))
      (should (equal (plist-get forked :sourceId) session))
      (should (equal (mevedel-test--session-ids) (sort (cons child (copy-sequence before)) #'string<)))
      (should (= (mevedel-test--turn-count child) 2))
      (should (eq (current-buffer) (get-buffer (mevedel-lsp--transcript-name child))))
      (should (mevedel-test--contains (current-buffer) "ERT forked step 2"))
      (should-not (mevedel-test--contains (current-buffer) "ERT forked step 3")))
    (should (= (mevedel-test--turn-count session) 3))
    ;; Worktree Fork: declined, no worktree; confirmed, the worktree holds the turn's content.
    (should (null (mevedel-test--answering nil nil (mevedel-lsp-worktree-fork 2 "from-emacs" session))))
    (should (string-match-p "^Creates the Git worktree \\.worktrees/from-emacs on the new branch [^ ]+ at [0-9a-f]\\{12\\} (HEAD of \\.)$"
                            (mevedel-test--impact)))
    (should-not (file-exists-p worktree))
    (let ((made (mevedel-test--answering t nil (mevedel-lsp-worktree-fork 2 "from-emacs" session))))
      (should (equal (plist-get (plist-get made :worktree) :directory) ".worktrees/from-emacs")))
    (should (equal (with-temp-buffer (insert-file-contents (expand-file-name mevedel-test-tracked worktree)) (buffer-string))
                   "ERT forked v2\n"))
    (should (equal (mevedel-test--tracked) "ERT forked v3\n"))
    ;; Save As asks the name (here given) and copies the whole session.
    (let ((count (length (mevedel-test--session-ids))))
      (should (null (mevedel-test--answering nil nil (mevedel-lsp-save-as "ERT   copy" session))))
      (should (string-prefix-p (format "Save %s as \"ERT copy\": a new session with 3 turns." session) (mevedel-test--impact)))
      (should (= (length (mevedel-test--session-ids)) count))
      (let* ((saved (mevedel-test--answering t nil (mevedel-lsp-save-as "ERT copy" session)))
             (row (mevedel-test--row (plist-get (plist-get saved :session) :sessionId))))
        (should (equal (plist-get row :displayName) "ERT copy"))
        (should (= (plist-get row :turns) 3))
        (should (= (length (mevedel-test--session-ids)) (1+ count)))))))

(ert-deftest mevedel-lsp-test-fork-variants-picker ()
  "The variants picker lists the source, then its forks oldest first; choosing one opens it at the turn."
  (let* ((session (mevedel-test--three-turns "ERT variants"))
         (older (plist-get (plist-get (mevedel-test--answering t nil (mevedel-lsp-fork 2 session)) :session) :sessionId))
         ;; Creation times are whole seconds (same-second forks order by ID).
         (_ (sleep-for 1.1))
         (newer (plist-get (plist-get (mevedel-test--answering t nil (mevedel-lsp-fork 2 session)) :session) :sessionId))
         (offered nil))
    (cl-letf (((symbol-function 'completing-read)
               (lambda (prompt collection &rest _)
                 (should (equal prompt "Variant at turn 2: "))
                 (setq offered (all-completions "" collection))
                 (mevedel-test--log "variants offered %S" offered)
                 (seq-find (lambda (c) (string-match-p (regexp-quote newer) c)) offered))))
      (let ((opened (mevedel-test--run #'mevedel-lsp-fork-variants 2 older)))
        (should (equal (plist-get (plist-get opened :session) :sessionId) newer))))
    (should (= (length offered) 3))
    (should (string-match-p (format "\\`  source  ERT variants (%s)  ERT variants step 3\\'" (regexp-quote session)) (nth 0 offered)))
    (should (string-match-p (format "\\`\\* conversation  .*(%s)" (regexp-quote older)) (nth 1 offered)))
    (should (string-match-p (format "\\`  conversation  .*(%s)" (regexp-quote newer)) (nth 2 offered)))
    ;; The chosen fork's transcript is shown with point on the fork point's turn.
    (should (eq (current-buffer) (get-buffer (mevedel-lsp--transcript-name newer))))
    (should (looking-at "## Turn 2 "))
    (should (string-match-p "ERT variants step 2" (buffer-substring (point) (line-end-position 6))))
    (should (eq (plist-get (mevedel-test--row newer) :current) t))))

(defvar mevedel-test-recovery-retry (getenv "MEVEDEL_TEST_RECOVERY_RETRY"))
(defvar mevedel-test-recovery-retry-file (getenv "MEVEDEL_TEST_RECOVERY_RETRY_FILE"))
(defvar mevedel-test-recovery-abandon (getenv "MEVEDEL_TEST_RECOVERY_ABANDON"))
(defvar mevedel-test-recovery-edited (getenv "MEVEDEL_TEST_RECOVERY_EDITED"))
(defvar mevedel-test-recovery-edited-file (getenv "MEVEDEL_TEST_RECOVERY_EDITED_FILE"))

(ert-deftest mevedel-lsp-test-recovery-is-offered-retried-and-abandoned ()
  "A session in recovery says so on open, refuses a Rewind and offers retry or abandon."
  ;; Opening it: the recovery is announced; leaving it keeps the block.
  (mevedel-test--answering nil '("^Leave it$")
    (mevedel-test--from-document #'mevedel-lsp-open-session mevedel-test-recovery-retry "resume"))
  (should (mevedel-test--contains "*Messages*" (format "%s stays in recovery" mevedel-test-recovery-retry)))
  ;; A Rewind is refused; the offer is taken: Retry rolls the files back.
  (let ((err (should-error (mevedel-test--answering t '("^Retry$") (mevedel-lsp-rewind 1 "after" mevedel-test-recovery-retry))
                           :type 'user-error)))
    (should (string-match-p (format "%s: .*retry or abandon" (regexp-quote mevedel-test-recovery-retry)) (cadr err))))
  (should (mevedel-test--contains "*Messages*" "the files have their content from before the interrupted transaction"))
  (should (equal (with-temp-buffer (insert-file-contents (expand-file-name mevedel-test-recovery-retry-file mevedel-test-root))
                                   (buffer-string))
                 "Crashed retry v2\n"))
  (let ((rewound (mevedel-test--answering t nil (mevedel-lsp-rewind 1 "after" mevedel-test-recovery-retry))))
    (should (= (plist-get rewound :settledTurns) 1)))
  ;; The other: abandoned from its command, after confirming.
  (mevedel-test--answering nil '("^Leave it$")
    (mevedel-test--from-document #'mevedel-lsp-open-session mevedel-test-recovery-abandon "resume"))
  (should (null (mevedel-test--answering nil nil (mevedel-lsp-abandon-recovery mevedel-test-recovery-abandon))))
  (should (equal (plist-get (mevedel-test--answering t nil (mevedel-lsp-abandon-recovery mevedel-test-recovery-abandon))
                            :resolution)
                 "abandoned"))
  (should (plist-get (mevedel-test--answering t nil (mevedel-lsp-fork 1 mevedel-test-recovery-abandon)) :session))
  ;; A file edited by hand since the crash: the retry leaves it and says so.
  (mevedel-test--answering nil '("^Leave it$")
    (mevedel-test--from-document #'mevedel-lsp-open-session mevedel-test-recovery-edited "resume"))
  (should (equal (mevedel-lsp--list (plist-get (mevedel-test--answering nil nil (mevedel-lsp-retry-recovery mevedel-test-recovery-edited))
                                               :left))
                 (list mevedel-test-recovery-edited-file)))
  ;; Told as a warning, in the words of the CLI and every client.
  (should (mevedel-test--contains "*Warnings*" (format "left as it is, changed outside the session since the transaction was interrupted: %s"
                                                       mevedel-test-recovery-edited-file)))
  (should (equal (with-temp-buffer (insert-file-contents (expand-file-name mevedel-test-recovery-edited-file mevedel-test-root))
                                   (buffer-string))
                 "edited by hand after the crash\n")))

;;;; Control transfer

(defvar mevedel-test-cli (append (json-parse-string (getenv "MEVEDEL_CLI_COMMAND") :array-type 'list) nil)
  "The mevedel CLI: another client of the workspace.")

(defun mevedel-test--cli (&rest args)
  "Run the CLI with ARGS and --json, processing events while it runs (the
editor's server may ask its user something meanwhile).  Return (STATUS . JSON)."
  (let* ((default-directory mevedel-test-root)
         (buffer (generate-new-buffer " *mevedel cli*"))
         (errors (generate-new-buffer " *mevedel cli stderr*"))
         (process (make-process :name "mevedel-cli" :buffer buffer :connection-type 'pipe :sentinel #'ignore
                                :stderr errors
                                :command (append mevedel-test-cli args '("--json")))))
    (mevedel-test--wait (lambda () (not (process-live-p process))) "the CLI to finish" 120)
    ;; Emacs may reap the process before it has read the last of its
    ;; output from the pipe: read on until the pipe says nothing more.
    (while (accept-process-output process 0.1))
    (let ((output (with-current-buffer buffer (buffer-string))))
      ;; Its stderr and how it ended too: a command that printed no JSON
      ;; must say why in the failure, not as a parse error alone.
      (mevedel-test--log "cli %S -> %s [%s %s] stderr: %s" args output (process-status process)
                         (process-exit-status process) (with-current-buffer errors (buffer-string)))
      (cons (process-exit-status process) (json-parse-string output :object-type 'plist)))))

(ert-deftest mevedel-lsp-test-control-transfer ()
  "Another client asks for control: the Grant/Keep question reaches the minibuffer, Keep refuses,
Grant hands the session over (read-only here); take and release control."
  (let* ((session (plist-get (mevedel-test--from-document #'mevedel-lsp-create-session "ERT control") :sessionId))
         (transcript (get-buffer (mevedel-lsp--transcript-name session)))
         (questions nil)
         (answer nil)
         (phases nil)
         (mevedel-lsp-control-change-functions
          (list (lambda (_server params) (push (plist-get params :phase) phases)))))
    (mevedel-test--settle-turn session "Owned by Emacs")
    ;; A granted release stays reserved for the requester this long.
    (customize-set-variable 'mevedel-lsp-settings '(:controlTransfer (:promptTimeoutSeconds 60 :fenceSeconds 1)))
    (unwind-protect
    (cl-letf (((symbol-function 'completing-read)
               (lambda (prompt &rest _) (push prompt questions)
                 (if (eq answer 'quit) (signal 'quit nil) answer))))
      ;; C-g and an empty answer are a person at this machine: Keep, at
      ;; once (not granted when the 60 s prompt timeout ends).
      (dolist (dismissal '(quit ""))
        (setq answer dismissal)
        (pcase-let ((`(,status . ,result) (mevedel-test--cli "session" "take-control" session "--wait" "30")))
          (should (= status 1))
          (should (equal (plist-get (plist-get result :error) :kind) "rejected"))))
      (should (= (length questions) 2))
      (should (string-match-p "Grant, Keep) \\[empty or C-g: Keep\\]" (car questions)))
      (setq questions nil)
      ;; Keep: the other client's request ends rejected; Emacs keeps writing.
      (setq answer "Keep")
      (pcase-let ((`(,status . ,result) (mevedel-test--cli "session" "take-control" session "--wait" "60")))
        (should (= status 1))
        (should (equal (plist-get (plist-get result :error) :kind) "rejected")))
      (should (= (length questions) 1))
      (should (string-match-p "Grant, Keep" (car questions)))
      (should (member "asking" phases))
      (should (member "kept" phases))
      (should (equal (plist-get (mevedel-test--row session) :action) "Switch"))
      (mevedel-lsp-rename-session "Still mine" session)
      ;; Grant: handed over; this side is read-only and its transcript says so.
      (setq answer "Grant")
      (pcase-let ((`(,status . ,result) (mevedel-test--cli "session" "take-control" session "--wait" "60")))
        (should (= status 0))
        (should (equal (plist-get result :outcome) "acquired")))
      (should (= (length questions) 2))
      (mevedel-test--wait (lambda () (member "released" phases)) "the owner side to report the hand-over")
      (mevedel-test--wait (lambda () (with-current-buffer transcript
                                       (and (stringp header-line-format)
                                            (string-match-p "read-only" header-line-format))))
                          "the transcript to say it is read-only")
      (let ((err (should-error (mevedel-lsp-rename-session "Mine again" session) :type 'user-error)))
        (should (string-match-p "read-only" (cadr err))))
      ;; The other client releases; taking control acquires it at once.
      (pcase-let ((`(,status . ,_) (mevedel-test--cli "session" "release-control" "--session" session)))
        (should (= status 0)))
      ;; The grant's reservation was the CLI's, and the CLI took it.
      (let ((taken (mevedel-lsp-take-control session)))
        (should (equal (plist-get taken :outcome) "acquired"))
        (should (equal (plist-get (plist-get taken :state) :access) "writable")))
      (should (mevedel-test--contains "*Messages*" (format "mevedel: %s: you have control (writable here)" session)))
      (should (equal (plist-get (mevedel-lsp-rename-session "Mine again" session) :displayName) "Mine again"))
      ;; Release control: saved, read-only here, following; take it back.
      (should (equal (plist-get (plist-get (mevedel-lsp-release-control session) :state) :access) "read-only"))
      (should (equal (plist-get (mevedel-test--row session) :action) "Resume"))
      (should (equal (plist-get (mevedel-lsp-take-control session) :outcome) "acquired"))
      (should (= (length questions) 2)))
      (customize-set-variable 'mevedel-lsp-settings nil))))

;;;; Following a session owned elsewhere

(defun mevedel-test--cli-turn (session prompt)
  "The CLI, owning SESSION, runs and settles a whole turn with PROMPT."
  (should (= (car (mevedel-test--cli "turn" "begin" "--session" session prompt)) 0))
  (should (= (car (mevedel-test--cli "turn" "append" "response" "--text" (concat "cli answer to " prompt)
                                     "--session" session))
             0))
  (should (= (car (mevedel-test--cli "turn" "settle" "--session" session)) 0)))

(ert-deftest mevedel-lsp-test-following-a-session-owned-elsewhere ()
  "A joined session's transcript follows the owner's settled turns (didPublish);
with following off only a refresh advances it.  Compact and /clear on an own session."
  ;; Beside the sessions this Emacs holds: the script accepts sharing the files.
  (let* ((session (plist-get (cdr (mevedel-test--cli "turn" "begin" "--new" "--beside-held"
                                                     "--name" "Owned by the CLI" "CLI prompt 1"))
                             :session_id))
         (published nil)
         (mevedel-lsp-publish-functions (list (lambda (_server params) (push params published)))))
    (should (= (car (mevedel-test--cli "turn" "settle" "--session" session)) 0))
    (should (equal (plist-get (mevedel-test--row session) :action) "Join"))
    (let* ((opened (mevedel-test--from-document #'mevedel-lsp-open-session session "join"))
           (transcript (get-buffer (mevedel-lsp--transcript-name session))))
      (should (equal (plist-get (plist-get opened :session) :access) "read-only"))
      (should (mevedel-test--contains transcript "CLI prompt 1"))
      ;; The owner settles a turn: the view here shows it, whole.
      (mevedel-test--cli-turn session "CLI prompt 2")
      (mevedel-test--wait (lambda () (mevedel-test--contains transcript "cli answer to CLI prompt 2"))
                          "the followed transcript to show the owner's new turn")
      (let ((change (seq-find (lambda (p) (= (plist-get p :settledTurns) 2)) published)))
        (should change)
        (should (equal (mapcar (lambda (turn) (list (plist-get turn :turn) (plist-get turn :change) (plist-get turn :prompt)))
                               (plist-get change :turns))
                       '((2 "new" "CLI prompt 2")))))
      ;; Following off: the owner's next turn is adopted only by a refresh.
      (let ((state (mevedel-lsp-toggle-follow session)))
        (should (eq (plist-get state :enabled) :json-false))
        (should (eq (plist-get state :following) :json-false)))
      (mevedel-test--cli-turn session "CLI prompt 3")
      (let ((refreshed (mevedel-lsp-refresh-session session)))
        (should (equal (plist-get refreshed :status) "advanced"))
        (should (= (plist-get (plist-get refreshed :publication) :settledTurns) 3)))
      (mevedel-test--wait (lambda () (mevedel-test--contains transcript "CLI prompt 3"))
                          "the refreshed transcript to show turn 3")
      (should (equal (plist-get (mevedel-lsp-refresh-session session) :status) "unchanged"))
      (let ((state (mevedel-lsp-toggle-follow session)))
        (should (eq (plist-get state :enabled) t))
        (should (eq (plist-get state :following) t)))
      (mevedel-test--cli-turn session "CLI prompt 4")
      (mevedel-test--wait (lambda () (mevedel-test--contains transcript "cli answer to CLI prompt 4"))
                          "the transcript, followed again, to show turn 4")))
  ;; Compaction and /clear of a session this client owns.
  (let* ((session (plist-get (mevedel-test--from-document #'mevedel-lsp-create-session "ERT compacted") :sessionId))
         (transcript (get-buffer (mevedel-lsp--transcript-name session))))
    (mevedel-test--settle-turn session "Before the compaction")
    (let ((result (mevedel-lsp-compact-session "The summary written by ERT" session)))
      (should (= (plist-get result :segment) (1+ (plist-get result :previousSegment)))))
    (mevedel-test--wait (lambda () (mevedel-test--contains transcript "The summary written by ERT"))
                        "the transcript to start with the summary")
    (mevedel-test--settle-turn session "After the compaction")
    (should (numberp (plist-get (mevedel-lsp-clear-session session) :chapter)))
    (mevedel-test--wait (lambda () (not (mevedel-test--contains transcript "After the compaction")))
                        "the transcript to start the new chat")))

;;;; Remote workspaces

(ert-deftest mevedel-lsp-test-remote-workspaces-reach-the-server ()
  "`mevedel-lsp-settings' :remoteWorkspaces makes an ssh:// address a workspace folder of the server."
  (let ((remote "ssh://127.0.0.1:1/srv/project")
        (kind (lambda (err) (plist-get (alist-get 'jsonrpc-error-data (cdr err)) :kind))))
    (with-current-buffer (mevedel-test--document-buffer)
      (unwind-protect
          (progn
            (let ((err (should-error (mevedel-test--call :mevedel/session/list :workspaceFolder remote) :type 'jsonrpc-error)))
              (should (equal (funcall kind err) "invalid-params")))
            (customize-set-variable 'mevedel-lsp-settings (list :remoteWorkspaces (vector remote)))
            ;; A workspace folder now: the request goes to the host, which refuses.
            (let ((err (should-error (mevedel-test--call :mevedel/session/list :workspaceFolder remote) :type 'jsonrpc-error)))
              (mevedel-test--log "remote: %s" (mevedel-lsp--error-text err))
              (should (equal (funcall kind err) "unavailable"))
              (should (string-match-p "127\\.0\\.0\\.1" (mevedel-lsp--error-text err)))))
        (customize-set-variable 'mevedel-lsp-settings nil)))))

;;; mevedel-lsp-test.el ends here
