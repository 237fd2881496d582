;;; mevedel-lsp-review-test.el --- ERT tests of the review buffer against the real server and a scripted agent  -*- lexical-binding: t; -*-

;; Run by tests/clients/test_emacs.py with MEVEDEL_TEST_AGENT_COMMAND set
;; (the chat tests' helpers and server are shared).  A scripted agent's turn
;; writes a file through fs/write_text_file and runs a shell command that
;; adds, deletes, renames and chmods; the review, opened from the turns list
;; and from the chat with their keys, shows each of those changes, `e'
;; compares a file's sides in ediff and `g' reads the diff again; `r'
;; restores one path (after showing what that does and asking).

;;; Code:

(require 'ert)
(require 'ediff)
(require 'mevedel-lsp)

(unless (fboundp 'mevedel-chat-test--script)
  (load (expand-file-name "mevedel-lsp-chat-test.el" (file-name-directory (or load-file-name buffer-file-name)))))

(defconst mevedel-review-test--shell
  (concat "set -e; chmod 755 run.sh; mv old.txt renamed.txt; rm gone.txt; mkdir built; "
          "ln -s app.py link.py; printf 'new\\n' > added.txt; printf '\\000\\001\\002binary' > blob.bin; rmdir emptydir")
  "The turn's shell command: a chmod, a rename, a deletion, a directory, a
link, a text and a binary file added, a directory removed.")

(defun mevedel-review-test--goto (buffer text)
  "Put point of BUFFER (shown in the selected window) at the start of TEXT."
  (pop-to-buffer buffer)
  (goto-char (point-min))
  (search-forward text)
  (goto-char (match-beginning 0)))

(ert-deftest mevedel-lsp-test-review-a-turn-from-the-turns-list-and-the-chat ()
  "The review of a turn names each change its fs write and its shell command
made, in a read-only `diff-mode' buffer; `e' opens ediff of a file's
before and after texts (and says why a binary file has none); `g' reads
the diff again; from the chat, a turn's review and, with a prefix
argument, a range's."
  (make-directory (expand-file-name "emptydir" mevedel-test-root) t)
  (mevedel-chat-test--write "app.py" "print('one')\nprint('two')\n")
  (mevedel-chat-test--write "run.sh" "#!/bin/sh\necho run\n")
  (set-file-modes (expand-file-name "run.sh" mevedel-test-root) #o644)
  (mevedel-chat-test--write "old.txt" "the same bytes move\n")
  (mevedel-chat-test--write "gone.txt" "bye\n")
  (let* ((script (mevedel-chat-test--script
                  (vector (vector (list :write (list :path "app.py" :content "print('one')\nprint('TWO')\nprint('three')\n"))
                                  (list :terminal (list :command "sh" :args (vector "-c" mevedel-review-test--shell)))
                                  (list :say "changed things"))
                          (vector (list :write (list :path "added.txt" :content "new\nand more\n"))
                                  (list :say "added more")))))
         (session (mevedel-chat-test--session "ERT review")))
    (mevedel-chat-test--with-settings
      (mevedel-chat-test--configure script)
      (let ((chat (mevedel-lsp-chat-send (mevedel-test--server) "Change things" :session session)))
        (mevedel-chat-test--wait-idle chat "the first turn to settle")
        (should (mevedel-chat-test--has chat "ran: exit 0"))
        ;; From the turns list: `d' on turn 1.
        (let* ((turns (mevedel-test--from-document #'mevedel-lsp-list-turns session))
               (review (progn (with-current-buffer turns
                                (goto-char (point-min))
                                (while (not (eql (tabulated-list-get-id) 1)) (forward-line 1)))
                              (mevedel-chat-test--press turns "d")))
               (text (mevedel-chat-test--text review)))
          (mevedel-test--log "review:\n%s" text)
          (should (eq review (current-buffer)))
          (should (derived-mode-p 'mevedel-lsp-review-mode))
          (should (derived-mode-p 'diff-mode))
          (should buffer-read-only)
          (should (equal (buffer-name) (format "*mevedel review %s turn 1*" session)))
          (dolist (header '("=== app.py: modified\n--- a/app.py\n+++ b/app.py\n"
                            "=== run.sh: mode changed (644 -> 755)\n"
                            "=== old.txt -> renamed.txt: renamed\n"
                            "=== gone.txt: deleted\n--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n"
                            "=== built: directory created"
                            "=== link.py: link created -> app.py\n"
                            "=== added.txt: added"
                            "=== blob.bin: added"
                            "binary file: 0 -> 9 bytes\n"
                            "=== emptydir: directory removed\n"))
            (should (string-search header text)))
          (should (string-search "-print('two')\n+print('TWO')\n+print('three')\n" text))
          ;; The stat heads the buffer.
          (should (string-match-p "^ 9 paths changed, 3 insertions(\\+), 2 deletions(-)$" text))
          ;; diff-mode reads the buffer: N moves from file diff to file diff.
          (mevedel-review-test--goto review "=== app.py")
          (mevedel-chat-test--press review "N")
          (should (looking-at-p "--- a/app.py\n"))
          (mevedel-chat-test--press review "N")
          (should (looking-at-p "--- a/gone.txt\n"))
          ;; `e' on app.py: ediff of the texts before and after the turn.
          (mevedel-review-test--goto review "+print('TWO')")
          (mevedel-chat-test--press review "e")
          (should ediff-control-buffer)
          (let ((control ediff-control-buffer))
            (with-current-buffer control
              (should (equal (mevedel-chat-test--text ediff-buffer-A) "print('one')\nprint('two')\n"))
              (should (equal (mevedel-chat-test--text ediff-buffer-B) "print('one')\nprint('TWO')\nprint('three')\n"))
              (should (equal (buffer-name ediff-buffer-A) "*mevedel before turn 1: app.py*"))
              (should (equal (buffer-name ediff-buffer-B) "*mevedel after turn 1: app.py*"))
              (should (with-current-buffer ediff-buffer-A buffer-read-only))
              (should (= ediff-number-of-differences 1))
              (cl-letf (((symbol-function 'y-or-n-p) (lambda (&rest _) t)))
                (ediff-quit nil))))
          ;; A rename compares the old name's text with the new one's.
          (mevedel-review-test--goto review "=== old.txt -> renamed.txt")
          (mevedel-chat-test--press review "e")
          (with-current-buffer ediff-control-buffer
            (should (equal (buffer-name ediff-buffer-A) "*mevedel before turn 1: old.txt*"))
            (should (equal (mevedel-chat-test--text ediff-buffer-B) "the same bytes move\n"))
            (should (= ediff-number-of-differences 0))
            (cl-letf (((symbol-function 'y-or-n-p) (lambda (&rest _) t)))
              (ediff-quit nil)))
          ;; A binary file has no text: `e' says so.
          (mevedel-review-test--goto review "=== blob.bin")
          (let ((err (should-error (mevedel-chat-test--press review "e") :type 'user-error)))
            (should (string-match-p "blob\\.bin: added (mode 644): no text to compare (a binary file)" (cadr err))))
          ;; The second turn, then a review of the latest turn and `g'.
          (let ((latest (mevedel-lsp-review nil nil session)))
            (should (string-search "=== app.py: modified" (mevedel-chat-test--text latest)))
            (mevedel-lsp-chat-send (mevedel-test--server) "Add more" :session session)
            (mevedel-chat-test--wait-idle chat "the second turn to settle")
            (mevedel-chat-test--press latest "g")
            (let ((again (mevedel-chat-test--text latest)))
              (mevedel-test--log "after g:\n%s" again)
              (should (equal (buffer-name latest) (format "*mevedel review %s turn 2*" session)))
              (should (string-search "=== added.txt: modified\n--- a/added.txt\n+++ b/added.txt\n" again))
              (should (string-search "+and more\n" again))
              (should-not (string-search "app.py" again)))))
        ;; From the chat: `d' on turn 2, and C-u d for turns 1..2.
        (mevedel-review-test--goto chat "added more")
        (let ((review (mevedel-chat-test--press chat "d")))
          (should (equal (buffer-name review) (format "*mevedel review %s turn 2*" session))))
        (mevedel-review-test--goto chat "added more")
        (let* ((review (cl-letf (((symbol-function 'read-string) (lambda (&rest _) "1..2")))
                         (let ((current-prefix-arg '(4)))
                           (mevedel-chat-test--press chat "d"))))
               (text (mevedel-chat-test--text review)))
          (mevedel-test--log "range review:\n%s" text)
          (should (equal (buffer-name review) (format "*mevedel review %s turns 1..2*" session)))
          (should (string-search "=== added.txt: added (mode 644)  [turns 1..2]\n--- /dev/null\n+++ b/added.txt\n@@ -0,0 +1,2 @@\n+new\n+and more\n" text))
          (should (string-search "=== app.py: modified  [turn 1]" text)))
        ;; A range that is no range is refused with what it expected.
        (should-error (mevedel-lsp-review--parse-range "two") :type 'user-error)))))

;; Key presses whose answer to `yes-or-no-p' is ANSWER: t, nil, or `quit'
;; (C-g, which signals `quit' from the minibuffer).
(defmacro mevedel-review-test--answering (answer shown &rest body)
  "Run BODY with `yes-or-no-p' answering ANSWER; SHOWN is a symbol bound
to a list of (PROMPT . RESTORE-BUFFER-TEXT) it was asked, newest first."
  (declare (indent 2))
  `(cl-letf (((symbol-function 'yes-or-no-p)
              (lambda (prompt)
                (push (cons prompt (with-current-buffer mevedel-lsp-review-restore-buffer (buffer-string))) ,shown)
                (should (get-buffer-window mevedel-lsp-review-restore-buffer))
                (if (eq ,answer 'quit) (signal 'quit nil) ,answer))))
     ,@body))

(ert-deftest mevedel-lsp-test-review-restore-a-file ()
  "`r' on a path of a range's review shows what restoring it to its state
before the range's first turn that changed it does, and asks; no and C-g
change nothing; yes brings back the file's content or mode as a new turn,
leaves the other files alone and reads the review again."
  (mevedel-chat-test--write "app.py" "print('one')\n")
  (mevedel-chat-test--write "run.sh" "#!/bin/sh\necho run\n")
  (set-file-modes (expand-file-name "run.sh" mevedel-test-root) #o644)
  (mevedel-chat-test--write "other.txt" "other before\n")
  (let* ((script (mevedel-chat-test--script
                  (vector (vector (list :write (list :path "app.py" :content "print('two')\n"))
                                  (list :write (list :path "other.txt" :content "other after\n"))
                                  (list :terminal (list :command "sh" :args (vector "-c" "chmod 755 run.sh")))
                                  (list :say "first"))
                          (vector (list :write (list :path "app.py" :content "print('three')\n"))
                                  (list :say "second")))))
         (session (mevedel-chat-test--session "ERT review restore"))
         (shown nil))
    (mevedel-chat-test--with-settings
      (mevedel-chat-test--configure script)
      (let ((chat (mevedel-lsp-chat-send (mevedel-test--server) "One" :session session)))
        (mevedel-chat-test--wait-idle chat "the first turn to settle")
        (mevedel-lsp-chat-send (mevedel-test--server) "Two" :session session)
        (mevedel-chat-test--wait-idle chat "the second turn to settle")
        (let ((review (mevedel-test--from-document #'mevedel-lsp-review 1 nil session)))
          (should (string-search "=== app.py: modified  [turns 1..2]" (mevedel-chat-test--text review)))
          ;; No: nothing is restored, and the preview said what would be.
          (mevedel-review-test--goto review "=== app.py")
          (should (null (mevedel-review-test--answering nil shown (mevedel-chat-test--press review "r"))))
          (mevedel-test--log "asked %S" (car shown))
          (should (string-match-p "\\`Restore app\\.py to its state before turn 1 (app\\.py: modified)\\? \\'" (caar shown)))
          (should (string-search "=== app.py: modified\n--- a/app.py\n+++ b/app.py\n" (cdar shown)))
          (should (string-search "-print('three')\n+print('one')\n" (cdar shown)))
          (should-not (get-buffer-window mevedel-lsp-review-restore-buffer))
          (should (equal (mevedel-chat-test--file "app.py") "print('three')\n"))
          ;; C-g: nothing either.
          (mevedel-review-test--goto review "=== run.sh")
          (should (eq (condition-case nil
                          (progn (mevedel-review-test--answering 'quit shown (mevedel-chat-test--press review "r")) 'answered)
                        (quit 'quit))
                      'quit))
          (should (string-search "=== run.sh: mode changed (755 -> 644)" (cdar shown)))
          (should (= (file-modes (expand-file-name "run.sh" mevedel-test-root)) #o755))
          ;; Yes: app.py is back, as turn 3; other.txt is untouched.
          (mevedel-review-test--goto review "=== app.py")
          (should (eql (mevedel-review-test--answering t shown (mevedel-chat-test--press review "r")) 3))
          (should (equal (mevedel-chat-test--file "app.py") "print('one')\n"))
          (should (equal (mevedel-chat-test--file "other.txt") "other after\n"))
          (should (= (file-modes (expand-file-name "run.sh" mevedel-test-root)) #o755))
          ;; The review was read again: turns 1.. no longer change app.py.
          (let ((text (mevedel-chat-test--text review)))
            (mevedel-test--log "after the restore:\n%s" text)
            (should-not (string-search "=== app.py" text))
            (should (string-search "=== other.txt: modified" text)))
          ;; Yes on run.sh: its mode is back, its content unchanged.
          (mevedel-review-test--goto review "=== run.sh")
          (should (eql (mevedel-review-test--answering t shown (mevedel-chat-test--press review "r")) 4))
          (should (= (file-modes (expand-file-name "run.sh" mevedel-test-root)) #o644))
          (should (equal (mevedel-chat-test--file "run.sh") "#!/bin/sh\necho run\n"))
          (should (equal (mevedel-chat-test--file "other.txt") "other after\n"))
          ;; Rewind to before turn 3 undoes both restores.
          (mevedel-test--answering t nil (mevedel-lsp-rewind 3 "before" session))
          (should (equal (mevedel-chat-test--file "app.py") "print('three')\n"))
          (should (= (file-modes (expand-file-name "run.sh" mevedel-test-root)) #o755)))))))

;;; mevedel-lsp-review-test.el ends here
