;;; mevedel-lsp-artifacts-test.el --- ERT tests of the artifact store's UI against the real server  -*- lexical-binding: t; -*-

;; Run by tests/clients/test_emacs.py after mevedel-lsp-test.el (whose
;; helpers and server it shares):
;;   emacs --batch -q -L clients/emacs -l tests/clients/emacs/mevedel-lsp-test.el \
;;         -l tests/clients/emacs/mevedel-lsp-artifacts-test.el \
;;         --eval '(ert-run-tests-batch-and-exit "^mevedel-lsp-test-artifact")'
;; Each test drives the items list and the item buffers with their keys,
;; answers the minibuffer's questions with stubs that record what they were
;; asked, and checks what the user sees against what the server holds.  A
;; second real server process of the same workspace plays the other
;; machine that holds an item.

;;; Code:

(require 'ert)
(require 'json)
(require 'mevedel-lsp)

(unless (fboundp 'mevedel-test--document-buffer)
  (load (expand-file-name "mevedel-lsp-test.el" (file-name-directory (or load-file-name buffer-file-name)))))

(defvar mevedel-art-test--asked nil
  "The questions (`yes-or-no-p' and `read-string' prompts) asked, newest first.")

(defmacro mevedel-art-test--answering (strings answers &rest body)
  "Run BODY with `read-string' answering STRINGS in turn and `yes-or-no-p'
answering ANSWERS in turn; a question with no answer left fails the test."
  (declare (indent 2))
  `(let ((strings ,strings) (answers ,answers))
     (cl-letf (((symbol-function 'read-string)
                (lambda (prompt &rest _)
                  (push prompt mevedel-art-test--asked)
                  (if strings (pop strings) (ert-fail (format "an unexpected question: %s" prompt)))))
               ((symbol-function 'yes-or-no-p)
                (lambda (prompt)
                  (push prompt mevedel-art-test--asked)
                  (if answers (pop answers) (ert-fail (format "an unexpected question: %s" prompt))))))
       ,@body)))

(defun mevedel-art-test--text (buffer)
  "BUFFER's text, without properties."
  (with-current-buffer buffer (buffer-substring-no-properties (point-min) (point-max))))

(defun mevedel-art-test--line-of (buffer title)
  "The line of list BUFFER showing the item called TITLE, or nil."
  (with-current-buffer buffer
    (save-excursion
      (goto-char (point-min))
      (and (re-search-forward (format "^ [* ] %s +\\(?:document\\|whiteboard\\|artifact\\) " (regexp-quote title))
                              nil t)
           (buffer-substring-no-properties (line-beginning-position) (line-end-position))))))

(defun mevedel-art-test--press (buffer key &optional row)
  "Press KEY in BUFFER (on the line showing ROW, when given) as the user
would there; return what the command returned.  Afterwards the current
buffer is the selected window's, as after a command."
  (set-buffer buffer)
  (when row
    (goto-char (point-min))
    (unless (re-search-forward (format "^ [* ] %s " (regexp-quote row)) nil t)
      (ert-fail (format "%s shows no line %s:\n%s" (buffer-name buffer) row (mevedel-art-test--text buffer))))
    (beginning-of-line))
  (let ((command (key-binding (kbd key))))
    (mevedel-test--log "%s in %s runs %s" key (buffer-name buffer) command)
    (prog1 (call-interactively command)
      (set-buffer (window-buffer (selected-window))))))

(defun mevedel-art-test--read (id)
  "What the server holds of item ID (`mevedel/artifact/read')."
  (mevedel-test--call :mevedel/artifact/read :id id))

(defun mevedel-art-test--content (id)
  (plist-get (mevedel-art-test--read id) :content))

(defun mevedel-art-test--list ()
  "The items list, as `mevedel-lsp-artifacts' shows it from the document."
  (mevedel-test--from-document #'mevedel-lsp-artifacts)
  (should (derived-mode-p 'mevedel-lsp-artifacts-mode))
  (current-buffer))

(defun mevedel-art-test--set-text (buffer text)
  "Replace BUFFER's text with TEXT, as typing would."
  (with-current-buffer buffer
    (erase-buffer)
    (insert text)))

(defun mevedel-art-test--header (buffer)
  (with-current-buffer buffer (format "%s" header-line-format)))


(ert-deftest mevedel-lsp-test-artifact-document-round-trip ()
  "A new document is listed by title and marked attached; its buffer saves
to the store, reloads when the item changes, reports a conflicting write
without losing the text; versions list and restore; attach, detach,
comment, duplicate and delete from the list."
  (mevedel-test--from-document #'mevedel-lsp-create-session "ERT artifacts")
  (let ((listing (mevedel-art-test--list)))
    ;; n: a new document, shown in its own buffer.
    (mevedel-art-test--answering '("ERT plan") nil
      (mevedel-art-test--press listing "n"))
    (let ((item (current-buffer))
          (id mevedel-lsp-artifact--id))
      (should mevedel-lsp-artifact-mode)
      (should id)
      (should-not buffer-read-only)
      (should (string-match-p "ERT plan" (mevedel-art-test--header item)))
      (should (equal (mevedel-art-test--text item) (mevedel-art-test--content id)))
      ;; Listed by its title, marked attached to the current session.
      (let ((line (mevedel-art-test--line-of listing "ERT plan")))
        (mevedel-test--log "listed: %s" line)
        (should (string-match-p "^ \\* ERT plan +document +1 " line))
        (should (string-match-p (regexp-quote id) line)))

      ;; Edit and C-x C-s: the server holds the new text.
      (mevedel-art-test--set-text item "# Plan\n\nfirst draft\n")
      (mevedel-art-test--press item "C-x C-s")
      (should-not (buffer-modified-p item))
      (should (equal (mevedel-art-test--content id) "# Plan\n\nfirst draft\n"))
      (should (mevedel-test--contains "*Messages*" "mevedel: saved ERT plan"))
      ;; Saved once more from there: the revision the save answered is the base.
      (with-current-buffer item (goto-char (point-max)) (insert "second line\n"))
      (mevedel-art-test--press item "C-x C-s")
      (should (equal (mevedel-art-test--content id) "# Plan\n\nfirst draft\nsecond line\n"))

      ;; Written elsewhere: the open buffer, without edits, shows it.
      (mevedel-test--call :mevedel/artifact/write :id id :content "# Plan\n\nfrom elsewhere\n")
      (mevedel-test--wait (lambda () (equal (mevedel-art-test--text item) "# Plan\n\nfrom elsewhere\n"))
                          "the open buffer to show the other write")
      (should-not (buffer-modified-p item))

      ;; A conflicting write: someone else wrote while this buffer had edits.
      (with-current-buffer item (goto-char (point-max)) (insert "my unsaved line\n"))
      (mevedel-test--call :mevedel/artifact/write :id id :content "# Plan\n\ntheirs\n")
      (setq mevedel-art-test--asked nil)
      (let ((err (should-error (mevedel-art-test--answering nil '(nil)
                                 (mevedel-art-test--press item "C-x C-s"))
                               :type 'user-error)))
        (mevedel-test--log "refused: %s" (cadr err))
        (should (string-match-p "\\`mevedel: ERT plan was not saved: it changed since" (cadr err))))
      (should (string-match-p "ERT plan was not saved.*Reload it" (car mevedel-art-test--asked)))
      ;; Nothing lost: their text on the server, mine in the buffer.
      (should (equal (mevedel-art-test--content id) "# Plan\n\ntheirs\n"))
      (should (buffer-modified-p item))
      (should (equal (mevedel-art-test--text item) "# Plan\n\nfrom elsewhere\nmy unsaved line\n"))
      ;; Saving again, the reload is accepted: the buffer shows their text,
      ;; mine is kept in a buffer of its own.
      (mevedel-art-test--answering nil '(t)
        (mevedel-art-test--press item "C-x C-s"))
      (should (equal (mevedel-art-test--text item) "# Plan\n\ntheirs\n"))
      (should-not (buffer-modified-p item))
      (let ((kept (get-buffer "*mevedel unsaved ERT plan*")))
        (should kept)
        (should (equal (mevedel-art-test--text kept) "# Plan\n\nfrom elsewhere\nmy unsaved line\n")))
      (should (equal (mevedel-art-test--content id) "# Plan\n\ntheirs\n"))
      ;; After the reload a save goes through again, also once the user
      ;; picked another major mode.
      (with-current-buffer item (fundamental-mode))
      (mevedel-art-test--set-text item "version one\n")
      (mevedel-art-test--press item "C-x C-s")
      (should (equal (mevedel-art-test--content id) "version one\n"))

      ;; s records a version; v lists them; RET restores one.
      (mevedel-art-test--press listing "s" "ERT plan")
      (mevedel-art-test--set-text item "version two\n")
      (mevedel-art-test--press item "C-x C-s")
      (should (equal (mevedel-art-test--content id) "version two\n"))
      (mevedel-art-test--press listing "v" "ERT plan")
      (let ((versions (current-buffer)))
        (should (derived-mode-p 'mevedel-lsp-artifact-versions-mode))
        (mevedel-test--log "versions:\n%s" (mevedel-art-test--text versions))
        (should (string-match-p "^ +2 .* saved +12 " (mevedel-art-test--text versions)))
        (should (string-match-p "^ +1 .* created +0 " (mevedel-art-test--text versions)))
        (set-buffer versions)
        (goto-char (point-min))
        (re-search-forward "^ +2 .* saved ")
        (setq mevedel-art-test--asked nil)
        ;; Declined: nothing changes.
        (mevedel-art-test--answering nil '(nil) (mevedel-art-test--press versions "RET"))
        ;; The question says what the restore replaces: 12 bytes no version holds.
        (should (string-match-p "Restore ERT plan to version 2 (saved, 12 bytes, .*)\\?  It replaces the current text (12 bytes), which no version holds: it is kept as a new version first"
                                (car mevedel-art-test--asked)))
        (should (equal (mevedel-art-test--content id) "version two\n"))
        (set-buffer versions)
        (goto-char (point-min))
        (re-search-forward "^ +2 .* saved ")
        (mevedel-art-test--answering nil '(t) (mevedel-art-test--press versions "RET"))
        (should (equal (mevedel-art-test--content id) "version one\n"))
        (mevedel-test--wait (lambda () (equal (mevedel-art-test--text item) "version one\n"))
                            "the open buffer to show the restored version")
        (mevedel-test--wait (lambda () (string-match-p "^ +4 .* restored +12 " (mevedel-art-test--text versions)))
                            "the versions list to show the restore")
        ;; The text the restore replaced is version 3: nothing was lost.
        (should (string-match-p "^ +3 .* replaced +12 " (mevedel-art-test--text versions))))

      ;; d detaches, a attaches again.
      (mevedel-art-test--press listing "d" "ERT plan")
      (should (string-match-p "^   ERT plan " (mevedel-art-test--line-of listing "ERT plan")))
      (should (eq (plist-get (mevedel-art-test--read id) :attached) :json-false))
      (mevedel-art-test--press listing "a" "ERT plan")
      (should (string-match-p "^ \\* ERT plan " (mevedel-art-test--line-of listing "ERT plan")))

      ;; c comments; i shows the discussion.
      (mevedel-art-test--answering '("Tighten the intro, please") nil
        (mevedel-art-test--press listing "c" "ERT plan"))
      (should (equal (plist-get (aref (plist-get (mevedel-art-test--read id) :comments) 0) :text)
                     "Tighten the intro, please"))
      (mevedel-art-test--press listing "i" "ERT plan")
      (should (derived-mode-p 'mevedel-lsp-artifact-discussion-mode))
      (should (string-match-p "^#1 .* user.*\nTighten the intro, please$" (mevedel-art-test--text (current-buffer))))

      ;; C copies it under a new title: both are listed.
      (mevedel-art-test--answering '("ERT plan copy") nil
        (mevedel-art-test--press listing "C" "ERT plan"))
      (should (mevedel-art-test--line-of listing "ERT plan copy"))
      (should (mevedel-art-test--line-of listing "ERT plan"))

      ;; D asks first; declined, the copy stays; confirmed, it is gone.
      (setq mevedel-art-test--asked nil)
      (mevedel-art-test--answering nil '(nil)
        (mevedel-art-test--press listing "D" "ERT plan copy"))
      (should (string-match-p "Delete ERT plan copy" (car mevedel-art-test--asked)))
      (should (mevedel-art-test--line-of listing "ERT plan copy"))
      (mevedel-art-test--answering nil '(t)
        (mevedel-art-test--press listing "D" "ERT plan copy"))
      (should-not (mevedel-art-test--line-of listing "ERT plan copy"))
      (should (mevedel-art-test--line-of listing "ERT plan"))
      ;; Deleting the open one: its buffer keeps the text and says so.
      (mevedel-art-test--answering nil '(t)
        (mevedel-art-test--press listing "D" "ERT plan"))
      (should-not (mevedel-art-test--line-of listing "ERT plan"))
      (should (string-match-p "ERT plan was deleted" (mevedel-art-test--header item)))
      (should (equal (mevedel-art-test--text item) "version one\n"))
      (should (eq (car (should-error (mevedel-art-test--read id) :type 'jsonrpc-error)) 'jsonrpc-error)))))

(ert-deftest mevedel-lsp-test-artifact-whiteboard-and-refusals ()
  "A whiteboard opens as its JSON scene and saves; what the server refuses
is reported in its words, and the buffer keeps the text."
  (let ((listing (mevedel-art-test--list)))
    (mevedel-art-test--answering '("ERT board") nil
      (mevedel-art-test--press listing "w"))
    (let* ((board (current-buffer))
           (id mevedel-lsp-artifact--id)
           (scene (json-parse-string (mevedel-art-test--text board) :object-type 'plist)))
      ;; A JSON mode: js-mode on Emacs 28, js-json-mode on Emacs 30.
      (should (memq major-mode '(js-mode javascript-mode js-json-mode)))
      (should (equal (plist-get scene :elements) []))
      (should (mevedel-art-test--line-of listing "ERT board"))
      ;; A scene with an element saves.
      (let ((drawn (json-serialize (list :type "excalidraw" :version 2 :elements (vector (list :id "r1" :type "rectangle"))
                                         :appState (make-hash-table) :files (make-hash-table)))))
        (mevedel-art-test--set-text board drawn)
        (mevedel-art-test--press board "C-x C-s")
        (should (equal (mevedel-art-test--content id) drawn))
        ;; Text that is no scene: the server's reason, the text kept.
        (mevedel-art-test--set-text board "{ not a scene")
        (let ((err (should-error (mevedel-art-test--press board "C-x C-s") :type 'user-error)))
          (mevedel-test--log "refused: %s" (cadr err))
          (should (string-match-p "\\`mevedel: ERT board was not saved: .*not a whiteboard scene" (cadr err)))
          (should-not (string-match-p (regexp-quote mevedel-test-root) (cadr err))))
        (should (buffer-modified-p board))
        (should (equal (mevedel-art-test--text board) "{ not a scene"))
        (should (equal (mevedel-art-test--content id) drawn))
        (with-current-buffer board (revert-buffer nil t))
        (should (equal (mevedel-art-test--text board) drawn))))
    ;; A title the server refuses: its words, nothing created.
    (let ((err (should-error (mevedel-art-test--answering '("") nil (mevedel-art-test--press listing "n"))
                             :type 'user-error)))
      (mevedel-test--log "refused: %s" (cadr err))
      (should (string-match-p "\\`mevedel: .*title" (cadr err))))))

(defconst mevedel-art-test--png
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
  "A 1x1 PNG, base64.")

(ert-deftest mevedel-lsp-test-artifact-files-open-as-text-or-image ()
  "An HTML artifact opens as its text and saves; an image opens read-only."
  (let* ((listing (mevedel-art-test--list))
         (page (plist-get (mevedel-test--call :mevedel/artifact/create :kind "artifact" :title "ERT page"
                                              :fileName "page.html" :content "<p>first</p>\n")
                          :id))
         (picture (plist-get (mevedel-test--call :mevedel/artifact/create :kind "artifact" :title "ERT picture"
                                                 :fileName "dot.png" :encoding "base64"
                                                 :content mevedel-art-test--png)
                             :id)))
    ;; Both are listed (the creations' didChange refreshed the list).
    (mevedel-test--wait (lambda () (and (mevedel-art-test--line-of listing "ERT page")
                                        (mevedel-art-test--line-of listing "ERT picture")))
                        "the list to show the new artifacts")
    (mevedel-art-test--press listing "RET" "ERT page")
    (let ((buffer (current-buffer)))
      (should (equal mevedel-lsp-artifact--id page))
      (should (equal (mevedel-art-test--text buffer) "<p>first</p>\n"))
      (should-not buffer-read-only)
      (should (derived-mode-p 'mhtml-mode 'html-mode 'sgml-mode))
      (mevedel-art-test--set-text buffer "<p>second</p>\n")
      (mevedel-art-test--press buffer "C-x C-s")
      (should (equal (mevedel-art-test--content page) "<p>second</p>\n")))
    ;; m: the item's own conversation, in a chat.
    (mevedel-art-test--press listing "m" "ERT page")
    (should (derived-mode-p 'mevedel-lsp-chat-mode))
    (let ((conversation (mevedel-test--call :mevedel/artifact/conversation :id page)))
      (should (eq (plist-get conversation :created) :json-false))
      (should (equal mevedel-lsp--session-id (plist-get conversation :sessionId))))
    (mevedel-art-test--press listing "RET" "ERT picture")
    (let ((buffer (current-buffer)))
      (should (equal mevedel-lsp-artifact--id picture))
      (should buffer-read-only)
      (should (string-match-p "\\`\\[dot\\.png: [0-9]+ bytes\\]\\'" (mevedel-art-test--text buffer)))
      (should (string-match-p "ERT picture · an image" (mevedel-art-test--header buffer))))))

(ert-deftest mevedel-lsp-test-artifact-max-versions-setting ()
  "`:artifactMaxVersions' in `mevedel-lsp-settings' reaches the server: the
versions list keeps that many, the newest."
  (unwind-protect
      (let ((listing (mevedel-art-test--list)))
        (customize-set-variable 'mevedel-lsp-settings '(:artifactMaxVersions 2))
        (mevedel-art-test--answering '("ERT versions") nil
          (mevedel-art-test--press listing "n"))
        (let ((item (current-buffer)))
          (dolist (text '("one\n" "two\n"))
            (mevedel-art-test--set-text item text)
            (mevedel-art-test--press item "C-x C-s")
            (mevedel-art-test--press listing "s" "ERT versions")))
        (mevedel-art-test--press listing "v" "ERT versions")
        (let ((shown (mevedel-art-test--text (current-buffer))))
          (mevedel-test--log "versions:\n%s" shown)
          (should (string-match-p "\\` +3 .* saved +4 .*\n +2 .* saved +4 .*\n\\'" shown))))
    (customize-set-variable 'mevedel-lsp-settings nil)))

(defun mevedel-art-test--path-uri (path)
  (if (fboundp 'eglot-path-to-uri) (eglot-path-to-uri path) (with-no-warnings (eglot--path-to-uri path))))

(defun mevedel-art-test--other-server (&optional editor)
  "A second mevedel-lsp process of the test workspace, initialized: a
client of its own, as another machine's editor would be (EDITOR: the
name it gives as its clientInfo, as another editor on this machine)."
  (let* ((process (make-process :name "other mevedel-lsp" :command mevedel-lsp-server-command
                                :connection-type 'pipe :coding 'utf-8-emacs-unix :noquery t
                                :stderr (get-buffer-create " *other mevedel-lsp stderr*")))
         (connection (make-instance 'jsonrpc-process-connection
                                    :name "other mevedel-lsp" :process process
                                    :request-dispatcher
                                    (lambda (_connection method params)
                                      (if (eq method 'workspace/configuration)
                                          (make-vector (length (plist-get params :items)) nil)
                                        nil))
                                    :notification-dispatcher #'ignore))
         (uri (mevedel-art-test--path-uri (directory-file-name mevedel-test-root))))
    ;; Starting takes as long as eglot is given to connect the first one
    ;; (jsonrpc's default 10 seconds was too short on a loaded machine).
    (jsonrpc-request connection :initialize
                     (list :processId (emacs-pid) :rootUri uri
                           :workspaceFolders (vector (list :uri uri :name "project"))
                           :capabilities (make-hash-table)
                           :clientInfo (list :name (or editor "other editor") :version "1.0"))
                     :timeout eglot-connect-timeout)
    (jsonrpc-notify connection :initialized (make-hash-table))
    connection))

(ert-deftest mevedel-lsp-test-artifact-held-by-another-server ()
  "An item another server process holds is listed with its holder and opens
read-only, naming the holder; a save is refused saying why; asking for it
hands it over, and the buffer turns writable."
  (let ((other (mevedel-art-test--other-server))
        (listing (mevedel-art-test--list)))
    (unwind-protect
        (let* ((id (plist-get (jsonrpc-request other :mevedel/artifact/create
                                               (list :kind "document" :title "ERT held"))
                              :id))
               (base (plist-get (jsonrpc-request other :mevedel/artifact/read (list :id id)) :revision)))
          (jsonrpc-request other :mevedel/artifact/write
                           (list :id id :content "# Held\n\nwritten elsewhere\n" :baseRevision base))
          (with-current-buffer listing (revert-buffer))
          (let* ((read (mevedel-art-test--read id))
                 (holder (plist-get read :holder))
                 (line (mevedel-art-test--line-of listing "ERT held")))
            (mevedel-test--log "held: %s" line)
            ;; Named by the other server's editor (its clientInfo), pid and host.
            (should (string-match-p (format "\\`other editor 1.0 (pid [0-9]+) on %s\\'" (regexp-quote (plist-get read :holderHost)))
                                    holder))
            (should (string-match-p "ERT held .* other editor 1.0 (pid" line))
            (mevedel-art-test--press listing "RET" "ERT held")
            (let ((item (current-buffer)))
              (should (equal (mevedel-art-test--text item) "# Held\n\nwritten elsewhere\n"))
              (should buffer-read-only)
              (should (string-match-p (format "ERT held is read-only here: %s holds it" (regexp-quote holder))
                                      (mevedel-art-test--header item)))
              (should-error (with-current-buffer item (insert "x")) :type 'buffer-read-only)
              ;; Made writable by hand (C-x C-q), the save is refused: the
              ;; server's words, the text kept.
              (with-current-buffer item
                (let ((inhibit-read-only t)) (goto-char (point-max)) (insert "mine\n")))
              (setq mevedel-art-test--asked nil)
              (let ((err (should-error (mevedel-art-test--answering nil '(nil)
                                         (mevedel-art-test--press item "C-x C-s"))
                                       :type 'user-error)))
                (mevedel-test--log "refused: %s" (cadr err))
                (should (string-match-p "another server process holds it" (cadr err))))
              (should (equal (mevedel-art-test--content id) "# Held\n\nwritten elsewhere\n"))
              (should (equal (mevedel-art-test--text item) "# Held\n\nwritten elsewhere\nmine\n"))
              (with-current-buffer item (revert-buffer nil t))
              (should buffer-read-only)
              ;; h asks for it; the other server hands it over once idle, and
              ;; the buffer turns writable.
              (mevedel-art-test--press listing "h" "ERT held")
              (should (mevedel-test--contains "*Messages*" (format "asked %s to hand ERT held over" holder)))
              (mevedel-test--wait (lambda () (not (buffer-local-value 'buffer-read-only item)))
                                  "the hand-over" 90)
              (mevedel-art-test--set-text item "# Held\n\nwritten here\n")
              (mevedel-art-test--press item "C-x C-s")
              (should (equal (mevedel-art-test--content id) "# Held\n\nwritten here\n")))))
      (ignore-errors (jsonrpc-request other :shutdown nil))
      (ignore-errors (jsonrpc-notify other :exit nil))
      (jsonrpc-shutdown other))))

;; Here the other server stands for a second editor on this machine: the
;; first editor's server is told by its watch of the item, not by a save.
(ert-deftest mevedel-lsp-test-artifact-taken-elsewhere-turns-read-only ()
  "An open item buffer with unsaved edits turns read-only naming the other
editor once that editor's server writes the item, shows the new text, and
keeps the edits in a buffer of their own; once the other editor exits it is
writable again; C-x k on unsaved edits asks; the list keeps its row."
  (let* ((other (mevedel-art-test--other-server "Second editor"))
         (listing (mevedel-art-test--list))
         (id (plist-get (mevedel-test--call :mevedel/artifact/create :kind "document" :title "ERT shared"
                                            :content "# Shared\n")
                        :id)))
    (unwind-protect
        (let ((item (mevedel-lsp-artifact-buffer id)))
          (should-not (buffer-local-value 'buffer-read-only item))
          (with-current-buffer item (goto-char (point-max)) (insert "my unsaved line\n"))
          (jsonrpc-request other :mevedel/artifact/write (list :id id :content "# Shared\n\nwritten by the second editor\n"))
          ;; Told by the server's watch: no save, no poll of ours.
          (mevedel-test--wait (lambda () (buffer-local-value 'buffer-read-only item))
                              "the buffer to turn read-only once the other editor wrote")
          (should (equal (mevedel-art-test--text item) "# Shared\n\nwritten by the second editor\n"))
          (should-not (buffer-modified-p item))
          (mevedel-test--log "header: %s" (mevedel-art-test--header item))
          (should (string-match-p "ERT shared is read-only here: Second editor 1.0 (pid [0-9]+) on .* holds it"
                                  (mevedel-art-test--header item)))
          (let ((kept (get-buffer "*mevedel unsaved ERT shared*")))
            (should kept)
            (should (equal (mevedel-art-test--text kept) "# Shared\nmy unsaved line\n")))
          (should (mevedel-test--contains "*Messages*" "ERT shared is held by Second editor 1.0"))
          ;; The list names the holder's editor too.
          (with-current-buffer listing (revert-buffer))
          (should (string-match-p "Second editor 1.0 (pid" (mevedel-art-test--line-of listing "ERT shared")))
          ;; The other editor exits: its server hands the item back, and the
          ;; buffer turns writable.
          (ignore-errors (jsonrpc-request other :shutdown nil))
          (ignore-errors (jsonrpc-notify other :exit nil))
          (mevedel-test--wait (lambda () (not (buffer-local-value 'buffer-read-only item)))
                              "the buffer to turn writable once the other editor exited")
          ;; C-x k with unsaved edits asks; declined, the buffer stays.
          (with-current-buffer item (goto-char (point-max)) (insert "more\n"))
          (setq mevedel-art-test--asked nil)
          (mevedel-art-test--answering nil '(nil) (with-current-buffer item (kill-buffer item)))
          (should (buffer-live-p item))
          (should (string-match-p "unsaved edits of ERT shared; kill it anyway" (car mevedel-art-test--asked)))
          (mevedel-art-test--answering nil '(t) (with-current-buffer item (kill-buffer item)))
          (should-not (buffer-live-p item))
          ;; s, d and a on a row that is not the first leave the cursor on it.
          (mevedel-test--call :mevedel/artifact/create :kind "document" :title "ERT a first row")
          (with-current-buffer listing (revert-buffer))
          (dolist (key '("s" "d" "a"))
            (mevedel-art-test--press listing key "ERT shared")
            (with-current-buffer listing
              (should (string-match-p "ERT shared" (buffer-substring (line-beginning-position) (line-end-position)))))))
      (ignore-errors (jsonrpc-request other :shutdown nil))
      (ignore-errors (jsonrpc-notify other :exit nil))
      (jsonrpc-shutdown other))))

(provide 'mevedel-lsp-artifacts-test)
;;; mevedel-lsp-artifacts-test.el ends here
