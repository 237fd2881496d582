"""The custom resource requests: ``mevedel/resource/read|glob|grep|applyPatch``
and ``mevedel/address/describe``, and the ``mevedel.resource.applyPatch``
command. Each is thin: decode params, build the resolver context, prepare,
execute, encode the result. An ApplyPatch writes a session's ``work://``
files only when this server holds that session open and writable."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException

from mevedel_protocol import converter, methods

from .. import artifacts
from .. import resources as core
from ..addresses import Operation
from ..loading import OnFirstUse
from . import virtual_documents
from .definition import definition_uri
from .errors import answers_errors, failure, invalid_params, structure_params
from .workspaces import Scope, request_scope, virtual_scope

if TYPE_CHECKING:
    from .server import MevedelLanguageServer

#: Its message classes, made by the first message that uses them.
wire = OnFirstUse("mevedel_protocol.resource")
address_wire = OnFirstUse("mevedel_protocol.address")


def _given(**values: Any) -> dict[str, Any]:
    """Only the options the client set, so the resolver's defaults apply."""
    return {name: value for name, value in values.items() if value is not None}


@contextlib.contextmanager
def _progress(ls: MevedelLanguageServer, token: int | str | None, title: str) -> Iterator[list[str]]:
    """``$/progress`` begin/end around the work when the client asked for it;
    the caller appends the closing message to the yielded list."""
    closing: list[str] = []
    if token is None:
        yield closing
        return
    ls.work_done_progress.begin(token, types.WorkDoneProgressBegin(title=title, cancellable=False))
    try:
        yield closing
    finally:
        ls.work_done_progress.end(token, types.WorkDoneProgressEnd(message=closing[0] if closing else "failed"))
        # pygls keeps a cancellation future per token it has seen; this one is done.
        ls.work_done_progress.tokens.pop(token, None)


def _read_scope(ls: MevedelLanguageServer, params: wire.ReadParams) -> tuple[str, Scope]:
    if (params.address is None) == (params.uri is None):
        raise invalid_params(methods.RESOURCE_READ, "give exactly one of address and uri")
    if params.address is not None:
        return params.address, request_scope(ls, params.workspace_folder, params.session_id)
    assert params.uri is not None
    try:
        document = virtual_documents.parse_uri(params.uri)
    except ValueError as error:
        raise invalid_params(params.uri, str(error)) from None
    if params.workspace_folder is not None or params.session_id is not None:
        raise invalid_params(params.uri, "a virtual URI names its own workspace and session")
    return document.address, virtual_scope(ls, params.uri, document)


def read_result(found: core.ReadResult, view: str) -> wire.ReadResult:
    return wire.ReadResult(
        address=found.address,
        canonical=found.canonical,
        text=found.plain_text if view == "plain" else found.text,
        start_line=found.start_line,
        end_line=found.end_line,
        total_lines=found.total_lines,
        kind=found.kind,
        truncated_lines=[wire.TruncatedLine(line, resume) for line, resume in found.truncated_lines],
        next_offset=found.next_offset,
        notice=found.notice,
    )


def _grep_match(match: core.GrepMatch) -> wire.GrepMatch:
    return wire.GrepMatch(
        address=match.address,
        line=match.line,
        column=match.column,
        preview=match.preview,
        char_offset=match.char_offset,
        before=[wire.ContextLine(line, text) for line, text in match.before],
        after=[wire.ContextLine(line, text) for line, text in match.after],
    )


def writable_context(ls: MevedelLanguageServer, scope: Scope) -> core.ResolverContext:
    """The scope's context with this server's answer to "may it write that
    session's files?": only a session it holds open and writable."""
    if scope.folder is None or ls.sessions is None:
        return scope.context
    try:
        service = ls.sessions.service(scope.folder)
    except JsonRpcException:  # a folder that cannot hold sessions has none open
        return scope.context
    return dataclasses.replace(scope.context, session_writable=core.writable_sessions(service))


async def apply_patch(ls: MevedelLanguageServer, raw: Any, method: str) -> Any:
    params = structure_params(raw, wire.ApplyPatchParams, method)
    scope = request_scope(ls, params.workspace_folder, params.session_id)
    attempt = core.prepare(Operation.APPLY_PATCH, params.patch, None, writable_context(ls, scope))
    written = sorted({fact.project_path for fact in attempt.facts if fact.project_path})
    work = ls.artifacts.of(scope.folder) if scope.folder is not None and artifacts.written_items(written) else None  # type: ignore[attr-defined]
    if work is not None:
        # A live item's files are written under its lease, as its whole-item writes are.
        try:
            await artifacts.hold_written_items(work, written)
        except artifacts.ArtifactError as error:
            raise failure(error.kind, error.authored, error.reason) from None
    applied = await core.execute(attempt)
    if work is not None:
        # Authored files of the artifact store: it learns of them.
        await artifacts.learn_patch_writes(work, scope.session_id, written)
    changes = [
        wire.PatchFileChange(address=c.display, kind=c.kind, added=c.added, removed=c.removed, move_to=c.move_display)
        for c in applied.changes
    ]
    return converter.unstructure(wire.ApplyPatchResult(changes=changes, summary=applied.summary()))


def register(ls: MevedelLanguageServer) -> None:
    @ls.feature(methods.RESOURCE_READ)
    @answers_errors(methods.RESOURCE_READ)
    async def read(ls: MevedelLanguageServer, raw: Any) -> Any:
        params = structure_params(raw, wire.ReadParams, methods.RESOURCE_READ)
        address, scope = _read_scope(ls, params)
        options = core.ReadOptions(
            **_given(
                offset=params.offset,
                limit=params.limit,
                char_offset=params.char_offset,
                max_line_chars=params.max_line_chars,
            )
        )
        with _progress(ls, params.work_done_token, f"Read {address}") as closing:
            found = await core.execute(core.prepare(Operation.READ, address, options, scope.context))
            closing.append(f"lines {found.start_line}-{found.end_line} of {found.total_lines}")
        return converter.unstructure(read_result(found, params.view))

    @ls.feature(methods.RESOURCE_GLOB)
    @answers_errors(methods.RESOURCE_GLOB)
    async def glob(ls: MevedelLanguageServer, raw: Any) -> Any:
        params = structure_params(raw, wire.GlobParams, methods.RESOURCE_GLOB)
        context = request_scope(ls, params.workspace_folder, params.session_id).context
        options = core.GlobOptions(**_given(pattern=params.pattern, limit=params.limit))
        with _progress(ls, params.work_done_token, f"Glob {params.address}") as closing:
            found = await core.execute(core.prepare(Operation.GLOB, params.address, options, context))
            closing.append(f"{len(found.matches)} files" + (" (truncated)" if found.truncated else ""))
        return converter.unstructure(
            wire.GlobResult(found.address, found.canonical, list(found.matches), found.truncated, found.notice)
        )

    @ls.feature(methods.RESOURCE_GREP)
    @answers_errors(methods.RESOURCE_GREP)
    async def grep(ls: MevedelLanguageServer, raw: Any) -> Any:
        params = structure_params(raw, wire.GrepParams, methods.RESOURCE_GREP)
        context = request_scope(ls, params.workspace_folder, params.session_id).context
        options = core.GrepOptions(
            pattern=params.pattern,
            ignore_case=params.ignore_case,
            **_given(glob=params.glob, limit=params.limit, context_lines=params.context_lines),
        )
        with _progress(ls, params.work_done_token, f"Grep {params.address}") as closing:
            found = await core.execute(core.prepare(Operation.GREP, params.address, options, context))
            closing.append(f"{len(found.matches)} matches in {found.files_searched} files")
        return converter.unstructure(
            wire.GrepResult(
                found.address,
                found.canonical,
                [_grep_match(match) for match in found.matches],
                found.files_searched,
                found.truncated,
                found.notice,
            )
        )

    @ls.feature(methods.RESOURCE_APPLY_PATCH)
    @answers_errors(methods.RESOURCE_APPLY_PATCH)
    async def apply_patch_request(ls: MevedelLanguageServer, raw: Any) -> Any:
        return await apply_patch(ls, raw, methods.RESOURCE_APPLY_PATCH)

    # No annotations: pygls evaluates a command handler's type hints at call
    # time, and the server type is only imported for type checking.
    @ls.command(methods.COMMAND_APPLY_PATCH)
    @answers_errors(methods.COMMAND_APPLY_PATCH)
    async def apply_patch_command(ls, *arguments):  # type: ignore[no-untyped-def]
        if len(arguments) != 1:
            raise invalid_params(
                methods.COMMAND_APPLY_PATCH, f"takes exactly one argument (the applyPatch params), got {len(arguments)}"
            )
        return await apply_patch(ls, arguments[0], methods.COMMAND_APPLY_PATCH)

    @ls.feature(methods.ADDRESS_DESCRIBE)
    @answers_errors(methods.ADDRESS_DESCRIBE)
    async def describe(ls: MevedelLanguageServer, raw: Any) -> Any:
        params = structure_params(raw, address_wire.DescribeParams, methods.ADDRESS_DESCRIBE)
        scope = request_scope(ls, params.workspace_folder, params.session_id)
        found = await core.describe(params.address, scope.context)
        return converter.unstructure(
            address_wire.DescribeResult(
                address=params.address,
                canonical=found.canonical,
                family=found.family.value,
                locator_class=found.locator_class.value,
                operations=[operation.value for operation in found.operations],
                status=found.status,
                kind=found.kind,
                size=found.size,
                reason=found.reason,
                uri=definition_uri(params.address, scope),
                detail=found.detail,
            )
        )
