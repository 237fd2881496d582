"""``mevedel-lsp``: start the language server on stdio (default) or TCP."""

from __future__ import annotations

import argparse
import logging
import sys

from .server import NAME, build_server, server_version


def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"--tcp expects HOST:PORT (like 127.0.0.1:2087), got {text!r}")
    return host.strip("[]"), int(port)


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=NAME, description="Language server for mevedel resource addresses.")
    transport = parser.add_mutually_exclusive_group()
    transport.add_argument("--stdio", action="store_true", help="talk LSP on stdin/stdout (the default)")
    transport.add_argument("--tcp", metavar="HOST:PORT", type=_host_port, help="listen for one LSP client on HOST:PORT")
    parser.add_argument("--log-file", metavar="PATH", help="write the server log to PATH (default: stderr)")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.add_argument("--version", action="version", version=f"{NAME} {server_version()}")
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
        sys.exit(f"{NAME}: cannot open log file {arguments.log_file}: {error.strerror}")
    server = build_server()
    if arguments.tcp is not None:
        host, port = arguments.tcp
        server.start_tcp(host, port)
    else:
        server.start_io()
