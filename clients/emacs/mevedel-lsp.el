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
;; - `$/progress' shows in the echo area on eglot versions that do not show
;;   it themselves.
;;
;; Quick start:
;;
;;   (require 'mevedel-lsp)
;;   (add-hook 'markdown-mode-hook #'mevedel-lsp-ensure)
;;   (add-hook 'text-mode-hook #'mevedel-lsp-ensure)
;;
;; Works with the eglot 1.9 of Debian's elpa-eglot on Emacs 28 and with the
;; eglot built into Emacs 29 and later.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'eglot)
(require 'jsonrpc)
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
  '(:memoryRoots :skillRoots :completionLimit :currentSession :diagnostics)
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

(defun mevedel-lsp--fill (buffer server uri)
  "Fill BUFFER with the virtual document URI read through SERVER."
  (let ((document (mevedel-lsp-read-document
                   server (list :uri uri)
                   (format "mevedel-read-%d" (cl-incf mevedel-lsp--progress-tokens)))))
    (with-current-buffer buffer
      (let ((inhibit-read-only t) (position (point)))
        (erase-buffer)
        (insert (plist-get document :text))
        (goto-char (min position (point-max)))
        (set-buffer-modified-p nil)))
    document))

(defun mevedel-lsp-open-virtual (uri &optional server)
  "Return a read-only buffer showing the virtual document URI.
The text is read through SERVER (default: the current mevedel-lsp server).
A buffer already showing URI is reused."
  (let* ((server (or server (mevedel-lsp--server)))
         (existing (seq-find (lambda (b) (equal (buffer-local-value 'mevedel-lsp--uri b) uri))
                             (buffer-list))))
    (or existing
        (let* ((buffer (generate-new-buffer (format "*mevedel %s*" uri)))
               (document (condition-case err
                             (mevedel-lsp--fill buffer server uri)
                           (error (kill-buffer buffer) (signal (car err) (cdr err)))))
               (canonical (plist-get document :canonical)))
          (with-current-buffer buffer
            (rename-buffer (format "*mevedel %s*" canonical) t)
            (funcall (mevedel-lsp--major-mode-for canonical))
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
