;;; first-run.el --- What a new user's first file shows, after the documented setup  -*- lexical-binding: t; -*-

;; Run by tests/clients/test_emacs.py as
;;   emacs --batch -q -l INIT -l first-run.el
;; where INIT is an init file taken verbatim from docs/client-emacs.md, and
;; MEVEDEL_TEST_VISIT names the file to open.  It opens the file as
;; find-file does, runs the command loop's hook once (eglot connects from
;; it), waits for eglot to manage the buffer, and prints one line of facts
;; for the test to check.

;;; Code:

(let* ((file (getenv "MEVEDEL_TEST_VISIT"))
       (buffer (find-file file))
       (deadline (+ (float-time) 60)))
  (with-current-buffer buffer
    (run-hooks 'post-command-hook)
    (while (and (not (eglot-managed-p)) (< (float-time) deadline))
      (accept-process-output nil 0.05))
    (princ (format "FIRST-RUN mode=%s managed=%s server=%s key=%s\n"
                   major-mode
                   (and (eglot-managed-p) t)
                   (and (eglot-current-server) (eieio-object-class-name (eglot-current-server)))
                   (key-binding (kbd "C-M-i"))))
    ;; The server is asked to shut down and must answer; eglot's own 1.5 s
    ;; for the answer is a wait for a core on a loaded machine, not a
    ;; measure of the server (a timeout would fail the whole run).
    (when (eglot-current-server)
      (eglot-shutdown (eglot-current-server) nil 60))))

;;; first-run.el ends here
