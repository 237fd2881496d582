"""``mevedel-lsp``: start the language server on stdio (default) or TCP.

However the server ends, it runs its exit sequence (``MevedelLanguageServer.stop``:
the exit hooks, then every open session saved and released, bounded in time)
before the process exits:

- ``shutdown`` runs it, ``exit`` waits for it (or runs it when no shutdown
  came); status 0, or 1 for an exit without shutdown (the LSP rule);
- end of input (the editor closed the pipe or the TCP connection): status 0
  (1 when serving failed otherwise, say the TCP port is taken);
- SIGTERM, SIGHUP or SIGINT: status 0, since the server stopped as asked and
  cleanly (editors read a non-zero status as a crash); a second signal while
  stopping is ignored, the sequence is bounded anyway.

Once the sequence is over the process ends at once with that status: it
waits neither for what a step that gave up on its time limit left running
nor for anything else left (tasks, worker threads), which the event loop's
and the interpreter's teardown would wait for without a bound.

Nothing of the server is imported before the arguments are read: the
modules (pygls and lsprotocol with them, most of a start) load inside
``main``, with the cyclic collector's older generations held off
(``loading.py``: the server lives on, so its young garbage is collected)
and asyncio's TLS support left to its first use (``tls_on_demand.py``); the
serving itself is ``serving.py``.
"""

from __future__ import annotations

import argparse
import logging
import sys

from ..loading import loading
from ..tls_on_demand import defer_tls
from ..version import LSP_NAME, VERSION

#: The feature modules of this package the server is built with, in the
#: order they register (each has ``register(ls)``). A new feature is a new
#: module named here.
FEATURES = (
    "configuration", "completion", "hover", "definition", "diagnostics", "resources", "sessions",
    "lifecycle", "control", "follow", "agents", "agent_options", "prompt_queue", "mcp", "artifacts", "input_history",
)


def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"--tcp expects HOST:PORT (like 127.0.0.1:2087), got {text!r}")
    return host.strip("[]"), int(port)


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=LSP_NAME, description="Language server for mevedel resource addresses.")
    transport = parser.add_mutually_exclusive_group()
    transport.add_argument("--stdio", action="store_true", help="talk LSP on stdin/stdout (the default)")
    transport.add_argument("--tcp", metavar="HOST:PORT", type=_host_port, help="listen for one LSP client on HOST:PORT")
    parser.add_argument("--log-file", metavar="PATH", help="write the server log to PATH (default: stderr)")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.add_argument("--version", action="version", version=f"{LSP_NAME} {VERSION}")
    return parser.parse_args(argv)


def _configure_logging(log_file: str | None, level: str) -> None:
    # stdout carries the protocol, so the log never goes there.
    handler: logging.Handler = logging.FileHandler(log_file, encoding="utf-8") if log_file else logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # pygls logs every message body at INFO; that is debugging detail.
    logging.getLogger("pygls").setLevel(max(logging.WARNING, logging.getLevelName(level)))


def main(argv: list[str] | None = None) -> None:
    arguments = parse_arguments(argv)
    try:
        _configure_logging(arguments.log_file, arguments.log_level)
    except OSError as error:
        sys.exit(f"{LSP_NAME}: cannot open log file {arguments.log_file}: {error.strerror}")
    defer_tls()
    with loading(young=True):
        from .server import build_server
        from .serving import serve, stdio_connection, tcp_connection

        server = build_server(FEATURES)
    connect = tcp_connection(*arguments.tcp) if arguments.tcp is not None else stdio_connection
    sys.exit(serve(server, connect))
