"""A package's public names, each imported from its module on first use
(PEP 562): a package ``__init__`` that imported every submodule made
importing any one of them (``store.errors``, say) load them all, which was
most of a short CLI command's start-up."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(namespace: dict[str, Any], exports: Mapping[str, tuple[str, ...]]) -> tuple[Callable, Callable, list[str]]:
    """``(__getattr__, __dir__, __all__)`` for the package whose globals are
    ``namespace``; ``exports`` maps a relative module name to the names it
    provides."""
    package = namespace["__name__"]
    where = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value  # the next lookup is a plain one
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(where))

    return __getattr__, __dir__, list(where)
