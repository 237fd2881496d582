"""asyncio's TLS support, loaded by the first thing that uses it.

Importing asyncio imports :mod:`ssl` (OpenSSL's library with it) and
``asyncio.sslproto``, which reads two of ssl's exception classes as it
loads: about 0.6x a bare interpreter's whole start, paid by every command,
while only a connection that speaks TLS needs them -- a listing, a read, a
prompt over a local workspace or SSH never does. So before the command's
modules import asyncio, both modules are entered as stand-ins that import
the real module the first time anything is looked up on them (a context
made, a socket checked against ``ssl.SSLSocket``) and answer from it after.
Nothing is deferred when either is loaded already.
"""

from __future__ import annotations

import _thread
import importlib
import sys
import types

DEFERRED = ("ssl", "asyncio.sslproto")

# Re-entrant: the real sslproto, loading, looks up ssl's stand-in.
_LOADING = _thread.RLock()


class _OnDemand(types.ModuleType):
    """A module's stand-in until something is looked up on it."""

    def __getattr__(self, name: str) -> object:
        with _LOADING:
            if sys.modules.get(self.__name__) is self:
                del sys.modules[self.__name__]
            real = importlib.import_module(self.__name__)
            # Those that imported the stand-in now find the real
            # module's names on it directly.
            self.__dict__.update(real.__dict__)
        return getattr(real, name)


def defer_tls() -> None:
    """Enter the stand-ins, unless asyncio or ssl is imported already."""
    if any(name in sys.modules for name in ("asyncio", *DEFERRED)):
        return
    for name in DEFERRED:
        sys.modules[name] = _OnDemand(name)
