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
    (let ((origin (current-buffer))
          (server (eglot-current-server)))
      (unwind-protect
          (progn
            (xref-find-definitions "LSP identifier at point")
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
            ;; The read's $/progress reached the echo area (and so *Messages*).
            (should (with-current-buffer "*Messages*"
                      (save-excursion
                        (goto-char (point-min))
                        (search-forward "Read work://shared/plans" nil t)))))
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

;;; mevedel-lsp-test.el ends here
