;;; mevedel-lsp-connect-test.el --- ERT tests of commands while eglot connects  -*- lexical-binding: t; -*-

;; Run by tests/clients/test_emacs.py after mevedel-lsp-test.el (whose
;; helpers it uses), against the real server, in an Emacs of its own: it
;; kills the server.  eglot says "Reconnected!" (or "Waiting in
;; background") once it stops blocking, which `eglot-sync-connect' does at
;; the first output of any process; the server is registered, and manages
;; buffers, only once it answered `initialize'.  A person's command in
;; between waits for it.  With `eglot-sync-connect' nil eglot never
;; blocks, so the command always comes before the answer.

;;; Code:

(require 'ert)
(require 'mevedel-lsp)

(defun mevedel-connect-test--prompt-buffer ()
  "C-c m p as a person presses it; the prompt buffer it shows, closed again."
  (let ((buffer (call-interactively #'mevedel-lsp-prompt)))
    (prog1 (list (buffer-name buffer) (buffer-local-value 'mevedel-lsp--origin-server buffer))
      (with-current-buffer buffer (mevedel-lsp-prompt-abort)))))

(ert-deftest mevedel-lsp-test-connect-a-command-waits-for-the-server-eglot-is-connecting ()
  "C-c m p in a file eglot has only started the server for, and again
right after the server was killed and eglot started another: each time
the prompt buffer opens, through the server once connected (not \"no
mevedel-lsp server is running\")."
  (let* ((eglot-sync-connect nil)
         (eglot-autoreconnect t)
         (started nil)
         ;; Run as eglot makes each server, before its `initialize'.
         (eglot-server-initialized-hook (list (lambda (server) (push server started))))
         (buffer (find-file-noselect mevedel-test-document)))
    (switch-to-buffer buffer)
    (with-current-buffer buffer
      (unless (derived-mode-p 'text-mode) (text-mode))
      (mevedel-lsp-ensure)
      ;; eglot-ensure connects from `post-command-hook'; batch runs no commands.
      (run-hooks 'post-command-hook)
      (let ((first (car started)))
        (should (cl-typep first 'mevedel-lsp-server))
        (should-not (eglot-managed-p))
        (should (equal (mevedel-connect-test--prompt-buffer) (list "*mevedel prompt*" first)))
        (should (eq (eglot-current-server) first))
        (signal-process (process-id (jsonrpc--process first)) 'SIGKILL)
        (mevedel-test--wait (lambda () (and (not (jsonrpc-running-p first)) (cdr started)))
                            "eglot to start another server")
        (let ((second (car started)))
          (should-not (eglot-managed-p))
          (should (equal (mevedel-connect-test--prompt-buffer) (list "*mevedel prompt*" second)))
          (should (eq (eglot-current-server) second))
          (eglot-shutdown second))))))

(provide 'mevedel-lsp-connect-test)
;;; mevedel-lsp-connect-test.el ends here
