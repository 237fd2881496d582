"""The mevedel LSP extension: attrs classes for every custom message, the
method names, and the converter that puts them on the wire. No I/O."""

from . import agent, follow, lifecycle, methods, session
from .address import DescribeParams, DescribeResult
from .catalog import COMMANDS, NOTIFICATIONS, REQUESTS, SHARED_TYPES, Message
from .converter import converter, describe_structure_error, make_converter, wire_name
from .errors import ErrorData, error_code
from .resource import (
    ApplyPatchParams,
    ApplyPatchResult,
    ContextLine,
    GlobParams,
    GlobResult,
    GrepMatch,
    GrepParams,
    GrepResult,
    PatchFileChange,
    ReadParams,
    ReadResult,
    TruncatedLine,
)
from .settings import (
    DiagnosticsSettings,
    McpServerSetting,
    MemoryRootSetting,
    SessionWatchSettings,
    Settings,
    SkillRootSetting,
)

__all__ = [
    "COMMANDS",
    "NOTIFICATIONS",
    "REQUESTS",
    "SHARED_TYPES",
    "ApplyPatchParams",
    "ApplyPatchResult",
    "ContextLine",
    "DescribeParams",
    "DescribeResult",
    "DiagnosticsSettings",
    "ErrorData",
    "GlobParams",
    "GlobResult",
    "GrepMatch",
    "GrepParams",
    "GrepResult",
    "McpServerSetting",
    "MemoryRootSetting",
    "Message",
    "PatchFileChange",
    "ReadParams",
    "ReadResult",
    "SessionWatchSettings",
    "Settings",
    "SkillRootSetting",
    "TruncatedLine",
    "converter",
    "describe_structure_error",
    "error_code",
    "make_converter",
    "agent",
    "follow",
    "lifecycle",
    "methods",
    "session",
    "wire_name",
]
