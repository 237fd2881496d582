"""The remote program as it travels: one compressed script on standard
input, started by a short constant command.

The script registers :mod:`.wire`, :mod:`.executor` and
:mod:`.remote_program` from their own source text under stand-alone module
names and runs the remote program's ``main``. Nothing is installed or cached
on the target, so a target always runs exactly the code of this client, and
the command line stays far below any argument limit whatever the request
carries.
"""

from __future__ import annotations

import functools
import shlex
import zlib
from pathlib import Path

from . import executor, remote_program, wire

_MODULES = (("mevedel_wire", wire), ("mevedel_executor", executor), ("mevedel_remote", remote_program))

_LOADER = """\
import sys, types
def _load(name, source):
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(compile(source, "<" + name + ">", "exec"), module.__dict__)
    return module
"""


@functools.cache
def remote_script() -> bytes:
    """The compressed script the bootstrap command reads and runs."""
    parts = [_LOADER]
    for name, module in _MODULES:
        source = Path(module.__file__ or "").read_text(encoding="utf-8")
        parts.append(f"_load({name!r}, {source!r})\n")
    parts.append("sys.exit(sys.modules['mevedel_remote'].main())\n")
    return zlib.compress("".join(parts).encode("utf-8"), 9)


@functools.cache
def remote_command(python: str = "python3") -> str:
    """The shell command that runs the script: isolated (``-I``: no
    ``PYTHON*`` variables, no user site) and without ``site`` (``-S``)."""
    bootstrap = f"import sys,zlib;exec(zlib.decompress(sys.stdin.buffer.read({len(remote_script())})))"
    return f"{shlex.quote(python)} -I -S -c {shlex.quote(bootstrap)}"
