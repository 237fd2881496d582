;;; mevedel-lsp.el --- Resource addresses from the mevedel-lsp server, through eglot  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The mevedel-lsp authors

;; Author: The mevedel-lsp authors
;; Version: 0.1.0
;; Package-Requires: ((emacs "28.1") (eglot "1.9") (jsonrpc "1.0.14"))
;; Keywords: tools, languages, convenience
;; SPDX-License-Identifier: MIT

;; This file is not part of GNU Emacs.

;;; Commentary:

;; A thin eglot client for `mevedel-lsp', the language server of mevedel's
;; resource addresses (work://shared/notes.md, mevedel://architecture.md,
;; memory://..., skill://...).  The server does the work; eglot gives
;; completion at point, eldoc hover, xref go-to-definition and flymake
;; diagnostics.  This package adds what LSP alone cannot carry:
;;
;; - it registers the server with eglot for Markdown and plain-text buffers
;;   and passes `mevedel-lsp-settings' as initializationOptions and as the
;;   "mevedel" configuration section;
;; - an address that is not a real file (a directory listing, a discovery
;;   view) is a `mevedel-resource:' virtual document: following it with
;;   `xref-find-definitions' opens a read-only buffer whose text is read
;;   through the server's `mevedel/resource/read';
;; - `mevedel-lsp-read-address' opens any address the same way;
;; - sessions: `mevedel-lsp-list-sessions' (a table) and
;;   `mevedel-lsp-open-session' (a minibuffer picker) show the server's
;;   listing with each row's action (Switch, Resume, Join, Take over) and
;;   open the chosen session's transcript (its `history://root'), which
;;   `mevedel/session/didChange' keeps up to date; `mevedel-lsp-list-turns'
;;   lists its turns; create, rename, save, close, retry or abandon a failed
;;   publication, and abort a turn in flight, each with its command;
;; - review what a turn (or a range, or the whole session) changed in the
;;   tree: `mevedel-lsp-review' (`d' on a turn) shows `mevedel/turn/diff' in
;;   a read-only `diff-mode' buffer, a header per path saying the kind of
;;   change; `e' opens `ediff' of a file's before and after texts; `r'
;;   restores a file to its state before the turn, after showing what that
;;   does and asking (a turn of its own, which Rewind undoes);
;; - Rewind, Redo, Fork, Worktree Fork and Save As: each shows what the
;;   server's prepare says would change and commits only after you say
;;   yes; a recovery an interrupted Rewind left is offered for retry or
;;   abandon;
;; - control transfer: take and release control of a session; the owner's
;;   Grant / Keep question is asked in the minibuffer;
;; - following: a session open read-only follows its owner's publications
;;   (`mevedel/session/didPublish' re-reads its views); toggle it, refresh
;;   it, compact or /clear it;
;; - the server's questions (`window/showMessageRequest', such as whether
;;   to take over a session whose lease expired) are asked in the minibuffer;
;; - `$/progress' shows in the echo area on eglot versions that do not show
;;   it themselves;
;; - chat with agents (ACP, configured in the server's `agents' setting):
;;   `mevedel-lsp-prompt' writes a prompt in a buffer of its own and sends it
;;   as the next turn of a session (`mevedel/turn/prompt'); the session's
;;   chat buffer (`mevedel-lsp-chat') shows its turns and the running one
;;   live (`mevedel/turn/didUpdate'): the response, folded reasoning, tool
;;   calls with their diffs, the plan, permission decisions; cancel, and
;;   Rewind, Redo or Fork at a turn, from the chat;
;; - the workspace artifact store: `mevedel-lsp-artifacts' lists its
;;   documents, whiteboards and artifacts by title (* marks those attached
;;   to the current session), with keys to open, attach, detach, duplicate,
;;   delete, comment, list versions and restore one, make a new document or
;;   whiteboard and ask another server process for an item's lease; an
;;   item opens in an editable buffer whose C-x C-s writes it back
;;   (`mevedel/artifact/write', refused rather than overwriting a change
;;   made meanwhile), read-only while another machine holds it;
;; - `mevedel-lsp-global-mode' manages Markdown and text files (a .md file
;;   opens in `text-mode' when no `markdown-mode' is installed), and
;;   C-M-i completes addresses in them.
;;
;; Quick start:
;;
;;   (require 'mevedel-lsp)
;;   (mevedel-lsp-global-mode 1)
;;   (global-set-key (kbd "C-c m") 'mevedel-lsp-command-map)
;;
;; Works with the eglot 1.9 of Debian's elpa-eglot on Emacs 28 and with the
;; eglot built into Emacs 29 and later.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'eglot)
(require 'jsonrpc)
(require 'tabulated-list)
(require 'xref)
(require 'diff-mode)

(defgroup mevedel-lsp nil
  "Resource addresses from the mevedel-lsp language server."
  :group 'eglot
  :prefix "mevedel-lsp-")

(defcustom mevedel-lsp-server-command '("mevedel-lsp")
  "The language server program and its arguments.
The program is looked up on `exec-path' unless it is absolute."
  :type '(repeat string))

(defcustom mevedel-lsp-major-modes
  '((markdown-mode :language-id "markdown")
    (gfm-mode :language-id "markdown")
    (text-mode :language-id "plaintext"))
  "Major modes whose buffers the server manages, in eglot's syntax.
Each element is a mode or (MODE :language-id ID).  Modes derived from
one of these (`org-mode' derives from `text-mode') are managed too.
Takes effect for servers started after the change."
  :type '(repeat (choice symbol (list symbol (const :language-id) string))))

(defcustom mevedel-lsp-settings nil
  "The server's settings, as a plist with the server's (camelCase) keys.
Sent as initializationOptions when the server starts, and as the
\"mevedel\" section of `workspace/didChangeConfiguration' whenever it
changes through Customize or `mevedel-lsp-send-settings'.  Keys:

  :memoryRoots       vector of (:path P :location \"local\"|\"global\"
                                :kind \"mevedel\"|\"agents\")
  :skillRoots        vector of (:path P :origin O)
  :completionLimit   the most completions offered at once (default 200)
  :currentSession    a session id, or a plist of folder URI -> session id
  :diagnostics       (:unknownSchemes \"near-miss\"|\"all\"|\"off\")
  :followPublished   t or :json-false: joined sessions follow the owner
  :sessionWatch      (:idlePollSeconds N :activePollSeconds N :debounceMs N)
  :leaseSeconds      seconds a session lease lasts unrenewed (default 60)
  :controlTransfer   (:promptTimeoutSeconds N :fenceSeconds N)
  :remoteWorkspaces  vector of \"ssh://[user@]host[:port]/path\": workspace
                     folders on other machines, named by that address
  :agents            ACP agents by name: (:NAME (:command [\"program\" \"arg\"]
                                          :env (:VAR \"value\")))
  :defaultAgent      the agent a prompt uses when it names none
  :permissions       \"ask\" (default), \"allow-reads\" or \"allow-all\"
  :permissionTimeoutSeconds, :agentStartTimeoutSeconds,
  :cancelTimeoutSeconds, :agentIdleTimeoutSeconds   agent time limits
  :checkpointExclude paths a turn's checkpoint leaves out (a vector of
                     gitignore patterns), besides editors' own files
  :artifactMaxVersions, :artifactMaxVersionBytes    versions the artifact
                     store keeps per item (default 20 and 64 MiB)

A key left out means the server's default.  A \"mevedel\" section in
`eglot-workspace-configuration' (for example in .dir-locals.el) takes
precedence over this variable for its project."
  :type 'plist
  :set (lambda (symbol value)
         (set-default symbol value)
         (when (fboundp 'mevedel-lsp-send-settings)
           (mevedel-lsp-send-settings))))

(defcustom mevedel-lsp-read-page-lines 2000
  "How many lines one `mevedel/resource/read' page asks for."
  :type 'natnum)

(defconst mevedel-lsp-virtual-scheme "mevedel-resource"
  "URI scheme of the server's read-only virtual documents.")

(defconst mevedel-lsp-configuration-section "mevedel"
  "The configuration section of the server's settings.")


;;;; The server class and its configuration

(defclass mevedel-lsp-server (eglot-lsp-server) ()
  :documentation "An eglot connection to mevedel-lsp.")

(defun mevedel-lsp--contact (&optional _interactive)
  "The eglot contact for `eglot-server-programs': our class and command."
  (cons 'mevedel-lsp-server mevedel-lsp-server-command))

(defun mevedel-lsp--project-settings (server)
  "The \"mevedel\" section of SERVER's project `eglot-workspace-configuration'."
  (let* ((default-directory (if server
                                (project-root (eglot--project server))
                              default-directory))
         (configuration (with-temp-buffer
                          ;; Directory variables may be given per mode, as
                          ;; eglot reads them.
                          (when server
                            (setq-local major-mode (car (eglot--major-modes server))))
                          (hack-dir-local-variables-non-file-buffer)
                          (if (functionp eglot-workspace-configuration)
                              (and server (funcall eglot-workspace-configuration server))
                            eglot-workspace-configuration))))
    ;; Both spellings eglot documents: a plist, and the older alist.
    (if (keywordp (car-safe configuration))
        (plist-get configuration (intern (concat ":" mevedel-lsp-configuration-section)))
      (cdr (assoc mevedel-lsp-configuration-section
                  (mapcar (lambda (cell) (cons (format "%s" (car cell)) (cdr cell)))
                          (seq-filter #'consp configuration)))))))

(defconst mevedel-lsp--setting-keys
  '(:memoryRoots :skillRoots :completionLimit :currentSession :diagnostics
    :followPublished :sessionWatch :leaseSeconds :controlTransfer :remoteWorkspaces
    :agents :defaultAgent :permissions :permissionTimeoutSeconds
    :agentStartTimeoutSeconds :cancelTimeoutSeconds :agentIdleTimeoutSeconds
    :checkpointExclude :artifactMaxVersions :artifactMaxVersionBytes)
  "The server's settings.  The server keeps a setting a message leaves out,
so every one is sent, nil (JSON null) meaning the server's default.")

(defun mevedel-lsp--settings (server)
  "The complete settings object to send SERVER."
  (let ((given (or (mevedel-lsp--project-settings server) mevedel-lsp-settings))
        (complete nil))
    (dolist (key mevedel-lsp--setting-keys)
      (setq complete (plist-put complete key (plist-get given key))))
    ;; Unknown keys are passed on, so the server can name a misspelt one.
    (cl-loop for (key value) on given by #'cddr
             unless (memq key mevedel-lsp--setting-keys)
             do (setq complete (plist-put complete key value)))
    complete))

(cl-defmethod eglot-initialization-options ((server mevedel-lsp-server))
  "The server's settings as initializationOptions."
  (mevedel-lsp--settings server))

(cl-defmethod eglot-handle-request
  ((server mevedel-lsp-server) (_method (eql workspace/configuration)) &key items)
  "Answer the \"mevedel\" section from `mevedel-lsp-settings'."
  (apply #'vector
         (mapcar (lambda (item)
                   (if (equal (plist-get item :section) mevedel-lsp-configuration-section)
                       (mevedel-lsp--settings server)
                     nil))
                 items)))

(defun mevedel-lsp--servers ()
  "Every live mevedel-lsp connection."
  (let (found)
    (maphash (lambda (_project servers)
               (dolist (server servers)
                 (when (and (cl-typep server 'mevedel-lsp-server)
                            (jsonrpc-running-p server))
                   (push server found))))
             eglot--servers-by-project)
    found))

(defun mevedel-lsp-send-settings (&optional server)
  "Send the current settings to SERVER, or to every mevedel-lsp server."
  (interactive)
  (dolist (target (if server (list server) (mevedel-lsp--servers)))
    (jsonrpc-notify target :workspace/didChangeConfiguration
                    (list :settings
                          (list (intern (concat ":" mevedel-lsp-configuration-section))
                                (mevedel-lsp--settings target))))))

(defun mevedel-lsp--after-connect (server)
  "Send SERVER its settings once connected.
eglot's own didChangeConfiguration carries only
`eglot-workspace-configuration'; the server keeps what a notification
leaves out, so sending ours afterwards is safe."
  (when (cl-typep server 'mevedel-lsp-server)
    (mevedel-lsp-send-settings server)))

(defun mevedel-lsp--server-entry ()
  "Our `eglot-server-programs' entry."
  (cons mevedel-lsp-major-modes #'mevedel-lsp--contact))

;;;###autoload
(defun mevedel-lsp-register ()
  "Put mevedel-lsp first in `eglot-server-programs' for its major modes."
  (interactive)
  (setq eglot-server-programs
        (cons (mevedel-lsp--server-entry)
              (cl-remove #'mevedel-lsp--contact eglot-server-programs
                         :key #'cdr-safe :test #'eq))))

;;;###autoload
(defun mevedel-lsp-ensure ()
  "Manage the current buffer with mevedel-lsp through eglot.
Suitable for `markdown-mode-hook' and `text-mode-hook'.  Buffers that
visit no file (eglot manages only files; the prompt buffer is one) are
left alone."
  (when buffer-file-name
    (mevedel-lsp-register)
    (eglot-ensure)))

(defun mevedel-lsp--modes ()
  "The major modes of `mevedel-lsp-major-modes', without their language ids."
  (mapcar (lambda (entry) (if (consp entry) (car entry) entry)) mevedel-lsp-major-modes))

(defun mevedel-lsp--maybe-ensure ()
  "`mevedel-lsp-ensure' when the buffer visits a file in one of the modes."
  (when (and buffer-file-name (apply #'derived-mode-p (mevedel-lsp--modes)))
    (mevedel-lsp-ensure)))

(defconst mevedel-lsp--markdown-files
  (cons "\\.\\(?:md\\|markdown\\|mkd\\|mdown\\)\\'" 'text-mode)
  "The `auto-mode-alist' entry that opens Markdown files in `text-mode'
when no Markdown mode is installed.")

(defun mevedel-lsp--markdown-mode-available-p ()
  "Non-nil when a `markdown-mode' is defined or can be loaded."
  (or (fboundp 'markdown-mode) (locate-library "markdown-mode")))

(defconst mevedel-lsp--mode-hooks '(markdown-mode-hook gfm-mode-hook text-mode-hook)
  "The hooks `mevedel-lsp-global-mode' manages buffers from.")

;;;###autoload
(define-minor-mode mevedel-lsp-global-mode
  "Manage Markdown and text files with mevedel-lsp, through eglot.
Registers the server with eglot and manages every file buffer whose
major mode is (or derives from) one of `mevedel-lsp-major-modes': those
opened from now on and those already open.  In a stock Emacs, with no
Markdown mode installed, a .md file would open in `fundamental-mode',
which no server manages: while this mode is on, such files open in
`text-mode' instead (an installed `markdown-mode' is left to do it)."
  :global t
  :group 'mevedel-lsp
  (if mevedel-lsp-global-mode
      (progn
        (mevedel-lsp-register)
        (dolist (hook mevedel-lsp--mode-hooks)
          (add-hook hook #'mevedel-lsp--maybe-ensure))
        (unless (mevedel-lsp--markdown-mode-available-p)
          (add-to-list 'auto-mode-alist mevedel-lsp--markdown-files))
        (dolist (buffer (buffer-list))
          (with-current-buffer buffer
            (when (and buffer-file-name
                       (eq major-mode 'fundamental-mode)
                       (member mevedel-lsp--markdown-files auto-mode-alist)
                       (string-match-p (car mevedel-lsp--markdown-files) buffer-file-name))
              ;; The mode hook manages it.
              (text-mode))
            (mevedel-lsp--maybe-ensure))))
    (dolist (hook mevedel-lsp--mode-hooks)
      (remove-hook hook #'mevedel-lsp--maybe-ensure))
    (setq auto-mode-alist (delete mevedel-lsp--markdown-files auto-mode-alist))))

(defun mevedel-lsp--registered-p (server)
  "Non-nil when eglot has registered SERVER: it answered `initialize'."
  (memq server (gethash (eglot--project server) eglot--servers-by-project)))

(defun mevedel-lsp--connecting ()
  "A mevedel-lsp server eglot has started but not registered yet, or nil.
eglot registers a server, and manages buffers with it, once it answered
`initialize'; but `eglot-sync-connect' stops blocking at the first
output of any process, so eglot may have said \"Reconnected!\" (or
\"Waiting in background\") well before that."
  (seq-some (lambda (process)
              (let ((server (process-get process 'jsonrpc-connection)))
                (and (cl-typep server 'mevedel-lsp-server)
                     (process-live-p process)
                     (not (eglot--shutdown-requested server))
                     (not (mevedel-lsp--registered-p server))
                     server)))
            (process-list)))

(defun mevedel-lsp--await-connection (server)
  "Wait until eglot has registered SERVER; return it, or nil when it never
will (its process exited, or eglot gave up on it).  C-g stops waiting."
  (message "mevedel: waiting for eglot to connect the mevedel-lsp server (C-g stops)...")
  ;; Until its sentinel has run, not merely until the process is gone: eglot
  ;; reports the unanswered `initialize' there, which would otherwise come
  ;; after (and hide) the refusal that names the server.
  (while (not (or (mevedel-lsp--registered-p server)
                  (process-get (jsonrpc--process server) 'jsonrpc-sentinel-cleanup-started)))
    (accept-process-output nil 0.1))
  ;; (eglot's "Connected!", said meanwhile, has replaced the message.)
  (and (jsonrpc-running-p server) (mevedel-lsp--registered-p server) server))

(defun mevedel-lsp--server (&optional noerror)
  "The mevedel-lsp server of the current buffer, or of any live one.
When eglot is still connecting one (just started, or restarted after the
server died), wait for it, unless NOERROR.  Signal a user error when
there is none, unless NOERROR."
  (let* ((current (eglot-current-server))
         (server (cond ((cl-typep current 'mevedel-lsp-server) current)
                       ((and (local-variable-p 'mevedel-lsp--origin-server)
                             (jsonrpc-running-p mevedel-lsp--origin-server))
                        mevedel-lsp--origin-server)
                       (t (car (mevedel-lsp--servers)))))
         (connecting (and (not server) (not noerror) (mevedel-lsp--connecting))))
    (or server
        (and connecting (mevedel-lsp--await-connection connecting))
        noerror
        ;; Signalled here, not inside the `cond' (Emacs names the form the
        ;; error left: "cond: No mevedel-lsp server...").
        (user-error "%s"
                    (cond (connecting
                           (format "mevedel: the mevedel-lsp server eglot was starting did not connect; its buffer *%s events* says why"
                                   (jsonrpc-name connecting)))
                          ((apply #'derived-mode-p (mevedel-lsp--modes))
                           "mevedel: the mevedel-lsp server is not connected yet (it starts with this buffer); try again in a moment")
                          (t "mevedel: no mevedel-lsp server is running; visit a Markdown or text file (it starts there), or M-x mevedel-lsp-ensure in one"))))))


;;;; Completion

;; An address token (work://shared/no) is not one Emacs symbol: eglot's own
;; completion takes the symbol before point as the text to match, and its
;; exit function applies each item's textEdit range as the server computed
;; it, which a completion already under way in the buffer may have moved.
;; Together these can double a scheme (work://://).  In the buffers this
;; server manages, this function is the only completion at point: the
;; region is the address token before point, found in the buffer itself by
;; the server's own rule (so it always covers the whole scheme), and each
;; candidate is the whole address an item inserts, replacing the region.

(defconst mevedel-lsp--token-stop "^ \t\n\r\f\v<>\"'`()[]"
  "`skip-chars-backward' set of the characters that may be in a token:
the server ends a token at whitespace, quotes, angle brackets and brackets.")

(defun mevedel-lsp--token-start ()
  "Where the address-like token ending at point starts, or nil.
The server's rule (`token_before'): a partial scheme (wo, work:), or
scheme:// and what follows it; any other text is no token."
  (save-excursion
    (let* ((end (point))
           (start (progn (skip-chars-backward mevedel-lsp--token-stop (line-beginning-position))
                         (point)))
           (run (buffer-substring-no-properties start end))
           (case-fold-search nil)
           (marker (string-match "://" run)))
      (if marker
          (let ((head marker))
            (while (and (> head 0) (string-match-p "[A-Za-z0-9+.-]" (substring run (1- head) head)))
              (setq head (1- head)))
            (while (and (< head marker) (not (string-match-p "[[:alpha:]]" (substring run head (1+ head)))))
              (setq head (1+ head)))
            (and (< head marker) (+ start head)))
        (and (or (string-empty-p run)
                 (string-match-p "\\`[A-Za-z][A-Za-z0-9+.-]*\\(?::/?\\)?\\'" run))
             start)))))

(defun mevedel-lsp--completion-items (server)
  "SERVER's completion items at point, or nil when input interrupted it.
Pending edits are sent first: the server completes the text as it is
now (eglot otherwise holds a deferred request until Emacs is idle, which
it is not while a command waits for the answer)."
  (when (fboundp 'eglot--signal-textDocument/didChange)
    (eglot--signal-textDocument/didChange))
  (let ((response (jsonrpc-request server :textDocument/completion
                                   (eglot--CompletionParams)
                                   :deferred :textDocument/completion
                                   :cancel-on-input t)))
    (append (if (vectorp response) response (plist-get response :items)) nil)))

(defun mevedel-lsp--candidate (item)
  "ITEM's inserted text (a whole address), carrying ITEM as a text property."
  (let* ((edit (plist-get item :textEdit))
         (text (or (plist-get edit :newText)
                   (plist-get item :insertText)
                   (plist-get item :label))))
    (propertize text 'mevedel-lsp--item item)))

(defun mevedel-lsp--annotation (candidate)
  "The server's detail for CANDIDATE, shown beside it."
  (let ((detail (plist-get (get-text-property 0 'mevedel-lsp--item candidate) :detail)))
    (and (stringp detail) (not (string-empty-p detail)) (concat "  " detail))))

(defun mevedel-lsp-completion-at-point ()
  "Complete the resource address before point with the server's candidates.
The region is the whole address token before point; a candidate
replaces it.  After scheme:// nothing but an address is offered;
before, a word that is no scheme is left to other completion."
  (when-let* ((server (and (eglot-managed-p) (eglot-current-server)))
              ((cl-typep server 'mevedel-lsp-server))
              (start (mevedel-lsp--token-start))
              (items (mevedel-lsp--completion-items server)))
    (let ((candidates (mapcar #'mevedel-lsp--candidate
                              (cl-sort (copy-sequence items) #'string-lessp
                                       :key (lambda (item) (or (plist-get item :sortText)
                                                               (plist-get item :label))))))
          (address (save-excursion (goto-char start) (looking-at-p "[^:\n]*://"))))
      (list start (point)
            (lambda (probe pred action)
              (if (eq action 'metadata)
                  '(metadata (category . mevedel-address) (display-sort-function . identity))
                (complete-with-action action candidates probe pred)))
            :annotation-function #'mevedel-lsp--annotation
            :exclusive (if address t 'no)))))

(defvar mevedel-lsp-address-mode-map
  (let ((map (make-sparse-keymap)))
    ;; Emacs 28's text modes bind C-M-i (M-TAB) to `ispell-complete-word'.
    (define-key map [remap ispell-complete-word] #'completion-at-point)
    map)
  "Keys of `mevedel-lsp-address-mode'.")

(define-minor-mode mevedel-lsp-address-mode
  "Address completion in a buffer mevedel-lsp manages.
\\<mevedel-lsp-address-mode-map>\\[completion-at-point] completes the address before point (on Emacs 28,
the text modes' `ispell-complete-word' key does it here)."
  :lighter nil
  (if mevedel-lsp-address-mode
      (progn
        (add-hook 'completion-at-point-functions #'mevedel-lsp-completion-at-point nil t)
        ;; Its items are the same addresses, with eglot's symbol bounds.
        (remove-hook 'completion-at-point-functions #'eglot-completion-at-point t))
    (remove-hook 'completion-at-point-functions #'mevedel-lsp-completion-at-point t)))

(defun mevedel-lsp--managed-buffer-setup ()
  "Address completion in buffers mevedel-lsp manages."
  (mevedel-lsp-address-mode
   (if (and (eglot-managed-p) (cl-typep (eglot-current-server) 'mevedel-lsp-server)) 1 -1)))

(add-hook 'eglot-managed-mode-hook #'mevedel-lsp--managed-buffer-setup)


;;;; Reading resources

(defun mevedel-lsp--error-text (error)
  "A user-facing sentence for a failed request: the server's own wording."
  (pcase error
    (`(jsonrpc-error . ,details)
     (let* ((data (alist-get 'jsonrpc-error-data details))
            (authored (plist-get data :authored))
            (reason (plist-get data :reason)))
       (if (and authored reason)
           (format "%s: %s" authored reason)
         (or (alist-get 'jsonrpc-error-message details) (format "%S" details)))))
    (_ (error-message-string error))))

(defconst mevedel-lsp--declined
  '(("beside-held-declined" . "no new session was started")
    ("takeover-declined" . "%s was not taken over")
    ("identity-declined" . "%s was not bound to this workspace"))
  "What was not done when the user answered Cancel to the server's
question, by the error kind the request it guarded fails with (%s: the
session).  The question said why.")

(defun mevedel-lsp--fail (server error &optional more)
  "Signal a `user-error' saying that SERVER's request failed with ERROR.
MORE, a string, is added to the message.
A question the user declined is no failure: it says what was not done,
not the server's text named by the request, and leaves no error state
\(jsonrpc keeps an error answer as SERVER's last error, which Eglot's
mode line shows as `error' until the next message arrives)."
  (let* ((data (pcase error (`(jsonrpc-error . ,details) (alist-get 'jsonrpc-error-data details))))
         (declined (cdr (assoc (plist-get data :kind) mevedel-lsp--declined))))
    (unless declined
      (user-error "mevedel: %s%s" (mevedel-lsp--error-text error) (or more "")))
    (setf (jsonrpc-last-error server) nil)
    (force-mode-line-update t)
    (user-error "mevedel: %s%s" (format declined (plist-get data :authored)) (or more ""))))

(defun mevedel-lsp--request (server method params)
  "Send SERVER a METHOD request with PARAMS; a failure becomes a `user-error'."
  (condition-case err
      (jsonrpc-request server method params)
    (jsonrpc-error (mevedel-lsp--fail server err))))

(defun mevedel-lsp--rest-of-line (server ref line char-offset)
  "The characters of LINE of REF from CHAR-OFFSET on, page by page."
  (let ((rest "") (done nil))
    (while (not done)
      (let* ((page (mevedel-lsp--request
                    server :mevedel/resource/read
                    (append ref (list :view "plain" :offset line :limit 1
                                      :charOffset char-offset))))
             (again (seq-find (lambda (cut) (eql (plist-get cut :line) line))
                              (plist-get page :truncatedLines))))
        (setq rest (concat rest (plist-get page :text)))
        (if (not again)
            (setq done t)
          (unless (> (plist-get again :charOffset) char-offset)
            (user-error "mevedel: %s: line %d does not advance past character %d"
                        (plist-get page :canonical) line char-offset))
          (setq char-offset (plist-get again :charOffset)))))
    rest))

(defun mevedel-lsp-read-document (server ref &optional token)
  "Read all of REF's plain projection through SERVER.
REF is (:uri URI) or (:address ADDRESS).  Return a plist (:canonical
:kind :text).  Pages are joined and lines the server cut at its page
width are continued, so line numbers match the server's.  TOKEN, a
progress token, rides on the first page, where the server does most of
the work, so its `$/progress' shows in the echo area."
  (let ((lines (make-hash-table)) (offset nil) (first nil) (total 0) (more t))
    (while more
      (let ((page (mevedel-lsp--request
                   server :mevedel/resource/read
                   (append ref (list :view "plain" :limit mevedel-lsp-read-page-lines)
                           (and offset (list :offset offset))
                           (and token (not first) (list :workDoneToken token))))))
        (unless first (setq first page))
        (if (or (equal (plist-get page :kind) "empty")
                (zerop (plist-get page :totalLines)))
            (setq more nil)
          (setq total (plist-get page :totalLines))
          (cl-loop for text in (split-string (plist-get page :text) "\n")
                   for n from (plist-get page :startLine)
                   do (puthash n text lines))
          (seq-doseq (cut (plist-get page :truncatedLines))
            (let ((n (plist-get cut :line)))
              (puthash n (concat (gethash n lines "")
                                 (mevedel-lsp--rest-of-line server ref n (plist-get cut :charOffset)))
                       lines)))
          (let ((next (plist-get page :nextOffset)))
            (cond ((null next) (setq more nil))
                  ((<= next (plist-get page :startLine))
                   (user-error "mevedel: %s: the next page (%s) does not advance"
                               (plist-get page :canonical) next))
                  (t (setq offset next)))))))
    (list :canonical (plist-get first :canonical)
          :kind (plist-get first :kind)
          :text (mapconcat (lambda (n) (concat (gethash n lines "") "\n"))
                           (number-sequence 1 total) ""))))


;;;; Virtual documents

(defvar mevedel-lsp--progress-tokens 0
  "How many progress tokens this Emacs has made.")

(defvar-local mevedel-lsp--uri nil
  "The `mevedel-resource:' URI a virtual buffer shows.")

(defvar-local mevedel-lsp--origin-server nil
  "The server a virtual buffer was read through.")

(defun mevedel-lsp-virtual-uri-p (uri)
  "Non-nil when URI names one of the server's virtual documents."
  (and (stringp uri) (string-prefix-p (concat mevedel-lsp-virtual-scheme ":") uri)))

(defvar mevedel-lsp-virtual-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "g") #'revert-buffer)
    (define-key map (kbd "q") #'quit-window)
    map)
  "Keys of `mevedel-lsp-virtual-mode'.")

(define-minor-mode mevedel-lsp-virtual-mode
  "A read-only buffer showing a resource read through mevedel-lsp.
\\<mevedel-lsp-virtual-mode-map>\\[revert-buffer] reads it again."
  :lighter " mevedel-ro"
  (when mevedel-lsp-virtual-mode
    (setq buffer-read-only t)
    (setq-local revert-buffer-function #'mevedel-lsp--revert)))

(defun mevedel-lsp--revert (&rest _)
  "Read the virtual buffer's resource again."
  (mevedel-lsp--fill (current-buffer) (mevedel-lsp--server) mevedel-lsp--uri))

(defun mevedel-lsp--major-mode-for (canonical)
  "The major mode `auto-mode-alist' gives an address named CANONICAL."
  (let ((mode (assoc-default canonical auto-mode-alist #'string-match)))
    (when (consp mode) (setq mode (car mode)))
    (if (and mode (functionp mode)) mode #'fundamental-mode)))

(defun mevedel-lsp--replace-text (buffer text)
  "Make TEXT the contents of read-only BUFFER, keeping every reader's place.
The old and new text are diffed, so point and each window's point stay
on the text they were on; a window that was at the end (following the
conversation as it grows) stays at the end."
  (with-current-buffer buffer
    (let* ((inhibit-read-only t)
           (at-end (seq-filter (lambda (window) (= (window-point window) (point-max)))
                               (get-buffer-window-list buffer nil t)))
           (point-at-end (= (point) (point-max)))
           (source (generate-new-buffer " *mevedel-lsp new text*")))
      (unwind-protect
          (progn
            (with-current-buffer source (insert text))
            ;; Small budget: past it Emacs replaces the text wholesale, which
            ;; is still correct, only without keeping places.
            (replace-buffer-contents source 0.5))
        (kill-buffer source))
      (when point-at-end (goto-char (point-max)))
      (dolist (window at-end) (set-window-point window (point-max)))
      (set-buffer-modified-p nil))))

(defun mevedel-lsp--fill (buffer server uri &optional quiet)
  "Fill BUFFER with the virtual document URI read through SERVER.
Unless QUIET, the read reports its `$/progress' in the echo area."
  (let ((document (mevedel-lsp-read-document
                   server (list :uri uri)
                   (unless quiet
                     (format "mevedel-read-%d" (cl-incf mevedel-lsp--progress-tokens))))))
    (mevedel-lsp--replace-text buffer (plist-get document :text))
    document))

(defun mevedel-lsp--virtual-buffer (uri)
  "The live buffer showing the virtual document URI, if any."
  (seq-find (lambda (b) (equal (buffer-local-value 'mevedel-lsp--uri b) uri))
            (buffer-list)))

(defun mevedel-lsp-open-virtual (uri &optional server name mode)
  "Return a read-only buffer showing the virtual document URI.
The text is read through SERVER (default: the current mevedel-lsp server).
A buffer already showing URI is reused.  A new buffer is called NAME
\(default: after the canonical address) and put in major MODE (default:
the mode `auto-mode-alist' gives the canonical address)."
  (let* ((server (or server (mevedel-lsp--server)))
         (existing (mevedel-lsp--virtual-buffer uri)))
    (or existing
        (let* ((buffer (generate-new-buffer (or name (format "*mevedel %s*" uri))))
               (document (condition-case err
                             (mevedel-lsp--fill buffer server uri)
                           (error (kill-buffer buffer) (signal (car err) (cdr err)))))
               (canonical (plist-get document :canonical)))
          (with-current-buffer buffer
            (unless name (rename-buffer (format "*mevedel %s*" canonical) t))
            (funcall (or mode (mevedel-lsp--major-mode-for canonical)))
            (setq mevedel-lsp--uri uri
                  mevedel-lsp--origin-server server)
            (mevedel-lsp-virtual-mode 1)
            (goto-char (point-min)))
          buffer))))

(defalias 'mevedel-lsp--uri-to-path
  ;; eglot 1.16 (Emacs 30) renamed it; older eglot has only the old name.
  (if (fboundp 'eglot-uri-to-path) 'eglot-uri-to-path 'eglot--uri-to-path)
  "The file name of a file: URI.")

(defun mevedel-lsp--position-to-point (position)
  "The point of LSP POSITION in the current buffer."
  (if (fboundp 'eglot--lsp-position-to-point)
      (eglot--lsp-position-to-point position)
    (save-excursion
      (goto-char (point-min))
      (forward-line (plist-get position :line))
      (forward-char (min (plist-get position :character)
                         (- (line-end-position) (point))))
      (point))))

(defun mevedel-lsp--virtual-position (buffer range)
  "The position in BUFFER where LSP RANGE starts."
  (with-current-buffer buffer
    (mevedel-lsp--position-to-point (plist-get range :start))))

(defun mevedel-lsp--xref-make-match (make-match name uri range)
  "Around `eglot--xref-make-match': a virtual URI becomes a buffer location.
MAKE-MATCH is the original, called with NAME URI RANGE for any other URI."
  (if (not (mevedel-lsp-virtual-uri-p uri))
      (funcall make-match name uri range)
    (let* ((buffer (mevedel-lsp-open-virtual uri))
           (position (mevedel-lsp--virtual-position buffer range))
           (summary (with-current-buffer buffer
                      (save-excursion
                        (goto-char position)
                        (buffer-substring (line-beginning-position) (line-end-position))))))
      (xref-make-match (if (string-empty-p summary) (buffer-name buffer) summary)
                       (xref-make-buffer-location buffer position)
                       (max 1 (length summary))))))

(if (fboundp 'eglot--xref-make-match)
    ;; eglot turns every Location into a file location; a virtual document
    ;; has no file, so it gets a buffer location instead (every eglot since
    ;; 1.9 builds its xrefs through this one function).
    (advice-add 'eglot--xref-make-match :around #'mevedel-lsp--xref-make-match)
  (display-warning 'mevedel-lsp
                   "This eglot has no `eglot--xref-make-match'; go-to-definition on a virtual address will not open its document"))

;;;###autoload
(defun mevedel-lsp-read-address (address)
  "Open what ADDRESS names: its backing file, else a read-only virtual buffer."
  (interactive (list (read-string "Read address: " nil 'mevedel-lsp-address-history)))
  (let* ((address (string-trim address))
         (server (mevedel-lsp--server))
         (described (mevedel-lsp--request server :mevedel/address/describe
                                          (list :address address)))
         (uri (plist-get described :uri))
         (canonical (plist-get described :canonical)))
    (cond
     ((null uri)
      (user-error "mevedel: %s: %s" canonical
                  (or (plist-get described :reason)
                      (format "%s, nothing to open" (plist-get described :status)))))
     ((equal (plist-get described :status) "missing")
      (user-error "mevedel: %s does not exist" canonical))
     ((mevedel-lsp-virtual-uri-p uri)
      (pop-to-buffer-same-window (mevedel-lsp-open-virtual uri server)))
     (t (find-file (mevedel-lsp--uri-to-path uri))))))

(defvar mevedel-lsp-address-history nil
  "Addresses given to `mevedel-lsp-read-address'.")


;;;; Sessions

;; The server owns sessions (its `mevedel/session/*' requests); these
;; commands only show what it lists and send what the user picked.  A
;; session's transcript view is the virtual document of its
;; `history://root', read like any other; `mevedel/session/didChange'
;; re-reads the views of the session that changed.

(defcustom mevedel-lsp-question-timeout 600
  "Seconds to wait for a request that may ask you something.
Opening a session whose previous holder's lease expired asks whether
to take it over; the server waits for your answer, and so does Emacs."
  :type 'natnum)

(defvar mevedel-lsp-session-change-functions nil
  "Abnormal hook run after the views of a changed session are refreshed.
Each function gets the server and the params plist of that session's
latest `mevedel/session/didChange' (:workspaceFolder :sessionId :reason
:settledTurns :access); a burst of changes runs it once, with the last.")

(defconst mevedel-lsp--open-modes
  '(("Switch" . "auto") ("Resume" . "resume") ("Join" . "join") ("Take over" . "takeover"))
  "The `mevedel/session/open' mode for each action the listing offers.")

(defvar-local mevedel-lsp--session-id nil
  "The session a transcript, turns list or turn buffer belongs to.")

(defun mevedel-lsp--object (&rest plist)
  "PLIST as a JSON object, {} when empty (nil would be sent as null)."
  (or (cl-loop for (key value) on plist by #'cddr
               when value append (list key value))
      (make-hash-table)))

(defun mevedel-lsp-uri-session (uri)
  "The session id a virtual URI carries, or nil when it names none."
  (when (mevedel-lsp-virtual-uri-p uri)
    (let ((session (nth 1 (split-string (substring uri (1+ (length mevedel-lsp-virtual-scheme)))
                                        "/" t))))
      (and session (not (equal session "_")) session))))

(defun mevedel-lsp--session-at-point ()
  "The session the current buffer or listing row is about, or nil.
nil means the server's current session."
  (if (derived-mode-p 'mevedel-lsp-sessions-mode)
      (let ((entry (or (tabulated-list-get-id) (user-error "No session on this line"))))
        (when (eq (car entry) 'inspect)
          (user-error "mevedel: %s can only be inspected: %s"
                      (plist-get (cdr entry) :name) (plist-get (cdr entry) :reason)))
        (plist-get (cdr entry) :sessionId))
    (or mevedel-lsp--session-id
        (and mevedel-lsp--uri (mevedel-lsp-uri-session mevedel-lsp--uri)))))

(defun mevedel-lsp--list-sessions (server)
  "SERVER's `mevedel/session/list' result."
  (mevedel-lsp--request server :mevedel/session/list (mevedel-lsp--object)))

(defun mevedel-lsp--transcript-name (session-id)
  "The name of SESSION-ID's transcript buffer."
  (format "*mevedel transcript %s*" session-id))

(defun mevedel-lsp-transcript-buffer (&optional session-id server)
  "A buffer showing SESSION-ID's transcript (`history://root'), read-only.
SESSION-ID defaults to the server's current session.  A buffer already
showing it is read again."
  (let* ((server (or server (mevedel-lsp--server)))
         (described (mevedel-lsp--request server :mevedel/address/describe
                                          (mevedel-lsp--object :address "history://root"
                                                               :sessionId session-id)))
         (uri (plist-get described :uri))
         (session (and uri (mevedel-lsp-uri-session uri))))
    (unless session
      (user-error "mevedel: no session is current; open one with M-x mevedel-lsp-open-session"))
    (let ((existing (mevedel-lsp--virtual-buffer uri)))
      (if existing
          (progn (mevedel-lsp--fill existing server uri t)
                 (with-current-buffer existing (setq header-line-format nil))
                 existing)
        (with-current-buffer (mevedel-lsp-open-virtual uri server (mevedel-lsp--transcript-name session)
                                                       (mevedel-lsp--major-mode-for "transcript.md"))
          (setq mevedel-lsp--session-id session)
          (current-buffer))))))

;;;###autoload
(defun mevedel-lsp-transcript (&optional session-id)
  "Show the transcript of SESSION-ID (default: the current session)."
  (interactive (list (mevedel-lsp--session-at-point)))
  (pop-to-buffer (mevedel-lsp-transcript-buffer session-id)))

(defun mevedel-lsp--row-candidate (row)
  "The completion candidate of a listing ROW (a session or inspect entry)."
  (let* ((inspect (plist-member row :subject))
         (name (if inspect (plist-get row :name) (plist-get row :displayName)))
         (session (plist-get row :sessionId)))
    (propertize (cond (inspect (format "%s (inspect only)" name))
                      ((equal name session) session)
                      (t (format "%s (%s)" name session)))
                'mevedel-lsp--row row)))

(defun mevedel-lsp--row-annotation (candidate)
  "Action, turns and host of CANDIDATE's row; the reason for inspect rows."
  (let ((row (get-text-property 0 'mevedel-lsp--row candidate)))
    (if (plist-member row :subject)
        (format "  %s" (plist-get row :reason))
      (format "  [%s]  %d turn%s%s%s"
              (plist-get row :action)
              (plist-get row :turns)
              (if (eql (plist-get row :turns) 1) "" "s")
              (if-let ((host (plist-get row :holderHost))) (format "  host %s" host) "")
              (if (eq (plist-get row :current) t) "  (current)" "")))))

(defun mevedel-lsp--read-session (server)
  "Ask for a session of SERVER's listing; return its row."
  (let* ((listing (mevedel-lsp--list-sessions server))
         (candidates (mapcar #'mevedel-lsp--row-candidate
                             (append (plist-get listing :sessions) (plist-get listing :inspect) nil))))
    (unless candidates
      (user-error "mevedel: this workspace has no sessions yet; M-x mevedel-lsp-create-session starts one"))
    (let ((chosen (completing-read
                   "Open session: "
                   (lambda (probe pred action)
                     (if (eq action 'metadata)
                         '(metadata (category . mevedel-session)
                                    (annotation-function . mevedel-lsp--row-annotation)
                                    (display-sort-function . identity))
                       (complete-with-action action candidates probe pred)))
                   nil t)))
      (or (get-text-property 0 'mevedel-lsp--row (or (car (member chosen candidates)) ""))
          (user-error "mevedel: no session %s" chosen)))))

(defun mevedel-lsp--open-row (server row)
  "Open listing ROW's session through SERVER with the mode its action gives.
Return the `mevedel/session/open' result."
  (when (plist-member row :subject)
    (user-error "mevedel: %s can only be inspected: %s" (plist-get row :name) (plist-get row :reason)))
  (mevedel-lsp-open-session (plist-get row :sessionId)
                            (cdr (assoc (plist-get row :action) mevedel-lsp--open-modes))
                            server))

;;;###autoload
(defun mevedel-lsp-open-session (session-id &optional mode server)
  "Open SESSION-ID in MODE and show its transcript.
Interactively, pick a session from the server's listing; the mode is
the row's action (Switch, Resume, Join or Take over).  MODE is one of
\"auto\" (default), \"resume\", \"join\" and \"takeover\".  A takeover
asks you first (the server's question, in the minibuffer).  Return the
`mevedel/session/open' result."
  (interactive
   (let* ((server (mevedel-lsp--server))
          (row (mevedel-lsp--read-session server)))
     (when (plist-member row :subject)
       (user-error "mevedel: %s can only be inspected: %s" (plist-get row :name) (plist-get row :reason)))
     (list (plist-get row :sessionId)
           (cdr (assoc (plist-get row :action) mevedel-lsp--open-modes))
           server)))
  (let* ((server (or server (mevedel-lsp--server)))
         (opened (condition-case err
                     (jsonrpc-request server :mevedel/session/open
                                      (mevedel-lsp--object :sessionId session-id :mode (or mode "auto"))
                                      :timeout mevedel-lsp-question-timeout)
                   (jsonrpc-error (mevedel-lsp--fail server err))))
         (state (plist-get opened :session)))
    (pop-to-buffer (mevedel-lsp-transcript-buffer (plist-get state :sessionId) server))
    (mevedel-lsp--refresh-lists server)
    (message "mevedel: %s %s (%s)%s"
             (pcase (plist-get opened :action)
               ("switch" "switched to") ("join" "joined") ("takeover" "took over") (_ "resumed"))
             (plist-get state :displayName)
             (plist-get state :access)
             (if-let ((turn (plist-get opened :interruptedTurn)))
                 (format "; turn %d was in flight and is now interrupted" turn)
               ""))
    (when-let ((recovery (plist-get state :recoveryPending)))
      (mevedel-lsp--offer-recovery
       server (plist-get state :sessionId)
       (format "%s is in recovery %s: an interrupted Rewind or Redo left project files to repair"
               (plist-get state :sessionId) recovery)))
    opened))

;;;###autoload
(defun mevedel-lsp-create-session (&optional name)
  "Start a new session, named NAME, and show its transcript.
An empty NAME leaves it unnamed."
  (interactive (list (read-string "New session name (empty for none): ")))
  (let* ((server (mevedel-lsp--server))
         (name (and name (string-trim name)))
         (state (mevedel-lsp--request server :mevedel/session/create
                                      (mevedel-lsp--object :name (and name (not (string-empty-p name)) name)))))
    (pop-to-buffer (mevedel-lsp-transcript-buffer (plist-get state :sessionId) server))
    (mevedel-lsp--refresh-lists server)
    (message "mevedel: created session %s" (plist-get state :displayName))
    state))

(defun mevedel-lsp-rename-session (name &optional session-id)
  "Give SESSION-ID the display NAME.
SESSION-ID defaults to the session at point, else the current one."
  (interactive (list (read-string "Rename session to: ") (mevedel-lsp--session-at-point)))
  (let ((state (mevedel-lsp--request (mevedel-lsp--server) :mevedel/session/rename
                                     (mevedel-lsp--object :name name :sessionId session-id))))
    (message "mevedel: session %s is now called %s" (plist-get state :sessionId) (plist-get state :displayName))
    state))

(defun mevedel-lsp--report-save (what result)
  "Say in the echo area what a save-like request WHAT did (its RESULT)."
  (message "mevedel: %s %s: %s" what (plist-get result :sessionId)
           (cond ((eq (plist-get result :committed) t) "published")
                 ((plist-get result :note))
                 (t "nothing was published")))
  result)

(defun mevedel-lsp-save-session (&optional session-id)
  "Publish SESSION-ID now.
SESSION-ID defaults to the session at point, else the current one."
  (interactive (list (mevedel-lsp--session-at-point)))
  (mevedel-lsp--report-save "saved" (mevedel-lsp--request (mevedel-lsp--server) :mevedel/session/save
                                                          (mevedel-lsp--object :sessionId session-id))))

(defun mevedel-lsp-close-session (&optional session-id)
  "Save and close SESSION-ID, releasing its lease.
SESSION-ID defaults to the session at point, else the current one."
  (interactive (list (mevedel-lsp--session-at-point)))
  (let* ((server (mevedel-lsp--server))
         (result (mevedel-lsp--request server :mevedel/session/close
                                       (mevedel-lsp--object :sessionId session-id))))
    (mevedel-lsp--refresh-lists server)
    (message "mevedel: closed %s%s" (plist-get result :sessionId)
             (if (eq (plist-get result :saved) t) " (saved its unsaved content)" ""))
    result))

(defun mevedel-lsp-retry-publication (&optional session-id)
  "Publish again the save of SESSION-ID that failed before its commit point."
  (interactive (list (mevedel-lsp--session-at-point)))
  (mevedel-lsp--report-save "retried" (mevedel-lsp--request (mevedel-lsp--server)
                                                            :mevedel/session/retryPublication
                                                            (mevedel-lsp--object :sessionId session-id))))

(defun mevedel-lsp-abandon-publication (&optional session-id)
  "Drop SESSION-ID's failed save; its content goes with the next save."
  (interactive (list (mevedel-lsp--session-at-point)))
  (let ((result (mevedel-lsp--request (mevedel-lsp--server) :mevedel/session/abandonPublication
                                      (mevedel-lsp--object :sessionId session-id))))
    (message "mevedel: %s: %s" (plist-get result :sessionId)
             (if (eq (plist-get result :abandoned) t)
                 "the failed save was dropped; the next save carries its content"
               "no failed save was pending"))
    result))

(defun mevedel-lsp-abort-turn (&optional session-id reason)
  "Interrupt the turn in flight in SESSION-ID and save it, giving REASON."
  (interactive (list (mevedel-lsp--session-at-point)
                     (let ((why (read-string "Why (empty: aborted): ")))
                       (and (not (string-empty-p why)) why))))
  (mevedel-lsp--report-save "interrupted the turn in flight in"
                            (mevedel-lsp--request (mevedel-lsp--server) :mevedel/turn/abort
                                                  (mevedel-lsp--object :sessionId session-id
                                                                       :reason reason))))


;;;; The sessions list

(defvar mevedel-lsp-sessions-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "RET") #'mevedel-lsp-sessions-open)
    (define-key map (kbd "c") #'mevedel-lsp-create-session)
    (define-key map (kbd "r") #'mevedel-lsp-rename-session)
    (define-key map (kbd "s") #'mevedel-lsp-save-session)
    (define-key map (kbd "k") #'mevedel-lsp-close-session)
    (define-key map (kbd "t") #'mevedel-lsp-list-turns)
    (define-key map (kbd "R") #'mevedel-lsp-retry-publication)
    (define-key map (kbd "A") #'mevedel-lsp-abandon-publication)
    map)
  "Keys of `mevedel-lsp-sessions-mode'.")

(define-derived-mode mevedel-lsp-sessions-mode tabulated-list-mode "mevedel sessions"
  "The sessions of a workspace, as the server lists them.
Each row shows the action opening it takes (Switch, Resume, Join, Take
over); rows marked Inspect cannot be opened and say why.
\\{mevedel-lsp-sessions-mode-map}"
  (setq tabulated-list-format
        [("" 1 t) ("Name" 28 t) ("Action" 9 t) ("Turns" 5 t :right-align t) ("Host" 14 t)
         ("Session" 30 t) ("Latest prompt / why" 0 nil)])
  (setq tabulated-list-padding 1)
  (add-hook 'tabulated-list-revert-hook #'mevedel-lsp--sessions-entries nil t)
  (tabulated-list-init-header))

(defun mevedel-lsp--sessions-entries ()
  "Read the listing again into `tabulated-list-entries'."
  (mevedel-lsp--set-sessions-entries (mevedel-lsp--list-sessions (mevedel-lsp--server))))

(defun mevedel-lsp--set-sessions-entries (listing)
  "Make LISTING, a `mevedel/session/list' result, the rows of this buffer."
  (setq tabulated-list-entries
          (append
           (mapcar (lambda (row)
                     (list (cons 'session row)
                           (vector (if (eq (plist-get row :current) t) "*" "")
                                   (plist-get row :displayName)
                                   (plist-get row :action)
                                   (number-to-string (plist-get row :turns))
                                   (or (plist-get row :holderHost) "")
                                   (plist-get row :sessionId)
                                   (or (plist-get row :latestPrompt) ""))))
                   (plist-get listing :sessions))
           (mapcar (lambda (row)
                     (list (cons 'inspect row)
                           (vector "" (plist-get row :name)
                                   (propertize "Inspect" 'face 'warning)
                                   "" "" "" (plist-get row :reason))))
                   (plist-get listing :inspect)))))

;;;###autoload
(defun mevedel-lsp-list-sessions ()
  "List the workspace's sessions; RET opens the one at point."
  (interactive)
  (let ((server (mevedel-lsp--server)))
    (with-current-buffer (get-buffer-create (format "*mevedel sessions %s*"
                                                    (file-name-nondirectory
                                                     (directory-file-name (project-root (eglot--project server))))))
      (mevedel-lsp-sessions-mode)
      (setq-local mevedel-lsp--origin-server server)
      (mevedel-lsp--sessions-entries)
      (tabulated-list-print)
      (pop-to-buffer (current-buffer)))))

(defun mevedel-lsp-sessions-open ()
  "Open the session at point with its row's action and show its transcript."
  (interactive)
  (let ((entry (or (tabulated-list-get-id) (user-error "No session on this line"))))
    (mevedel-lsp--open-row (mevedel-lsp--server) (cdr entry))))

(defun mevedel-lsp--list-buffers (server &optional session-id)
  "SERVER's sessions lists, and its turns lists of SESSION-ID."
  (seq-filter (lambda (buffer)
                (with-current-buffer buffer
                  (and (eq mevedel-lsp--origin-server server)
                       (or (derived-mode-p 'mevedel-lsp-sessions-mode)
                           (and session-id (derived-mode-p 'mevedel-lsp-turns-mode)
                                (equal mevedel-lsp--session-id session-id))))))
              (buffer-list)))

(defun mevedel-lsp--refresh-lists (server &optional session-id)
  "Read SERVER's sessions lists again, and SESSION-ID's turns lists."
  (dolist (buffer (mevedel-lsp--list-buffers server session-id))
    (with-current-buffer buffer
      (condition-case err
          (revert-buffer)
        (error (message "mevedel: %s: %s" (buffer-name) (error-message-string err)))))))

;;;; Turns

(defvar mevedel-lsp-turns-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "RET") #'mevedel-lsp-turns-visit)
    (define-key map (kbd "v") #'mevedel-lsp-turns-show)
    (define-key map (kbd "w") #'mevedel-lsp-rewind)
    (define-key map (kbd "f") #'mevedel-lsp-fork)
    (define-key map (kbd "F") #'mevedel-lsp-worktree-fork)
    (define-key map (kbd "V") #'mevedel-lsp-fork-variants)
    (define-key map (kbd "d") #'mevedel-lsp-review)
    map)
  "Keys of `mevedel-lsp-turns-mode'.")

(define-derived-mode mevedel-lsp-turns-mode tabulated-list-mode "mevedel turns"
  "The turns of a session, oldest first.
\\<mevedel-lsp-turns-mode-map>\\[mevedel-lsp-turns-visit] jumps to the turn in the transcript, \
\\[mevedel-lsp-turns-show] shows it alone, \\[mevedel-lsp-rewind] rewinds to it,
\\[mevedel-lsp-fork] forks after it, \\[mevedel-lsp-review] reviews what it changed.
\\{mevedel-lsp-turns-mode-map}"
  (setq tabulated-list-format
        [("Turn" 5 t :right-align t) ("State" 12 t) ("Tools" 5 t :right-align t) ("Prompt" 0 nil)])
  (setq tabulated-list-padding 1)
  (add-hook 'tabulated-list-revert-hook #'mevedel-lsp--turns-entries nil t)
  (tabulated-list-init-header))

(defun mevedel-lsp--turns-entries ()
  "Read the turns again into `tabulated-list-entries'."
  (mevedel-lsp--set-turns-entries
   (mevedel-lsp--request (mevedel-lsp--server) :mevedel/turn/list
                         (mevedel-lsp--object :sessionId mevedel-lsp--session-id))))

(defun mevedel-lsp--set-turns-entries (listing)
  "Make LISTING, a `mevedel/turn/list' result, the rows of this buffer."
  (setq mevedel-lsp--session-id (plist-get listing :sessionId))
  (setq tabulated-list-entries
          (mapcar (lambda (turn)
                    (list (plist-get turn :turn)
                          (vector (number-to-string (plist-get turn :turn))
                                  (plist-get turn :state)
                                  (number-to-string (plist-get turn :toolCalls))
                                  (concat (plist-get turn :prompt)
                                          (if-let ((why (plist-get turn :reason))) (format "  (%s)" why) "")))))
                  (plist-get listing :turns))))

;;;###autoload
(defun mevedel-lsp-list-turns (&optional session-id)
  "List the turns of SESSION-ID.
SESSION-ID defaults to the session at point, else the current one."
  (interactive (list (mevedel-lsp--session-at-point)))
  (let ((server (mevedel-lsp--server)))
    (with-current-buffer (get-buffer-create "*mevedel turns*")
      (mevedel-lsp-turns-mode)
      (setq-local mevedel-lsp--origin-server server)
      (setq mevedel-lsp--session-id session-id)
      (mevedel-lsp--turns-entries)
      (rename-buffer (format "*mevedel turns %s*" mevedel-lsp--session-id) t)
      (tabulated-list-print)
      (pop-to-buffer (current-buffer)))))

(defun mevedel-lsp--show-turn (turn &optional session-id)
  "The `mevedel/turn/show' result of TURN of SESSION-ID."
  (mevedel-lsp--request (mevedel-lsp--server) :mevedel/turn/show
                        (mevedel-lsp--object :turn turn :sessionId session-id)))

(defun mevedel-lsp-visit-turn (turn &optional session-id)
  "Show SESSION-ID's transcript with point on TURN's heading."
  (interactive (list (read-number "Turn: ") (mevedel-lsp--session-at-point)))
  (let* ((server (mevedel-lsp--server))
         (shown (mevedel-lsp--show-turn turn session-id))
         (heading (car (split-string (plist-get shown :markdown) "\n")))
         (buffer (mevedel-lsp-transcript-buffer (plist-get shown :sessionId) server))
         (position (with-current-buffer buffer
                     (save-excursion
                       (goto-char (point-min))
                       (and (search-forward heading nil t) (line-beginning-position))))))
    (unless position
      (user-error "mevedel: turn %d is not in the transcript of %s" turn (plist-get shown :sessionId)))
    (pop-to-buffer buffer)
    (goto-char position)
    (recenter 0)))

(defun mevedel-lsp-show-turn (turn &optional session-id)
  "Show TURN of SESSION-ID alone, as the transcript renders it."
  (interactive (list (read-number "Turn: ") (mevedel-lsp--session-at-point)))
  (let* ((server (mevedel-lsp--server))
         (shown (mevedel-lsp--show-turn turn session-id))
         (session (plist-get shown :sessionId)))
    (with-current-buffer (get-buffer-create (format "*mevedel turn %d %s*" turn session))
      (let ((inhibit-read-only t))
        (erase-buffer)
        (insert (plist-get shown :markdown)))
      (funcall (mevedel-lsp--major-mode-for "turn.md"))
      (setq-local mevedel-lsp--origin-server server)
      (setq mevedel-lsp--session-id session)
      (setq buffer-read-only t)
      (set-buffer-modified-p nil)
      (goto-char (point-min))
      (local-set-key (kbd "q") #'quit-window)
      (pop-to-buffer (current-buffer)))))

(defun mevedel-lsp-turns-visit ()
  "Jump to the turn at point in the transcript."
  (interactive)
  (mevedel-lsp-visit-turn (or (tabulated-list-get-id) (user-error "No turn on this line"))
                          mevedel-lsp--session-id))

(defun mevedel-lsp-turns-show ()
  "Show the turn at point alone."
  (interactive)
  (mevedel-lsp-show-turn (or (tabulated-list-get-id) (user-error "No turn on this line"))
                         mevedel-lsp--session-id))


;;;; Rewind, Redo, Fork, Worktree Fork, Save As

;; Each is two-phase on the server: `.../prepare' reports the impact and a
;; token, `.../commit' with the token rechecks and acts.  These commands show
;; the impact in the *mevedel impact* buffer and commit only after
;; `yes-or-no-p'; declining sends nothing more, so nothing changes.

(defun mevedel-lsp--plural (count word)
  "COUNT WORD, with an s unless COUNT is 1."
  (format "%d %s%s" count word (if (eql count 1) "" "s")))

(defun mevedel-lsp--list (value)
  "VALUE, a JSON array (vector) or absent, as a list."
  (append value nil))

(defun mevedel-lsp--label-line (label)
  "One indented line for a TurnLabel LABEL."
  (format "  turn %d: %s" (plist-get label :turn) (plist-get label :preview)))

(defun mevedel-lsp--file-lines (impact)
  "The lines of IMPACT about project files.
Restores, capture gaps, external changes and the Git index."
  (let* ((restores (mevedel-lsp--list (plist-get impact :restores)))
         (writes (seq-filter (lambda (r) (eq (plist-get r :changes) t)) restores))
         (gaps (mevedel-lsp--list (plist-get impact :gaps)))
         (outside (mevedel-lsp--list (plist-get impact :externallyModified)))
         (git (plist-get impact :git))
         (divergent (mevedel-lsp--list (plist-get git :divergent)))
         (lines nil))
    (when writes
      (push (format "Restores %s:" (mevedel-lsp--plural (length writes) "file")) lines)
      (dolist (r writes)
        ;; The action: delete, create directory, remove directory, chmod 755,
        ;; relink; a restore shows the bytes it writes.
        (let ((action (or (plist-get r :action) (if (equal (plist-get r :state) "absent") "delete" "restore"))))
          (push (format "  %s (%s of turn %d: %s)%s" (plist-get r :path) (plist-get r :checkpoint) (plist-get r :turn)
                        (if (equal action "restore")
                            (mevedel-lsp--plural (or (plist-get r :size) 0) "byte")
                          action)
                        ;; Rewind: the sub-agents whose tasks changed it.
                        (if-let ((agents (mevedel-lsp--list (plist-get r :agents))))
                            (format ", changed by sub-agent%s %s" (if (cdr agents) "s" "") (string-join agents ", "))
                          ""))
                lines))))
    (let ((same (- (length restores) (length writes))))
      (when (> same 0)
        (push (format "%s already match and stay as they are" (mevedel-lsp--plural same "captured file")) lines)))
    (when gaps
      (push "Capture gaps (these files may have changed and are NOT restored):" lines)
      (dolist (gap gaps)
        (push (format "  %s (turn %d: %s)" (plist-get gap :path) (plist-get gap :turn) (plist-get gap :reason)) lines)))
    (when outside
      (push "Changed outside the session since recorded (the commit overwrites them):" lines)
      (dolist (change outside)
        (push (format "  %s (recorded by turn %d)" (plist-get change :path) (plist-get change :recordedTurn)) lines)))
    (cond ((and (equal (plist-get git :status) "checked") divergent)
           (push "Git index will differ from the restored files:" lines)
           (dolist (path divergent) (push (concat "  " path) lines)))
          ((equal (plist-get git :status) "unavailable")
           (push (format "Git could not be asked about the index: %s" (or (plist-get git :detail) "no detail")) lines)))
    (nreverse lines)))

(defun mevedel-lsp--describe-rewind (impact)
  "(SUMMARY DETAILS ACTION) for a RewindImpact IMPACT."
  (let* ((turn (plist-get impact :turn))
         (discarded (mevedel-lsp--list (plist-get impact :discarded)))
         (summary (format "Rewind %s %s: %s kept." (plist-get impact :sessionId)
                          (if (equal (plist-get impact :boundary) "after")
                              (format "to after the response of turn %d" turn)
                            (format "to before the prompt of turn %d" turn))
                          (mevedel-lsp--plural (plist-get impact :keptTurns) "turn"))))
    (list summary
          (if (eq (plist-get impact :empty) t)
              (list "Nothing changes.")
            (append (cond (discarded
                           (cons (format "Discards %s:" (mevedel-lsp--plural (length discarded) "prompt"))
                                 (mapcar #'mevedel-lsp--label-line discarded)))
                          ((eq (plist-get impact :transcriptChanges) t)
                           (list "Discards no prompts; undoes a compaction or /clear"))
                          (t (list "Discards no prompts")))
                    (mevedel-lsp--file-lines impact)))
          "Rewind")))

(defun mevedel-lsp--describe-redo (impact)
  "(SUMMARY DETAILS ACTION) for a RedoImpact IMPACT."
  (let* ((back (mevedel-lsp--list (plist-get impact :restored)))
         (gone (mevedel-lsp--list (plist-get impact :discarded)))
         (files (mevedel-lsp--file-lines impact))
         (changes (seq-some (lambda (r) (eq (plist-get r :changes) t))
                            (mevedel-lsp--list (plist-get impact :restores)))))
    (list (format "Redo %s: return to the state with %s." (plist-get impact :sessionId)
                  (mevedel-lsp--plural (+ (plist-get impact :commonTurns) (length back)) "turn"))
          (append (and back (cons (format "Brings back %s:" (mevedel-lsp--plural (length back) "turn"))
                                  (mapcar #'mevedel-lsp--label-line back)))
                  (and gone (cons (format "Discards %s:" (mevedel-lsp--plural (length gone) "prompt"))
                                  (mapcar #'mevedel-lsp--label-line gone)))
                  files
                  (and (not back) (not gone) (not changes) (list "Nothing changes.")))
          "Redo")))

(defun mevedel-lsp--child-lines (impact)
  "What a Fork, Worktree Fork or Save As IMPACT carries into the new session."
  (let ((artifacts (mevedel-lsp--list (plist-get impact :attachedArtifacts)))
        (local (mevedel-lsp--list (plist-get impact :localFiles)))
        (plans (plist-get impact :plansNote)))
    (append (and artifacts (list (format "Carries %s: %s" (mevedel-lsp--plural (length artifacts) "attached artifact")
                                         (string-join artifacts ", "))))
            (and local (list (format "Copies %s: %s" (mevedel-lsp--plural (length local) "session-local file")
                                     (string-join local ", "))))
            (and plans (list (concat "Plans: " plans)))
            (list "The source session is not changed."))))

(defun mevedel-lsp--describe-fork (impact &optional worktree)
  "(SUMMARY DETAILS ACTION) for a ForkImpact IMPACT.
With WORKTREE, IMPACT is a WorktreeForkImpact."
  (let* ((response (plist-get impact :response))
         (summary (format "%s %s after the response of turn %d (%s): a new session with %s."
                          (if worktree "Worktree Fork" "Fork") (plist-get impact :sessionId)
                          (plist-get response :turn) (plist-get response :preview)
                          (mevedel-lsp--plural (plist-get impact :turns) "turn"))))
    (if (not worktree)
        (list summary
              (append (list "The working files are left as they are: the new session shares this workspace's files"
                            "(only a Worktree Fork gives the new session its own files).")
                      (mevedel-lsp--child-lines impact))
              "Fork")
      (let* ((place (plist-get impact :worktree))
             (restores (mevedel-lsp--list (plist-get impact :restores)))
             (unrestored (mevedel-lsp--list (plist-get impact :unrestored)))
             (shared (mevedel-lsp--list (plist-get impact :shared))))
        (list summary
              (append (list (format "Creates the Git worktree %s on the new branch %s at %s (HEAD of %s)"
                                    (plist-get place :directory) (plist-get place :branch)
                                    (substring (plist-get place :baseCommit) 0 12) (plist-get place :sourceCheckout)))
                      (and restores (list (concat "Writes the turn's content of: " (string-join restores ", "))))
                      (and unrestored (cons "Left at their HEAD content:"
                                            (mapcar (lambda (f) (format "  %s (%s)" (plist-get f :path) (plist-get f :reason)))
                                                    unrestored)))
                      (and shared (list (concat "Shared, not copied (outside the checkout): " (string-join shared ", "))))
                      (mevedel-lsp--child-lines impact))
              "Create Worktree Fork")))))

(defun mevedel-lsp--describe-save-as (impact)
  "(SUMMARY DETAILS ACTION) for a SaveAsImpact IMPACT."
  (list (format "Save %s as \"%s\": a new session with %s." (plist-get impact :sessionId) (plist-get impact :name)
                (mevedel-lsp--plural (plist-get impact :turns) "turn"))
        (list (format "%s, %s, %s (%s)"
                      (mevedel-lsp--plural (plist-get impact :segments) "transcript segment")
                      (mevedel-lsp--plural (plist-get impact :chats) "chat")
                      (mevedel-lsp--plural (plist-get impact :artifacts) "artifact")
                      (mevedel-lsp--plural (plist-get impact :size) "byte"))
              "The source session is not changed.")
        "Save As"))

(defconst mevedel-lsp-impact-buffer "*mevedel impact*"
  "The buffer that shows what a lifecycle commit would change.")

(defun mevedel-lsp--show-impact (described)
  "Show DESCRIBED, (SUMMARY DETAILS ACTION), in `mevedel-lsp-impact-buffer'."
  (with-current-buffer (get-buffer-create mevedel-lsp-impact-buffer)
    (let ((inhibit-read-only t))
      (erase-buffer)
      (insert (nth 0 described) "\n\n" (string-join (nth 1 described) "\n") "\n"))
    (special-mode)
    (goto-char (point-min))
    (display-buffer (current-buffer))))

(defun mevedel-lsp--offer-recovery (server session-id why)
  "Say WHY SESSION-ID is blocked and offer to retry or abandon its recovery."
  (let ((choice (condition-case nil
                    (completing-read (format "[mevedel] %s\nRecovery (Retry, Abandon, Leave it): " why)
                                     '("Retry" "Abandon" "Leave it") nil t)
                  (quit "Leave it"))))
    (pcase choice
      ("Retry" (mevedel-lsp-retry-recovery session-id server))
      ("Abandon" (mevedel-lsp--resolve-recovery server :mevedel/session/abandonRecovery session-id))
      (_ (message "mevedel: %s stays in recovery; M-x mevedel-lsp-retry-recovery or mevedel-lsp-abandon-recovery resolves it"
                  (or session-id "the session"))
         nil))))

(defun mevedel-lsp--lifecycle-request (server method params session-id)
  "Send SERVER a lifecycle METHOD with PARAMS about SESSION-ID.
A refusal because the session is in recovery offers to resolve it and
then signals a `user-error'; any other failure is a `user-error' with
the server's words."
  (condition-case err
      (jsonrpc-request server method params)
    (jsonrpc-error
     (let ((text (mevedel-lsp--error-text err)))
       (when (equal (plist-get (alist-get 'jsonrpc-error-data (cdr err)) :kind) "recovery-pending")
         (mevedel-lsp--offer-recovery server session-id text))
       (user-error "mevedel: %s" text)))))

(defun mevedel-lsp--with-agent-history (impact described)
  "DESCRIBED, (SUMMARY DETAILS ACTION), with IMPACT's `agentHistory'.
That last detail says what the transaction does to the agent's own
history of the conversation; the server leaves it out when the session
retains none."
  (let ((note (plist-get impact :agentHistory)))
    (if (not (stringp note))
        described
      (list (nth 0 described)
            (append (nth 1 described) (list (concat "Agent history: " note)))
            (nth 2 described)))))

(defun mevedel-lsp--transaction (server prepare commit params describe)
  "Run one lifecycle transaction through SERVER.
PREPARE and COMMIT are the methods, PARAMS the prepare's params and
DESCRIBE turns its result into (SUMMARY DETAILS ACTION).  The impact is
shown and committed only when `yes-or-no-p' says yes.  Return the
commit's result, or nil when declined."
  (let* ((session-id (plist-get params :sessionId))
         (impact (mevedel-lsp--lifecycle-request server prepare (apply #'mevedel-lsp--object params) session-id))
         (described (mevedel-lsp--with-agent-history impact (funcall describe impact))))
    (mevedel-lsp--show-impact described)
    (if (not (yes-or-no-p (format "%s %s " (nth 0 described) (concat (nth 2 described) "?"))))
        (progn (message "mevedel: %s cancelled; nothing changed" (downcase (nth 2 described))) nil)
      ;; The commit names the session the prepare saw, so a session switch
      ;; in between cannot redirect it.
      (mevedel-lsp--lifecycle-request
       server commit
       (mevedel-lsp--object :token (plist-get impact :token) :sessionId (plist-get impact :sessionId))
       (plist-get impact :sessionId)))))

(defcustom mevedel-lsp-revert-changed-files t
  "Whether buffers of files an agent's turn, a Rewind or a Redo changed are
read again.  Only buffers without unsaved changes whose file changed on
disk are, like `auto-revert-mode' would."
  :type 'boolean)

(defun mevedel-lsp--revert-changed-buffers (server)
  "Read again the unmodified buffers of SERVER's project changed on disk."
  (when-let* ((mevedel-lsp-revert-changed-files)
              (root (ignore-errors (file-truename (project-root (eglot--project server))))))
    (dolist (buffer (buffer-list))
      (let ((file (buffer-file-name buffer)))
        (when (and file (not (buffer-modified-p buffer))
                   (string-prefix-p (file-name-as-directory root) (file-truename file))
                   (file-exists-p file)
                   (not (verify-visited-file-modtime buffer)))
          (with-current-buffer buffer
            (condition-case err
                (revert-buffer t t t)
              (error (message "mevedel: could not read %s again: %s" file (error-message-string err))))))))))

(defun mevedel-lsp--in-place-done (verb result)
  "Report an in-place RESULT (Rewind, Redo) as VERB; return RESULT."
  (when (and result (eq (plist-get result :committed) t))
    (mevedel-lsp--revert-changed-buffers (mevedel-lsp--server)))
  (when result
    (message "mevedel: %s %s: %s%s%s" verb (plist-get result :sessionId)
             (if (eq (plist-get result :committed) t)
                 (format "now %s" (mevedel-lsp--plural (plist-get result :settledTurns) "settled turn"))
               "nothing changed")
             (if-let ((written (mevedel-lsp--list (plist-get result :written))))
                 (concat "; wrote " (string-join written ", "))
               "")
             (if-let ((warning (plist-get result :warning))) (format " (warning: %s)" warning) "")))
  result)

(defun mevedel-lsp--child-done (server verb result)
  "Report a new session RESULT (Fork, Save As) as VERB and show its transcript."
  (when result
    (let ((child (plist-get result :session)))
      ;; From a chat, the new session's chat; else its transcript.
      (pop-to-buffer (if (derived-mode-p 'mevedel-lsp-chat-mode)
                         (mevedel-lsp-chat-buffer (plist-get child :sessionId) server)
                       (mevedel-lsp-transcript-buffer (plist-get child :sessionId) server)))
      (mevedel-lsp--refresh-lists server)
      (message "mevedel: %s %s into %s (%s, %s), now current%s" verb (plist-get result :sourceId)
               (plist-get child :displayName) (plist-get child :sessionId)
               (mevedel-lsp--plural (plist-get child :settledTurns) "turn")
               (if-let ((warning (plist-get result :warning))) (format " (warning: %s)" warning) ""))))
  result)

(defun mevedel-lsp--read-turn (server session-id what &optional completed-only)
  "Ask SERVER for a settled turn of SESSION-ID to WHAT.
In a turns list or a chat, the turn at point.  With COMPLETED-ONLY,
only completed turns are offered."
  (or (and (derived-mode-p 'mevedel-lsp-turns-mode) (tabulated-list-get-id))
      (and (derived-mode-p 'mevedel-lsp-chat-mode) (get-text-property (point) 'mevedel-lsp-chat-turn))
      (let* ((listing (mevedel-lsp--request server :mevedel/turn/list (mevedel-lsp--object :sessionId session-id)))
             (turns (seq-filter (lambda (turn)
                                  (if completed-only
                                      (equal (plist-get turn :state) "completed")
                                    (not (equal (plist-get turn :state) "in-flight"))))
                                (reverse (mevedel-lsp--list (plist-get listing :turns)))))
             (candidates (mapcar (lambda (turn)
                                   (cons (format "%d  %s  %s" (plist-get turn :turn) (plist-get turn :state)
                                                 (plist-get turn :prompt))
                                         (plist-get turn :turn)))
                                 turns)))
        (unless candidates
          (user-error "mevedel: %s has no settled turn to %s" (plist-get listing :sessionId) what))
        (cdr (assoc (completing-read (format "Turn to %s: " what)
                                     (lambda (probe pred action)
                                       (if (eq action 'metadata)
                                           '(metadata (display-sort-function . identity))
                                         (complete-with-action action candidates probe pred)))
                                     nil t)
                    candidates)))))

(defun mevedel-lsp--read-boundary (turn)
  "Ask which boundary of TURN to rewind to: \"after\" or \"before\"."
  (let* ((choices (list (cons (format "After the response of turn %d (keep it)" turn) "after")
                        (cons (format "Before the prompt of turn %d (discard it too)" turn) "before"))))
    (cdr (assoc (completing-read "Rewind to: " (mapcar #'car choices) nil t) choices))))

;;;###autoload
(defun mevedel-lsp-rewind (turn boundary &optional session-id)
  "Rewind SESSION-ID to BOUNDARY (\"after\" or \"before\") of TURN.
Interactively, the turn at point of a turns list, else one picked, and
the boundary picked.  The impact is shown and you are asked to confirm.
Return the commit's result, or nil when declined."
  (interactive
   (let* ((session (mevedel-lsp--session-at-point))
          (turn (mevedel-lsp--read-turn (mevedel-lsp--server) session "rewind to")))
     (list turn (mevedel-lsp--read-boundary turn) session)))
  (mevedel-lsp--in-place-done
   "rewound"
   (mevedel-lsp--transaction (mevedel-lsp--server) :mevedel/rewind/prepare :mevedel/rewind/commit
                             (list :turn turn :boundary boundary :sessionId session-id)
                             #'mevedel-lsp--describe-rewind)))

(defun mevedel-lsp--redo-candidate (state)
  "The picker text of a RedoState STATE, like the Rewind picker labels a turn."
  (let ((last (plist-get state :lastTurn)))
    (format "%s · %s" (mevedel-lsp--plural (plist-get state :turnCount) "turn")
            (if last
                (format "ends at turn %d: %s" (plist-get last :turn) (plist-get last :preview))
              "the empty session"))))

;;;###autoload
(defun mevedel-lsp-redo (publication-id &optional session-id)
  "Return SESSION-ID to the earlier committed state PUBLICATION-ID.
Interactively, pick one of the states the server lists, newest first.
The impact is shown and you are asked to confirm."
  (interactive
   (let* ((session (mevedel-lsp--session-at-point))
          (listing (mevedel-lsp--request (mevedel-lsp--server) :mevedel/redo/list
                                         (mevedel-lsp--object :sessionId session)))
          (candidates (mapcar (lambda (state) (cons (mevedel-lsp--redo-candidate state) (plist-get state :publicationId)))
                              (mevedel-lsp--list (plist-get listing :states)))))
     (unless candidates
       (user-error "mevedel: %s has no earlier state to return to" (plist-get listing :sessionId)))
     (list (cdr (assoc (completing-read "Redo to: "
                                        (lambda (probe pred action)
                                          (if (eq action 'metadata)
                                              '(metadata (display-sort-function . identity))
                                            (complete-with-action action candidates probe pred)))
                                        nil t)
                       candidates))
           (plist-get listing :sessionId))))
  (mevedel-lsp--in-place-done
   "redone"
   (mevedel-lsp--transaction (mevedel-lsp--server) :mevedel/redo/prepare :mevedel/redo/commit
                             (list :publicationId publication-id :sessionId session-id)
                             #'mevedel-lsp--describe-redo)))

;;;###autoload
(defun mevedel-lsp-fork (turn &optional session-id)
  "Fork SESSION-ID after the response of TURN into a new, current session.
The impact is shown and you are asked to confirm."
  (interactive
   (let ((session (mevedel-lsp--session-at-point)))
     (list (mevedel-lsp--read-turn (mevedel-lsp--server) session "fork after" t) session)))
  (let ((server (mevedel-lsp--server)))
    (mevedel-lsp--child-done
     server "forked"
     (mevedel-lsp--transaction server :mevedel/fork/prepare :mevedel/fork/commit
                               (list :turn turn :sessionId session-id) #'mevedel-lsp--describe-fork))))

;;;###autoload
(defun mevedel-lsp-fork-variants (turn &optional session-id)
  "Pick one of the sessions sharing the fork point at TURN of SESSION-ID.
The picker lists the source first, then its direct forks oldest to
newest, the session asked about marked current.  The chosen session is
opened and its transcript shown at TURN.  Return the
`mevedel/session/open' result."
  (interactive
   (let ((session (mevedel-lsp--session-at-point)))
     (list (mevedel-lsp--read-turn (mevedel-lsp--server) session "list the variants of" t) session)))
  (let* ((server (mevedel-lsp--server))
         (group (mevedel-lsp--request server :mevedel/fork/variants
                                      (mevedel-lsp--object :turn turn :sessionId session-id)))
         (variants (append (and (plist-get group :source) (list (plist-get group :source)))
                           (mevedel-lsp--list (plist-get group :forks))))
         (candidates (mapcar (lambda (v)
                               (cons (format "%s%s  %s (%s)  %s"
                                             (if (eq (plist-get v :isCurrent) t) "* " "  ")
                                             (plist-get v :role) (plist-get v :displayName) (plist-get v :sessionId)
                                             (or (plist-get v :latestPreview) ""))
                                     (plist-get v :sessionId)))
                             variants))
         (chosen (cdr (assoc (completing-read (format "Variant at turn %d: " (plist-get group :turn))
                                              (lambda (probe pred action)
                                                (if (eq action 'metadata)
                                                    '(metadata (display-sort-function . identity))
                                                  (complete-with-action action candidates probe pred)))
                                              nil t)
                             candidates))))
    (unless chosen
      (user-error "mevedel: no such variant"))
    (prog1 (mevedel-lsp-open-session chosen "auto" server)
      (mevedel-lsp-visit-turn (plist-get group :turn) chosen))))

;;;###autoload
(defun mevedel-lsp-worktree-fork (turn &optional name session-id)
  "Fork SESSION-ID after TURN into a new session in a linked Git worktree NAME.
An empty or nil NAME lets the server allocate one.  The impact is shown
and you are asked to confirm."
  (interactive
   (let ((session (mevedel-lsp--session-at-point)))
     (list (mevedel-lsp--read-turn (mevedel-lsp--server) session "fork after" t)
           (read-string "Worktree name (empty: allocated): ")
           session)))
  (let* ((server (mevedel-lsp--server))
         (name (and name (not (string-empty-p (string-trim name))) (string-trim name)))
         (result (mevedel-lsp--transaction
                  server :mevedel/worktreeFork/prepare :mevedel/worktreeFork/commit
                  (list :turn turn :name name :sessionId session-id)
                  (lambda (impact) (mevedel-lsp--describe-fork impact t)))))
    (when result
      (mevedel-lsp--child-done server "forked" result)
      (let ((place (plist-get result :worktree))
            (unrestored (mevedel-lsp--list (plist-get result :unrestored))))
        (message "mevedel: the fork's worktree is %s on branch %s%s" (plist-get place :directory) (plist-get place :branch)
                 (if unrestored
                     (concat "; left at HEAD: "
                             (mapconcat (lambda (f) (format "%s (%s)" (plist-get f :path) (plist-get f :reason))) unrestored ", "))
                   ""))))
    result))

;;;###autoload
(defun mevedel-lsp-save-as (name &optional session-id)
  "Copy SESSION-ID into a new session called NAME, made current.
The impact is shown and you are asked to confirm."
  (interactive (list (read-string "Save session as: ") (mevedel-lsp--session-at-point)))
  (let ((server (mevedel-lsp--server)))
    (mevedel-lsp--child-done
     server "saved"
     (mevedel-lsp--transaction server :mevedel/saveAs/prepare :mevedel/saveAs/commit
                               (list :name name :sessionId session-id) #'mevedel-lsp--describe-save-as))))

(defun mevedel-lsp--resolve-recovery (server method session-id)
  "Send SERVER the recovery METHOD for SESSION-ID and say what it did.
A file it left as the person edited it since the crash makes it a warning."
  (let* ((result (mevedel-lsp--request server method (mevedel-lsp--object :sessionId session-id)))
         ;; The server's sentence, the one every client and the CLI say.
         (left (plist-get result :leftNote))
         (said (format "recovery %s of %s: %s%s%s" (plist-get result :recoveryId) (plist-get result :sessionId)
                       (pcase (plist-get result :resolution)
                         ("rolled-back" "the files have their content from before the interrupted transaction")
                         ("completed" "the interrupted transaction was finished")
                         (_ "the files were left as they are"))
                       (if-let ((written (mevedel-lsp--list (plist-get result :written))))
                           (concat "; wrote " (string-join written ", "))
                         "")
                       (if (stringp left) (concat "; " left) ""))))
    (if (stringp left)
        (display-warning 'mevedel said)
      (message "mevedel: %s" said))
    result))

(defun mevedel-lsp-retry-recovery (&optional session-id server)
  "Finish or roll back the interrupted Rewind or Redo of SESSION-ID."
  (interactive (list (mevedel-lsp--session-at-point)))
  (mevedel-lsp--resolve-recovery (or server (mevedel-lsp--server)) :mevedel/session/retryRecovery session-id))

(defun mevedel-lsp-abandon-recovery (&optional session-id)
  "Drop SESSION-ID's recovery, leaving the project files as they are.
Asks first."
  (interactive (list (mevedel-lsp--session-at-point)))
  (when (yes-or-no-p "Abandon the recovery? The project files stay as the interrupted transaction left them. ")
    (mevedel-lsp--resolve-recovery (mevedel-lsp--server) :mevedel/session/abandonRecovery session-id)))


;;;; Control transfer

;; One client writes a session at a time.  "Take control" acquires a free,
;; released or own lease at once, takes over an expired one after the
;; server's question, and asks the owner of a live one; the owner's server
;; asks its user Grant or Keep through `window/showMessageRequest' (the
;; minibuffer question below).  `mevedel/control/didChange' reports each
;; step on both sides.

(defvar mevedel-lsp-control-change-functions nil
  "Abnormal hook run with the server and the params plist of each
`mevedel/control/didChange' (:sessionId :role :phase :message ...).")

(defun mevedel-lsp-take-control (&optional session-id)
  "Take control of SESSION-ID (default: the session at point, else current).
Return the `mevedel/control/take' result."
  (interactive (list (mevedel-lsp--session-at-point)))
  (let* ((server (mevedel-lsp--server))
         (taken (condition-case err
                    (jsonrpc-request server :mevedel/control/take (mevedel-lsp--object :sessionId session-id)
                                     :timeout mevedel-lsp-question-timeout)
                  (jsonrpc-error (mevedel-lsp--fail server err)))))
    (mevedel-lsp--refresh-lists server)
    (message "mevedel: %s: %s" (plist-get taken :sessionId)
             (pcase (plist-get taken :outcome)
               ("acquired" "you have control (writable here)")
               ("took-over" "took over the expired lease (writable here)")
               ("already-owner" "you already have control")
               (_ (format "asked %s for control; read-only until it answers"
                          (or (plist-get taken :ownerHost) "its owner")))))
    taken))

(defun mevedel-lsp-release-control (&optional session-id)
  "Save, publish and release SESSION-ID; it stays open here read-only, following."
  (interactive (list (mevedel-lsp--session-at-point)))
  (let* ((server (mevedel-lsp--server))
         (released (mevedel-lsp--request server :mevedel/control/release (mevedel-lsp--object :sessionId session-id))))
    (mevedel-lsp--refresh-lists server)
    (message "mevedel: released %s%s; it is read-only here now" (plist-get released :sessionId)
             (if (eq (plist-get released :committed) t) " (published its unsaved content)" ""))
    released))

(defun mevedel-lsp--answer-control (method verb session-id)
  "Answer the waiting request for SESSION-ID with METHOD; VERB names it."
  (let ((status (mevedel-lsp--request (mevedel-lsp--server) method (mevedel-lsp--object :sessionId session-id))))
    (message "mevedel: %s the request for %s (%s)" verb (plist-get status :sessionId) (plist-get status :phase))
    status))

(defun mevedel-lsp-grant-control (&optional session-id)
  "Grant the waiting request for control of SESSION-ID (outside the question)."
  (interactive (list (mevedel-lsp--session-at-point)))
  (mevedel-lsp--answer-control :mevedel/control/grant "granted" session-id))

(defun mevedel-lsp-keep-control (&optional session-id)
  "Refuse the waiting request for control of SESSION-ID (outside the question)."
  (interactive (list (mevedel-lsp--session-at-point)))
  (mevedel-lsp--answer-control :mevedel/control/keep "kept" session-id))

(cl-defmethod eglot-handle-notification
  ((server mevedel-lsp-server) (_method (eql mevedel/control/didChange)) &rest params &key message &allow-other-keys)
  "Say what a control transfer step (PARAMS) means, in MESSAGE's words."
  (message "[mevedel] %s" message)
  (run-hook-with-args 'mevedel-lsp-control-change-functions server params))


;;;; Following, refresh, compaction and /clear

;; A session open read-only here (joined, released, handed over) follows the
;; owner's committed publications: the server reads each new head and sends
;; `mevedel/session/didPublish', whole settled turns only, and the open
;; views of that session are read again.

(defvar mevedel-lsp--follow-off nil
  "(SERVER . SESSION-ID) pairs whose following was turned off here.")

(defun mevedel-lsp-toggle-follow (&optional session-id)
  "Turn following of SESSION-ID on or off here.
Return the `mevedel/session/setFollow' result."
  (interactive (list (mevedel-lsp--session-at-point)))
  (let* ((server (mevedel-lsp--server))
         (session (or session-id
                      (plist-get (mevedel-lsp--request server :mevedel/turn/list (mevedel-lsp--object)) :sessionId)))
         (key (cons server session))
         (enable (and (member key mevedel-lsp--follow-off) t))
         (state (mevedel-lsp--request server :mevedel/session/setFollow
                                      (list :enabled (if enable t :json-false) :sessionId session))))
    (setq mevedel-lsp--follow-off (delete key mevedel-lsp--follow-off))
    (unless (eq (plist-get state :enabled) t)
      (push key mevedel-lsp--follow-off))
    (message "mevedel: %s: %s" session
             (cond ((not (eq (plist-get state :enabled) t))
                    "not following (M-x mevedel-lsp-refresh-session reads the latest)")
                   ((eq (plist-get state :following) t)
                    (format "following the owner's publications (%s)" (or (plist-get state :mode) "on")))
                   (t "following is on; it applies while the session is read-only here")))
    state))

(defun mevedel-lsp-refresh-session (&optional session-id)
  "Read SESSION-ID's committed head now (followed or not).
Return the `mevedel/session/refresh' result."
  (interactive (list (mevedel-lsp--session-at-point)))
  (let ((result (mevedel-lsp--request (mevedel-lsp--server) :mevedel/session/refresh
                                      (mevedel-lsp--object :sessionId session-id))))
    (message "mevedel: %s: %s" (plist-get result :sessionId)
             (pcase (plist-get result :status)
               ("advanced" (format "now at the owner's latest (%s)"
                                   (mevedel-lsp--plural (plist-get (plist-get result :publication) :settledTurns)
                                                        "settled turn")))
               ("unchanged" "already at the owner's latest")
               ("held-back" (format "not advanced: %s" (plist-get (plist-get result :publication) :heldBack)))
               (_ "you own it; there is nothing to refresh")))
    result))

(defun mevedel-lsp-compact-session (summary &optional session-id)
  "Compact SESSION-ID: close its live segment; the next starts with SUMMARY."
  (interactive (list (read-string "Summary of the segment: ") (mevedel-lsp--session-at-point)))
  (let ((result (mevedel-lsp--request (mevedel-lsp--server) :mevedel/session/compact
                                      (mevedel-lsp--object :summary summary :sessionId session-id))))
    (message "mevedel: %s: segment %d closed; segment %d starts with your summary"
             (plist-get result :sessionId) (plist-get result :previousSegment) (plist-get result :segment))
    result))

(defun mevedel-lsp-clear-session (&optional session-id)
  "/clear SESSION-ID: close the current chat as a chapter and start a new one."
  (interactive (list (mevedel-lsp--session-at-point)))
  (let ((result (mevedel-lsp--request (mevedel-lsp--server) :mevedel/session/clear
                                      (mevedel-lsp--object :sessionId session-id))))
    (message "mevedel: %s: chapter %s closed; a new chat starts in segment %d"
             (plist-get result :sessionId) (plist-get result :chapter) (plist-get result :segment))
    result))

(defvar mevedel-lsp--pending-changes)
(defvar mevedel-lsp--change-timer)

(defvar mevedel-lsp-publish-functions nil
  "Abnormal hook run with the server and the params plist of each
`mevedel/session/didPublish' after the session's views were read again.")

(cl-defmethod eglot-handle-notification
  ((server mevedel-lsp-server) (_method (eql mevedel/session/didPublish))
   &rest params &key sessionId heldBack &allow-other-keys)
  "Read again the views of session SESSIONID, which advanced (PARAMS).
With HELDBACK, nothing was adopted: say why."
  (if heldBack
      (message "mevedel: %s: the owner published a newer state, not adopted here: %s" sessionId heldBack)
    ;; A followed session is read-only here; the change is queued like a
    ;; didChange so a refresh never runs inside a waiting request.
    (setq mevedel-lsp--pending-changes
          (cons (cons (cons server sessionId)
                      (append (list :sessionId sessionId :reason "published" :access "read-only"
                                    :settledTurns (plist-get params :settledTurns))
                              (list :published params)))
                (cl-remove-if (lambda (queued) (and (eq (caar queued) server) (equal (cdar queued) sessionId)))
                              mevedel-lsp--pending-changes)))
    (unless mevedel-lsp--change-timer
      (setq mevedel-lsp--change-timer (run-at-time 0 nil #'mevedel-lsp--apply-pending-changes)))))


;;;; Session notifications and questions

(defun mevedel-lsp--session-changed (server params)
  "Bring the views of the session PARAMS names up to date."
  (let ((session (plist-get params :sessionId))
        (reason (plist-get params :reason)))
    (dolist (buffer (buffer-list))
      (with-current-buffer buffer
        (when (and mevedel-lsp--uri (equal (mevedel-lsp-uri-session mevedel-lsp--uri) session))
          (if (equal reason "closed")
              ;; Its live conversation is gone from the server; the text
              ;; stays, marked as no longer followed.
              (setq header-line-format (format "mevedel: session %s was closed; this view is not updated" session))
            (condition-case err
                (progn
                  (mevedel-lsp--fill buffer server mevedel-lsp--uri t)
                  (setq header-line-format
                        (and (equal (plist-get params :access) "read-only")
                             (format "mevedel: session %s is read-only here" session))))
              (error (message "mevedel: could not refresh %s: %s" (buffer-name) (error-message-string err))))))))
    (mevedel-lsp--refresh-lists server session)
    (when (equal reason "read-only")
      (message "mevedel: session %s is now read-only here (another client took it over)" session))
    (if-let ((published (plist-get params :published)))
        (run-hook-with-args 'mevedel-lsp-publish-functions server published)
      (run-hook-with-args 'mevedel-lsp-session-change-functions server params))))

;; A refresh reads through the server, so it waits for answers.  It must not
;; run while any `jsonrpc-request' waits (a timer can fire inside that wait,
;; and inside the filter a notification arrives in): jsonrpc ends a wait by
;; throwing to it, which would cut a wait nested inside short, and stops
;; reading that batch of messages, so answers queued behind would sit unread.
;; Changes are therefore queued and applied once no request is waiting.

(defvar mevedel-lsp--waiting 0
  "How many `jsonrpc-request' calls are waiting for an answer now.")

(defun mevedel-lsp--count-waiting (request &rest arguments)
  "Around `jsonrpc-request': count it while it waits (REQUEST ARGUMENTS)."
  (cl-incf mevedel-lsp--waiting)
  (unwind-protect (apply request arguments)
    (cl-decf mevedel-lsp--waiting)))

(advice-add 'jsonrpc-request :around #'mevedel-lsp--count-waiting)

;; The jsonrpc of Emacs 28 (1.0.14) reads a batch of messages in its process
;; filter one after another, and the answer that ends a `jsonrpc-request'
;; wait throws out of that loop: the messages that came in the same read
;; behind it stay in the process buffer, unread until the server writes
;; again.  When the server writes nothing more (a turn's last didUpdate and
;; its prompt's answer, right behind the answer to `mevedel/turn/cancel'),
;; the chat would wait for them forever.  So after each such wait the rest
;; of the buffer is read, from a timer, outside any run of the filter.
;; (Emacs 30's jsonrpc queues the messages and reads on by itself.)

(defvar mevedel-lsp--in-filter nil
  "Non-nil while a jsonrpc process filter runs (Emacs 28's jsonrpc).")

(defun mevedel-lsp--filtering (filter &rest arguments)
  "Around jsonrpc's process FILTER (ARGUMENTS): note that it runs."
  (let ((mevedel-lsp--in-filter t))
    (apply filter arguments)))

(defun mevedel-lsp--read-left-behind (process)
  "Read the messages jsonrpc left unread in PROCESS's buffer, once no filter runs."
  (cond ((not (and (process-live-p process) (buffer-live-p (process-buffer process)))))
        ;; A question asked from inside the filter runs timers too.
        (mevedel-lsp--in-filter (run-at-time 0.05 nil #'mevedel-lsp--read-left-behind process))
        (t (jsonrpc--process-filter process ""))))

(defun mevedel-lsp--after-waiting (request connection &rest arguments)
  "Around `jsonrpc-request' (REQUEST CONNECTION ARGUMENTS): afterwards,
read what came behind its answer."
  (unwind-protect (apply request connection arguments)
    (when (cl-typep connection 'jsonrpc-process-connection)
      (run-at-time 0 nil #'mevedel-lsp--read-left-behind (jsonrpc--process connection)))))

(unless (boundp 'jsonrpc--in-process-filter)
  (advice-add 'jsonrpc--process-filter :around #'mevedel-lsp--filtering)
  (advice-add 'jsonrpc-request :around #'mevedel-lsp--after-waiting))

(defvar mevedel-lsp--pending-changes nil
  "Session changes not applied yet: ((SERVER . SESSION) . PARAMS), newest first.")

(defvar mevedel-lsp--change-timer nil
  "The timer that applies `mevedel-lsp--pending-changes'.")

(defun mevedel-lsp--quiet-p ()
  "Non-nil when views may be read again now: no request waits, no agent
turn runs.  While a turn runs, the agent may ask a question at any moment
\(`window/showMessageRequest', in the minibuffer); had a refresh's request
been waiting then, its answer would end the wait by throwing through the
question, which would vanish unanswered.  The chat shows the running turn
from `mevedel/turn/didUpdate' meanwhile; the rest is read once it settled."
  (and (= mevedel-lsp--waiting 0)
       (not (and (fboundp 'mevedel-lsp-chat--running-p) (mevedel-lsp-chat--running-p)))))

(defun mevedel-lsp--retry-delay ()
  "Seconds until views are tried again: soon after a waiting request,
later while a turn runs (its end tries them at once)."
  (if (> mevedel-lsp--waiting 0) 0.05 0.5))

(defun mevedel-lsp--apply-pending-changes ()
  "Apply the queued session changes, or wait until `mevedel-lsp--quiet-p'."
  (setq mevedel-lsp--change-timer nil)
  (if (not (mevedel-lsp--quiet-p))
      (setq mevedel-lsp--change-timer (run-at-time (mevedel-lsp--retry-delay) nil #'mevedel-lsp--apply-pending-changes))
    (let ((changes (reverse mevedel-lsp--pending-changes)))
      (setq mevedel-lsp--pending-changes nil)
      (pcase-dolist (`((,server . ,_session) . ,params) changes)
        (when (jsonrpc-running-p server)
          (mevedel-lsp--session-changed server params))))))

(cl-defmethod eglot-handle-notification
  ((server mevedel-lsp-server) (_method (eql mevedel/session/didChange)) &rest params &key sessionId &allow-other-keys)
  "Queue the refresh of what shows session SESSIONID (PARAMS)."
  (let ((key (cons server sessionId)))
    ;; Only the latest change of a session matters: it says what is now.
    (setq mevedel-lsp--pending-changes
          (cons (cons key params)
                (cl-remove-if (lambda (queued)
                                (and (eq (caar queued) server) (equal (cdar queued) sessionId)))
                              mevedel-lsp--pending-changes))))
  (unless mevedel-lsp--change-timer
    (setq mevedel-lsp--change-timer (run-at-time 0 nil #'mevedel-lsp--apply-pending-changes))))

(cl-defmethod eglot-handle-request
  ((_server mevedel-lsp-server) (_method (eql window/showMessageRequest))
   &key type message actions &allow-other-keys)
  "Ask the user the server's question MESSAGE; answer the chosen action.
Empty input or \\[keyboard-quit] answers at once with nothing (JSON
null), which the server reads as the cautious choice: refuse a
permission, Cancel a takeover, Keep a session another client asks for."
  (ignore type)
  (let ((titles (mapcar (lambda (action) (plist-get action :title)) (append actions nil))))
    ;; jsonrpc writes nil as null (its `:null-object' is nil in Emacs 28
    ;; and 30); the keyword `:null' is no JSON value there.
    (if (null titles)
        (progn (message "[mevedel] %s" message) nil)
      (condition-case nil
          (let ((choice (completing-read (format "[mevedel] %s\nAnswer (%s) [empty or C-g: %s]: "
                                                 message (string-join titles ", ")
                                                 (mevedel-lsp--cautious-answer message titles))
                                         titles nil t)))
            (and (member choice titles) (list :title choice)))
        (quit (message "[mevedel] answered: %s" (mevedel-lsp--cautious-answer message titles))
              nil)))))

(defun mevedel-lsp--cautious-answer (message titles)
  "What no answer to the question MESSAGE with TITLES means, in words."
  (cond ((string-match-p " asks permission: " message) "refuse")
        ((member "Keep" titles) "Keep")
        ((member "Cancel" titles) "Cancel")
        (t "no answer")))


;;;; Chat: prompting agents and watching their turns

;; `mevedel/turn/prompt' sends a prompt to an ACP agent as the next turn of
;; a session and answers once the turn settled, so it goes out as an
;; asynchronous request.  Meanwhile the server sends
;; `mevedel/turn/didUpdate' (phases starting, running, cancelling, settled;
;; events response, reasoning, tool_call, plan, permission), which the chat
;; buffer of the session shows as it arrives; the agent's permission
;; questions are the server's `window/showMessageRequest', asked in the
;; minibuffer with the agent's own options (see the end of this file).
;;
;; A chat buffer shows the session's turns (`mevedel/turn/list' and
;; `mevedel/turn/show') and the running one, each as a model: a list of
;; blocks (response text, reasoning, tool calls, plan, permission
;; decisions) with markers, so streamed text is appended and a tool call
;; is redrawn in place.  A turn seen live keeps its model (it has the
;; diffs the records lack); other turns are read once with
;; `mevedel/turn/show'.

(defface mevedel-lsp-chat-heading
  '((t :inherit font-lock-keyword-face :weight bold))
  "A turn's heading in the chat.")

(defface mevedel-lsp-chat-prompt
  '((t :inherit bold))
  "The prompt of a turn in the chat.")

(defface mevedel-lsp-chat-reasoning
  '((t :inherit shadow))
  "The agent's reasoning in the chat.")

(defface mevedel-lsp-chat-tool
  '((t :inherit font-lock-function-name-face))
  "A tool call's line in the chat.")

(defface mevedel-lsp-chat-added
  '((t :inherit diff-added))
  "An added line of a tool call's diff.")

(defface mevedel-lsp-chat-removed
  '((t :inherit diff-removed))
  "A removed line of a tool call's diff.")

(defface mevedel-lsp-chat-permission
  '((t :inherit warning))
  "A permission decision in the chat.")

(defface mevedel-lsp-chat-error
  '((t :inherit error))
  "A failed turn or a refused prompt in the chat.")

(defface mevedel-lsp-chat-footer
  '((t :inherit shadow))
  "How a turn ended.")

(defcustom mevedel-lsp-chat-diff-context 2
  "Unchanged lines shown around a tool call's change."
  :type 'natnum)

(defcustom mevedel-lsp-chat-output-lines 20
  "The most lines of a tool call's output the chat shows."
  :type 'natnum)

(cl-defstruct (mevedel-lsp-chat--turn (:constructor mevedel-lsp-chat--make-turn)
                                      (:copier nil))
  "A turn as the chat shows it."
  number turn-id agent prompt attachments
  ;; "starting", "running", "cancelling", or how it settled: "completed",
  ;; "errored", "interrupted", "refused", "aborted" (a prompt aborted
  ;; before its turn began); past turns: their state.
  state stop-reason
  ;; (:kind :message :action) of a failed turn or a refused prompt.
  error
  ;; Why an interrupted turn (or an aborted prompt) ended, as recorded.
  reason
  ;; The turn was seen live here (its model has the diffs).
  live
  blocks start header-end
  ;; Its sub-agents' blocks (kind agent) by path, as an alist.
  agents)

(cl-defstruct (mevedel-lsp-chat--block (:constructor mevedel-lsp-chat--make-block)
                                       (:copier nil))
  "One thing a turn did, as the chat shows it."
  ;; response, reasoning, tool_call, plan, permission, mail, agent (a
  ;; sub-agent's activity; its call-id: the parent's call that started it)
  kind call-id
  ;; response/reasoning/plan/mail: the text; tool_call: (:title :toolKind
  ;; :status :output :diffs :arguments); permission: (:text :decision
  ;; :allowed); agent: (:path :label :phase :outcome :reason :error)
  data
  ;; reasoning: shown; agent: `open' or `closed' as toggled, else nil
  ;; (shown while it runs, folded once settled)
  shown start end overlay
  ;; tool_call: the sub-agents it started; agent: its own blocks
  nested)

(defvar mevedel-lsp-chat--agents (make-hash-table :test #'equal)
  "The agent picked for each session (by session id) in this Emacs.")

(defvar-local mevedel-lsp-chat--turns nil
  "The chat's turn models by turn id.")

(defvar-local mevedel-lsp-chat--live nil
  "The model of the turn in flight (or of the prompt waiting to start).")

(defvar-local mevedel-lsp-chat--notice nil
  "The model of the last refused prompt, shown after the turns.")

(defvar-local mevedel-lsp-chat--order nil
  "The turn ids of the session's turns, in order, as last listed.")

(defvar-local mevedel-lsp-chat--name nil
  "The session's display name.")

(defvar-local mevedel-lsp-chat--options nil
  "The session's agent modes and options (an `AgentOptions'), as last told.")

(defvar-local mevedel-lsp-chat--note nil
  "A sentence the header line shows (the session was closed...).")

(defvar mevedel-lsp-chat--refresh-queue nil
  "Chat buffers to read again once `mevedel-lsp--quiet-p'.")

(defvar mevedel-lsp-chat--refresh-timer nil
  "The timer that reads the queued chats again.")

(defun mevedel-lsp-chat--phase ()
  "The chat's indicator: the live turn's phase, else \"idle\"."
  (if mevedel-lsp-chat--live
      (mevedel-lsp-chat--turn-state mevedel-lsp-chat--live)
    "idle"))

(defun mevedel-lsp-chat--header-line ()
  "The chat's header line."
  (let ((agent (gethash mevedel-lsp--session-id mevedel-lsp-chat--agents)))
    (concat (format " %s" (or mevedel-lsp-chat--name mevedel-lsp--session-id))
            (if agent (format " · agent %s" agent) "")
            (if-let ((options (mevedel-lsp-chat--options-summary mevedel-lsp-chat--options))) (format " · %s" options) "")
            (format " · %s" (mevedel-lsp-chat--phase))
            (if mevedel-lsp-chat--note (format " · %s" mevedel-lsp-chat--note) "")
            (substitute-command-keys
             (if mevedel-lsp-chat--live
                 "   \\<mevedel-lsp-chat-mode-map>\\[mevedel-lsp-cancel] cancel  \\[mevedel-lsp-chat-toggle-reasoning] reasoning"
               "   \\<mevedel-lsp-chat-mode-map>\\[mevedel-lsp-prompt] prompt  \\[mevedel-lsp-chat-toggle-reasoning] reasoning  \\[mevedel-lsp-rewind] rewind  \\[mevedel-lsp-redo] redo  \\[mevedel-lsp-fork] fork")))))

(defvar mevedel-lsp-chat-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "C-c C-c") #'mevedel-lsp-cancel)
    (define-key map (kbd "p") #'mevedel-lsp-prompt)
    (define-key map (kbd "TAB") #'mevedel-lsp-chat-toggle-reasoning)
    (define-key map (kbd "M-n") #'mevedel-lsp-chat-next-turn)
    (define-key map (kbd "M-p") #'mevedel-lsp-chat-previous-turn)
    (define-key map (kbd "w") #'mevedel-lsp-rewind)
    (define-key map (kbd "y") #'mevedel-lsp-redo)
    (define-key map (kbd "f") #'mevedel-lsp-fork)
    (define-key map (kbd "F") #'mevedel-lsp-worktree-fork)
    (define-key map (kbd "V") #'mevedel-lsp-fork-variants)
    (define-key map (kbd "t") #'mevedel-lsp-list-turns)
    (define-key map (kbd "h") #'mevedel-lsp-transcript)
    (define-key map (kbd "d") #'mevedel-lsp-review)
    (define-key map (kbd "o") #'mevedel-lsp-chat-options)
    (define-key map (kbd "e") #'mevedel-lsp-queue-edit)
    (define-key map (kbd "k") #'mevedel-lsp-queue-cancel)
    (define-key map (kbd "S") #'mevedel-lsp-steer)
    map)
  "Keys of `mevedel-lsp-chat-mode'.")

(define-derived-mode mevedel-lsp-chat-mode special-mode "mevedel chat"
  "The chat of a mevedel session: its turns, and the one running, live.
Each turn shows its prompt, the agent's response, its reasoning (folded:
\\<mevedel-lsp-chat-mode-map>\\[mevedel-lsp-chat-toggle-reasoning] shows or hides it), its tool calls with their status and
diffs (a sub-agent's activity under the call that started it: streamed
while it runs, folded once it is done, \\[mevedel-lsp-chat-toggle-reasoning] shows it), its plan and the
permission decisions; then how it ended.
\\[mevedel-lsp-prompt] writes the next prompt, \\[mevedel-lsp-cancel] cancels the running turn.  On a turn:
\\[mevedel-lsp-rewind] rewinds to before or after it, \\[mevedel-lsp-fork] forks after it, \\[mevedel-lsp-redo] returns to an earlier
state; each shows its impact and asks first.
\\{mevedel-lsp-chat-mode-map}"
  (setq-local revert-buffer-function (lambda (&rest _) (mevedel-lsp-chat-refresh)))
  (setq-local header-line-format '(:eval (mevedel-lsp-chat--header-line)))
  (setq-local mode-line-process '(":" (:eval (mevedel-lsp-chat--phase))))
  (setq-local truncate-lines nil)
  (setq-local word-wrap t)
  ;; A window following the end keeps the newest text at its bottom.
  (setq-local scroll-conservatively 101)
  (setq mevedel-lsp-chat--turns (make-hash-table :test #'equal)))

(defun mevedel-lsp-chat--buffers (&optional server session-id)
  "The chat buffers, of SERVER and SESSION-ID when given."
  (seq-filter (lambda (buffer)
                (with-current-buffer buffer
                  (and (derived-mode-p 'mevedel-lsp-chat-mode)
                       (or (null server) (eq mevedel-lsp--origin-server server))
                       (or (null session-id) (equal mevedel-lsp--session-id session-id)))))
              (buffer-list)))

(defun mevedel-lsp-chat--orphan (server session-id)
  "A chat buffer of SESSION-ID whose server is gone, of SERVER's project."
  (let ((root (ignore-errors (project-root (eglot--project server)))))
    (seq-find (lambda (buffer)
                (with-current-buffer buffer
                  (and (not (and mevedel-lsp--origin-server (jsonrpc-running-p mevedel-lsp--origin-server)))
                       root
                       (equal (ignore-errors (project-root (eglot--project mevedel-lsp--origin-server))) root))))
              (mevedel-lsp-chat--buffers nil session-id))))

(defun mevedel-lsp-chat--get-buffer (server session-id &optional name)
  "The chat buffer of SESSION-ID through SERVER, made (empty) if needed.
NAME is the session's display name, when known.  The chat of the session
a dead server of the same project showed (eglot restarted it) is taken
over, emptied, rather than left beside a second one."
  (or (car (mevedel-lsp-chat--buffers server session-id))
      (with-current-buffer (or (mevedel-lsp-chat--orphan server session-id)
                               (generate-new-buffer (format "*mevedel chat %s*" (or name session-id))))
        (let ((inhibit-read-only t)) (erase-buffer))
        ;; Anew: what the dead server's chat held (its live turn, notice,
        ;; queue) is read again from the new server.
        (mevedel-lsp-chat-mode)
        (setq-local mevedel-lsp--origin-server server)
        (setq mevedel-lsp--session-id session-id
              mevedel-lsp-chat--name name)
        (current-buffer))))


;;;;; Rendering

(defmacro mevedel-lsp-chat--editing (&rest body)
  "Run BODY, which edits the chat buffer; windows at its end stay there."
  (declare (indent 0) (debug t))
  `(let* ((inhibit-read-only t)
          (at-end (seq-filter (lambda (window) (= (window-point window) (point-max)))
                              (get-buffer-window-list (current-buffer) nil t)))
          (point-at-end (= (point) (point-max))))
     (prog1 (save-excursion ,@body)
       (when point-at-end (goto-char (point-max)))
       (dolist (window at-end) (set-window-point window (point-max))))))

(defun mevedel-lsp-chat--relative (path)
  "PATH relative to the chat's project when inside it."
  (let ((root (and mevedel-lsp--origin-server
                   (ignore-errors (project-root (eglot--project mevedel-lsp--origin-server))))))
    (if (and root (stringp path) (file-name-absolute-p path)
             (string-prefix-p (expand-file-name root) (expand-file-name path)))
        (file-relative-name path root)
      path)))

(defun mevedel-lsp-chat--indent (text &optional prefix)
  "TEXT with each line after PREFIX (four spaces)."
  (mapconcat (lambda (line) (concat (or prefix "    ") line))
             (split-string text "\n") "\n"))

(defun mevedel-lsp-chat--diff-lines (diff)
  "The lines showing DIFF (a ToolDiff): its path, then the changed lines
with `mevedel-lsp-chat-diff-context' unchanged lines around them."
  (let* ((path (mevedel-lsp-chat--relative (plist-get diff :path)))
         (old-text (plist-get diff :oldText))
         (lines (lambda (text) (split-string (string-remove-suffix "\n" text) "\n")))
         (old (and (stringp old-text) (funcall lines old-text)))
         (new (funcall lines (or (plist-get diff :newText) "")))
         (head 0) (tail 0))
    (while (and (< head (length old)) (< head (length new))
                (equal (nth head old) (nth head new)))
      (setq head (1+ head)))
    (while (and (< (+ head tail) (length old)) (< (+ head tail) (length new))
                (equal (nth (- (length old) tail 1) old) (nth (- (length new) tail 1) new)))
      (setq tail (1+ tail)))
    (let* ((context mevedel-lsp-chat-diff-context)
           (from (max 0 (- head context)))
           ;; Pushed, then reversed.
           (lines (list (propertize (format "+++ %s" path) 'face 'mevedel-lsp-chat-added)
                        (propertize (format "--- %s" (if (stringp old-text) path "/dev/null"))
                                    'face 'mevedel-lsp-chat-removed))))
      (cl-loop for n from from below head do (push (concat " " (nth n new)) lines))
      (cl-loop for n from head below (- (length old) tail)
               do (push (propertize (concat "-" (nth n old)) 'face 'mevedel-lsp-chat-removed) lines))
      (cl-loop for n from head below (- (length new) tail)
               do (push (propertize (concat "+" (nth n new)) 'face 'mevedel-lsp-chat-added) lines))
      (cl-loop for n from (- (length new) tail) below (min (length new) (+ (- (length new) tail) context))
               do (push (concat " " (nth n new)) lines))
      (nreverse lines))))

(defun mevedel-lsp-chat--tool-text (data)
  "The lines of a tool call with DATA."
  (let* ((status (or (plist-get data :status) "pending"))
         (output (plist-get data :output))
         (lines (and (stringp output) (not (string-empty-p output)) (split-string output "\n"))))
    (concat
     (propertize (format "Tool %s" (or (plist-get data :title) "(untitled)")) 'face 'mevedel-lsp-chat-tool)
     (format "  [%s%s]" (if-let ((kind (plist-get data :toolKind))) (concat kind " · ") "")
             (propertize status 'face (if (equal status "failed") 'mevedel-lsp-chat-error 'bold)))
     (mapconcat (lambda (line) (concat "\n" (mevedel-lsp-chat--indent line)))
                (apply #'append (mapcar #'mevedel-lsp-chat--diff-lines (plist-get data :diffs)))
                "")
     (if lines
         (concat "\n" (mevedel-lsp-chat--indent
                       (string-join (seq-take lines mevedel-lsp-chat-output-lines) "\n"))
                 (if (> (length lines) mevedel-lsp-chat-output-lines)
                     (format "\n    [%d more lines]" (- (length lines) mevedel-lsp-chat-output-lines))
                   ""))
       ""))))

(defconst mevedel-lsp-chat--reasoning-heading "Reasoning (TAB shows or hides it)"
  "The first line of a reasoning block; its text is folded below it.")

(defun mevedel-lsp-chat--block-text (block)
  "The text of BLOCK, a reasoning block's heading only."
  (let ((data (mevedel-lsp-chat--block-data block)))
    (pcase (mevedel-lsp-chat--block-kind block)
      ('response data)
      ('reasoning (propertize mevedel-lsp-chat--reasoning-heading 'face 'mevedel-lsp-chat-reasoning))
      ('tool_call (mevedel-lsp-chat--tool-text data))
      ('plan (concat (propertize "Plan" 'face 'bold) "\n" (mevedel-lsp-chat--indent data)))
      ('permission
       (concat (propertize "Permission " 'face 'mevedel-lsp-chat-permission)
               (or (plist-get data :text) "")
               (propertize (format " → %s" (or (plist-get data :decision) "(no decision)"))
                           'face (if (eq (plist-get data :allowed) t) 'success 'mevedel-lsp-chat-permission))))
      ('mail (concat (propertize "Mail " 'face 'bold) data))
      ('agent (mevedel-lsp-chat--agent-heading data))
      (_ (format "%s" data)))))

(defun mevedel-lsp-chat--agent-heading (data)
  "The heading line of a sub-agent's block with DATA."
  (let* ((settled (equal (plist-get data :phase) "settled"))
         (state (if settled (or (plist-get data :outcome) "completed") (or (plist-get data :phase) "starting"))))
    (concat (propertize (format "Agent %s" (or (plist-get data :label) (plist-get data :path))) 'face 'mevedel-lsp-chat-tool)
            (format "  [%s]" (propertize state 'face (if (member state '("completed" "starting" "running" "cancelling"))
                                                          'bold 'mevedel-lsp-chat-error)))
            (if settled "  (TAB shows or hides it)" ""))))

(defun mevedel-lsp-chat--visible-p (block)
  "Whether the folded part of BLOCK (reasoning, a sub-agent's activity) shows."
  (if (eq (mevedel-lsp-chat--block-kind block) 'agent)
      (pcase (mevedel-lsp-chat--block-shown block)
        ('open t)
        ('closed nil)
        (_ (not (equal (plist-get (mevedel-lsp-chat--block-data block) :phase) "settled"))))
    (mevedel-lsp-chat--block-shown block)))

(defun mevedel-lsp-chat--properties (turn block)
  "The text properties of BLOCK's text in TURN."
  (list 'mevedel-lsp-chat-turn (mevedel-lsp-chat--turn-number turn)
        'mevedel-lsp-chat-block block))

(defun mevedel-lsp-chat--fold (block)
  "Make BLOCK's folded text (reasoning, a sub-agent's activity) invisible
unless it is shown."
  (when-let ((overlay (mevedel-lsp-chat--block-overlay block)))
    (overlay-put overlay 'invisible (not (mevedel-lsp-chat--visible-p block)))))

(defun mevedel-lsp-chat--drop-overlays (block)
  "Delete the fold overlays of BLOCK and of the blocks nested in it."
  (when-let ((overlay (mevedel-lsp-chat--block-overlay block)))
    (delete-overlay overlay)
    (setf (mevedel-lsp-chat--block-overlay block) nil))
  (mapc #'mevedel-lsp-chat--drop-overlays (mevedel-lsp-chat--block-nested block)))

(defun mevedel-lsp-chat--insert-block (turn block &optional prefix)
  "Insert BLOCK of TURN at point, setting its markers.
A block nested in another (a sub-agent's) has PREFIX before each line,
and no markers: its host block is drawn again whole."
  (unless prefix
    (if-let ((start (mevedel-lsp-chat--block-start block)))
        (set-marker start (point))
      (setf (mevedel-lsp-chat--block-start block) (point-marker))))
  (let ((properties (mevedel-lsp-chat--properties turn block))
        (indent (lambda (text) (if prefix (mevedel-lsp-chat--indent text prefix) text))))
    (insert (apply #'propertize (funcall indent (mevedel-lsp-chat--block-text block)) properties))
    (pcase (mevedel-lsp-chat--block-kind block)
      ('reasoning
       (let ((body (point)))
         (insert (apply #'propertize (concat "\n" (funcall indent (mevedel-lsp-chat--block-data block)))
                        'face 'mevedel-lsp-chat-reasoning properties))
         (setf (mevedel-lsp-chat--block-overlay block) (make-overlay body (point)))
         (mevedel-lsp-chat--fold block)))
      ('tool_call
       ;; The sub-agents this call started, under it.
       (dolist (agent (mevedel-lsp-chat--block-nested block))
         (insert (apply #'propertize "\n" properties))
         (mevedel-lsp-chat--insert-block turn agent (concat prefix "    "))))
      ('agent (mevedel-lsp-chat--insert-agent-body turn block (concat prefix "    ")))))
  (unless prefix
    (if-let ((end (mevedel-lsp-chat--block-end block)))
        (set-marker end (point))
      (setf (mevedel-lsp-chat--block-end block) (point-marker)))
    (set-marker-insertion-type (mevedel-lsp-chat--block-end block) t)))

(defun mevedel-lsp-chat--insert-agent-body (turn agent prefix)
  "Insert what the sub-agent AGENT of TURN did, each line after PREFIX:
its blocks and its error, a fold."
  (let ((start (point))
        (data (mevedel-lsp-chat--block-data agent))
        (properties (mevedel-lsp-chat--properties turn agent)))
    (dolist (block (mevedel-lsp-chat--block-nested agent))
      (insert (apply #'propertize "\n" properties))
      (mevedel-lsp-chat--insert-block turn block prefix))
    (when-let ((error (plist-get data :error)))
      (insert (apply #'propertize (concat "\n" (mevedel-lsp-chat--indent (format "Error: %s" (plist-get error :message)) prefix))
                     'face 'mevedel-lsp-chat-error properties)))
    (when (> (point) start)
      (setf (mevedel-lsp-chat--block-overlay agent) (make-overlay start (point)))
      (mevedel-lsp-chat--fold agent))
    ;; Why its task was interrupted or failed, after the fold: it shows
    ;; folded or not, as a turn's reason ends the turn.
    (when-let ((reason (plist-get data :reason)))
      (pcase (plist-get data :outcome)
        ("interrupted"
         (insert (apply #'propertize (concat "\n" (mevedel-lsp-chat--indent (mevedel-lsp-chat--why-sentence reason) prefix))
                        'face 'mevedel-lsp-chat-footer properties)))
        ("errored"
         (insert (apply #'propertize (concat "\n" (mevedel-lsp-chat--indent (format "Error: %s" reason) prefix))
                        'face 'mevedel-lsp-chat-error properties)))))))

(defun mevedel-lsp-chat--separate ()
  "Insert the blank line that separates two blocks of a turn."
  (insert (if (bolp) "\n" "\n\n")))

(defun mevedel-lsp-chat--heading (turn)
  "The heading line and prompt of TURN."
  (let ((state (mevedel-lsp-chat--turn-state turn))
        (attachments (mevedel-lsp-chat--turn-attachments turn)))
    (concat
     (propertize (if (member state '("refused" "aborted"))
                     (format "── %s prompt%s ──" (if (equal state "refused") "Refused" "Aborted")
                             (if-let ((agent (mevedel-lsp-chat--turn-agent turn))) (format " · %s" agent) ""))
                   (format "── Turn %s · %s · %s ──"
                           (or (mevedel-lsp-chat--turn-number turn) "…")
                           (or (mevedel-lsp-chat--turn-agent turn) "agent")
                           state))
                 'face 'mevedel-lsp-chat-heading)
     "\n"
     (propertize (concat "You: " (replace-regexp-in-string
                                  "\n" "\n     " (or (mevedel-lsp-chat--turn-prompt turn) "") t t))
                 'face 'mevedel-lsp-chat-prompt)
     (if attachments (format "\nAttached: %s" (string-join attachments ", ")) ""))))

(defun mevedel-lsp-chat--why-sentence (reason &optional aborted)
  "The sentence saying why a turn or a sub-agent's task was interrupted,
from the REASON the server recorded (ABORTED: its prompt was aborted
before it began)."
  (format "%s: %s%s" (if aborted "Aborted before it reached the agent" "Interrupted")
          reason (if (string-suffix-p "." reason) "" ".")))

(defun mevedel-lsp-chat--why-interrupted (turn)
  "The sentence saying why TURN was interrupted (or its prompt aborted
before it began), or nil when the server did not say."
  (when-let ((reason (mevedel-lsp-chat--turn-reason turn)))
    (mevedel-lsp-chat--why-sentence reason (equal (mevedel-lsp-chat--turn-state turn) "aborted"))))

(defun mevedel-lsp-chat--footer (turn)
  "How TURN ended, or nil while it runs."
  (let* ((state (mevedel-lsp-chat--turn-state turn))
         (why (and (member state '("interrupted" "aborted")) (mevedel-lsp-chat--why-interrupted turn)))
         ;; An aborted prompt is its sentence; its error says no more.
         (error (and (not (and why (equal state "aborted"))) (mevedel-lsp-chat--turn-error turn))))
    (unless (member state '("starting" "running" "cancelling" "in-flight"))
      (concat
       (if (member state '("refused" "aborted"))
           ""
         (propertize (format "── %s%s" state
                             (if-let ((stop (mevedel-lsp-chat--turn-stop-reason turn))) (format " (%s)" stop) ""))
                     'face (if error 'mevedel-lsp-chat-error 'mevedel-lsp-chat-footer)))
       (if why
           (concat (if (equal state "aborted") "" "\n") (propertize why 'face 'mevedel-lsp-chat-footer))
         "")
       (if error
           (concat (if (member state '("refused" "aborted")) "" "\n")
                   (propertize (format "Error%s: %s"
                                            (if-let ((kind (plist-get error :kind))) (format " (%s)" kind) "")
                                            (plist-get error :message))
                                    'face 'mevedel-lsp-chat-error)
                   (if-let ((action (plist-get error :action)))
                       (concat "\n" (propertize "What to do: " 'face 'bold) action)
                     ""))
         "")))))

(defun mevedel-lsp-chat--insert-turn (turn)
  "Insert TURN at point: heading, blocks, and how it ended."
  (let ((start (point))
        (properties (list 'mevedel-lsp-chat-turn (mevedel-lsp-chat--turn-number turn))))
    (setf (mevedel-lsp-chat--turn-start turn) (copy-marker start))
    (insert (apply #'propertize (mevedel-lsp-chat--heading turn) properties))
    (setf (mevedel-lsp-chat--turn-header-end turn) (point-marker))
    (let ((previous nil))
      (dolist (block (mevedel-lsp-chat--turn-blocks turn))
        (when previous (set-marker-insertion-type (mevedel-lsp-chat--block-end previous) nil))
        (insert (apply #'propertize (if (bolp) "\n" "\n\n") properties))
        (mevedel-lsp-chat--insert-block turn block)
        (setq previous block))
      (when previous (set-marker-insertion-type (mevedel-lsp-chat--block-end previous) nil)))
    (when-let ((footer (mevedel-lsp-chat--footer turn)))
      (insert (apply #'propertize (concat (if (bolp) "\n" "\n\n") footer) properties)))
    (insert (apply #'propertize "\n\n" properties))))

(defun mevedel-lsp-chat--render ()
  "Draw the whole chat: the listed turns, the live one, the last refusal.
Point and each window's point stay on their line; at the end, at the end."
  (let* ((inhibit-read-only t)
         (places (mapcar (lambda (window)
                           (list window (= (window-point window) (point-max))
                                 (line-number-at-pos (window-point window))
                                 (line-number-at-pos (window-start window))))
                         (get-buffer-window-list (current-buffer) nil t)))
         (at-end (= (point) (point-max)))
         (line (line-number-at-pos))
         (line-position (lambda (n) (save-excursion (goto-char (point-min)) (forward-line (1- n)) (point)))))
    (remove-overlays)
    (erase-buffer)
    (dolist (id mevedel-lsp-chat--order)
      (let ((turn (gethash id mevedel-lsp-chat--turns)))
        (when (and turn (not (eq turn mevedel-lsp-chat--live)))
          (mevedel-lsp-chat--insert-turn turn))))
    ;; The prompts waiting behind the running turn (above it: the live
    ;; turn grows at the end).
    (mevedel-lsp-queue--insert)
    (when mevedel-lsp-chat--live
      (mevedel-lsp-chat--insert-live-start mevedel-lsp-chat--live))
    (when mevedel-lsp-chat--notice
      (mevedel-lsp-chat--insert-turn mevedel-lsp-chat--notice))
    (when (= (point-min) (point-max))
      (insert (substitute-command-keys
               "No turns yet.  \\<mevedel-lsp-chat-mode-map>\\[mevedel-lsp-prompt] writes a prompt.\n")))
    (goto-char (if at-end (point-max) (funcall line-position line)))
    (pcase-dolist (`(,window ,window-at-end ,point-line ,start-line) places)
      (set-window-start window (funcall line-position start-line) t)
      (set-window-point window (if window-at-end (point-max) (funcall line-position point-line))))))

(defun mevedel-lsp-chat--insert-live-start (turn)
  "Insert the live TURN at the end, leaving its last block open for more."
  (goto-char (point-max))
  (let ((properties (list 'mevedel-lsp-chat-turn (mevedel-lsp-chat--turn-number turn))))
    (setf (mevedel-lsp-chat--turn-start turn) (point-marker))
    (insert (apply #'propertize (mevedel-lsp-chat--heading turn) properties))
    (setf (mevedel-lsp-chat--turn-header-end turn) (point-marker))
    (let ((blocks (mevedel-lsp-chat--turn-blocks turn)))
      (dolist (block blocks)
        (insert (apply #'propertize (if (bolp) "\n" "\n\n") properties))
        (mevedel-lsp-chat--insert-block turn block)
        (unless (eq block (car (last blocks)))
          (set-marker-insertion-type (mevedel-lsp-chat--block-end block) nil))))))


;;;;; The live turn

(defun mevedel-lsp-chat--redraw-heading (turn)
  "Draw TURN's heading again (its number or state changed)."
  (let ((start (mevedel-lsp-chat--turn-start turn))
        (end (mevedel-lsp-chat--turn-header-end turn)))
    (when (and start end (marker-buffer start))
      (goto-char start)
      (delete-region start end)
      (insert (propertize (mevedel-lsp-chat--heading turn)
                          'mevedel-lsp-chat-turn (mevedel-lsp-chat--turn-number turn)))
      (set-marker end (point))
      ;; Text that came before the number knows it now.
      (put-text-property start (point-max) 'mevedel-lsp-chat-turn (mevedel-lsp-chat--turn-number turn)))))

(defun mevedel-lsp-chat--redraw-block (turn block)
  "Draw BLOCK of TURN again in place."
  (let ((start (mevedel-lsp-chat--block-start block))
        (end (mevedel-lsp-chat--block-end block))
        (last (= (mevedel-lsp-chat--block-end block) (point-max))))
    (mevedel-lsp-chat--drop-overlays block)
    (delete-region start end)
    (goto-char start)
    (mevedel-lsp-chat--insert-block turn block)
    (unless last (set-marker-insertion-type (mevedel-lsp-chat--block-end block) nil))))

(defun mevedel-lsp-chat--open-block (turn block)
  "Add BLOCK to the end of the live TURN."
  (let ((blocks (mevedel-lsp-chat--turn-blocks turn)))
    (when-let ((previous (car (last blocks))))
      (set-marker-insertion-type (mevedel-lsp-chat--block-end previous) nil))
    (goto-char (point-max))
    (insert (propertize (if (bolp) "\n" "\n\n") 'mevedel-lsp-chat-turn (mevedel-lsp-chat--turn-number turn)))
    (mevedel-lsp-chat--insert-block turn block)
    (setf (mevedel-lsp-chat--turn-blocks turn) (append blocks (list block)))))

(defun mevedel-lsp-chat--append-text (turn block text)
  "Append TEXT to the last BLOCK of TURN (a response or reasoning)."
  (setf (mevedel-lsp-chat--block-data block) (concat (mevedel-lsp-chat--block-data block) text))
  (goto-char (mevedel-lsp-chat--block-end block))
  (insert (apply #'propertize text
                 (append (and (eq (mevedel-lsp-chat--block-kind block) 'reasoning)
                              (list 'face 'mevedel-lsp-chat-reasoning))
                         (mevedel-lsp-chat--properties turn block))))
  (when-let ((overlay (mevedel-lsp-chat--block-overlay block)))
    (move-overlay overlay (overlay-start overlay) (point))))

(defun mevedel-lsp-chat--tool-data (old event)
  "Tool call data OLD with what EVENT reports folded in."
  (let ((data (copy-sequence old)))
    (dolist (key '(:title :toolKind :status :output :diffs))
      (let ((value (plist-get event key)))
        (when value
          (setq data (plist-put data key (if (eq key :diffs) (append value nil) value))))))
    data))

(defun mevedel-lsp-chat--apply-event (turn event)
  "Show EVENT, a TurnEvent, in the live TURN."
  (let* ((kind (intern (plist-get event :kind)))
         (blocks (mevedel-lsp-chat--turn-blocks turn))
         (last (car (last blocks)))
         (call-id (plist-get event :callId)))
    (pcase kind
      ((or 'response 'reasoning)
       (let ((text (or (plist-get event :text) "")))
         (if (and last (eq (mevedel-lsp-chat--block-kind last) kind))
             (mevedel-lsp-chat--append-text turn last text)
           (mevedel-lsp-chat--open-block turn (mevedel-lsp-chat--make-block :kind kind :data text)))))
      ('tool_call
       (let ((known (seq-find (lambda (b) (and (eq (mevedel-lsp-chat--block-kind b) 'tool_call)
                                               (equal (mevedel-lsp-chat--block-call-id b) call-id)))
                              blocks)))
         (if known
             (progn (setf (mevedel-lsp-chat--block-data known)
                          (mevedel-lsp-chat--tool-data (mevedel-lsp-chat--block-data known) event))
                    (mevedel-lsp-chat--redraw-block turn known))
           (mevedel-lsp-chat--open-block
            turn (mevedel-lsp-chat--make-block :kind 'tool_call :call-id call-id
                                               :data (mevedel-lsp-chat--tool-data nil event))))))
      ('plan
       (let ((known (seq-find (lambda (b) (eq (mevedel-lsp-chat--block-kind b) 'plan)) blocks)))
         (if known
             (progn (setf (mevedel-lsp-chat--block-data known) (plist-get event :text))
                    (mevedel-lsp-chat--redraw-block turn known))
           (mevedel-lsp-chat--open-block turn (mevedel-lsp-chat--make-block :kind 'plan :data (plist-get event :text))))))
      ('permission
       (mevedel-lsp-chat--open-block
        turn (mevedel-lsp-chat--make-block :kind 'permission :call-id call-id
                                           :data (list :text (plist-get event :text)
                                                       :decision (plist-get event :decision)
                                                       :allowed (plist-get event :allowed)))))
      (_ (mevedel-lsp-chat--open-block
          turn (mevedel-lsp-chat--make-block :kind kind :data (or (plist-get event :text) "")))))))

;; A retained sub-agent's activity (the `Agent' tool) arrives as
;; `mevedel/turn/didUpdate' with an `agentPath', in the parent's turn: its
;; phase, its events (the root's kinds) and, once settled, its outcome.
;; Each sub-agent is a block of kind agent nested under the call of its
;; parent that started it (`parentCallId'): a sub-agent a/b in a's own
;; block (under a's call of that id when a shows one, else after a's
;; activity), a top-level one under the root's call (made now when its own
;; event has not come yet: that event fills it in), or after the turn's
;; blocks so far when the call is unknown.  Its host, the turn's block it
;; is drawn in, is drawn again whole at each update; the turn goes on
;; whatever the sub-agent's phase.  A later task of the same sub-agent
;; (another Agent call naming it) is a block of its own.

(defun mevedel-lsp-chat--contains-p (block inner)
  "Whether INNER is BLOCK or nested in it."
  (or (eq block inner)
      (seq-some (lambda (nested) (mevedel-lsp-chat--contains-p nested inner))
                (mevedel-lsp-chat--block-nested block))))

(defun mevedel-lsp-chat--host (turn block)
  "The block of TURN that holds the nested BLOCK."
  (seq-find (lambda (top) (mevedel-lsp-chat--contains-p top block)) (mevedel-lsp-chat--turn-blocks turn)))

(defun mevedel-lsp-chat--agent-block (turn path label call-id phase)
  "The block of TURN's sub-agent PATH, made and placed when new.
LABEL names it; CALL-ID is its parent's call that started it.  An update
in PHASE other than settled for a settled block is another task of the
same sub-agent (a later Agent call naming it): a block of its own."
  (or (let ((known (cdr (assoc path (mevedel-lsp-chat--turn-agents turn)))))
        (and known
             (not (and (equal (plist-get (mevedel-lsp-chat--block-data known) :phase) "settled")
                       (not (equal phase "settled"))))
             known))
      (let* ((agent (mevedel-lsp-chat--make-block :kind 'agent :call-id call-id
                                                  :data (list :path path :label label :phase "starting")))
             (parent-path (and (string-match "\\`\\(.*\\)/[^/]+\\'" path) (match-string 1 path)))
             (parent (and parent-path (cdr (assoc parent-path (mevedel-lsp-chat--turn-agents turn)))))
             (scope (if parent (mevedel-lsp-chat--block-nested parent) (mevedel-lsp-chat--turn-blocks turn)))
             (call (and call-id (seq-find (lambda (b) (and (eq (mevedel-lsp-chat--block-kind b) 'tool_call)
                                                           (equal (mevedel-lsp-chat--block-call-id b) call-id)))
                                          scope))))
        (setf (mevedel-lsp-chat--turn-agents turn)
              (cons (cons path agent) (assoc-delete-all path (mevedel-lsp-chat--turn-agents turn))))
        (cond (call (setf (mevedel-lsp-chat--block-nested call)
                          (append (mevedel-lsp-chat--block-nested call) (list agent))))
              (parent (setf (mevedel-lsp-chat--block-nested parent)
                            (append (mevedel-lsp-chat--block-nested parent) (list agent))))
              (call-id (mevedel-lsp-chat--open-block
                        turn (mevedel-lsp-chat--make-block :kind 'tool_call :call-id call-id :nested (list agent))))
              (t (mevedel-lsp-chat--open-block turn agent)))
        agent)))

(defun mevedel-lsp-chat--nested-event (agent event)
  "Fold EVENT, a TurnEvent of the sub-agent AGENT, into its blocks."
  (let* ((kind (intern (plist-get event :kind)))
         (blocks (mevedel-lsp-chat--block-nested agent))
         (last (car (last blocks)))
         (call-id (plist-get event :callId))
         (add (lambda (block) (setf (mevedel-lsp-chat--block-nested agent) (append blocks (list block))))))
    (pcase kind
      ((or 'response 'reasoning)
       (let ((text (or (plist-get event :text) "")))
         (if (and last (eq (mevedel-lsp-chat--block-kind last) kind))
             (setf (mevedel-lsp-chat--block-data last) (concat (mevedel-lsp-chat--block-data last) text))
           (funcall add (mevedel-lsp-chat--make-block :kind kind :data text)))))
      ('tool_call
       (if-let ((known (seq-find (lambda (b) (and (eq (mevedel-lsp-chat--block-kind b) 'tool_call)
                                                  (equal (mevedel-lsp-chat--block-call-id b) call-id)))
                                 blocks)))
           (setf (mevedel-lsp-chat--block-data known)
                 (mevedel-lsp-chat--tool-data (mevedel-lsp-chat--block-data known) event))
         (funcall add (mevedel-lsp-chat--make-block :kind 'tool_call :call-id call-id
                                                    :data (mevedel-lsp-chat--tool-data nil event)))))
      ('plan
       (if-let ((known (seq-find (lambda (b) (eq (mevedel-lsp-chat--block-kind b) 'plan)) blocks)))
           (setf (mevedel-lsp-chat--block-data known) (plist-get event :text))
         (funcall add (mevedel-lsp-chat--make-block :kind 'plan :data (plist-get event :text)))))
      ('permission
       (funcall add (mevedel-lsp-chat--make-block :kind 'permission :call-id call-id
                                                  :data (list :text (plist-get event :text)
                                                              :decision (plist-get event :decision)
                                                              :allowed (plist-get event :allowed)))))
      (_ (funcall add (mevedel-lsp-chat--make-block :kind kind :data (or (plist-get event :text) "")))))))

(defun mevedel-lsp-chat--nested-update (turn params)
  "Show the sub-agent's `mevedel/turn/didUpdate' PARAMS in the live TURN."
  (let* ((agent (mevedel-lsp-chat--agent-block turn (plist-get params :agentPath) (plist-get params :agent)
                                               (plist-get params :parentCallId) (plist-get params :phase)))
         (data (mevedel-lsp-chat--block-data agent))
         (phase (plist-get params :phase)))
    (setq data (plist-put data :phase phase))
    (when-let ((label (plist-get params :agent))) (setq data (plist-put data :label label)))
    (seq-doseq (event (plist-get params :events))
      (mevedel-lsp-chat--nested-event agent event))
    (when (equal phase "settled")
      (setq data (plist-put data :outcome (or (plist-get params :outcome) "completed")))
      (setq data (plist-put data :reason (plist-get params :reason)))
      (setq data (plist-put data :error (mevedel-lsp-chat--turn-error-plist (plist-get params :error)))))
    (setf (mevedel-lsp-chat--block-data agent) data)
    (when-let ((host (mevedel-lsp-chat--host turn agent)))
      (mevedel-lsp-chat--redraw-block turn host))))

(defun mevedel-lsp-chat--settle (turn state stop-reason error &optional reason)
  "End the live TURN with STATE, STOP-REASON, ERROR (a TurnError plist)
and REASON (why it was interrupted).  A refused or aborted prompt (no turn
began) becomes the chat's notice."
  (when (eq turn mevedel-lsp-chat--live)
    (setf (mevedel-lsp-chat--turn-state turn) state
          (mevedel-lsp-chat--turn-stop-reason turn) stop-reason
          (mevedel-lsp-chat--turn-error turn) error
          (mevedel-lsp-chat--turn-reason turn) reason)
    (setq mevedel-lsp-chat--live nil)
    (if (mevedel-lsp-chat--turn-turn-id turn)
        (progn
          (unless (member (mevedel-lsp-chat--turn-turn-id turn) mevedel-lsp-chat--order)
            (setq mevedel-lsp-chat--order (append mevedel-lsp-chat--order
                                                  (list (mevedel-lsp-chat--turn-turn-id turn)))))
          (mevedel-lsp-chat--editing
            (mevedel-lsp-chat--redraw-heading turn)
            (goto-char (point-max))
            (when-let ((footer (mevedel-lsp-chat--footer turn)))
              (insert (propertize (concat (if (bolp) "\n" "\n\n") footer "\n\n")
                                  'mevedel-lsp-chat-turn (mevedel-lsp-chat--turn-number turn))))))
      (setf (mevedel-lsp-chat--turn-state turn) (if (equal state "interrupted") "aborted" "refused"))
      (setq mevedel-lsp-chat--notice turn)
      (mevedel-lsp-chat--render))
    (force-mode-line-update)
    ;; The files the agent changed, as they are now.
    (when mevedel-lsp--origin-server
      (mevedel-lsp--revert-changed-buffers mevedel-lsp--origin-server))
    ;; What waited for the turn to end is read now.
    (when mevedel-lsp--pending-changes
      (when mevedel-lsp--change-timer (cancel-timer mevedel-lsp--change-timer))
      (setq mevedel-lsp--change-timer (run-at-time 0 nil #'mevedel-lsp--apply-pending-changes)))
    (when mevedel-lsp-chat--refresh-queue
      (when mevedel-lsp-chat--refresh-timer (cancel-timer mevedel-lsp-chat--refresh-timer))
      (setq mevedel-lsp-chat--refresh-timer (run-at-time 0 nil #'mevedel-lsp-chat--run-refreshes)))
    (message "mevedel: %s%s"
             (if (mevedel-lsp-chat--turn-number turn)
                 (format "turn %d of %s %s" (mevedel-lsp-chat--turn-number turn)
                         (or mevedel-lsp-chat--name mevedel-lsp--session-id)
                         (mevedel-lsp-chat--turn-state turn))
               (if (equal (mevedel-lsp-chat--turn-state turn) "aborted")
                   "the prompt was aborted before it reached the agent"
                 "the prompt was refused"))
             (cond ((and error (not (equal (mevedel-lsp-chat--turn-state turn) "aborted")))
                    (format ": %s%s" (plist-get error :message)
                            (if-let ((action (plist-get error :action))) (format " (%s)" action) "")))
                   (reason (format ": %s" reason))
                   (t "")))))

(defvar mevedel-lsp-chat--actions)

(defun mevedel-lsp-chat--turn-error-plist (error)
  "A TurnError ERROR as (:kind :message :action).
Absent fields are omitted on the wire.  Without the server's
action, the one for its kind."
  (and error (list :kind (plist-get error :kind) :message (plist-get error :message)
                   :action (or (plist-get error :action)
                               (cdr (assoc (plist-get error :kind) mevedel-lsp-chat--actions))))))

(defun mevedel-lsp-chat--update (server params)
  "Show the `mevedel/turn/didUpdate' PARAMS from SERVER in the session's chat."
  (let* ((session (plist-get params :sessionId))
         (fresh (null (mevedel-lsp-chat--buffers server session)))
         (buffer (mevedel-lsp-chat--get-buffer server session)))
    (with-current-buffer buffer
      (if (and (equal (plist-get params :phase) "settled") (null (plist-get params :turnId))
               (null mevedel-lsp-chat--live) mevedel-lsp-chat--notice)
          ;; The refusal's words, which the prompt's error answer (when
          ;; read first) carries less structured.
          (progn
            (setf (mevedel-lsp-chat--turn-error mevedel-lsp-chat--notice)
                  (mevedel-lsp-chat--turn-error-plist (plist-get params :error)))
            (mevedel-lsp-chat--render))
      (let* ((phase (plist-get params :phase))
             ;; A sub-agent's update: nested in the root's turn, which runs.
             (nested (plist-get params :agentPath))
             (turn-id (plist-get params :turnId))
             (turn (or mevedel-lsp-chat--live
                       (and turn-id (gethash turn-id mevedel-lsp-chat--turns))
                       (mevedel-lsp-chat--make-turn :state (if nested "running" phase) :live t
                                                    ;; A queued prompt being sent now.
                                                    :prompt (mevedel-lsp-queue--sending-text)))))
        (unless (eq turn mevedel-lsp-chat--live)
          ;; A turn this chat did not prompt (or one it had settled).
          (setq mevedel-lsp-chat--live turn
                mevedel-lsp-chat--notice nil)
          (mevedel-lsp-chat--render))
        (when (and turn-id (not (mevedel-lsp-chat--turn-turn-id turn)))
          (setf (mevedel-lsp-chat--turn-turn-id turn) turn-id)
          (puthash turn-id turn mevedel-lsp-chat--turns))
        (let ((number (plist-get params :turn))
              (agent (plist-get params :agent)))
          (when (and (not nested)
                     (or (and number (not (eql number (mevedel-lsp-chat--turn-number turn))))
                         (and agent (not (equal agent (mevedel-lsp-chat--turn-agent turn))))
                         (and (not (equal phase "settled"))
                              (not (equal phase (mevedel-lsp-chat--turn-state turn))))))
            (when number (setf (mevedel-lsp-chat--turn-number turn) number))
            (when agent (setf (mevedel-lsp-chat--turn-agent turn) agent))
            (unless (equal phase "settled") (setf (mevedel-lsp-chat--turn-state turn) phase))
            (mevedel-lsp-chat--editing (mevedel-lsp-chat--redraw-heading turn))))
        (if nested
            (mevedel-lsp-chat--editing (mevedel-lsp-chat--nested-update turn params))
          (when-let ((events (plist-get params :events)))
            (mevedel-lsp-chat--editing
              (seq-doseq (event events)
                (mevedel-lsp-chat--apply-event turn event)))))
        (when (and (equal phase "settled") (not nested))
          (mevedel-lsp-chat--settle turn (or (plist-get params :outcome) "refused")
                                    (plist-get params :stopReason)
                                    (mevedel-lsp-chat--turn-error-plist (plist-get params :error))
                                    (plist-get params :reason)))
        (force-mode-line-update))))
    (when fresh
      ;; A turn this Emacs did not prompt: read the earlier turns too.
      (mevedel-lsp-chat--schedule-refresh buffer))))

(cl-defmethod eglot-handle-notification
  ((server mevedel-lsp-server) (_method (eql mevedel/turn/didUpdate)) &rest params &allow-other-keys)
  "Show the live turn update PARAMS in its session's chat."
  (mevedel-lsp-chat--update server params))


;;;;; Modes and models

;; ACP agents offer session modes and config options (model, reasoning
;; effort, ...).  `mevedel/agent/didChangeOptions' tells what the session's
;; agent offers and what is in effect; the chat's header line shows it and
;; `mevedel-lsp-chat-options' (o in the chat, C-c C-o in the prompt buffer)
;; chooses, through `mevedel/agent/setOption'.  The server remembers the
;; choice in the session and applies it again whenever the agent starts.

(defun mevedel-lsp-chat--value-name (option value)
  "The label of VALUE of the config OPTION."
  (if (equal (plist-get option :kind) "boolean")
      (if (eq value t) "on" "off")
    (or (plist-get (seq-find (lambda (v) (equal (plist-get v :value) value))
                             (plist-get option :values))
                   :name)
        value)))

(defun mevedel-lsp-chat--mode-name (options)
  "The label of the mode in effect in OPTIONS, or nil."
  (when-let ((current (plist-get options :currentMode)))
    (or (plist-get (seq-find (lambda (m) (equal (plist-get m :id) current)) (plist-get options :modes)) :name)
        current)))

(defun mevedel-lsp-chat--options-summary (options)
  "What the header line says of OPTIONS: the mode and each option's value."
  (when-let ((parts (and (eq (plist-get options :known) t)
                         (delq nil (cons (when-let ((mode (mevedel-lsp-chat--mode-name options))) (format "mode %s" mode))
                                         (mapcar (lambda (option)
                                                   (format "%s %s" (plist-get option :name)
                                                           (mevedel-lsp-chat--value-name option (plist-get option :current))))
                                                 (plist-get options :configOptions)))))))
    (string-join parts " · ")))

(defun mevedel-lsp-chat--take-options (server options)
  "Keep OPTIONS in the chats of their session through SERVER."
  (dolist (buffer (mevedel-lsp-chat--buffers server (plist-get options :sessionId)))
    (with-current-buffer buffer
      (setq mevedel-lsp-chat--options options)
      (force-mode-line-update))))

(cl-defmethod eglot-handle-notification
  ((server mevedel-lsp-server) (_method (eql mevedel/agent/didChangeOptions)) &rest params &allow-other-keys)
  "The session's agent modes and options changed: its chats show PARAMS."
  (mevedel-lsp-chat--take-options server params))

(defvar mevedel-lsp-prompt--session)

(defun mevedel-lsp-chat-options ()
  "Choose the agent's mode, model or another option for this session.
The choice goes to the agent at once when it runs (else with the next
prompt) and the session remembers it; one the agent refuses is said."
  (interactive)
  (let* ((prompting (derived-mode-p 'mevedel-lsp-prompt-mode))
         (server (if prompting (mevedel-lsp--server) (or mevedel-lsp--origin-server (mevedel-lsp--server))))
         (session (if prompting mevedel-lsp-prompt--session mevedel-lsp--session-id))
         (options (mevedel-lsp--request server :mevedel/agent/options (mevedel-lsp--object :sessionId session)))
         (agent (plist-get options :agent))
         (modes (append (plist-get options :modes) nil))
         (config (append (plist-get options :configOptions) nil)))
    (mevedel-lsp-chat--take-options server options)
    (unless (eq (plist-get options :known) t)
      (user-error "mevedel: agent %s has not said yet which modes and models it offers; send a prompt first" agent))
    (unless (or modes config)
      (user-error "mevedel: agent %s offers no modes and no options" agent))
    (let* ((choices (append
                     (when modes (list (cons (format "Mode: %s" (or (mevedel-lsp-chat--mode-name options) "?")) :mode)))
                     (mapcar (lambda (option)
                               (cons (format "%s: %s" (plist-get option :name)
                                             (mevedel-lsp-chat--value-name option (plist-get option :current)))
                                     option))
                             config)))
           (picked (cdr (assoc (completing-read (format "Change (agent %s): " agent) (mapcar #'car choices) nil t)
                               choices)))
           (params (if session (list :sessionId session) (list))))
      (cond
       ((null picked) (user-error "mevedel: nothing chosen; nothing changed"))
       ((eq picked :mode)
        (let* ((names (mapcar (lambda (m) (cons (plist-get m :name) (plist-get m :id))) modes))
               (id (cdr (assoc (completing-read (format "Mode (now %s): " (mevedel-lsp-chat--mode-name options))
                                                (mapcar #'car names) nil t)
                               names))))
          (unless id (user-error "mevedel: no mode chosen; nothing changed"))
          (setq params (append params (list :mode id)))))
       ((equal (plist-get picked :kind) "boolean")
        (let ((answer (completing-read (format "%s (now %s): " (plist-get picked :name)
                                               (mevedel-lsp-chat--value-name picked (plist-get picked :current)))
                                       '("on" "off") nil t)))
          (unless (member answer '("on" "off")) (user-error "mevedel: nothing chosen; nothing changed"))
          (setq params (append params (list :configId (plist-get picked :id)
                                            :value (if (equal answer "on") t :json-false))))))
       (t
        (let* ((values (mapcar (lambda (v) (cons (if (plist-get v :group)
                                                     (format "%s (%s)" (plist-get v :name) (plist-get v :group))
                                                   (plist-get v :name))
                                                 (plist-get v :value)))
                               (plist-get picked :values)))
               (value (cdr (assoc (completing-read (format "%s (now %s): " (plist-get picked :name)
                                                           (mevedel-lsp-chat--value-name picked (plist-get picked :current)))
                                                   (mapcar #'car values) nil t)
                                  values))))
          (unless value (user-error "mevedel: nothing chosen; nothing changed"))
          (setq params (append params (list :configId (plist-get picked :id) :value value))))))
      (let ((result (mevedel-lsp--request server :mevedel/agent/setOption params)))
        (mevedel-lsp-chat--take-options server result)
        (message "mevedel: agent %s: %s%s" agent (mevedel-lsp-chat--options-summary result)
                 (if (eq (plist-get result :running) t) "" " (applied with the next prompt)"))
        result))))


;;;;; Reading the session's turns

(defun mevedel-lsp-chat--from-show (shown)
  "A turn model from SHOWN, a `mevedel/turn/show' result."
  (let* ((summary (plist-get shown :summary))
         (turn (mevedel-lsp-chat--make-turn
                :number (plist-get summary :turn) :turn-id (plist-get summary :turnId)
                :prompt (plist-get shown :prompt) :state (plist-get summary :state)
                ;; The labels as recorded (absent for turns recorded by hand).
                :agent (plist-get summary :agent) :stop-reason (plist-get summary :stopReason)
                ;; Why it was interrupted is a sentence; why it failed, its error.
                :reason (and (equal (plist-get summary :state) "interrupted") (plist-get summary :reason))
                :error (and (plist-get summary :reason) (not (equal (plist-get summary :state) "interrupted"))
                            (list :message (plist-get summary :reason)))))
         (blocks nil)
         ;; Sub-agents' own sub-agents' tasks, waiting for their caller's.
         (waiting nil))
    (seq-doseq (item (plist-get shown :items))
      (let ((kind (intern (plist-get item :kind))))
        (pcase kind
          ('tool_call
           (push (mevedel-lsp-chat--make-block
                  :kind 'tool_call :call-id (plist-get item :callId)
                  :data (list :title (plist-get item :name) :toolKind (plist-get item :toolKind) :status "pending"))
                 blocks))
          ('tool_result
           (let ((call (seq-find (lambda (b) (and (eq (mevedel-lsp-chat--block-kind b) 'tool_call)
                                                  (equal (mevedel-lsp-chat--block-call-id b) (plist-get item :callId))))
                                 blocks)))
             (if call
                 (setf (mevedel-lsp-chat--block-data call)
                       (append (list :status (if (eq (plist-get item :isError) t) "failed" "completed")
                                     :output (plist-get item :output))
                               (mevedel-lsp-chat--block-data call)))
               (push (mevedel-lsp-chat--make-block :kind 'response :data (or (plist-get item :output) "")) blocks))))
          ('permission
           (push (mevedel-lsp-chat--make-block
                  :kind 'permission :call-id (plist-get item :callId)
                  :data (list :text (plist-get item :text) :decision (plist-get item :output)
                              :allowed (if (eq (plist-get item :isError) t) :json-false t)))
                 blocks))
          ('mail
           (push (mevedel-lsp-chat--make-block
                  :kind 'mail :data (format "from %s: %s" (or (plist-get item :sender) "?") (or (plist-get item :text) "")))
                 blocks))
          ('agent_task
           ;; A sub-agent's task, recorded when it settled (before its
           ;; caller's answer), shown as the live chat shows it settled:
           ;; under the call that started it (`parentCallId'; a record
           ;; that names none: the newest Agent call still without its
           ;; answer, a guess parallel calls defeat), its own sub-agents'
           ;; tasks (recorded before it) after its activity; with no such
           ;; call, where it was recorded.
           (let* ((agent (mevedel-lsp-chat--task-block item))
                  (path (plist-get (mevedel-lsp-chat--block-data agent) :path))
                  (own (seq-filter (lambda (w) (equal (mevedel-lsp-chat--parent-path w) path)) waiting))
                  (parent-call (plist-get item :parentCallId))
                  (call (seq-find (if (stringp parent-call)
                                      (lambda (b) (and (eq (mevedel-lsp-chat--block-kind b) 'tool_call)
                                                       (equal (mevedel-lsp-chat--block-call-id b) parent-call)))
                                    (lambda (b) (and (eq (mevedel-lsp-chat--block-kind b) 'tool_call)
                                                     (equal (plist-get (mevedel-lsp-chat--block-data b) :status) "pending")
                                                     (mevedel-lsp-chat--names-agent-tool-p
                                                      (plist-get (mevedel-lsp-chat--block-data b) :title)))))
                                  blocks)))
             (setf (mevedel-lsp-chat--block-nested agent) (append (mevedel-lsp-chat--block-nested agent) own))
             (setq waiting (seq-difference waiting own #'eq))
             (cond ((mevedel-lsp-chat--parent-path agent) (setq waiting (append waiting (list agent))))
                   (call (setf (mevedel-lsp-chat--block-nested call)
                               (append (mevedel-lsp-chat--block-nested call) (list agent))))
                   (t (push agent blocks)))))
          (_ (push (mevedel-lsp-chat--make-block :kind kind :data (or (plist-get item :text) "")) blocks)))))
    ;; A task whose caller's task is not in the turn: where the turn ends.
    (setf (mevedel-lsp-chat--turn-blocks turn) (append (nreverse blocks) waiting))
    turn))

(defun mevedel-lsp-chat--names-agent-tool-p (title)
  "Whether a tool call's TITLE names the `Agent' tool (`Agent',
`mcp__mevedel__Agent', `mcp Agent'...)."
  (and title (member "Agent" (split-string title "[^A-Za-z0-9]+" t)) t))

(defun mevedel-lsp-chat--parent-path (agent)
  "The path of the sub-agent whose own sub-agent AGENT is, or nil."
  (let ((path (plist-get (mevedel-lsp-chat--block-data agent) :path)))
    (and (string-match "\\`\\(.*\\)/[^/]+\\'" path) (match-string 1 path))))

(defun mevedel-lsp-chat--task-block (item)
  "The agent block of ITEM, a settled task recorded in a turn (a
`mevedel/turn/show' agent_task item): what the live chat holds once the
task settled, its conversation from the record as its activity."
  (let* ((name (or (plist-get item :name) "?"))
         (outcome (plist-get item :outcome))
         (output (or (plist-get item :output) "")))
    (mevedel-lsp-chat--make-block
     :kind 'agent
     :data (list :path name :phase "settled"
                 :label (if-let ((sender (plist-get item :sender))) (format "%s (%s)" name sender) name)
                 ;; How it ended and why, said as its settled update was
                 ;; (a server that sends no outcome says only whether it failed).
                 :outcome (or outcome (if (eq (plist-get item :isError) t) "did not complete" "completed"))
                 :reason (plist-get item :reason))
     :nested (unless (string-empty-p output)
               (list (mevedel-lsp-chat--make-block :kind 'response :data output))))))

(defun mevedel-lsp-chat-refresh ()
  "Read the session's turns again and draw the chat."
  (interactive)
  (let* ((server (mevedel-lsp--server))
         (session mevedel-lsp--session-id)
         (listing (mevedel-lsp--request server :mevedel/turn/list (mevedel-lsp--object :sessionId session)))
         (row (ignore-errors (seq-find (lambda (r) (equal (plist-get r :sessionId) session))
                                       (plist-get (mevedel-lsp--list-sessions server) :sessions))))
         (live-id (and mevedel-lsp-chat--live (mevedel-lsp-chat--turn-turn-id mevedel-lsp-chat--live)))
         (order nil))
    (when row
      (setq mevedel-lsp-chat--name (plist-get row :displayName))
      (rename-buffer (format "*mevedel chat %s*" mevedel-lsp-chat--name) t))
    (seq-doseq (summary (plist-get listing :turns))
      (let* ((id (plist-get summary :turnId))
             (known (gethash id mevedel-lsp-chat--turns)))
        (push id order)
        (cond ((equal id live-id))
              ((and known (mevedel-lsp-chat--turn-live known))
               ;; Seen live here: its model has the diffs.
               (setf (mevedel-lsp-chat--turn-number known) (plist-get summary :turn)))
              ((and known (not (equal (plist-get summary :state) "in-flight"))
                    (equal (mevedel-lsp-chat--turn-state known) (plist-get summary :state))))
              (t (puthash id (mevedel-lsp-chat--from-show
                              (mevedel-lsp--request server :mevedel/turn/show
                                                    (mevedel-lsp--object :turn (plist-get summary :turn)
                                                                         :sessionId session)))
                          mevedel-lsp-chat--turns)))))
    (setq mevedel-lsp-chat--order (nreverse order))
    (unless mevedel-lsp-chat--options
      ;; The header line's mode and model (later changes are notified).
      (setq mevedel-lsp-chat--options
            (ignore-errors (jsonrpc-request server :mevedel/agent/options (mevedel-lsp--object :sessionId session)))))
    (mevedel-lsp-queue--load server session)
    (mevedel-lsp-chat--render)))

(defun mevedel-lsp-chat--running-p ()
  "Non-nil when a chat shows an agent turn running (its server alive)."
  (seq-some (lambda (buffer)
              (with-current-buffer buffer
                (and mevedel-lsp-chat--live mevedel-lsp--origin-server
                     (jsonrpc-running-p mevedel-lsp--origin-server))))
            (mevedel-lsp-chat--buffers)))

(defun mevedel-lsp-chat--run-refreshes ()
  "Read the queued chats again, or wait until `mevedel-lsp--quiet-p'."
  (setq mevedel-lsp-chat--refresh-timer nil)
  (if (not (mevedel-lsp--quiet-p))
      (setq mevedel-lsp-chat--refresh-timer (run-at-time (mevedel-lsp--retry-delay) nil #'mevedel-lsp-chat--run-refreshes))
    (let ((buffers (delete-dups (reverse mevedel-lsp-chat--refresh-queue))))
      (setq mevedel-lsp-chat--refresh-queue nil)
      (dolist (buffer buffers)
        (when (buffer-live-p buffer)
          (with-current-buffer buffer
            (condition-case err
                (mevedel-lsp-chat-refresh)
              (error (message "mevedel: could not refresh %s: %s" (buffer-name) (error-message-string err))))))))))

(defun mevedel-lsp-chat--schedule-refresh (buffer)
  "Read chat BUFFER again soon, outside any waiting request."
  (push buffer mevedel-lsp-chat--refresh-queue)
  (unless mevedel-lsp-chat--refresh-timer
    (setq mevedel-lsp-chat--refresh-timer (run-at-time 0 nil #'mevedel-lsp-chat--run-refreshes))))

(defun mevedel-lsp-chat--session-changed (server params)
  "Read the chats of the session PARAMS names again (a settled turn, a
Rewind, a rename...), through SERVER."
  (let ((session (plist-get params :sessionId)))
    (dolist (buffer (mevedel-lsp-chat--buffers server session))
      (with-current-buffer buffer
        (setq mevedel-lsp-chat--note
              (pcase (plist-get params :reason)
                ("closed" "closed: not updated")
                (_ (and (equal (plist-get params :access) "read-only") "read-only here"))))
        (if (equal (plist-get params :reason) "closed")
            (force-mode-line-update)
          (condition-case err
              (mevedel-lsp-chat-refresh)
            (error (message "mevedel: could not refresh %s: %s" (buffer-name) (error-message-string err)))))))))

(add-hook 'mevedel-lsp-session-change-functions #'mevedel-lsp-chat--session-changed)
(add-hook 'mevedel-lsp-publish-functions #'mevedel-lsp-chat--session-changed)


;;;;; Opening a chat, prompting, cancelling

(defun mevedel-lsp--current-session (server)
  "SERVER's current session id, or nil when none is current."
  (condition-case nil
      (plist-get (jsonrpc-request server :mevedel/turn/list (mevedel-lsp--object)) :sessionId)
    (jsonrpc-error nil)))

(defun mevedel-lsp-chat-buffer (&optional session-id server)
  "The chat buffer of SESSION-ID (default: the current session), read.
SERVER defaults to the current buffer's."
  (let* ((server (or server (mevedel-lsp--server)))
         (session (or session-id (mevedel-lsp--current-session server)
                      (user-error "mevedel: no session is current; M-x mevedel-lsp-prompt starts one")))
         (known (car (mevedel-lsp-chat--buffers server session)))
         (buffer (or known (mevedel-lsp-chat--get-buffer server session))))
    (unless known
      (with-current-buffer buffer (mevedel-lsp-chat-refresh)))
    buffer))

;;;###autoload
(defun mevedel-lsp-chat (&optional session-id)
  "Show the chat of SESSION-ID.
SESSION-ID defaults to the session at point, else the current one."
  (interactive (list (mevedel-lsp--session-at-point)))
  (pop-to-buffer (mevedel-lsp-chat-buffer session-id)))

(defun mevedel-lsp--agent-list (server)
  "SERVER's `mevedel/agent/list' result."
  (mevedel-lsp--request server :mevedel/agent/list (mevedel-lsp--object)))

(defun mevedel-lsp-chat--pick-agent (server session &optional ask)
  "The agent to prompt in SESSION through SERVER, or nil to let the server choose.
With more than one agent configured, ask (with `completing-read') unless
one was picked for SESSION already, or ASK."
  (let* ((listing (mevedel-lsp--agent-list server))
         (entries (mevedel-lsp--list (plist-get listing :agents)))
         (names (mapcar (lambda (entry) (plist-get entry :name)) entries))
         (remembered (and session (gethash session mevedel-lsp-chat--agents))))
    (cond ((and remembered (member remembered names) (not ask)) remembered)
          ((cdr names)
           (let* ((default (or (and (member remembered names) remembered)
                               (plist-get (seq-find (lambda (e) (eq (plist-get e :default) t)) entries) :name)
                               (car names)))
                  (candidates (mapcar (lambda (entry)
                                        (cons (format "%s%s" (plist-get entry :name)
                                                      (if (eq (plist-get entry :found) t) "" "  (not installed)"))
                                              (plist-get entry :name)))
                                      entries)))
             (cdr (assoc (completing-read (format "Agent (default %s): " default)
                                          (mapcar #'car candidates) nil t nil nil
                                          (car (rassoc default candidates)))
                         candidates))))
          (t (car names)))))

(defconst mevedel-lsp-chat--actions
  '(("agent-not-configured" . "add the agent to :agents in `mevedel-lsp-settings' (see docs/agents.md), or pick a configured one")
    ("agent-not-installed" . "install the agent's program, or fix its :command in the :agents of `mevedel-lsp-settings'")
    ("agent-needs-login" . "log in with the agent's own login (the methods it named), then prompt again")
    ("agent-failed" . "read the agent's log (~/.local/state/mevedel/logs/agent-NAME.log), then prompt again")
    ("attachment-refused" . "drop or fix the attachment (C-c C-d in the prompt buffer), then send again")
    ("agent-option-refused" . "choose another mode or value (o in the chat, C-c C-o in the prompt buffer), or fix the agent's :mode or :options in `mevedel-lsp-settings'")
    ("read-only" . "take control of the session (M-x mevedel-lsp-take-control), or prompt in another one")
    ("conflict" . "wait for the running turn to settle, or cancel it (C-c C-c in the chat)")
    ;; The server process that had it open is gone (it crashed, or eglot
    ;; restarted it): the session must be opened in the new one.
    ("owner-missing" . "open the session again (M-x mevedel-lsp-open-session, or RET on it in M-x mevedel-lsp-list-sessions), then prompt again"))
  "What to do about each kind of refused prompt.")

(defun mevedel-lsp-chat--refusal (error)
  "(:kind :message :action) for the ResponseError ERROR of a refused prompt."
  (let* ((data (plist-get error :data))
         (kind (plist-get data :kind)))
    (list :kind kind
          :message (or (and (plist-get data :authored) (plist-get data :reason)
                            (format "%s: %s" (plist-get data :authored) (plist-get data :reason)))
                       (plist-get error :message) "the server refused the prompt")
          :action (cdr (assoc kind mevedel-lsp-chat--actions)))))

(defun mevedel-lsp-chat--prompt-failed (buffer turn error)
  "Show in chat BUFFER that the prompt of TURN was refused with ERROR.
The answer can come after the turn's settled didUpdate, and so after the
next prompt began: only TURN, while it is still the live one, settles."
  (when (buffer-live-p buffer)
    (with-current-buffer buffer
      (when (eq turn mevedel-lsp-chat--live)
        (mevedel-lsp-chat--settle turn (if (mevedel-lsp-chat--turn-turn-id turn) "errored" "refused")
                                  nil (mevedel-lsp-chat--refusal error))))))

(defun mevedel-lsp-chat--prompt-answered (buffer turn result)
  "The prompt of TURN in chat BUFFER answered RESULT: settle it, if not yet."
  (when (buffer-live-p buffer)
    (with-current-buffer buffer
      (when (and (eq turn mevedel-lsp-chat--live)
                 (equal (mevedel-lsp-chat--turn-turn-id turn) (plist-get result :turnId)))
        (setf (mevedel-lsp-chat--turn-number turn) (plist-get result :turn))
        (mevedel-lsp-chat--settle turn (plist-get result :outcome) (plist-get result :stopReason)
                                  (mevedel-lsp-chat--turn-error-plist (plist-get result :error)))))))

(cl-defun mevedel-lsp-chat-send (server text &key session agent attachments)
  "Send TEXT as the next turn of SESSION through SERVER; return the chat buffer.
SESSION defaults to the current session, else a new one.  AGENT nil lets
the server choose; ATTACHMENTS is a list of addresses or workspace paths.
The request answers once the turn settled; meanwhile the chat buffer
shows it."
  (let* ((session (or session (mevedel-lsp--current-session server)
                      (plist-get (mevedel-lsp--request server :mevedel/session/create (mevedel-lsp--object))
                                 :sessionId)))
         (buffer (mevedel-lsp-chat-buffer session server)))
    (when agent (puthash session agent mevedel-lsp-chat--agents))
    (with-current-buffer buffer
      (when mevedel-lsp-chat--live
        ;; A turn runs: the prompt waits in the session's queue, sent when it settles.
        (mevedel-lsp-queue--add server session text agent attachments)
        (cl-return-from mevedel-lsp-chat-send buffer))
      (setq mevedel-lsp-chat--notice nil
            mevedel-lsp-chat--live (mevedel-lsp-chat--make-turn
                                    :prompt text :agent agent :attachments attachments
                                    :state "starting" :live t))
      (mevedel-lsp-chat--render)
      (goto-char (point-max))
      (force-mode-line-update))
    (let ((turn (buffer-local-value 'mevedel-lsp-chat--live buffer)))
      (jsonrpc-async-request server :mevedel/turn/prompt
                             (mevedel-lsp--object :text text :sessionId session :agent agent
                                                  :attachments (and attachments (vconcat attachments)))
                             :success-fn (lambda (result) (mevedel-lsp-chat--prompt-answered buffer turn result))
                             :error-fn (lambda (error) (mevedel-lsp-chat--prompt-failed buffer turn error))
                             :timeout-fn #'ignore
                             ;; A turn takes as long as the agent works.
                             :timeout nil))
    buffer))

(defun mevedel-lsp-cancel (&optional session-id)
  "Cancel the agent's turn running in SESSION-ID.
SESSION-ID defaults to the chat's session, else the current one."
  (interactive (list (mevedel-lsp--session-at-point)))
  (let ((result (mevedel-lsp--request (mevedel-lsp--server) :mevedel/turn/cancel
                                      (mevedel-lsp--object :sessionId session-id))))
    (message "mevedel: %s" (if (eq (plist-get result :cancelled) t)
                               "cancelling the agent's turn; what arrived is kept"
                             "no agent turn is running"))
    result))

(defun mevedel-lsp-chat-toggle-reasoning ()
  "Show or hide the reasoning or the sub-agent's activity at point (or the
nearest one before it in its turn)."
  (interactive)
  (let* ((turn (get-text-property (point) 'mevedel-lsp-chat-turn))
         (foldable (lambda (at) (and at (memq (mevedel-lsp-chat--block-kind at) '(reasoning agent)) at)))
         (block (or (funcall foldable (get-text-property (point) 'mevedel-lsp-chat-block))
                    (save-excursion
                      (let ((found nil))
                        (while (and (not found) (not (bobp))
                                    (equal (get-text-property (point) 'mevedel-lsp-chat-turn) turn))
                          (or (setq found (funcall foldable (get-text-property (point) 'mevedel-lsp-chat-block)))
                              (goto-char (or (previous-single-property-change (point) 'mevedel-lsp-chat-block)
                                             (point-min)))))
                        found)))))
    (unless block (user-error "No reasoning or sub-agent here"))
    (setf (mevedel-lsp-chat--block-shown block)
          (if (eq (mevedel-lsp-chat--block-kind block) 'agent)
              (if (mevedel-lsp-chat--visible-p block) 'closed 'open)
            (not (mevedel-lsp-chat--block-shown block))))
    (mevedel-lsp-chat--fold block)))

(defun mevedel-lsp-chat-next-turn (&optional count)
  "Move to the heading of the COUNTth next turn."
  (interactive "p")
  (dotimes (_ (or count 1))
    (let ((here (get-text-property (point) 'mevedel-lsp-chat-turn))
          (position (point)))
      (while (and (< position (point-max))
                  (equal (get-text-property position 'mevedel-lsp-chat-turn) here))
        (setq position (or (next-single-property-change position 'mevedel-lsp-chat-turn) (point-max))))
      (goto-char position))))

(defun mevedel-lsp-chat-previous-turn (&optional count)
  "Move to the heading of this turn, or of the COUNTth previous one."
  (interactive "p")
  (let ((start-of (lambda (position)
                    ;; Where the turn holding POSITION starts.
                    (if (and (> position (point-min))
                             (equal (get-text-property (1- position) 'mevedel-lsp-chat-turn)
                                    (get-text-property position 'mevedel-lsp-chat-turn)))
                        (or (previous-single-property-change position 'mevedel-lsp-chat-turn) (point-min))
                      position))))
    (dotimes (_ (or count 1))
      (let ((start (funcall start-of (point))))
        (when (and (= start (point)) (> start (point-min)))
          (setq start (funcall start-of (1- start))))
        (goto-char start)))))


;;;;; The prompt buffer

(defvar-local mevedel-lsp-prompt--session nil
  "The session the prompt goes to (nil: the current one, else a new one).")

(defvar-local mevedel-lsp-prompt--continuing nil
  "(SESSION-ID . NAME) the prompt continues: the workspace's most recent
session, offered when none is current (after a restart); nil otherwise.")

(defvar-local mevedel-lsp-prompt--agent nil
  "The agent the prompt goes to (nil: the server chooses).")

(defvar-local mevedel-lsp-prompt--attachments nil
  "The addresses and workspace paths that go with the prompt.")

(defvar-local mevedel-lsp-prompt--file nil
  "The workspace path of the file the prompt was started from.")

(defvar-local mevedel-lsp-prompt--queue-action nil
  "What the prompt buffer's text is for: nil (a prompt), `steer', or
\(edit . ENTRY-ID) (a queued prompt's new text).")

(defvar-local mevedel-lsp-prompt--windows nil
  "The window configuration before the prompt buffer was shown.")

(defvar mevedel-lsp-prompt-history nil
  "Prompts sent with `mevedel-lsp-prompt'.")

(defvar mevedel-lsp-prompt-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "C-c C-c") #'mevedel-lsp-prompt-send)
    (define-key map (kbd "C-c C-k") #'mevedel-lsp-prompt-abort)
    (define-key map (kbd "C-c C-a") #'mevedel-lsp-prompt-attach)
    (define-key map (kbd "C-c C-d") #'mevedel-lsp-prompt-detach)
    (define-key map (kbd "C-c C-t") #'mevedel-lsp-prompt-choose-agent)
    (define-key map (kbd "C-c C-n") #'mevedel-lsp-prompt-new-session)
    (define-key map (kbd "C-c C-o") #'mevedel-lsp-chat-options)
    (define-key map (kbd "M-p") #'mevedel-lsp-prompt-previous-input)
    (define-key map (kbd "M-n") #'mevedel-lsp-prompt-next-input)
    map)
  "Keys of `mevedel-lsp-prompt-mode'.")

(defvar-local mevedel-lsp-prompt--inputs 'unfetched
  "The workspace's input history, newest first (`mevedel/input/history'),
fetched at the first step into it of a prompt.")

(defvar-local mevedel-lsp-prompt--input-index -1
  "The entry of `mevedel-lsp-prompt--inputs' the buffer shows (-1: the draft).")

(defvar-local mevedel-lsp-prompt--draft nil
  "What was written before stepping into the input history.")

(defun mevedel-lsp-prompt--input-history ()
  "The input history of the prompt's workspace, newest first.
A history file the server found corrupt (renamed aside) is told once."
  (when (eq mevedel-lsp-prompt--inputs 'unfetched)
    (let* ((server (or mevedel-lsp--origin-server (mevedel-lsp--server)))
           (answer (condition-case err
                       (jsonrpc-request server :mevedel/input/history (mevedel-lsp--object)
                                        :timeout mevedel-lsp-question-timeout)
                     (jsonrpc-error (user-error "mevedel: %s" (mevedel-lsp--error-text err)))))
           (warning (plist-get answer :warning)))
      (when (stringp warning) (display-warning 'mevedel warning))
      (setq mevedel-lsp-prompt--inputs (reverse (append (plist-get answer :entries) nil)))))
  mevedel-lsp-prompt--inputs)

(defun mevedel-lsp-prompt--step-input (n)
  "Show the prompt N entries older in the input history (newer when N < 0)."
  (let* ((inputs (mevedel-lsp-prompt--input-history))
         (index (+ mevedel-lsp-prompt--input-index n)))
    (cond ((null inputs) (user-error "mevedel: no prompt was sent in this workspace yet"))
          ((>= index (length inputs)) (user-error "mevedel: no earlier prompt"))
          ((< index -1) (user-error "mevedel: no later prompt; this is your draft")))
    (when (= mevedel-lsp-prompt--input-index -1)
      (setq mevedel-lsp-prompt--draft (buffer-substring-no-properties (point-min) (point-max))))
    (setq mevedel-lsp-prompt--input-index index)
    (erase-buffer)
    (insert (if (= index -1) (or mevedel-lsp-prompt--draft "") (nth index inputs)))))

(defun mevedel-lsp-prompt-previous-input (n)
  "Replace the prompt with the one sent N before in this workspace
\(from any editor or the CLI); the draft comes back after the newest."
  (interactive "p")
  (mevedel-lsp-prompt--step-input n))

(defun mevedel-lsp-prompt-next-input (n)
  "Replace the prompt with the one sent N after the one shown, or the draft."
  (interactive "p")
  (mevedel-lsp-prompt--step-input (- n)))

(defun mevedel-lsp-prompt--header-line ()
  "The prompt buffer's header line."
  (concat
   (format " → %s · %s"
           (or mevedel-lsp-prompt--agent "the session's agent")
           (cond (mevedel-lsp-prompt--continuing
                  (substitute-command-keys
                   (format "continue %s (\\<mevedel-lsp-prompt-mode-map>\\[mevedel-lsp-prompt-new-session] new session)"
                           (cdr mevedel-lsp-prompt--continuing))))
                 (mevedel-lsp-prompt--session)
                 (t "the current session (a new one if none)")))
   (if mevedel-lsp-prompt--attachments
       (format " · attached: %s" (string-join mevedel-lsp-prompt--attachments ", "))
     "")
   (substitute-command-keys
    "   \\<mevedel-lsp-prompt-mode-map>\\[mevedel-lsp-prompt-send] send  \\[mevedel-lsp-prompt-abort] abort  \\[mevedel-lsp-prompt-attach] attach  \\[mevedel-lsp-prompt-detach] detach  \\[mevedel-lsp-prompt-choose-agent] agent")))

(define-derived-mode mevedel-lsp-prompt-mode text-mode "mevedel prompt"
  "A prompt for an agent, written over as many lines as it takes.
\\<mevedel-lsp-prompt-mode-map>\\[mevedel-lsp-prompt-send] sends it, \\[mevedel-lsp-prompt-abort] aborts; \\[mevedel-lsp-prompt-attach] attaches a file or address,
\\[mevedel-lsp-prompt-detach] drops one, \\[mevedel-lsp-prompt-choose-agent] picks the agent; \\[mevedel-lsp-prompt-previous-input] and \\[mevedel-lsp-prompt-next-input]
step through the prompts sent in this workspace.
\\{mevedel-lsp-prompt-mode-map}"
  (setq-local header-line-format '(:eval (mevedel-lsp-prompt--header-line))))

(defun mevedel-lsp--workspace-path (server file)
  "FILE relative to SERVER's project, or nil when it is outside."
  (let ((root (ignore-errors (project-root (eglot--project server)))))
    (and root file
         (string-prefix-p (file-truename (file-name-as-directory root)) (file-truename file))
         (file-relative-name (file-truename file) (file-truename root)))))

;;;###autoload
(defun mevedel-lsp-prompt (&optional session-id)
  "Write a prompt for an agent in a buffer of its own; C-c C-c sends it.
It goes to SESSION-ID (default: the session at point, else the current
one, else a new one) as its next turn, and the session's chat shows
the turn as it runs.  With the region active, the current file goes
with it as an attachment; \\<mevedel-lsp-prompt-mode-map>\\[mevedel-lsp-prompt-attach] attaches the current file or an
address.  With more than one agent configured, you pick one (once per
session; \\[mevedel-lsp-prompt-choose-agent] picks again)."
  (interactive (list (mevedel-lsp--session-at-point)))
  (let* ((server (mevedel-lsp--server))
         (session (or session-id (mevedel-lsp--current-session server)))
         (continuing (and (not session) (mevedel-lsp--continuable server)))
         (session (or session (car continuing)))
         (file (mevedel-lsp--workspace-path server buffer-file-name))
         (attachments (and file (use-region-p) (list file)))
         (agent (mevedel-lsp-chat--pick-agent server session))
         (windows (current-window-configuration))
         (buffer (get-buffer-create "*mevedel prompt*")))
    (deactivate-mark)
    (with-current-buffer buffer
      (unless (derived-mode-p 'mevedel-lsp-prompt-mode) (mevedel-lsp-prompt-mode))
      (setq-local mevedel-lsp--origin-server server)
      (setq mevedel-lsp-prompt--inputs 'unfetched
            mevedel-lsp-prompt--input-index -1)
      (setq mevedel-lsp-prompt--session session
            mevedel-lsp-prompt--continuing continuing
            mevedel-lsp-prompt--agent agent
            mevedel-lsp-prompt--attachments attachments
            mevedel-lsp-prompt--file file
            mevedel-lsp-prompt--windows windows))
    (pop-to-buffer buffer)
    buffer))

(defun mevedel-lsp-prompt-attach (attachment)
  "Attach ATTACHMENT (a workspace path or an address) to the prompt.
Interactively, the file the prompt was started from is the default."
  (interactive
   (list (let ((default mevedel-lsp-prompt--file))
           (read-string (if default (format "Attach (path or address, default %s): " default)
                          "Attach (path or address): ")
                        nil 'mevedel-lsp-address-history default))))
  (let ((attachment (string-trim attachment)))
    (when (string-empty-p attachment) (user-error "Nothing to attach"))
    (unless (member attachment mevedel-lsp-prompt--attachments)
      (setq mevedel-lsp-prompt--attachments (append mevedel-lsp-prompt--attachments (list attachment))))
    (force-mode-line-update)))

(defun mevedel-lsp-prompt-detach (attachment)
  "Drop ATTACHMENT from the prompt."
  (interactive
   (list (if mevedel-lsp-prompt--attachments
             (completing-read "Detach: " mevedel-lsp-prompt--attachments nil t)
           (user-error "Nothing is attached"))))
  (setq mevedel-lsp-prompt--attachments (delete attachment mevedel-lsp-prompt--attachments))
  (force-mode-line-update))

(defun mevedel-lsp-prompt-choose-agent ()
  "Pick the agent the prompt goes to."
  (interactive)
  (setq mevedel-lsp-prompt--agent
        (mevedel-lsp-chat--pick-agent (mevedel-lsp--server) mevedel-lsp-prompt--session t))
  (force-mode-line-update))

(defun mevedel-lsp-prompt--close ()
  "Bury the prompt buffer and restore the windows as they were."
  (let ((windows mevedel-lsp-prompt--windows)
        (buffer (current-buffer)))
    (kill-buffer buffer)
    (when windows (set-window-configuration windows))))

(defun mevedel-lsp-prompt-abort ()
  "Abort the prompt; nothing is sent."
  (interactive)
  (mevedel-lsp-prompt--close)
  (message "mevedel: prompt aborted; nothing was sent"))

(defun mevedel-lsp--continuable (server)
  "The session SERVER offers to continue when none is current, as
\(SESSION-ID . NAME), or nil (the listing's `continuable')."
  (let* ((listing (mevedel-lsp--list-sessions server))
         (id (plist-get listing :continuable)))
    (when (stringp id)
      (let ((row (seq-find (lambda (row) (equal (plist-get row :sessionId) id))
                           (append (plist-get listing :sessions) nil))))
        (cons id (or (plist-get row :displayName) id))))))

(defun mevedel-lsp-prompt-new-session ()
  "Send this prompt to a new session instead of continuing the last one."
  (interactive)
  (when mevedel-lsp-prompt--continuing
    (setq mevedel-lsp-prompt--session nil
          mevedel-lsp-prompt--continuing nil)
    (force-mode-line-update)
    (message "mevedel: the prompt starts a new session")))

(defun mevedel-lsp-prompt-send ()
  "Send the prompt and show the session's chat."
  (interactive)
  (let ((text (string-trim (buffer-substring-no-properties (point-min) (point-max))))
        (server (mevedel-lsp--server))
        (continuing mevedel-lsp-prompt--continuing)
        (session mevedel-lsp-prompt--session)
        (agent mevedel-lsp-prompt--agent)
        (attachments mevedel-lsp-prompt--attachments))
    (when (string-empty-p text) (user-error "mevedel: the prompt is empty"))
    (when continuing
      ;; Opened here first (it was free: resumed without a question).
      (condition-case err
          (jsonrpc-request server :mevedel/session/open
                           (mevedel-lsp--object :sessionId (car continuing) :mode "auto")
                           :timeout mevedel-lsp-question-timeout)
        (jsonrpc-error (mevedel-lsp--fail server err " (C-c C-n sends to a new session)")))
      (message "mevedel: continuing %s" (cdr continuing)))
    (add-to-history 'mevedel-lsp-prompt-history text)
    (let ((chat (mevedel-lsp-queue--send-prompt server text mevedel-lsp-prompt--queue-action
                                                :session session :agent agent :attachments attachments)))
      (mevedel-lsp-prompt--close)
      (pop-to-buffer chat)
      (goto-char (point-max))
      chat)))


;;;; The workspace artifact store

;; The workspace's documents, whiteboards and artifacts live in the
;; server's artifact store (`mevedel/artifact/*').  `mevedel-lsp-artifacts'
;; lists them by title, marking those attached to the current session; an
;; item opens in a buffer of its own (a document as Markdown, a whiteboard
;; as its JSON scene, an artifact as its text) whose save (C-x C-s, through
;; `write-contents-functions') is one `mevedel/artifact/write' naming the
;; revision the text was read at.  A write refused because the item moved
;; meanwhile (`conflict') or because another server process took its lease
;; (`item-lease-lost', `item-held') is reported, and reloading it keeps
;; your text in a buffer of its own.  An item another server process holds
;; is shown read-only, naming that machine.  `mevedel/artifact/didChange'
;; reloads open item buffers that have no unsaved edits at once, with a
;; request nothing waits for (so a buffer follows an agent writing its
;; item during a turn); the lists, versions and discussions are read again
;; like session views, once no request waits and no turn runs (see
;; "Session notifications and questions").

(defvar mevedel-lsp-artifact-mode)

(defvar-local mevedel-lsp-artifact--id nil
  "The store item an item buffer, versions list or discussion shows.")

(defvar-local mevedel-lsp-artifact--rows nil
  "The items list's entries by id.  A row is named by its item's id, so
the cursor stays on its row when the entry changes (after s, a or d).")

(defvar-local mevedel-lsp-artifact--item nil
  "The item's last `mevedel/artifact/read' result, without its content.")

(defvar-local mevedel-lsp-artifact--revision nil
  "The item's revision the buffer's text was read or written at; a save
sends it as `baseRevision'.")

(defvar-local mevedel-lsp-artifact--note nil
  "What happened to the item that the buffer's text does not show:
deleted, or changed on the server while it had unsaved edits.")

(defvar-local mevedel-lsp-artifact--server nil
  "The server an item buffer's item is read through.")

(defvar-local mevedel-lsp-artifact--generation 0
  "Counts what changed an item buffer's text or revision: a show, a save,
a reload asked for.  A reload answered for an older count is dropped,
so an older read never puts its text back over a newer one.")

;; An item buffer stays one when the user picks another major mode.
(dolist (variable '(mevedel-lsp-artifact--id mevedel-lsp-artifact--item mevedel-lsp-artifact--revision
                    mevedel-lsp-artifact--note mevedel-lsp-artifact--server
                    mevedel-lsp-artifact--generation))
  (put variable 'permanent-local t))

(defun mevedel-lsp-artifact--error-kind (error)
  "The `data.kind' of a failed request's ERROR, or nil."
  (pcase error
    (`(jsonrpc-error . ,details)
     (plist-get (alist-get 'jsonrpc-error-data details) :kind))))

(defun mevedel-lsp-artifact--list-items (server)
  "SERVER's items (`mevedel/artifact/list'), as a list of entries."
  (mevedel-lsp--list (plist-get (mevedel-lsp--request server :mevedel/artifact/list (mevedel-lsp--object))
                                :items)))

(defun mevedel-lsp-artifact--candidate (entry)
  "The completion candidate of item ENTRY: its title and its id."
  (propertize (format "%s (%s)" (plist-get entry :title) (plist-get entry :id))
              'mevedel-lsp-artifact--entry entry))

(defun mevedel-lsp-artifact--pick (server)
  "Ask for one of SERVER's items by title; return its entry."
  (let ((candidates (mapcar #'mevedel-lsp-artifact--candidate (mevedel-lsp-artifact--list-items server))))
    (unless candidates
      (user-error "mevedel: the workspace has no documents, whiteboards or artifacts yet; M-x mevedel-lsp-artifacts makes one"))
    (let ((chosen (completing-read "Item: " candidates nil t)))
      (or (get-text-property 0 'mevedel-lsp-artifact--entry (or (car (member chosen candidates)) ""))
          (user-error "mevedel: no item %s" chosen)))))

(defun mevedel-lsp-artifact--at-point ()
  "The item the current buffer or list row is about, as a plist with
:id and :title, or nil when there is none."
  (cond ((derived-mode-p 'mevedel-lsp-artifacts-mode)
         (or (and mevedel-lsp-artifact--rows (tabulated-list-get-id)
                  (gethash (tabulated-list-get-id) mevedel-lsp-artifact--rows))
             (user-error "No item on this line")))
        (mevedel-lsp-artifact--id
         (list :id mevedel-lsp-artifact--id
               :title (or (plist-get mevedel-lsp-artifact--item :title) mevedel-lsp-artifact--id)))))

(defun mevedel-lsp-artifact--read-id ()
  "The item at point, else one the user picks; return its id."
  (plist-get (or (mevedel-lsp-artifact--at-point) (mevedel-lsp-artifact--pick (mevedel-lsp--server))) :id))

(defun mevedel-lsp-artifact--title (id)
  "A name for item ID in a message: its title when known here, else ID."
  (let ((here (ignore-errors (mevedel-lsp-artifact--at-point))))
    (or (and (equal (plist-get here :id) id) (plist-get here :title))
        (seq-some (lambda (buffer)
                    (with-current-buffer buffer
                      (and (equal mevedel-lsp-artifact--id id)
                           (plist-get mevedel-lsp-artifact--item :title))))
                  (buffer-list))
        id)))

(defun mevedel-lsp-artifact--time (seconds)
  "SECONDS since the epoch as a short local date and time."
  (if (numberp seconds) (format-time-string "%Y-%m-%d %H:%M" seconds) ""))


;;;;; The items list

(defvar mevedel-lsp-artifacts-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "RET") #'mevedel-lsp-artifact-open)
    (define-key map (kbd "o") #'mevedel-lsp-artifact-open)
    (define-key map (kbd "a") #'mevedel-lsp-artifact-attach)
    (define-key map (kbd "d") #'mevedel-lsp-artifact-detach)
    (define-key map (kbd "C") #'mevedel-lsp-artifact-duplicate)
    (define-key map (kbd "D") #'mevedel-lsp-artifact-delete)
    (define-key map (kbd "c") #'mevedel-lsp-artifact-comment)
    (define-key map (kbd "i") #'mevedel-lsp-artifact-discussion)
    (define-key map (kbd "v") #'mevedel-lsp-artifact-versions)
    (define-key map (kbd "s") #'mevedel-lsp-artifact-save-version)
    (define-key map (kbd "n") #'mevedel-lsp-artifact-new-document)
    (define-key map (kbd "w") #'mevedel-lsp-artifact-new-whiteboard)
    (define-key map (kbd "h") #'mevedel-lsp-artifact-request-handover)
    (define-key map (kbd "m") #'mevedel-lsp-artifact-conversation)
    map)
  "Keys of `mevedel-lsp-artifacts-mode'.")

(define-derived-mode mevedel-lsp-artifacts-mode tabulated-list-mode "mevedel artifacts"
  "The workspace's documents, whiteboards and artifacts, by title.
A * marks the items attached to the current session; \"Held by\" names
the machine whose server process holds an item's lease (it is
read-only here until handed over: \\<mevedel-lsp-artifacts-mode-map>\\[mevedel-lsp-artifact-request-handover] asks for it).
\\{mevedel-lsp-artifacts-mode-map}"
  (setq tabulated-list-format
        [("" 1 t) ("Title" 32 t) ("Kind" 10 t) ("Versions" 8 t :right-align t)
         ("Updated" 16 t) ("Held by" 34 t) ("Id" 0 t)])
  (setq tabulated-list-padding 1)
  (add-hook 'tabulated-list-revert-hook #'mevedel-lsp-artifact--list-entries nil t)
  (tabulated-list-init-header))

(defun mevedel-lsp-artifact--list-entries ()
  "Read the items again into `tabulated-list-entries'."
  (setq mevedel-lsp-artifact--rows (make-hash-table :test #'equal))
  (setq tabulated-list-entries
        (mapcar (lambda (entry)
                  (puthash (plist-get entry :id) entry mevedel-lsp-artifact--rows)
                  (list (plist-get entry :id)
                        (vector (if (eq (plist-get entry :attached) t) "*" "")
                                (plist-get entry :title)
                                (plist-get entry :kind)
                                (number-to-string (or (plist-get entry :versions) 0))
                                (mevedel-lsp-artifact--time (plist-get entry :updatedAt))
                                (or (plist-get entry :holder) (plist-get entry :holderHost) "")
                                (plist-get entry :id))))
                (mevedel-lsp-artifact--list-items (mevedel-lsp--server)))))

;;;###autoload
(defun mevedel-lsp-artifacts ()
  "List the workspace's documents, whiteboards and artifacts.
RET opens the item at point; see `mevedel-lsp-artifacts-mode' for the rest."
  (interactive)
  (let ((server (mevedel-lsp--server)))
    (with-current-buffer (get-buffer-create
                          (format "*mevedel artifacts %s*"
                                  (file-name-nondirectory
                                   (directory-file-name (project-root (eglot--project server))))))
      (unless (derived-mode-p 'mevedel-lsp-artifacts-mode) (mevedel-lsp-artifacts-mode))
      (setq-local mevedel-lsp--origin-server server)
      (mevedel-lsp-artifact--list-entries)
      (tabulated-list-print t)
      (pop-to-buffer (current-buffer)))))

(defun mevedel-lsp-artifact--buffers (server &optional id)
  "SERVER's item lists, and its versions lists, discussions and item buffers of ID."
  (seq-filter (lambda (buffer)
                (with-current-buffer buffer
                  (and (eq mevedel-lsp--origin-server server)
                       (or (derived-mode-p 'mevedel-lsp-artifacts-mode)
                           (and id (equal mevedel-lsp-artifact--id id))))))
              (buffer-list)))

(defun mevedel-lsp-artifact--refresh (server &optional id)
  "Bring SERVER's item lists, and what shows item ID, up to date.
An item buffer with unsaved edits keeps them."
  (dolist (buffer (mevedel-lsp-artifact--buffers server id))
    (with-current-buffer buffer
      (condition-case err
          (cond ((derived-mode-p 'mevedel-lsp-artifacts-mode 'mevedel-lsp-artifact-versions-mode
                                 'mevedel-lsp-artifact-discussion-mode)
                 (revert-buffer))
                (mevedel-lsp-artifact-mode
                 (mevedel-lsp-artifact--changed-here server)))
        (error (message "mevedel: could not refresh %s: %s" (buffer-name) (error-message-string err)))))))


;;;;; Item buffers

(defvar mevedel-lsp-artifact-mode-map (make-sparse-keymap)
  "Keys of `mevedel-lsp-artifact-mode' (none of its own: C-x C-s saves,
\\[revert-buffer] reloads; the item commands work from the buffer).")

(define-minor-mode mevedel-lsp-artifact-mode
  "A buffer showing an item of the workspace's artifact store.
\\[save-buffer] writes it to the store (`mevedel/artifact/write'),
\\[revert-buffer] reads it again.  The item commands
\(`mevedel-lsp-artifact-versions', `mevedel-lsp-artifact-comment',
`mevedel-lsp-artifact-request-handover'...) act on this buffer's item."
  :lighter " mevedel-item"
  (when mevedel-lsp-artifact-mode
    (setq-local revert-buffer-function #'mevedel-lsp-artifact--revert)
    (add-hook 'write-contents-functions #'mevedel-lsp-artifact--save nil t)
    ;; Saved exactly as shown; no final newline is added on the way.
    (setq-local require-final-newline nil)
    ;; `save-some-buffers' (and leaving Emacs) offers to save its edits.
    (setq-local buffer-offer-save t)
    ;; C-x k asks before unsaved edits go, as for a file.
    (add-hook 'kill-buffer-query-functions #'mevedel-lsp-artifact--kill-query nil t)))

(defun mevedel-lsp-artifact--kill-query ()
  "Before killing an item buffer with unsaved edits, ask (as for a file)."
  (or (not (buffer-modified-p))
      (not mevedel-lsp-artifact-mode)
      (mevedel-lsp-artifact--image-p mevedel-lsp-artifact--item)
      (yes-or-no-p (format "%s has unsaved edits of %s; kill it anyway? "
                           (buffer-name) (or (plist-get mevedel-lsp-artifact--item :title) "an item")))))

(defun mevedel-lsp-artifact--image-p (read)
  "Non-nil when READ, a `mevedel/artifact/read' result, is an image."
  (equal (plist-get read :encoding) "base64"))

(defun mevedel-lsp-artifact--major-mode (read)
  "The major mode of a buffer showing READ."
  (let ((primary (plist-get read :primary)))
    (cond ((mevedel-lsp-artifact--image-p read) #'special-mode)
          ((equal (plist-get read :kind) "whiteboard") (mevedel-lsp--major-mode-for "scene.json"))
          ((string-match-p "\\.\\(?:md\\|markdown\\)\\'" primary)
           (if (or (fboundp 'markdown-mode) (require 'markdown-mode nil t)) 'markdown-mode #'text-mode))
          (t (let ((mode (mevedel-lsp--major-mode-for primary)))
               (if (eq mode #'fundamental-mode) #'text-mode mode))))))

(defun mevedel-lsp-artifact--header ()
  "The header line of an item buffer, from its last read."
  (let* ((item mevedel-lsp-artifact--item)
         (title (plist-get item :title))
         (comments (length (mevedel-lsp--list (plist-get item :comments)))))
    (cond (mevedel-lsp-artifact--note
           (substitute-command-keys (format "mevedel: %s %s" title mevedel-lsp-artifact--note)))
          ((mevedel-lsp-artifact--image-p item)
           (format "mevedel: %s · an image (%s); it is not edited here" title (plist-get item :primary)))
          ((not (eq (plist-get item :writable) t))
           (format "mevedel: %s is read-only here: %s holds it (M-x mevedel-lsp-artifact-request-handover asks for it)"
                   title (mevedel-lsp-artifact--holder item)))
          (t (format "mevedel: %s · %s%s%s" title (plist-get item :kind)
                     (if (eq (plist-get item :attached) t) " · attached" "")
                     (if (> comments 0) (format " · %s" (mevedel-lsp--plural comments "comment")) ""))))))

(defun mevedel-lsp-artifact--holder (item)
  "Who holds ITEM (a read result or list entry), for people: its editor
or process and machine when the server says, else the machine."
  (or (plist-get item :holder) (plist-get item :holderHost) "another server process"))

(defun mevedel-lsp-artifact--show (read)
  "Make the current item buffer show READ, a `mevedel/artifact/read' result."
  (let ((image (mevedel-lsp-artifact--image-p read)))
    (if (not image)
        (mevedel-lsp--replace-text (current-buffer) (plist-get read :content))
      (let ((inhibit-read-only t)
            (bytes (base64-decode-string (plist-get read :content))))
        (erase-buffer)
        (insert (propertize (format "[%s: %d bytes]" (plist-get read :primary) (length bytes))
                            'display (and (display-images-p) (create-image bytes nil t))))
        (set-buffer-modified-p nil)))
    (cl-incf mevedel-lsp-artifact--generation)
    (setq mevedel-lsp-artifact--item (plist-put (copy-sequence read) :content nil)
          mevedel-lsp-artifact--revision (plist-get read :revision)
          mevedel-lsp-artifact--note nil
          buffer-read-only (or image (not (eq (plist-get read :writable) t)))
          header-line-format (mevedel-lsp-artifact--header))))

(defun mevedel-lsp-artifact--read (server id)
  "Item ID's `mevedel/artifact/read' result from SERVER."
  (mevedel-lsp--request server :mevedel/artifact/read (mevedel-lsp--object :id id)))

(defun mevedel-lsp-artifact--reload ()
  "Read the current buffer's item again and show it, unsaved edits or not."
  (mevedel-lsp-artifact--show (mevedel-lsp-artifact--read (mevedel-lsp--server) mevedel-lsp-artifact--id)))

(defun mevedel-lsp-artifact--take (read &optional elsewhere)
  "The current buffer's item changed; READ is what it is now.  Show it,
unless the buffer has unsaved edits; then only say so, keeping them.
ELSEWHERE: another server process took or wrote the item, so the edits
could never be saved here: they go to a buffer of their own, and the
buffer shows the item, read-only while that process holds it."
  (cond ((not (buffer-modified-p))
         (let ((was-writable (eq (plist-get mevedel-lsp-artifact--item :writable) t)))
           (mevedel-lsp-artifact--show read)
           (when (and elsewhere was-writable (not (eq (plist-get read :writable) t)))
             (message "mevedel: %s is held by %s now: read-only here, and reloaded"
                      (plist-get read :title) (mevedel-lsp-artifact--holder read)))))
        ((and elsewhere (not (equal (plist-get read :revision) mevedel-lsp-artifact--revision))
              (not (eq (plist-get read :writable) t)))
         (let ((kept (mevedel-lsp-artifact--keep-text)))
           (mevedel-lsp-artifact--show read)
           (message "mevedel: %s is held by %s now and was written there: read-only here and reloaded; your unsaved text is in %s"
                    (plist-get read :title) (mevedel-lsp-artifact--holder read) (buffer-name kept))))
        ((not (equal (plist-get read :revision) mevedel-lsp-artifact--revision))
         (setq mevedel-lsp-artifact--note
               "changed on the server while you edit it: saving will report the conflict; \\[revert-buffer] reads it again"
               header-line-format (mevedel-lsp-artifact--header)))))

(defun mevedel-lsp-artifact--changed-here (server)
  "The current buffer's item changed on SERVER: read it and take it."
  (mevedel-lsp-artifact--take (mevedel-lsp-artifact--read server mevedel-lsp-artifact--id)))

(defun mevedel-lsp-artifact--reload-async (buffer server &optional elsewhere)
  "Read item BUFFER's item again through SERVER without waiting for the
answer, and take it when it comes (unless something newer came first).
Nothing waits, so this may run while a request waits or an agent's turn
runs: the buffer follows an agent writing the item.  ELSEWHERE: another
server process changed it (see `mevedel-lsp-artifact--take')."
  (with-current-buffer buffer
    (let ((generation (cl-incf mevedel-lsp-artifact--generation)))
      (jsonrpc-async-request
       server :mevedel/artifact/read (mevedel-lsp--object :id mevedel-lsp-artifact--id)
       :success-fn (lambda (read)
                     (when (buffer-live-p buffer)
                       (with-current-buffer buffer
                         (when (= generation mevedel-lsp-artifact--generation)
                           (mevedel-lsp-artifact--take read elsewhere)))))
       :error-fn (lambda (error)
                   (message "mevedel: could not read %s again: %s" (buffer-name buffer)
                            (or (plist-get (plist-get error :data) :reason) (plist-get error :message))))
       :timeout-fn #'ignore))))

(defun mevedel-lsp-artifact--item-buffer (server id)
  "The live buffer showing item ID of SERVER, if any."
  (seq-find (lambda (buffer)
              (with-current-buffer buffer
                (and mevedel-lsp-artifact-mode (equal mevedel-lsp-artifact--id id)
                     (eq mevedel-lsp--origin-server server))))
            (buffer-list)))

(defun mevedel-lsp-artifact-buffer (id &optional server)
  "A buffer showing item ID of SERVER (default: the current server), read.
A buffer already showing it is reused as it is."
  (let ((server (or server (mevedel-lsp--server))))
    (or (mevedel-lsp-artifact--item-buffer server id)
        (let* ((read (mevedel-lsp-artifact--read server id))
               (buffer (generate-new-buffer (format "*mevedel %s*" (plist-get read :title)))))
          (with-current-buffer buffer
            (funcall (mevedel-lsp-artifact--major-mode read))
            (setq-local mevedel-lsp--origin-server server)
            (setq mevedel-lsp-artifact--id id
                  mevedel-lsp-artifact--server server)
            (mevedel-lsp-artifact-mode 1)
            (mevedel-lsp-artifact--show read)
            (buffer-disable-undo)
            (buffer-enable-undo)
            (goto-char (point-min)))
          buffer))))

(defun mevedel-lsp-artifact--after-mode-change ()
  "In an item buffer put in another major mode, saving still writes the item."
  (when (and mevedel-lsp-artifact--server (not mevedel-lsp-artifact-mode))
    (setq-local mevedel-lsp--origin-server mevedel-lsp-artifact--server)
    (mevedel-lsp-artifact-mode 1)
    (setq header-line-format (mevedel-lsp-artifact--header))))

(add-hook 'after-change-major-mode-hook #'mevedel-lsp-artifact--after-mode-change)

(defun mevedel-lsp-artifact-open (id)
  "Show item ID (default: the one at point, else one you pick) in a buffer.
A document or an artifact shows its text, a whiteboard its JSON scene;
\\[save-buffer] there writes it back."
  (interactive (list (mevedel-lsp-artifact--read-id)))
  (pop-to-buffer (mevedel-lsp-artifact-buffer id)))

(defun mevedel-lsp-artifact--keep-text ()
  "Copy the current buffer's text to a buffer of its own; return that buffer."
  (let ((text (buffer-substring-no-properties (point-min) (point-max)))
        (mode major-mode)
        (kept (generate-new-buffer (format "*mevedel unsaved %s*" (plist-get mevedel-lsp-artifact--item :title)))))
    (with-current-buffer kept
      (insert text)
      (ignore-errors (funcall mode))
      (goto-char (point-min)))
    kept))

(defconst mevedel-lsp-artifact--refusals
  '(("conflict" . "it changed since this buffer read it")
    ("item-lease-lost" . "another server process took its lease")
    ("item-held" . "another server process holds it"))
  "Why a save was refused, for each error kind that a reload resolves.")

(defun mevedel-lsp-artifact--refused (kind reason)
  "The save of the current item buffer was refused with KIND, REASON.
Offer to reload the item; the unsaved text goes to a buffer of its own.
Return non-nil when reloaded; else signal, keeping the edits."
  (let ((title (plist-get mevedel-lsp-artifact--item :title))
        (why (cdr (assoc kind mevedel-lsp-artifact--refusals))))
    (if (not (yes-or-no-p (format "mevedel: %s was not saved: %s.  Reload it (your text is kept in another buffer)? "
                                  title why)))
        (user-error "mevedel: %s was not saved: %s (%s); your edits are still here, and %s reloads it"
                    title why reason (substitute-command-keys "\\[revert-buffer]"))
      (let ((kept (mevedel-lsp-artifact--keep-text)))
        (mevedel-lsp-artifact--reload)
        (message "mevedel: %s was not saved (%s) and is reloaded; your text is in %s"
                 title why (buffer-name kept))
        t))))

(defun mevedel-lsp-artifact--save ()
  "Write the current item buffer to the store, for `write-contents-functions'.
The write names the revision the text was read at, so a change made
meanwhile is refused instead of overwritten."
  (when (mevedel-lsp-artifact--image-p mevedel-lsp-artifact--item)
    (user-error "mevedel: %s is an image; it is not edited here" (plist-get mevedel-lsp-artifact--item :title)))
  (let ((server (mevedel-lsp--server))
        (title (plist-get mevedel-lsp-artifact--item :title)))
    (condition-case err
        (let ((result (jsonrpc-request server :mevedel/artifact/write
                                       (mevedel-lsp--object
                                        :id mevedel-lsp-artifact--id
                                        :content (buffer-substring-no-properties (point-min) (point-max))
                                        :baseRevision mevedel-lsp-artifact--revision))))
          (cl-incf mevedel-lsp-artifact--generation)
          (setq mevedel-lsp-artifact--revision (plist-get result :revision)
                mevedel-lsp-artifact--note nil
                header-line-format (mevedel-lsp-artifact--header))
          (set-buffer-modified-p nil)
          (message "mevedel: saved %s" title)
          t)
      (jsonrpc-error
       (let ((kind (mevedel-lsp-artifact--error-kind err))
             (reason (mevedel-lsp--error-text err)))
         (if (assoc kind mevedel-lsp-artifact--refusals)
             (mevedel-lsp-artifact--refused kind reason)
           (user-error "mevedel: %s was not saved: %s" title reason)))))))

(defun mevedel-lsp-artifact--revert (_ignore-auto noconfirm)
  "Read the item again (`revert-buffer-function'); unsaved edits are
discarded only once you confirm, unless NOCONFIRM."
  (when (and (buffer-modified-p) (not noconfirm)
             (not (yes-or-no-p (format "Discard your edits of %s and read it again? "
                                       (plist-get mevedel-lsp-artifact--item :title)))))
    (user-error "mevedel: not read again; your edits are kept"))
  (mevedel-lsp-artifact--reload))


;;;;; Item commands

(defun mevedel-lsp-artifact--create (kind title)
  "Create an item of KIND called TITLE, refresh the lists, show it."
  (let* ((server (mevedel-lsp--server))
         (title (string-trim title))
         (entry (mevedel-lsp--request server :mevedel/artifact/create
                                      (mevedel-lsp--object :kind kind :title title))))
    (mevedel-lsp-artifact--refresh server)
    (pop-to-buffer (mevedel-lsp-artifact-buffer (plist-get entry :id) server))
    (message "mevedel: created the %s %s%s" kind (plist-get entry :title)
             (if (eq (plist-get entry :attached) t) ", attached to the current session"
               "; it is attached to no session (none is current: a on its row attaches it once one is)"))
    entry))

(defun mevedel-lsp-artifact-new-document (title)
  "Create a Markdown document called TITLE and show it."
  (interactive (list (read-string "New document title: ")))
  (mevedel-lsp-artifact--create "document" title))

(defun mevedel-lsp-artifact-new-whiteboard (title)
  "Create a whiteboard (an Excalidraw scene) called TITLE and show its JSON."
  (interactive (list (read-string "New whiteboard title: ")))
  (mevedel-lsp-artifact--create "whiteboard" title))

(defun mevedel-lsp-artifact--attach (method id verb)
  "Run attach or detach METHOD on item ID; say VERB happened."
  (let* ((server (mevedel-lsp--server))
         (result (mevedel-lsp--request server method (mevedel-lsp--object :id id))))
    (mevedel-lsp-artifact--refresh server id)
    (message "mevedel: %s %s %s session %s" verb (mevedel-lsp-artifact--title id)
             (if (eq (plist-get result :attached) t) "is attached to" "is not attached to")
             (plist-get result :sessionId))
    result))

(defun mevedel-lsp-artifact-attach (id)
  "Attach item ID to the current session."
  (interactive (list (mevedel-lsp-artifact--read-id)))
  (mevedel-lsp-artifact--attach :mevedel/artifact/attach id "attached:"))

(defun mevedel-lsp-artifact-detach (id)
  "Detach item ID from the current session."
  (interactive (list (mevedel-lsp-artifact--read-id)))
  (mevedel-lsp-artifact--attach :mevedel/artifact/detach id "detached:"))

(defun mevedel-lsp-artifact-duplicate (id title)
  "Copy item ID as a new, independent item called TITLE."
  (interactive
   (let ((id (mevedel-lsp-artifact--read-id)))
     (list id (read-string "Title of the copy: " (format "%s (copy)" (mevedel-lsp-artifact--title id))))))
  (let* ((server (mevedel-lsp--server))
         (title (string-trim title))
         (entry (mevedel-lsp--request server :mevedel/artifact/duplicate
                                      (mevedel-lsp--object :id id :title (and (not (string-empty-p title)) title)))))
    (mevedel-lsp-artifact--refresh server)
    (message "mevedel: copied %s as %s" (mevedel-lsp-artifact--title id) (plist-get entry :title))
    entry))

(defun mevedel-lsp-artifact-delete (id)
  "Delete item ID: its files, versions and discussion, once you confirm."
  (interactive (list (mevedel-lsp-artifact--read-id)))
  (let ((server (mevedel-lsp--server))
        (title (mevedel-lsp-artifact--title id)))
    (if (not (yes-or-no-p (format "Delete %s with its versions and discussion? " title)))
        (progn (message "mevedel: %s was not deleted" title) nil)
      (let ((result (mevedel-lsp--request server :mevedel/artifact/delete (mevedel-lsp--object :id id))))
        (dolist (buffer (mevedel-lsp-artifact--buffers server id))
          (with-current-buffer buffer
            (when mevedel-lsp-artifact-mode
              (setq mevedel-lsp-artifact--note "was deleted from the store; this text is all that is left of it"
                    header-line-format (mevedel-lsp-artifact--header)))))
        (mevedel-lsp-artifact--refresh server)
        (message "mevedel: deleted %s%s" title
                 (if-let ((kept (plist-get result :keptSession)))
                     (format "; its conversation %s is kept as an ordinary session" kept)
                   ""))
        result))))

(defun mevedel-lsp-artifact-comment (id text)
  "Add TEXT to item ID's discussion."
  (interactive
   (let ((id (mevedel-lsp-artifact--read-id)))
     (list id (read-string (format "Comment on %s: " (mevedel-lsp-artifact--title id))))))
  (when (string-blank-p text) (user-error "mevedel: the comment is empty"))
  (let* ((server (mevedel-lsp--server))
         (comment (mevedel-lsp--request server :mevedel/artifact/comment
                                        (mevedel-lsp--object :id id :text text))))
    (mevedel-lsp-artifact--refresh server id)
    (message "mevedel: comment %d on %s%s" (plist-get comment :number) (mevedel-lsp-artifact--title id)
             (if-let ((session (plist-get comment :sessionId))) (format ", for session %s" session) ""))
    comment))

(defun mevedel-lsp-artifact-save-version (id)
  "Record item ID's current content as a version."
  (interactive (list (mevedel-lsp-artifact--read-id)))
  (let* ((server (mevedel-lsp--server))
         (version (mevedel-lsp--request server :mevedel/artifact/saveVersion (mevedel-lsp--object :id id))))
    (mevedel-lsp-artifact--refresh server id)
    (message "mevedel: %s: saved version %d" (mevedel-lsp-artifact--title id) (plist-get version :number))
    version))

(defcustom mevedel-lsp-artifact-handover-wait 180
  "Seconds to watch for an item you asked another server process for.
Once it is handed over within that time, its open buffer turns writable
and the echo area says so."
  :type 'natnum)

(defconst mevedel-lsp-artifact--handover-poll 3
  "Seconds between two looks at an item asked for.  The holder tells only
its own editors that it handed the item over, so this server learns it
by reading the item.")

(defvar mevedel-lsp-artifact--handovers nil
  "The items asked for and not handed over yet: (SERVER ID DEADLINE) each.")

(defvar mevedel-lsp-artifact--handover-timer nil
  "The timer that looks at `mevedel-lsp-artifact--handovers'.")

(defun mevedel-lsp-artifact--watch-handover (server id)
  "Watch until item ID of SERVER is writable here, for a while."
  (setq mevedel-lsp-artifact--handovers
        (cons (list server id (+ (float-time) mevedel-lsp-artifact-handover-wait))
              (cl-remove-if (lambda (watch) (and (eq (car watch) server) (equal (cadr watch) id)))
                            mevedel-lsp-artifact--handovers)))
  (unless mevedel-lsp-artifact--handover-timer
    (setq mevedel-lsp-artifact--handover-timer
          (run-at-time mevedel-lsp-artifact--handover-poll nil #'mevedel-lsp-artifact--check-handovers))))

(defun mevedel-lsp-artifact--check-handovers ()
  "Read each item asked for: once writable here, show it so and stop."
  (setq mevedel-lsp-artifact--handover-timer nil)
  (when (mevedel-lsp--quiet-p)
    (dolist (watch mevedel-lsp-artifact--handovers)
      (pcase-let ((`(,server ,id ,deadline) watch))
        (let ((done t))
          (condition-case err
              (when (jsonrpc-running-p server)
                (let ((read (mevedel-lsp-artifact--read server id)))
                  (cond ((eq (plist-get read :writable) t)
                         (mevedel-lsp-artifact--refresh server id)
                         (message "mevedel: %s was handed over: it is writable here now" (plist-get read :title)))
                        ((> (float-time) deadline)
                         (message "mevedel: %s has not handed %s over yet; ask again with M-x mevedel-lsp-artifact-request-handover"
                                  (mevedel-lsp-artifact--holder read) (plist-get read :title)))
                        (t (setq done nil)))))
            (error (message "mevedel: %s" (error-message-string err))))
          (when done
            (setq mevedel-lsp-artifact--handovers (delq watch mevedel-lsp-artifact--handovers)))))))
  (when mevedel-lsp-artifact--handovers
    (setq mevedel-lsp-artifact--handover-timer
          (run-at-time (if (mevedel-lsp--quiet-p) mevedel-lsp-artifact--handover-poll (mevedel-lsp--retry-delay))
                       nil #'mevedel-lsp-artifact--check-handovers))))

(defun mevedel-lsp-artifact-request-handover (id)
  "Ask the server process holding item ID's lease to hand it over.
It does once the item has had no write there for 10 seconds; then the
item's open buffer turns writable (watched for
`mevedel-lsp-artifact-handover-wait' seconds)."
  (interactive (list (mevedel-lsp-artifact--read-id)))
  (let* ((server (mevedel-lsp--server))
         (entry (mevedel-lsp--request server :mevedel/artifact/requestHandover (mevedel-lsp--object :id id))))
    (mevedel-lsp-artifact--refresh server id)
    (when (plist-get entry :holderHost)
      (mevedel-lsp-artifact--watch-handover server id))
    (message "mevedel: %s" (if (plist-get entry :holderHost)
                               (format "asked %s to hand %s over; it does once nobody has written it there for 10 seconds (at once if nobody has)"
                                       (mevedel-lsp-artifact--holder entry) (plist-get entry :title))
                             (format "%s is held by no other server process: it is writable here" (plist-get entry :title))))
    entry))

(defun mevedel-lsp-artifact-conversation (id)
  "Show the chat of item ID's own session (made on first use)."
  (interactive (list (mevedel-lsp-artifact--read-id)))
  (let* ((server (mevedel-lsp--server))
         (result (mevedel-lsp--request server :mevedel/artifact/conversation (mevedel-lsp--object :id id))))
    (pop-to-buffer (mevedel-lsp-chat-buffer (plist-get result :sessionId) server))
    result))


;;;;; Versions and discussion

(defvar mevedel-lsp-artifact-versions-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "RET") #'mevedel-lsp-artifact-restore)
    (define-key map (kbd "r") #'mevedel-lsp-artifact-restore)
    (define-key map (kbd "s") #'mevedel-lsp-artifact-save-version)
    map)
  "Keys of `mevedel-lsp-artifact-versions-mode'.")

(define-derived-mode mevedel-lsp-artifact-versions-mode tabulated-list-mode "mevedel versions"
  "The versions the store keeps of an item, newest first.
\\<mevedel-lsp-artifact-versions-mode-map>\\[mevedel-lsp-artifact-restore] restores the one at point (an ordinary write, itself recorded
as a version, so it can be undone by restoring again).
\\{mevedel-lsp-artifact-versions-mode-map}"
  (setq tabulated-list-format
        [("Version" 7 nil :right-align t) ("Recorded" 16 nil) ("Why" 9 nil) ("Bytes" 9 nil :right-align t)
         ("Session" 30 nil) ("Turn" 0 nil)])
  (setq tabulated-list-padding 1)
  (add-hook 'tabulated-list-revert-hook #'mevedel-lsp-artifact--version-entries nil t)
  (tabulated-list-init-header))

(defun mevedel-lsp-artifact--version-entries ()
  "Read the item's versions again into `tabulated-list-entries'."
  (setq tabulated-list-entries
        (mapcar (lambda (version)
                  (list version
                        (vector (number-to-string (plist-get version :number))
                                (mevedel-lsp-artifact--time (plist-get version :at))
                                (plist-get version :reason)
                                (number-to-string (plist-get version :size))
                                (or (plist-get version :sessionId) "")
                                (if-let ((turn (plist-get version :turn))) (number-to-string turn) ""))))
                (mevedel-lsp--list
                 (plist-get (mevedel-lsp--request (mevedel-lsp--server) :mevedel/artifact/versions
                                                  (mevedel-lsp--object :id mevedel-lsp-artifact--id))
                            :versions)))))

(defun mevedel-lsp-artifact--view-buffer (server id mode name)
  "The MODE buffer of item ID of SERVER, else a new one called NAME
\(two items may share a title, and so a name)."
  (or (seq-find (lambda (buffer)
                  (with-current-buffer buffer
                    (and (derived-mode-p mode) (eq mevedel-lsp--origin-server server)
                         (equal mevedel-lsp-artifact--id id))))
                (buffer-list))
      (generate-new-buffer name)))

(defun mevedel-lsp-artifact-versions (id)
  "List the versions of item ID; RET restores one."
  (interactive (list (mevedel-lsp-artifact--read-id)))
  (let ((server (mevedel-lsp--server))
        (title (mevedel-lsp-artifact--title id)))
    (with-current-buffer (mevedel-lsp-artifact--view-buffer server id 'mevedel-lsp-artifact-versions-mode
                                                           (format "*mevedel versions %s*" title))
      (unless (derived-mode-p 'mevedel-lsp-artifact-versions-mode) (mevedel-lsp-artifact-versions-mode))
      (setq-local mevedel-lsp--origin-server server)
      (setq mevedel-lsp-artifact--id id
            mevedel-lsp-artifact--item (list :id id :title title))
      (mevedel-lsp-artifact--version-entries)
      (tabulated-list-print)
      (pop-to-buffer (current-buffer)))))

(defun mevedel-lsp-artifact--restore-question (server id title version)
  "The question before restoring item ID (TITLE) of SERVER to VERSION: what
the restore replaces, and whether that text is kept as a version."
  (let* ((versions (mevedel-lsp--list
                    (plist-get (mevedel-lsp--request server :mevedel/artifact/versions (mevedel-lsp--object :id id))
                               :versions)))
         (chosen (seq-find (lambda (v) (equal (plist-get v :number) version)) versions))
         (read (mevedel-lsp-artifact--read server id))
         (size (if (mevedel-lsp-artifact--image-p read)
                   (length (base64-decode-string (plist-get read :content)))
                 (string-bytes (plist-get read :content))))
         (holding (seq-find (lambda (v) (equal (plist-get v :revision) (plist-get read :revision))) versions))
         (latest (car versions))
         (unsaved (seq-find (lambda (buffer)
                              (with-current-buffer buffer
                                (and mevedel-lsp-artifact-mode (equal mevedel-lsp-artifact--id id)
                                     (buffer-modified-p))))
                            (buffer-list))))
    (unless chosen
      (user-error "mevedel: %s keeps no version %d (kept: %s)" title version
                  (mapconcat (lambda (v) (number-to-string (plist-get v :number))) versions ", ")))
    (format "Restore %s to version %d (%s, %s, %s)?  It replaces the current text (%s), %s%s. "
            title version (plist-get chosen :reason) (mevedel-lsp--plural (plist-get chosen :size) "byte")
            (mevedel-lsp-artifact--time (plist-get chosen :at))
            (mevedel-lsp--plural size "byte")
            (cond ((and latest (equal (plist-get latest :revision) (plist-get read :revision)))
                   (format "which is version %d" (plist-get latest :number)))
                  (holding
                   (format "the same as version %d; it is kept as a new version first" (plist-get holding :number)))
                  (t "which no version holds: it is kept as a new version first"))
            (if unsaved
                (format "; the unsaved edits in %s are not part of it and stay there" (buffer-name unsaved))
              ""))))

(defun mevedel-lsp-artifact-restore (id version)
  "Make VERSION of item ID its content again, once you confirm."
  (interactive
   (if (derived-mode-p 'mevedel-lsp-artifact-versions-mode)
       (list mevedel-lsp-artifact--id
             (plist-get (or (tabulated-list-get-id) (user-error "No version on this line")) :number))
     (let ((id (mevedel-lsp-artifact--read-id)))
       (list id (read-number (format "Restore %s to version: " (mevedel-lsp-artifact--title id)))))))
  (let ((server (mevedel-lsp--server))
        (title (mevedel-lsp-artifact--title id)))
    (if (not (yes-or-no-p (mevedel-lsp-artifact--restore-question server id title version)))
        (progn (message "mevedel: %s was not restored" title) nil)
      (let ((result (mevedel-lsp--request server :mevedel/artifact/restore
                                          (mevedel-lsp--object :id id :version version))))
        (mevedel-lsp-artifact--refresh server id)
        (message "mevedel: restored %s to version %d" title version)
        result))))

(define-derived-mode mevedel-lsp-artifact-discussion-mode special-mode "mevedel discussion"
  "An item's discussion, oldest comment first.
\\<mevedel-lsp-artifacts-mode-map>\\[mevedel-lsp-artifact-comment] adds one."
  (setq-local revert-buffer-function #'mevedel-lsp-artifact--fill-discussion))

(define-key mevedel-lsp-artifact-discussion-mode-map (kbd "c") #'mevedel-lsp-artifact-comment)

(defun mevedel-lsp-artifact--fill-discussion (&rest _)
  "Read the item's discussion again into the current buffer."
  (let* ((read (mevedel-lsp-artifact--read (mevedel-lsp--server) mevedel-lsp-artifact--id))
         (comments (mevedel-lsp--list (plist-get read :comments)))
         (inhibit-read-only t))
    (setq mevedel-lsp-artifact--item (plist-put (copy-sequence read) :content nil)
          header-line-format (format "mevedel: the discussion of %s" (plist-get read :title)))
    (erase-buffer)
    (if (null comments)
        (insert "No comments yet.\n")
      (dolist (comment comments)
        (insert (propertize (format "#%d  %s  %s%s\n" (plist-get comment :number)
                                    (mevedel-lsp-artifact--time (plist-get comment :at))
                                    (plist-get comment :author)
                                    (if-let ((session (plist-get comment :sessionId)))
                                        (format " → %s%s" session
                                                (if-let ((turn (plist-get comment :deliveredIn)))
                                                    (format ", delivered in turn %d" turn)
                                                  ""))
                                      ""))
                            'face 'mevedel-lsp-chat-heading)
                (plist-get comment :text) "\n\n")))
    (goto-char (point-min))))

(defun mevedel-lsp-artifact-discussion (id)
  "Show the discussion of item ID."
  (interactive (list (mevedel-lsp-artifact--read-id)))
  (let ((server (mevedel-lsp--server)))
    (with-current-buffer (mevedel-lsp-artifact--view-buffer server id 'mevedel-lsp-artifact-discussion-mode
                                                           (format "*mevedel discussion %s*"
                                                                   (mevedel-lsp-artifact--title id)))
      (unless (derived-mode-p 'mevedel-lsp-artifact-discussion-mode) (mevedel-lsp-artifact-discussion-mode))
      (setq-local mevedel-lsp--origin-server server)
      (setq mevedel-lsp-artifact--id id)
      (mevedel-lsp-artifact--fill-discussion)
      (pop-to-buffer (current-buffer)))))


;;;;; Notifications

(defvar mevedel-lsp-artifact--pending nil
  "Item changes not applied yet: ((SERVER . ID) . PARAMS), newest first.")

(defvar mevedel-lsp-artifact--timer nil
  "The timer that applies `mevedel-lsp-artifact--pending'.")

(defun mevedel-lsp-artifact--apply-pending ()
  "Apply the queued item changes, or wait until `mevedel-lsp--quiet-p'."
  (setq mevedel-lsp-artifact--timer nil)
  (if (not (mevedel-lsp--quiet-p))
      (setq mevedel-lsp-artifact--timer
            (run-at-time (mevedel-lsp--retry-delay) nil #'mevedel-lsp-artifact--apply-pending))
    (let ((changes (reverse mevedel-lsp-artifact--pending))
          (servers nil))
      (setq mevedel-lsp-artifact--pending nil)
      (pcase-dolist (`((,server . ,id) . ,params) changes)
        (when (jsonrpc-running-p server)
          (cl-pushnew server servers)
          (dolist (buffer (mevedel-lsp-artifact--buffers server id))
            (with-current-buffer buffer
              (condition-case err
                  (cond ((derived-mode-p 'mevedel-lsp-artifacts-mode))
                        ;; Item buffers were read again at the notification.
                        (mevedel-lsp-artifact-mode)
                        ((equal (plist-get params :reason) "deleted")
                         (setq header-line-format
                               (format "mevedel: %s was deleted from the store"
                                       (or (plist-get mevedel-lsp-artifact--item :title) id))))
                        (t (revert-buffer)))
                (error (message "mevedel: could not refresh %s: %s" (buffer-name) (error-message-string err))))))))
      (dolist (server servers)
        (dolist (buffer (mevedel-lsp-artifact--buffers server))
          (with-current-buffer buffer
            (condition-case err
                (revert-buffer)
              (error (message "mevedel: could not refresh %s: %s" (buffer-name) (error-message-string err))))))))))

(cl-defmethod eglot-handle-notification
  ((server mevedel-lsp-server) (_method (eql mevedel/artifact/didChange)) &rest params &key id &allow-other-keys)
  "Read item ID again into the buffers showing it; queue the refresh of
its versions list and discussion and of the item lists (PARAMS)."
  (dolist (buffer (mevedel-lsp-artifact--buffers server id))
    (with-current-buffer buffer
      (when mevedel-lsp-artifact-mode
        (if (not (equal (plist-get params :reason) "deleted"))
            (mevedel-lsp-artifact--reload-async buffer server (equal (plist-get params :reason) "elsewhere"))
          (cl-incf mevedel-lsp-artifact--generation)
          (setq mevedel-lsp-artifact--note "was deleted from the store; this text is all that is left of it"
                header-line-format (mevedel-lsp-artifact--header))))))
  (setq mevedel-lsp-artifact--pending
        (cons (cons (cons server id) params)
              (cl-remove-if (lambda (queued) (and (eq (caar queued) server) (equal (cdar queued) id)))
                            mevedel-lsp-artifact--pending)))
  (unless mevedel-lsp-artifact--timer
    (setq mevedel-lsp-artifact--timer (run-at-time 0 nil #'mevedel-lsp-artifact--apply-pending))))

(defun mevedel-lsp-artifact--session-changed (server _params)
  "A session changed (it may be the current one now): mark SERVER's
lists' attachments again."
  (dolist (buffer (mevedel-lsp-artifact--buffers server))
    (with-current-buffer buffer
      (condition-case err
          (revert-buffer)
        (error (message "mevedel: could not refresh %s: %s" (buffer-name) (error-message-string err)))))))

(add-hook 'mevedel-lsp-session-change-functions #'mevedel-lsp-artifact--session-changed)


;;;; Reviewing what turns changed

;; `mevedel/turn/diff' names every path a turn (or a range of turns)
;; changed in the tree -- fs writes, ApplyPatch and shell commands alike,
;; from the session's checkpoints -- with its kind of change and a unified
;; diff of text files.  The review buffer shows it in `diff-mode', each path
;; under a header saying what happened to it (a mode change, a rename, a
;; link, a directory, a binary file, a capture gap); `e' opens `ediff' of a
;; file's two sides, from the whole texts the server sent with the diff
;; (`contents'), so what ediff compares is what the diff shows.  `r'
;; restores one path to its state before the first turn of the review that
;; changed it (`mevedel/turn/restoreFile'): the change it would make is
;; shown first and asked about, and a yes records it as a turn of its own,
;; which Rewind undoes.

(defvar-local mevedel-lsp-review--range nil
  "(FIRST . LAST) the review buffer asked for; nil ends: the latest turn.")

(defvar-local mevedel-lsp-review--result nil
  "The review buffer's `mevedel/turn/diff' result.")

(defvar mevedel-lsp-review-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "e") #'mevedel-lsp-review-ediff)
    (define-key map (kbd "r") #'mevedel-lsp-review-restore)
    (define-key map (kbd "g") #'revert-buffer)
    (define-key map (kbd "q") #'quit-window)
    map)
  "Keys of `mevedel-lsp-review-mode', over `diff-mode's.")

(define-derived-mode mevedel-lsp-review-mode diff-mode "mevedel review"
  "What turns of a mevedel session changed in the tree, read-only.
Each path comes under a `=== PATH: what happened' header, then its
unified diff when it is a text file.  \\<mevedel-lsp-review-mode-map>\\[mevedel-lsp-review-ediff] on a path compares its two
sides with `ediff'; \\[mevedel-lsp-review-restore] restores it to its state before the
review's first turn that changed it (after showing what that does and
asking); \\[revert-buffer] reads the diff again.
\\{mevedel-lsp-review-mode-map}"
  (setq-local revert-buffer-function #'mevedel-lsp-review--revert)
  ;; diff-mode's read-only keys (n, p, N, P...) come from a map that
  ;; overrides the major mode's while the buffer is read-only; ours go in
  ;; front of it, or its `r' (`diff-restrict-view') would shadow ours.
  (setq-local minor-mode-overriding-map-alist
              (cons (cons 'buffer-read-only (make-composed-keymap mevedel-lsp-review-mode-map diff-mode-shared-map))
                    minor-mode-overriding-map-alist))
  ;; Through the mode, so that diff-mode's read-only keys apply.
  (read-only-mode 1))

(defun mevedel-lsp-review--parse-range (text)
  "(FIRST . LAST) for TEXT: N, N..M, N.., ..M, all, or empty (the latest turn)."
  (let ((text (string-trim text)))
    (cond ((string-empty-p text) (cons nil nil))
          ((string= text "all") (cons 1 nil))
          ((string-match "\\`\\([0-9]+\\)\\'" text)
           (let ((n (string-to-number (match-string 1 text)))) (cons n n)))
          ((string-match "\\`\\([0-9]*\\)\\.\\.\\([0-9]*\\)\\'" text)
           (let ((first (match-string 1 text)) (last (match-string 2 text)))
             (cons (if (string-empty-p first) 1 (string-to-number first))
                   (unless (string-empty-p last) (string-to-number last)))))
          (t (user-error "mevedel: %S is not a turn or a range (N, N..M, N.., ..M or all)" text)))))

(defun mevedel-lsp-review--turn-at-point ()
  "The turn at point of a turns list or a chat, or nil."
  (or (and (derived-mode-p 'mevedel-lsp-turns-mode) (tabulated-list-get-id))
      (and (derived-mode-p 'mevedel-lsp-chat-mode) (get-text-property (point) 'mevedel-lsp-chat-turn))))

(defun mevedel-lsp-review--span (result)
  "The turns RESULT covers, for a person."
  (let ((first (plist-get result :first)) (last (plist-get result :last)))
    (if (eql first last) (format "turn %d" first) (format "turns %d..%d" first last))))

(defun mevedel-lsp-review--details (file)
  "The lines after FILE's header: what has no line diff, and why."
  (let ((before (plist-get file :before)) (after (plist-get file :after)))
    (cond ((eq (plist-get file :binary) t)
           (format "binary file: %d -> %d bytes\n"
                   (or (plist-get before :size) 0) (or (plist-get after :size) 0)))
          ((plist-get file :noText)
           (format "no line diff: %s\n" (plist-get file :noText)))
          (t ""))))

(defun mevedel-lsp-review--insert (result)
  "Insert RESULT: the stat, then each path's header and diff.
Every line of a path (its stat line too) carries it as the
`mevedel-lsp-review-file' property."
  (let ((files (mevedel-lsp--list (plist-get result :files)))
        (ranged (not (eql (plist-get result :first) (plist-get result :last)))))
    (if (null files)
        (insert (format "%s changed nothing in the tree.\n" (capitalize (mevedel-lsp-review--span result))))
      (cl-loop for line in (mevedel-lsp--list (plist-get result :stat))
               for i from 0
               do (insert (propertize (concat line "\n") 'mevedel-lsp-review-file (nth i files))))
      (insert "\n")
      (dolist (file files)
        (let ((start (point))
              (first (plist-get file :firstTurn))
              (last (plist-get file :lastTurn))
              (diff (or (plist-get file :diff) "")))
          (insert "=== " (plist-get file :description)
                  (cond ((not ranged) "")
                        ((eql first last) (format "  [turn %d]" first))
                        (t (format "  [turns %d..%d]" first last)))
                  "\n"
                  (mevedel-lsp-review--details file)
                  diff)
          (unless (or (string-empty-p diff) (string-suffix-p "\n" diff)) (insert "\n"))
          (put-text-property start (point) 'mevedel-lsp-review-file file))))))

(defun mevedel-lsp-review--name (result)
  "The name of the review buffer of RESULT."
  (format "*mevedel review %s %s*" (plist-get result :sessionId) (mevedel-lsp-review--span result)))

(defun mevedel-lsp-review--render (result)
  "Make RESULT the text of this review buffer, keeping point's line."
  (let ((line (line-number-at-pos))
        (inhibit-read-only t))
    (setq mevedel-lsp-review--result result
          mevedel-lsp--session-id (plist-get result :sessionId))
    (erase-buffer)
    (mevedel-lsp-review--insert result)
    (rename-buffer (mevedel-lsp-review--name result) t)
    (setq header-line-format
          (format "%s of %s: %s, %d+ %d-   %s ediff the file, %s restore it, %s refresh"
                  (capitalize (mevedel-lsp-review--span result)) (plist-get result :sessionId)
                  (mevedel-lsp--plural (length (plist-get result :files)) "path")
                  (plist-get result :insertions) (plist-get result :deletions)
                  (substitute-command-keys "\\<mevedel-lsp-review-mode-map>\\[mevedel-lsp-review-ediff]")
                  (substitute-command-keys "\\<mevedel-lsp-review-mode-map>\\[mevedel-lsp-review-restore]")
                  (substitute-command-keys "\\<mevedel-lsp-review-mode-map>\\[revert-buffer]")))
    (set-buffer-modified-p nil)
    (goto-char (point-min))
    (forward-line (1- line))))

(defun mevedel-lsp-review--fetch (server session first last)
  "SERVER's `mevedel/turn/diff' of turns FIRST..LAST of SESSION, with both
sides' text."
  (mevedel-lsp--request server :mevedel/turn/diff
                        (mevedel-lsp--object :first first :last last :contents t :sessionId session)))

(defun mevedel-lsp-review--revert (&rest _)
  "Read the review buffer's diff again."
  (mevedel-lsp-review--render
   (mevedel-lsp-review--fetch (mevedel-lsp--server) mevedel-lsp--session-id
                              (car mevedel-lsp-review--range) (cdr mevedel-lsp-review--range))))

;;;###autoload
(defun mevedel-lsp-review (&optional first last session-id)
  "Show what turns FIRST..LAST of SESSION-ID changed in the tree.
FIRST and LAST nil: the latest turn; LAST nil: up to the latest.
Interactively, the turn at point of a turns list or a chat, else the
latest turn; with a prefix argument, a turn or range read in the
minibuffer (N, N..M, N.., ..M, or all: since the session began).
Return the review buffer."
  (interactive
   (let ((range (if current-prefix-arg
                    (mevedel-lsp-review--parse-range
                     (read-string "Review turns (N, N..M, N.., ..M or all; empty: the latest): "))
                  (let ((turn (mevedel-lsp-review--turn-at-point))) (cons turn turn)))))
     (list (car range) (cdr range) (mevedel-lsp--session-at-point))))
  (let* ((server (mevedel-lsp--server))
         (root (ignore-errors (project-root (eglot--project server))))
         (result (mevedel-lsp-review--fetch server session-id first last))
         (name (mevedel-lsp-review--name result)))
    (with-current-buffer (get-buffer-create name)
      (unless (derived-mode-p 'mevedel-lsp-review-mode)
        (mevedel-lsp-review-mode))
      (setq-local mevedel-lsp--origin-server server)
      (when root (setq default-directory (file-name-as-directory root)))
      (setq mevedel-lsp-review--range (cons first last))
      (mevedel-lsp-review--render result)
      (goto-char (point-min))
      (pop-to-buffer (current-buffer))
      (current-buffer))))

(defun mevedel-lsp-review--side-buffer (file side path text)
  "A read-only buffer holding TEXT, SIDE (\"before\" or \"after\") of FILE at PATH."
  (with-current-buffer (get-buffer-create
                        (format "*mevedel %s %s: %s*" side
                                (if (equal side "before")
                                    (format "turn %d" (plist-get file :firstTurn))
                                  (format "turn %d" (plist-get file :lastTurn)))
                                path))
    (let ((inhibit-read-only t))
      (erase-buffer)
      (insert text))
    ;; The file's major mode, for its colours, without the hooks that would
    ;; start a language server for a buffer that is no file.
    (let ((mode (assoc-default path auto-mode-alist #'string-match)))
      (when (consp mode) (setq mode (car mode)))
      (when (and mode (functionp mode))
        (delay-mode-hooks (funcall mode))))
    (setq buffer-read-only t)
    (set-buffer-modified-p nil)
    (goto-char (point-min))
    (current-buffer)))

(defun mevedel-lsp-review-ediff ()
  "Compare the two sides of the changed file at point with `ediff'."
  (interactive)
  (let* ((file (or (get-text-property (point) 'mevedel-lsp-review-file)
                   (user-error "mevedel: no changed path on this line")))
         (before (plist-get (plist-get file :before) :text))
         (after (plist-get (plist-get file :after) :text)))
    (unless (and (stringp before) (stringp after))
      (user-error "mevedel: %s: no text to compare%s" (plist-get file :description)
                  (cond ((eq (plist-get file :binary) t) " (a binary file)")
                        ((plist-get file :noText) (format " (%s)" (plist-get file :noText)))
                        (t ""))))
    (ediff-buffers (mevedel-lsp-review--side-buffer file "before" (or (plist-get file :renamedFrom) (plist-get file :path)) before)
                   (mevedel-lsp-review--side-buffer file "after" (plist-get file :path) after))))


;; Restoring one path from the review.

(defconst mevedel-lsp-review-restore-buffer "*mevedel restore*"
  "The buffer that shows what restoring a path from the review would do.")

(defun mevedel-lsp-review--restore-request (server session path before commit)
  "SERVER's `mevedel/turn/restoreFile' of PATH to its state before turn
BEFORE of SESSION; COMMIT non-nil restores it."
  (mevedel-lsp--request server :mevedel/turn/restoreFile
                        (mevedel-lsp--object :path path :beforeTurn before :commit (and commit t)
                                             :sessionId session)))

(defun mevedel-lsp-review--show-restore (change before)
  "Show CHANGE, the PathChange a restore to before turn BEFORE makes,
in `mevedel-lsp-review-restore-buffer'; return its window."
  (with-current-buffer (get-buffer-create mevedel-lsp-review-restore-buffer)
    (let ((inhibit-read-only t))
      (erase-buffer)
      (insert (format "Restoring to the state before turn %d does:
=== %s
%s"
                      before (plist-get change :description) (mevedel-lsp-review--details change))
              (or (plist-get change :diff) "")))
    (diff-mode)
    (setq buffer-read-only t)
    (set-buffer-modified-p nil)
    (goto-char (point-min))
    (display-buffer (current-buffer))))

(defun mevedel-lsp-review-restore ()
  "Restore the changed path at point to its state before the review's first
turn that changed it -- content, permission bits and kind.
What the restore does (the file now to the wanted state) is shown first,
and you are asked to confirm; no, or \[keyboard-quit], changes nothing.
A yes records the restore as a new turn of the session, which Rewind
undoes; the review is read again.  Return that turn, or nil."
  (interactive)
  (let* ((file (or (get-text-property (point) 'mevedel-lsp-review-file)
                   (user-error "mevedel: no changed path on this line")))
         (path (plist-get file :path))
         (before (plist-get file :firstTurn))
         (server (mevedel-lsp--server))
         (session mevedel-lsp--session-id)
         (review (current-buffer))
         (preview (mevedel-lsp-review--restore-request server session path before nil))
         (change (plist-get preview :change)))
    (if (not change)
        (progn (message "mevedel: %s is already as it was before turn %d; nothing to do" path before) nil)
      (let* ((window (mevedel-lsp-review--show-restore change before))
             (yes (unwind-protect
                      (yes-or-no-p (format "Restore %s to its state before turn %d (%s)? "
                                           path before (plist-get change :description)))
                    (when (window-live-p window) (quit-restore-window window)))))
        (if (not yes)
            (progn (message "mevedel: restore of %s cancelled; nothing changed" path) nil)
          (let ((turn (plist-get (mevedel-lsp-review--restore-request server session path before t) :turn)))
            (mevedel-lsp--revert-changed-buffers server)
            (when (buffer-live-p review)
              (with-current-buffer review
                ;; A review of the latest turn stays on the turn it showed,
                ;; not the restore's own turn.
                (unless (car mevedel-lsp-review--range)
                  (let ((shown (plist-get mevedel-lsp-review--result :first)))
                    (setq mevedel-lsp-review--range (cons shown shown))))
                (revert-buffer)))
            (message "mevedel: restored %s to its state before turn %d as turn %d (Rewind to before turn %d undoes it)"
                     path before turn turn)
            turn))))))


;;;; Key bindings

(defvar mevedel-lsp-command-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "l") #'mevedel-lsp-list-sessions)
    (define-key map (kbd "o") #'mevedel-lsp-open-session)
    (define-key map (kbd "c") #'mevedel-lsp-create-session)
    (define-key map (kbd "r") #'mevedel-lsp-rename-session)
    (define-key map (kbd "s") #'mevedel-lsp-save-session)
    (define-key map (kbd "k") #'mevedel-lsp-close-session)
    (define-key map (kbd "h") #'mevedel-lsp-transcript)
    (define-key map (kbd "t") #'mevedel-lsp-list-turns)
    (define-key map (kbd "a") #'mevedel-lsp-read-address)
    (define-key map (kbd "w") #'mevedel-lsp-rewind)
    (define-key map (kbd "y") #'mevedel-lsp-redo)
    (define-key map (kbd "f") #'mevedel-lsp-fork)
    (define-key map (kbd "F") #'mevedel-lsp-worktree-fork)
    (define-key map (kbd "V") #'mevedel-lsp-fork-variants)
    (define-key map (kbd "S") #'mevedel-lsp-save-as)
    (define-key map (kbd "T") #'mevedel-lsp-take-control)
    (define-key map (kbd "L") #'mevedel-lsp-release-control)
    (define-key map (kbd "g") #'mevedel-lsp-refresh-session)
    (define-key map (kbd "W") #'mevedel-lsp-toggle-follow)
    (define-key map (kbd "p") #'mevedel-lsp-prompt)
    (define-key map (kbd "m") #'mevedel-lsp-chat)
    (define-key map (kbd "x") #'mevedel-lsp-cancel)
    (define-key map (kbd "A") #'mevedel-lsp-artifacts)
    (define-key map (kbd "d") #'mevedel-lsp-review)
    map)
  "mevedel-lsp commands, for a prefix key of your choice:
  (global-set-key (kbd \"C-c m\") mevedel-lsp-command-map)")
(fset 'mevedel-lsp-command-map mevedel-lsp-command-map)


;;;; Progress, for eglot versions that do not show it

(defvar mevedel-lsp--progress (make-hash-table :test #'equal)
  "Live progress reporters, by server and token.")

(unless (boundp 'eglot-report-progress)
  ;; eglot 1.9 neither advertises nor shows $/progress; newer eglot does both
  ;; (and its own methods must not be shadowed).
  (cl-defmethod eglot-client-capabilities ((_server mevedel-lsp-server))
    "eglot's capabilities plus window.workDoneProgress."
    (let ((capabilities (copy-sequence (cl-call-next-method))))
      (plist-put capabilities :window
                 (plist-put (copy-sequence (plist-get capabilities :window))
                            :workDoneProgress t))))

  (cl-defmethod eglot-handle-request
    ((_server mevedel-lsp-server) (_method (eql window/workDoneProgress/create)) &key _token)
    "Accept a progress token."
    nil)

  (cl-defmethod eglot-handle-notification
    ((server mevedel-lsp-server) (_method (eql $/progress)) &key token value)
    "Show SERVER's progress TOKEN with a native progress reporter."
    (let ((key (cons server token))
          (kind (plist-get value :kind))
          (title (plist-get value :title))
          (message (plist-get value :message))
          (percentage (plist-get value :percentage)))
      (pcase kind
        ("begin"
         (let ((title (string-trim (format "%s %s" (or title "") (or message "")))))
           (puthash key (cons (make-progress-reporter (format "[mevedel] %s..." title)) title)
                    mevedel-lsp--progress)))
        ("report"
         (when-let ((entry (gethash key mevedel-lsp--progress)))
           (progress-reporter-update (car entry) percentage message)))
        ("end"
         (when-let ((entry (gethash key mevedel-lsp--progress)))
           (remhash key mevedel-lsp--progress)
           ;; The server's closing summary says what was done.
           (if message
               (message "[mevedel] %s: %s" (cdr entry) message)
             (progress-reporter-done (car entry)))))))))

;;;;; The queue: prompts waiting behind the running turn, and steering

;; A prompt sent while the chat's turn runs goes to `mevedel/queue/add':
;; the server keeps it (durably, beside the session) and sends it as the
;; next turn when the running one settles.  The chat shows the queue above
;; the running turn; on an entry, \\<mevedel-lsp-chat-mode-map>`e' edits it in the prompt buffer, `k'
;; cancels it, `S' sends it now (steering: the running turn is cancelled);
;; `S' elsewhere writes steering.  `mevedel/queue/didChange' carries the
;; whole queue after every change.

(defvar-local mevedel-lsp-queue--state nil
  "The chat session's queue as last heard (a QueueState plist).")

(defun mevedel-lsp-queue--entries ()
  "The chat's queued entries, in delivery order."
  (append (plist-get mevedel-lsp-queue--state :entries) nil))

(defun mevedel-lsp-queue--sending-text ()
  "The text of the chat's entry being sent now, if any."
  (plist-get (seq-find (lambda (entry) (equal (plist-get entry :state) "sending"))
                       (mevedel-lsp-queue--entries))
             :text))

(defun mevedel-lsp-queue--first-line (text)
  (let ((line (car (split-string (or text "") "\n"))))
    (if (string-search "\n" (or text "")) (concat line " …") line)))

(defun mevedel-lsp-queue--insert ()
  "Insert the chat's queue at point, each entry's lines marked with it."
  (let ((entries (mevedel-lsp-queue--entries))
        (problems (append (plist-get mevedel-lsp-queue--state :problems) nil)))
    (when (or entries problems)
      (insert (propertize (format "── Queued (%d)%s ──\n" (length entries)
                                  (if (eq (plist-get mevedel-lsp-queue--state :paused) t)
                                      " · paused: an entry needs review" ""))
                          'face 'mevedel-lsp-chat-heading))
      (insert (propertize (substitute-command-keys
                           "\\<mevedel-lsp-chat-mode-map>\\[mevedel-lsp-queue-edit] edits, \\[mevedel-lsp-queue-cancel] cancels, \\[mevedel-lsp-steer] sends now (cancelling the running turn)\n")
                          'face 'mevedel-lsp-chat-footer))
      (dolist (entry entries)
        (let ((start (point))
              (state (plist-get entry :state))
              (reason (plist-get entry :reason)))
          (insert (format "  [%s%s] %s\n"
                          (if (equal (plist-get entry :kind) "steer") "steering, " "")
                          (pcase state ("review" "needs review") (_ state))
                          (mevedel-lsp-queue--first-line (plist-get entry :text))))
          (seq-doseq (attachment (plist-get entry :attachments))
            (insert (format "      Attached: %s\n" attachment)))
          (when (stringp reason) (insert (format "      Why: %s\n" reason)))
          (put-text-property start (point) 'mevedel-lsp-queue-entry entry)))
      (dolist (problem problems)
        (insert (propertize (format "  Unreadable: %s\n" problem) 'face 'mevedel-lsp-chat-error)))
      (insert "\n"))))

(defun mevedel-lsp-queue--show (server state)
  "Show STATE, a session's queue from SERVER, in its chat buffers."
  (dolist (buffer (mevedel-lsp-chat--buffers server (plist-get state :sessionId)))
    (with-current-buffer buffer
      (setq mevedel-lsp-queue--state state)
      (mevedel-lsp-chat--render)
      (force-mode-line-update))))

(defun mevedel-lsp-queue--load (server session)
  "Read SESSION's queue from SERVER (a chat drawn again)."
  (let ((buffer (current-buffer)))
    (jsonrpc-async-request server :mevedel/queue/list (mevedel-lsp--object :sessionId session)
                           :success-fn (lambda (state)
                                         (when (buffer-live-p buffer)
                                           (with-current-buffer buffer
                                             (unless (equal state mevedel-lsp-queue--state)
                                               (mevedel-lsp-queue--show server state)))))
                           :error-fn #'ignore :timeout-fn #'ignore)))

(cl-defmethod eglot-handle-notification
  ((server mevedel-lsp-server) (_method (eql mevedel/queue/didChange)) &rest params &allow-other-keys)
  "Show the session's queue PARAMS in its chat."
  (mevedel-lsp-queue--show server params))

(defun mevedel-lsp-queue--request (server method params what)
  "Send METHOD with PARAMS to SERVER; a refusal is said, naming WHAT."
  (condition-case err
      (jsonrpc-request server method params)
    (jsonrpc-error (user-error "mevedel: %s was refused: %s" what (mevedel-lsp--error-text err)))))

(defun mevedel-lsp-queue--add (server session text agent attachments)
  "Queue TEXT behind SESSION's running turn."
  (mevedel-lsp-queue--request server :mevedel/queue/add
                              (mevedel-lsp--object :text text :sessionId session :agent agent
                                                   :attachments (and attachments (vconcat attachments)))
                              "queueing the prompt")
  (message "mevedel: queued; it is sent when the running turn settles"))

(cl-defun mevedel-lsp-queue--send-prompt (server text action &key session agent attachments)
  "Send the prompt buffer's TEXT as ACTION says (see
`mevedel-lsp-prompt--queue-action'); return the chat buffer."
  (pcase action
    ('nil (mevedel-lsp-chat-send server text :session session :agent agent :attachments attachments))
    ('steer
     (let ((session (or session (mevedel-lsp--current-session server))))
       (mevedel-lsp-queue--request server :mevedel/queue/steer
                                   (mevedel-lsp--object :text text :sessionId session :agent agent
                                                        :attachments (and attachments (vconcat attachments)))
                                   "steering")
       (message "mevedel: steering: the running turn is cancelled and this goes next")
       (mevedel-lsp-chat-buffer session server)))
    (`(edit . ,entry-id)
     (let ((session (or session (mevedel-lsp--current-session server))))
       (mevedel-lsp-queue--request server :mevedel/queue/edit
                                   (mevedel-lsp--object :entryId entry-id :text text :sessionId session)
                                   "editing the queued prompt")
       (message "mevedel: the queued prompt was changed")
       (mevedel-lsp-chat-buffer session server)))))

(defun mevedel-lsp-queue--at-point ()
  "The queued entry at point in the chat, or a user error."
  (or (get-text-property (point) 'mevedel-lsp-queue-entry)
      (user-error "mevedel: point is on no queued prompt")))

(defun mevedel-lsp-queue--prompt-buffer (action initial label)
  "Open the prompt buffer for the chat's session, for ACTION, holding INITIAL."
  (let ((buffer (mevedel-lsp-prompt mevedel-lsp--session-id)))
    (with-current-buffer buffer
      (setq mevedel-lsp-prompt--queue-action action)
      (erase-buffer)
      (when initial (insert initial))
      (setq-local header-line-format (list (propertize label 'face 'mevedel-lsp-chat-heading)
                                           '(:eval (mevedel-lsp-prompt--header-line)))))
    buffer))

(defun mevedel-lsp-queue-edit ()
  "Edit the queued prompt at point in the prompt buffer; C-c C-c keeps it."
  (interactive)
  (let ((entry (mevedel-lsp-queue--at-point)))
    (mevedel-lsp-queue--prompt-buffer (cons 'edit (plist-get entry :entryId)) (plist-get entry :text)
                                      " [editing a queued prompt]")))

(defun mevedel-lsp-queue-cancel ()
  "Cancel the queued prompt at point: it is never sent."
  (interactive)
  (let* ((entry (mevedel-lsp-queue--at-point))
         (server (mevedel-lsp--server))
         (state (mevedel-lsp-queue--request server :mevedel/queue/cancel
                                            (mevedel-lsp--object :entryId (plist-get entry :entryId)
                                                                 :sessionId mevedel-lsp--session-id)
                                            "cancelling the queued prompt")))
    (mevedel-lsp-queue--show server state)
    (message "mevedel: the queued prompt was cancelled; it is not sent")))

(defun mevedel-lsp-steer ()
  "Steer: on a queued prompt, send it now; elsewhere write steering.
Either way the running turn is cancelled and this goes next."
  (interactive)
  (let ((entry (get-text-property (point) 'mevedel-lsp-queue-entry)))
    (if (null entry)
        (mevedel-lsp-queue--prompt-buffer 'steer nil " [steering: cancels the running turn]")
      (mevedel-lsp-queue--request (mevedel-lsp--server) :mevedel/queue/steer
                                  (mevedel-lsp--object :entryId (plist-get entry :entryId)
                                                       :sessionId mevedel-lsp--session-id)
                                  "sending the queued prompt")
      (message "mevedel: sending the queued prompt now"))))


(add-hook 'eglot-connect-hook #'mevedel-lsp--after-connect 'append)

(provide 'mevedel-lsp)
;;; mevedel-lsp.el ends here
