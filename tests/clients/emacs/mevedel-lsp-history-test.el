;;; mevedel-lsp-history-test.el --- ERT test of the prompt's input history  -*- lexical-binding: t; -*-

;; Run by tests/clients/test_emacs.py after mevedel-lsp-test.el and
;; mevedel-lsp-chat-test.el (whose helpers it uses), in a workspace whose
;; .mevedel/input-history is corrupt.  M-p and M-n in the prompt buffer step
;; through the prompts sent in the workspace, as the user presses them.

;;; Code:

(require 'ert)
(require 'mevedel-lsp)

(ert-deftest mevedel-lsp-test-history-m-p-and-m-n-step-through-sent-prompts ()
  "A corrupt history is told once (renamed aside by the server); prompts
sent from the prompt buffer come back with M-p, newest first, and M-n
walks forward to the draft; the ends say so."
  (let* ((script (mevedel-chat-test--script
                  (vector (vector (list :say "one")) (vector (list :say "two")))))
         (session (mevedel-chat-test--session "ERT history"))
         (warnings nil))
    (ignore session)
    (mevedel-chat-test--with-settings
      (mevedel-chat-test--configure script)
      (cl-letf (((symbol-function 'display-warning)
                 (lambda (type message &rest _) (when (eq type 'mevedel) (push message warnings)))))
        (let ((prompt (mevedel-test--from-document #'call-interactively #'mevedel-lsp-prompt)))
          ;; Nothing sent yet: the corrupt file was renamed aside, and said.
          (should-error (mevedel-chat-test--press prompt "M-p") :type 'user-error)
          (should (= (length warnings) 1))
          (should (string-match-p "renamed to \\.mevedel/input-history\\.corrupt-" (car warnings)))
          (insert "the first prompt")
          (let ((chat (mevedel-chat-test--press prompt "C-c C-c")))
            (mevedel-chat-test--wait-idle chat "the first turn")
            (let ((again (mevedel-chat-test--press chat "p")))
              (insert "the second\nprompt")
              (mevedel-chat-test--press again "C-c C-c"))
            (mevedel-chat-test--wait-idle chat "the second turn")
            (let ((third (mevedel-chat-test--press chat "p")))
              (insert "my draft")
              (mevedel-chat-test--press third "M-p")
              (should (equal (mevedel-chat-test--text third) "the second\nprompt"))
              (mevedel-chat-test--press third "M-p")
              (should (equal (mevedel-chat-test--text third) "the first prompt"))
              (should-error (mevedel-chat-test--press third "M-p") :type 'user-error)
              (should (equal (mevedel-chat-test--text third) "the first prompt"))
              (mevedel-chat-test--press third "M-n")
              (should (equal (mevedel-chat-test--text third) "the second\nprompt"))
              (mevedel-chat-test--press third "M-n")
              (should (equal (mevedel-chat-test--text third) "my draft"))
              (should-error (mevedel-chat-test--press third "M-n") :type 'user-error)
              (should (= (length warnings) 1))
              (mevedel-chat-test--press third "C-c C-k"))))))))

;;; mevedel-lsp-history-test.el ends here
