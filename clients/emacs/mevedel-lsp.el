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
;;   it themselves.
;;
;; Quick start:
;;
;;   (require 'mevedel-lsp)
;;   (add-hook 'markdown-mode-hook #'mevedel-lsp-ensure)
;;   (add-hook 'text-mode-hook #'mevedel-lsp-ensure)
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
    :followPublished :sessionWatch :leaseSeconds :controlTransfer :remoteWorkspaces)
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
Suitable for `markdown-mode-hook' and `text-mode-hook'."
  (mevedel-lsp-register)
  (eglot-ensure))

(defun mevedel-lsp--server (&optional noerror)
  "The mevedel-lsp server of the current buffer, or of any live one.
Signal a user error when there is none, unless NOERROR."
  (let ((current (eglot-current-server)))
    (cond ((cl-typep current 'mevedel-lsp-server) current)
          ((and (local-variable-p 'mevedel-lsp--origin-server)
                (jsonrpc-running-p mevedel-lsp--origin-server))
           mevedel-lsp--origin-server)
          ((car (mevedel-lsp--servers)))
          (noerror nil)
          (t (user-error "No mevedel-lsp server is running; try M-x mevedel-lsp-ensure in a Markdown or text buffer")))))


;;;; Completion

;; An address token (work://shared/no) is not one Emacs symbol: eglot's own
;; completion takes only the symbol before point ("no") as the text to match,
;; and the server's candidates are whole canonical addresses.  The server's
;; textEdit says which span the candidates replace, so this function uses that
;; span as the completion region; each candidate is the text it inserts.

(defun mevedel-lsp--completion-items (server)
  "SERVER's completion items at point, or nil when input interrupted it."
  (let ((response (jsonrpc-request server :textDocument/completion
                                   (eglot--CompletionParams)
                                   :deferred :textDocument/completion
                                   :cancel-on-input t)))
    (append (if (vectorp response) response (plist-get response :items)) nil)))

(defun mevedel-lsp--candidate (item)
  "ITEM's inserted text, carrying ITEM as a text property."
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
Leaves other completion to eglot when the server offers no address."
  (when-let* ((server (and (eglot-managed-p) (eglot-current-server)))
              ((cl-typep server 'mevedel-lsp-server))
              (items (mevedel-lsp--completion-items server))
              (edit (seq-some (lambda (item) (plist-get item :textEdit)) items))
              (start (mevedel-lsp--position-to-point
                      (plist-get (or (plist-get edit :range) (plist-get edit :replace)) :start)))
              ((<= start (point))))
    (let ((candidates (mapcar #'mevedel-lsp--candidate
                              (cl-sort (copy-sequence items) #'string-lessp
                                       :key (lambda (item) (or (plist-get item :sortText)
                                                               (plist-get item :label)))))))
      (list start (point)
            (lambda (probe pred action)
              (if (eq action 'metadata)
                  '(metadata (category . mevedel-address) (display-sort-function . identity))
                (complete-with-action action candidates probe pred)))
            :annotation-function #'mevedel-lsp--annotation
            :exclusive 'no))))

(defun mevedel-lsp--managed-buffer-setup ()
  "Put address completion ahead of eglot's in buffers mevedel-lsp manages."
  (if (and (eglot-managed-p) (cl-typep (eglot-current-server) 'mevedel-lsp-server))
      (add-hook 'completion-at-point-functions #'mevedel-lsp-completion-at-point nil t)
    (remove-hook 'completion-at-point-functions #'mevedel-lsp-completion-at-point t)))

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

(defun mevedel-lsp--request (server method params)
  "Send SERVER a METHOD request with PARAMS; a failure becomes a `user-error'."
  (condition-case err
      (jsonrpc-request server method params)
    (jsonrpc-error (user-error "mevedel: %s" (mevedel-lsp--error-text err)))))

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
     (t (find-file (eglot--uri-to-path uri))))))

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
                   (jsonrpc-error (user-error "mevedel: %s" (mevedel-lsp--error-text err)))))
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
    map)
  "Keys of `mevedel-lsp-turns-mode'.")

(define-derived-mode mevedel-lsp-turns-mode tabulated-list-mode "mevedel turns"
  "The turns of a session, oldest first.
\\<mevedel-lsp-turns-mode-map>\\[mevedel-lsp-turns-visit] jumps to the turn in the transcript, \
\\[mevedel-lsp-turns-show] shows it alone, \\[mevedel-lsp-rewind] rewinds to it,
\\[mevedel-lsp-fork] forks after it.
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
        (push (format "  %s (%s of turn %d: %s)" (plist-get r :path) (plist-get r :checkpoint) (plist-get r :turn)
                      (if (equal (plist-get r :state) "absent")
                          "deleted, as it was absent"
                        (mevedel-lsp--plural (or (plist-get r :size) 0) "byte")))
              lines)))
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
        (list summary (mevedel-lsp--child-lines impact) "Fork")
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

(defun mevedel-lsp--transaction (server prepare commit params describe)
  "Run one lifecycle transaction through SERVER.
PREPARE and COMMIT are the methods, PARAMS the prepare's params and
DESCRIBE turns its result into (SUMMARY DETAILS ACTION).  The impact is
shown and committed only when `yes-or-no-p' says yes.  Return the
commit's result, or nil when declined."
  (let* ((session-id (plist-get params :sessionId))
         (impact (mevedel-lsp--lifecycle-request server prepare (apply #'mevedel-lsp--object params) session-id))
         (described (funcall describe impact)))
    (mevedel-lsp--show-impact described)
    (if (not (yes-or-no-p (format "%s %s " (nth 0 described) (concat (nth 2 described) "?"))))
        (progn (message "mevedel: %s cancelled; nothing changed" (downcase (nth 2 described))) nil)
      ;; The commit names the session the prepare saw, so a session switch
      ;; in between cannot redirect it.
      (mevedel-lsp--lifecycle-request
       server commit
       (mevedel-lsp--object :token (plist-get impact :token) :sessionId (plist-get impact :sessionId))
       (plist-get impact :sessionId)))))

(defun mevedel-lsp--in-place-done (verb result)
  "Report an in-place RESULT (Rewind, Redo) as VERB; return RESULT."
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
      (pop-to-buffer (mevedel-lsp-transcript-buffer (plist-get child :sessionId) server))
      (mevedel-lsp--refresh-lists server)
      (message "mevedel: %s %s into %s (%s, %s), now current%s" verb (plist-get result :sourceId)
               (plist-get child :displayName) (plist-get child :sessionId)
               (mevedel-lsp--plural (plist-get child :settledTurns) "turn")
               (if-let ((warning (plist-get result :warning))) (format " (warning: %s)" warning) ""))))
  result)

(defun mevedel-lsp--read-turn (server session-id what &optional completed-only)
  "Ask SERVER for a settled turn of SESSION-ID to WHAT.
In a turns list, the turn at point.  With COMPLETED-ONLY, only completed
turns are offered."
  (or (and (derived-mode-p 'mevedel-lsp-turns-mode) (tabulated-list-get-id))
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
  "Send SERVER the recovery METHOD for SESSION-ID and say what it did."
  (let ((result (mevedel-lsp--request server method (mevedel-lsp--object :sessionId session-id))))
    (message "mevedel: recovery %s of %s: %s%s" (plist-get result :recoveryId) (plist-get result :sessionId)
             (pcase (plist-get result :resolution)
               ("rolled-back" "the files have their content from before the interrupted transaction")
               ("completed" "the interrupted transaction was finished")
               (_ "the files were left as they are"))
             (if-let ((written (mevedel-lsp--list (plist-get result :written))))
                 (concat "; wrote " (string-join written ", "))
               ""))
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
                  (jsonrpc-error (user-error "mevedel: %s" (mevedel-lsp--error-text err))))))
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

(defvar mevedel-lsp--pending-changes nil
  "Session changes not applied yet: ((SERVER . SESSION) . PARAMS), newest first.")

(defvar mevedel-lsp--change-timer nil
  "The timer that applies `mevedel-lsp--pending-changes'.")

(defun mevedel-lsp--apply-pending-changes ()
  "Apply the queued session changes, or wait until no request waits."
  (setq mevedel-lsp--change-timer nil)
  (if (> mevedel-lsp--waiting 0)
      (setq mevedel-lsp--change-timer (run-at-time 0.05 nil #'mevedel-lsp--apply-pending-changes))
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
Empty input or \\[keyboard-quit] answers nothing, which the server reads
as the cautious choice (for a takeover: Cancel)."
  (ignore type)
  (let ((titles (mapcar (lambda (action) (plist-get action :title)) (append actions nil))))
    (if (null titles)
        (progn (message "[mevedel] %s" message) :null)
      (condition-case nil
          (let ((choice (completing-read (format "[mevedel] %s\nAnswer (%s): "
                                                 message (string-join titles ", "))
                                         titles nil t)))
            (if (member choice titles) (list :title choice) :null))
        (quit :null)))))


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

(add-hook 'eglot-connect-hook #'mevedel-lsp--after-connect 'append)

(provide 'mevedel-lsp)
;;; mevedel-lsp.el ends here
