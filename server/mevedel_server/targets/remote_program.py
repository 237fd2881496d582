"""The program a remote target runs: one process per control program.

The SSH target starts ``python3`` on the target and sends, on standard input,
this source together with :mod:`.wire` and :mod:`.executor` (see
:mod:`.remote_bundle`), then one request frame. This program reads the whole
request and checks its tail *before* it touches anything, so a request cut
short by a dropped channel never runs even partly; it then answers with one
frame carrying the request's nonce on standard output. Standard error is for
diagnostics only and is never read as a result; its first line announces the
process id (``\\0mevedel-pid N``), so that a client that gives up on a
program stuck on the host can end the process from another channel.

Requests and answers (lists, see :mod:`.wire` for the encoding)::

    ["pin", root]                          -> ["pinned", abs_root, dev, ino, interpreter, magic]
    ["program", abs_root, dev, ino, lock, ops] -> ["done", results, stopped_at]
    ["pin", root, lock, ops]               -> ["pinned", abs_root, dev, ino, interpreter, magic,
                                               "done", results, stopped_at]
                                              or [..., magic, "refused", kind, path, reason]
                                              (the first program of a target: pinned and run
                                              in one process, one round trip)
    any refused root or lock directory     -> ["refused", kind, path, reason]
    anything else going wrong              -> ["error", reason]

Standard library only, Python 3.7 compatible; it runs remotely and, in the
fault-injection tests, in-process behind an asyncssh server.
"""

from __future__ import annotations

import os
import sys

try:
    from . import executor, wire
except ImportError:  # running remotely: the loader registered them by these names
    import mevedel_executor as executor  # type: ignore[no-redef]
    import mevedel_wire as wire  # type: ignore[no-redef]


def answer(request):
    """The answer value for one decoded request value."""
    try:
        kind = request[0]
        if kind == "pin":
            root = os.path.abspath(os.path.expanduser(request[1]))
            dev, ino = executor.pin_root(root)
            # The interpreter's real path lets later programs skip whatever
            # wrapper (a version-manager shim, say) the command name led to.
            # The bytecode magic number says whether this interpreter can run
            # code the client compiled (see remote_bundle.compiled_script).
            bootstrap = sys.modules.get("_frozen_importlib_external")
            magic = bytes(getattr(bootstrap, "MAGIC_NUMBER", b""))
            pinned = ["pinned", root, dev, ino, sys.executable or "", magic]
            if len(request) == 4:
                # The program's own refusal (its lock directory) is its
                # answer, told apart from a refused root.
                try:
                    pinned += ["done", *_run(root, dev, ino, request[2], request[3])]
                except executor.ProgramRefused as refusal:
                    pinned += ["refused", refusal.kind, refusal.path, refusal.reason]
            return pinned
        if kind == "program":
            _kind, root, dev, ino, lock, operations = request
            results, stopped_at = _run(root, dev, ino, lock, operations)
            return ["done", results, stopped_at]
        return ["error", "unknown request %r" % (kind,)]
    except executor.ProgramRefused as refusal:
        return ["refused", refusal.kind, refusal.path, refusal.reason]
    except Exception as exc:  # reported, never mistaken for a result
        return ["error", "%s: %s" % (type(exc).__name__, exc)]


def _run(root, dev, ino, lock, operations):
    runner = executor.Executor(root, (dev, ino))
    plain = [(op[0], op[1], bool(op[2]), op[3], len(op) > 4 and bool(op[4])) for op in operations]
    results, stopped_at = runner.run(plain, lock)
    return [list(result) for result in results], stopped_at


def serve(read, write):
    """Read one request frame with ``read``, write its answer with
    ``write``. Returns the process exit status."""
    try:
        nonce, request = wire.read_frame(read)
    except wire.FrameError as exc:
        sys.stderr.write("mevedel remote program: %s\n" % exc)
        return 2
    response = answer(request)
    for chunk in wire.frame_chunks(nonce, response):
        write(chunk)
    return 0


def main():
    # Before the request is read: a process stuck later (a hung mount, a
    # SIGSTOP) is ended by this id, the one thing of it the client can name.
    os.write(2, b"\0mevedel-pid %d\n" % os.getpid())
    stdout = sys.stdout.buffer
    status = serve(sys.stdin.buffer.read, stdout.write)
    stdout.flush()
    sys.stderr.flush()
    # The answer is out and every descriptor the program opened is closed:
    # the interpreter's teardown would only delay the exit status the
    # client waits for before it trusts the answer.
    os._exit(status)
