"""The remote program as it travels: one compressed script on standard
input, started by a short constant command.

The script registers :mod:`.wire`, :mod:`.executor` and
:mod:`.remote_program` from their own source text under stand-alone module
names and runs the remote program's ``main``. Nothing is installed or cached
on the target, so a target always runs exactly the code of this client, and
the command line stays far below any argument limit whatever the request
carries.

Compiling that source is most of a program's remote cost after the
interpreter's own start (the executor alone is ~30 KB of Python). When the
target's interpreter reports the bytecode magic number of this one (it does
when the root is pinned), :func:`compiled_script` carries the same modules
as ``marshal``-ed code objects instead, compiled here once: the same code,
without the remote compile. It travels as ``marshal`` bytes, not as source
text spelling them: as a ``bytes`` literal in a script the same code was
three times the size and the remote side had to decompress and compile
that script (about 10 ms of CPU a program, half its remote cost beyond
the interpreter's start). Any other interpreter gets the source.
"""

from __future__ import annotations

import functools
import importlib.util
import marshal
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


#: The bytecode magic number of this interpreter: a target reporting the
#: same one can run :func:`compiled_script`.
BYTECODE_MAGIC = bytes(importlib.util.MAGIC_NUMBER)

#: Runs in the bootstrap's namespace, where the bootstrap left ``m``: the
#: modules' (name, code object) pairs.
_COMPILED_LOADER = """\
import sys, types
for name, code in m:
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(code, module.__dict__)
sys.exit(sys.modules['mevedel_remote'].main())
"""


@functools.cache
def compiled_script() -> bytes:
    """The loader and every module as code objects compiled here, in one
    compressed ``marshal`` of (loader, modules); only for a target whose
    interpreter reported :data:`BYTECODE_MAGIC`."""
    modules = []
    for name, module in _MODULES:
        source = Path(module.__file__ or "").read_text(encoding="utf-8")
        modules.append((name, compile(source, f"<{name}>", "exec", dont_inherit=True)))
    loader = compile(_COMPILED_LOADER, "<mevedel_loader>", "exec", dont_inherit=True)
    return zlib.compress(marshal.dumps((loader, tuple(modules))), 9)


@functools.cache
def remote_command(python: str = "python3", compiled: bool = False) -> str:
    """The shell command that runs the script (``compiled``: the
    :func:`compiled_script`): isolated (``-I``: no ``PYTHON*`` variables, no
    user site) and without ``site`` (``-S``)."""
    if compiled:
        size = len(compiled_script())
        bootstrap = f"import sys,zlib,marshal;l,m=marshal.loads(zlib.decompress(sys.stdin.buffer.read({size})));exec(l)"
    else:
        size = len(remote_script())
        bootstrap = f"import sys,zlib;exec(zlib.decompress(sys.stdin.buffer.read({size})))"
    return f"{shlex.quote(python)} -I -S -c {shlex.quote(bootstrap)}"
