"""The mevedel LSP extension: attrs classes for every custom message, the
method names, and the converter that puts them on the wire. No I/O.

The names below are imported from their modules when first read (a
module ``__getattr__``): importing the package, or one of its modules,
creates no message class a process does not use (see ``catalog``)."""

import importlib
from typing import Any

# Eager: the submodule ``converter`` shares its name with the converter it
# defines, and the package attribute must be the latter (an import of the
# submodule after this one leaves the attribute alone).
from .converter import converter as converter
from .converter import describe_structure_error as describe_structure_error
from .converter import make_converter as make_converter
from .converter import wire_name as wire_name

#: Each exported name -> the module of this package that defines it.
_HOMES = {
    **dict.fromkeys(("agent", "follow", "lifecycle", "methods", "session"), ""),
    **dict.fromkeys(("DescribeParams", "DescribeResult"), "address"),
    **dict.fromkeys(("COMMANDS", "NOTIFICATIONS", "REQUESTS", "SHARED_TYPES", "Message"), "catalog"),
    **dict.fromkeys(("ErrorData", "error_code"), "errors"),
    **dict.fromkeys(
        (
            "ApplyPatchParams",
            "ApplyPatchResult",
            "ContextLine",
            "GlobParams",
            "GlobResult",
            "GrepMatch",
            "GrepParams",
            "GrepResult",
            "PatchFileChange",
            "ReadParams",
            "ReadResult",
            "TruncatedLine",
        ),
        "resource",
    ),
    **dict.fromkeys(
        (
            "DiagnosticsSettings",
            "McpServerSetting",
            "MemoryRootSetting",
            "SessionWatchSettings",
            "Settings",
            "SkillRootSetting",
        ),
        "settings",
    ),
}

__all__ = sorted([*_HOMES, "converter", "describe_structure_error", "make_converter", "wire_name"])


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if home == "":
        return importlib.import_module(f"{__name__}.{name}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
