"""Runs ``mevedel ARGS`` with every SSH round trip counted (bench only).

``bench_ssh_cli.py`` starts the CLI through this file: it wraps
``SshTarget._exchange`` (one call is one remote program, whatever process
serves it) and, when the command ends, writes to ``$MEVEDEL_BENCH_PROGRAMS``
one JSON line per program: its kind (pin, program), its operations' names
and the first caller outside ``targets/`` (where to look to fold it away).
The command itself runs unchanged."""

from __future__ import annotations

import atexit
import json
import os
import sys
import traceback

from mevedel_server.targets.ssh import SshTarget

_programs: list[dict] = []
_exchange = SshTarget._exchange


def _caller() -> str:
    for frame in reversed(traceback.extract_stack()[:-2]):
        name = frame.filename.replace(os.sep, "/")
        if "mevedel_server/" in name and "/targets/" not in name:
            return f"{name.split('mevedel_server/')[-1]}:{frame.lineno} {frame.name}"
    return "?"


def _names(request: list) -> list[str]:
    operations = request[-1] if request and request[0] == "program" else request[3] if len(request) > 3 else []
    names = []
    for operation in operations if isinstance(operations, list) else []:
        names.append(str(operation[0]) if isinstance(operation, (list, tuple)) and operation else "?")
    return names


async def _counted(self, request: list, *args, **kwargs) -> list:
    _programs.append({"kind": str(request[0]), "operations": _names(request), "caller": _caller()})
    return await _exchange(self, request, *args, **kwargs)


def _save() -> None:
    path = os.environ.get("MEVEDEL_BENCH_PROGRAMS")
    if path:
        with open(path, "w", encoding="utf-8") as out:
            for program in _programs:
                out.write(json.dumps(program) + "\n")


async def _command(self, argv, *args, **kwargs):
    _programs.append({"kind": "command", "operations": [str(argv[0]) if argv else "?"], "caller": _caller()})
    return await _run_command(self, argv, *args, **kwargs)


_run_command = SshTarget.run_command
SshTarget._exchange = _counted
SshTarget.run_command = _command
atexit.register(_save)

if __name__ == "__main__":
    from mevedel_server.cli.main import main

    sys.argv[0] = "mevedel"
    sys.exit(main())
