"""The package's version, and the language server's name, written once:
``pyproject.toml`` takes the version from here (hatch's version source), and
the server, the CLI and the tool server read it from here rather than from
the installed distribution's metadata -- ``importlib.metadata`` brings the
email parser and scans ``sys.path``, a cost every server start paid for a
string known when the code was written."""

VERSION = "0.1.0"

#: The language server's name: its command, its ``serverInfo.name``.
LSP_NAME = "mevedel-lsp"
