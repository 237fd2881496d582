"""The tools ``Read``, ``Glob``, ``Grep``, ``ApplyPatch`` and, within an
agent's turn, ``Agent`` (a sub-agent's turn, run by the context): their schemas,
their argument checks, and the text a model reads back.

Every call is one ``prepare`` / ``execute`` of the resolver with a fresh
context (:class:`~.context.ToolContext`), whose operand is an address or a
plain workspace path. Whatever goes wrong -- a bad argument, a malformed
patch, a refusal, a missing file, an internal failure -- is a
:class:`ToolError` whose text names the authored path or address and the
reason (with the listing that finds the right name where that helps),
never a backing path or a traceback; the server turns it into a tool
result with ``isError``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..addresses import AddressError, Operation
from ..resources import (
    GlobOptions,
    GlobResult,
    GrepOptions,
    GrepResult,
    PatchOptions,
    PatchResult,
    ReadOptions,
    ReadResult,
    counted,
    execute,
    next_step,
    prepare,
    require_writable_session,
)
from .context import ToolContext, ToolRefused, after_project_write
from .persisted_output import MAX_OUTPUT_CHARS, bound_output

_log = logging.getLogger(__name__)

PATH_HELP = (
    "A workspace path (relative to the workspace root, or absolute inside it) or a mevedel resource address "
    "such as work://notes.md, work://shared/, artifact://, mevedel://, history://root."
)


class ToolError(Exception):
    """A tool call that failed; ``text`` is what the model reads."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    schema: dict[str, Any]


def _integer(description: str, minimum: int) -> dict[str, Any]:
    return {"type": "integer", "minimum": minimum, "description": description}


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "Read",
        "Read a file, directory or resource with numbered lines (line number, tab, text). Long output is paged: "
        "the answer ends with the exact call for the next page, and a line longer than a page width with the "
        "char_offset that continues it. A directory or bare address (work://, mevedel://) is a listing.",
        {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": PATH_HELP},
                "offset": _integer("First line to show, from 1 (default 1).", 1),
                "limit": _integer("Lines per page (default 2000).", 1),
                "char_offset": _integer(
                    "Continue one long line (the line given by offset) from this character (default 0).", 0
                ),
            },
            "required": ["path"],
            "additionalProperties": False,
        },
    ),
    ToolSpec(
        "Glob",
        "List the files below a directory or resource whose path (relative to it) matches a glob pattern: "
        "* and ? stay within one path component, ** spans components. Results are paths or addresses you can Read.",
        {
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "Glob over relative paths, e.g. **/*.py (default **/*)."},
                "path": {"type": "string", "description": PATH_HELP + " Default: the workspace root ('.')."},
                "limit": _integer("Most files to list (default 1000).", 1),
            },
            "required": ["pattern"],
            "additionalProperties": False,
        },
    ),
    ToolSpec(
        "Grep",
        "Search files below a path or resource for a Python regular expression, line by line. Each match is "
        "'PATH:LINE:COLUMN: text' with LINE the line number Read shows (Read PATH offset=LINE leads to it).",
        {
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "A Python regular expression."},
                "path": {"type": "string", "description": PATH_HELP + " Default: the workspace root ('.')."},
                "glob": {
                    "type": "string",
                    "description": "Only files whose name (or, with '/', relative path) matches this glob, e.g. *.py.",
                },
                "ignore_case": {"type": "boolean", "description": "Match case-insensitively (default false)."},
                "limit": _integer("Most matching lines to report (default 500).", 1),
                "context_lines": _integer("Lines of context before and after each match (default 0).", 0),
            },
            "required": ["pattern"],
            "additionalProperties": False,
        },
    ),
    ToolSpec(
        "ApplyPatch",
        "Add, change, delete or move files, all or nothing, with one patch:\n"
        "*** Begin Patch\n*** Add File: PATH\n+new line\n*** Update File: PATH\n@@ optional context line\n"
        " unchanged line\n-old line\n+new line\n*** Delete File: PATH\n*** End Patch\n"
        "An Update may be followed by '*** Move to: PATH'. PATH is a workspace path or a writable address "
        "(work://PATH, work://shared/PATH, memory://ROOT-KEY/PATH); one patch may mix them. An artifact's own files "
        "are .mevedel/artifacts/ID/FILE (a file added into a new ID directory creates the artifact; the rest of "
        ".mevedel/ is read-only). If any change does not apply, no file is touched.",
        {
            "type": "object",
            "properties": {"patch": {"type": "string", "description": "The patch, from '*** Begin Patch' to '*** End Patch'."}},
            "required": ["patch"],
            "additionalProperties": False,
        },
    ),
)

#: Offered only where the context can run a sub-agent (an agent's turn the
#: language server or ``mevedel prompt`` drives: its ``delegate``).
AGENT_TOOL = ToolSpec(
    "Agent",
    "Hand a task to another agent and get its final message back. The sub-agent works in the same workspace "
    "and session, and its file changes belong to the current turn (Rewind undoes them with it). It is "
    "retained under 'name': calling again with the same name continues its conversation; a new name starts "
    "a new one. Read agent:// to list retained agents and history://root/NAME for a conversation.",
    {
        "type": "object",
        "properties": {
            "agent": {
                "type": "string",
                "description": "A configured agent's name (default: your own agent). Only for a new name.",
            },
            "name": {
                "type": "string",
                "description": "The retained agent's name: 1-64 of a-z, 0-9, '_' and '-', e.g. 'reviewer'.",
            },
            "prompt": {"type": "string", "description": "The task, complete: the sub-agent sees nothing else of yours."},
        },
        "required": ["name", "prompt"],
        "additionalProperties": False,
    },
)

BY_NAME = {tool.name: tool for tool in (*TOOLS, AGENT_TOOL)}


def tools_for(context: object) -> tuple[ToolSpec, ...]:
    """The tools ``context`` serves: ``Agent`` only where it can delegate."""
    return (*TOOLS, AGENT_TOOL) if callable(getattr(context, "delegate", None)) else TOOLS


# -- errors --------------------------------------------------------------------


def error_text(error: AddressError) -> str:
    """The model-facing text of a resolver error."""
    text = f"{error.authored}: {error.kind.value}: {error.reason}"
    step = next_step(error)
    if step is None:
        return text
    what, operand = step
    if what == "glob":
        return text + "; find the right path with Glob (e.g. pattern '**/NAME*')"
    if what == "list":
        return text + f"; Read {operand} lists what exists"
    return text + f"; Read {operand} for the address documentation"


# -- arguments -----------------------------------------------------------------


def _text_arg(arguments: dict[str, Any], name: str, tool: str, default: str | None = None) -> str:
    value = arguments.get(name, default)
    if value is None:
        raise ToolError(f"{tool}: the argument '{name}' is required")
    if not isinstance(value, str):
        raise ToolError(f"{tool}: the argument '{name}' must be a string, not {type(value).__name__}")
    return value


def _int_arg(arguments: dict[str, Any], name: str, tool: str, default: int) -> int:
    value = arguments.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ToolError(f"{tool}: the argument '{name}' must be a whole number, not {value!r}")
    return value


def _bool_arg(arguments: dict[str, Any], name: str, tool: str) -> bool:
    value = arguments.get(name, False)
    if not isinstance(value, bool):
        raise ToolError(f"{tool}: the argument '{name}' must be true or false, not {value!r}")
    return value


def _unknown(arguments: dict[str, Any], tool: str) -> None:
    known = BY_NAME[tool].schema["properties"]
    extra = sorted(name for name in arguments if name not in known)
    if extra:
        raise ToolError(f"{tool}: unknown argument {', '.join(repr(name) for name in extra)}; it takes {', '.join(known)}")


# -- rendering -----------------------------------------------------------------


def render_read(result: ReadResult) -> str:
    body = result.text
    if result.kind == "empty":
        body = f"({result.canonical} is empty)" if not result.notice else ""
    notice = result.notice
    if len(body) > MAX_OUTPUT_CHARS:
        body, notice = _shorten_page(result)
    return body + (("\n\n" if body else "") + notice if notice else "")


def _shorten_page(result: ReadResult) -> tuple[str, str]:
    """A page too long for one answer, cut to whole lines, with the exact
    call for the rest (and for every long line it shows)."""
    kept: list[str] = []
    size = 0
    for line in result.text.split("\n"):
        if kept and size + len(line) + 1 > MAX_OUTPUT_CHARS:
            break
        kept.append(line)
        size += len(line) + 1
    last = result.start_line + len(kept) - 1
    address = result.address
    notes = [
        line
        for line in (result.notice or "").split("\n")
        if line and not line.startswith("showing lines ") and not (line.startswith("line ") and " continues: Read " in line)
    ]
    notes += [
        f"line {number} continues: Read {address} offset={number} char_offset={resume}"
        for number, resume in result.truncated_lines
        if number <= last
    ]
    notes.append(
        f"showing lines {result.start_line}-{last} of {result.total_lines} (a page is at most {MAX_OUTPUT_CHARS:,} "
        f"characters); next page: Read {address} offset={last + 1}"
    )
    return "\n".join(kept), "\n".join(notes)


def render_glob(result: GlobResult) -> str:
    body = "\n".join(result.matches) if result.matches else f"no files below {result.address} match"
    return body + (f"\n-- {result.notice}" if result.notice else "")


def render_grep(result: GrepResult) -> str:
    lines: list[str] = []
    for match in result.matches:
        for number, text in match.before:
            lines.append(f"{match.address}-{number}- {text}")
        lines.append(f"{match.address}:{match.line}:{match.column}: {match.preview}")
        if match.char_offset:
            lines.append(f"  (line {match.line} from character {match.char_offset}: Read {match.address} offset={match.line} char_offset={match.char_offset})")
        for number, text in match.after:
            lines.append(f"{match.address}-{number}- {text}")
    files = {match.address for match in result.matches}
    summary = (
        f"{counted(len(result.matches), 'matching line')} in {counted(len(files), 'file')} ({result.files_searched} searched)"
        if result.matches
        else f"no match below {result.address} ({counted(result.files_searched, 'file')} searched)"
    )
    out = "\n".join(lines)
    out = f"{out}\n-- {summary}" if out else summary
    return out + (f"\n-- {result.notice}" if result.notice else "")


def render_patch(result: PatchResult) -> str:
    return result.summary()


# -- calls ---------------------------------------------------------------------


async def call(name: str, arguments: dict[str, Any] | None, context: ToolContext) -> str:
    """Run one tool call; its text, or :class:`ToolError`."""
    handler = _HANDLERS.get(name)
    if handler is None:
        raise ToolError(f"unknown tool {name!r}; the tools are {', '.join(tool.name for tool in tools_for(context))}")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise ToolError(f"{name}: the arguments must be an object")
    _unknown(arguments, name)
    if name == "Agent" and not callable(getattr(context, "delegate", None)):
        raise ToolError(
            "Agent: sub-agents run only within an agent's turn that mevedel drives (the language server or "
            "mevedel prompt); this tool server runs no turn"
        )
    try:
        return await handler(arguments, context)
    except ToolError:
        raise
    except AddressError as error:
        raise ToolError(error_text(error)) from None
    except ToolRefused as refused:
        raise ToolError(refused.message) from None
    except Exception as error:  # never a traceback to the model, never a dead server
        _log.exception("internal error in the %s tool", name)
        raise ToolError(f"{name}: internal error ({type(error).__name__}); the call was not completed") from None


async def _read(arguments: dict[str, Any], context: ToolContext) -> str:
    path = _text_arg(arguments, "path", "Read")
    options = ReadOptions(
        offset=_int_arg(arguments, "offset", "Read", 1),
        limit=_int_arg(arguments, "limit", "Read", 2000),
        char_offset=_int_arg(arguments, "char_offset", "Read", 0),
    )
    found = await execute(prepare(Operation.READ, path, options, context.resolver_context()))
    assert isinstance(found, ReadResult)
    return render_read(found)


async def _glob(arguments: dict[str, Any], context: ToolContext) -> str:
    pattern = _text_arg(arguments, "pattern", "Glob")
    path = _text_arg(arguments, "path", "Glob", ".")
    options = GlobOptions(pattern=pattern, limit=_int_arg(arguments, "limit", "Glob", 1000))
    resolver = context.resolver_context()
    found = await execute(prepare(Operation.GLOB, path, options, resolver))
    assert isinstance(found, GlobResult)
    return await bound_output(render_glob(found), "Glob", resolver)


async def _grep(arguments: dict[str, Any], context: ToolContext) -> str:
    pattern = _text_arg(arguments, "pattern", "Grep")
    path = _text_arg(arguments, "path", "Grep", ".")
    glob = arguments.get("glob")
    if glob is not None and not isinstance(glob, str):
        raise ToolError(f"Grep: the argument 'glob' must be a string, not {type(glob).__name__}")
    options = GrepOptions(
        pattern=pattern,
        glob=glob,
        ignore_case=_bool_arg(arguments, "ignore_case", "Grep"),
        limit=_int_arg(arguments, "limit", "Grep", 500),
        context_lines=_int_arg(arguments, "context_lines", "Grep", 0),
    )
    resolver = context.resolver_context()
    found = await execute(prepare(Operation.GREP, path, options, resolver))
    assert isinstance(found, GrepResult)
    return await bound_output(render_grep(found), "Grep", resolver)


async def _apply_patch(arguments: dict[str, Any], context: ToolContext) -> str:
    patch = _text_arg(arguments, "patch", "ApplyPatch")
    resolver = context.resolver_context()
    attempt = prepare(Operation.APPLY_PATCH, patch, PatchOptions(), resolver)
    facts = [fact for fact in attempt.facts if fact.project_path is not None]
    paths = sorted({fact.project_path for fact in facts if fact.project_path})
    if facts:
        # The authority ``execute`` checks first, so that a patch refused
        # for it never reaches the hook (nothing is recorded for it).
        require_writable_session(resolver, facts[0].authored, project=True)
        await context.before_project_write(paths)
    applied = await execute(attempt)
    assert isinstance(applied, PatchResult)
    notes = await after_project_write(context, paths) if paths else []
    return "\n".join([render_patch(applied), *notes])


async def _agent(arguments: dict[str, Any], context: ToolContext) -> str:
    agent = arguments.get("agent")
    if agent is not None and not isinstance(agent, str):
        raise ToolError(f"Agent: the argument 'agent' must be a string, not {type(agent).__name__}")
    name = _text_arg(arguments, "name", "Agent")
    prompt = _text_arg(arguments, "prompt", "Agent")
    return await context.delegate(agent, name, prompt)  # type: ignore[attr-defined]


_HANDLERS: dict[str, Callable[[dict[str, Any], ToolContext], Any]] = {
    "Agent": _agent,
    "Read": _read,
    "Glob": _glob,
    "Grep": _grep,
    "ApplyPatch": _apply_patch,
}
