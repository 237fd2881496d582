"""history:// — conversation transcripts as concise Markdown.

- ``history://`` (Read): a discovery listing of ``history://root`` (when a
  session is open), its retained agents' ``history://root/PATH`` (the open
  session's registry) and ``history://saved`` (when a workspace is open).
- ``history://root`` (Read, Grep): the open session's live conversation, its
  current segment including unsaved records, from the session service's live
  projection. For a session chosen but not open in this server (another
  client's, or one named by a virtual document), its committed current
  segment, read-only, from its committed publication; a notice says so.
  ``history://root/PATH`` is a retained agent's conversation (its own
  transcript, ``agents/PATH/``; a session written before those holds its
  tasks in the current segment), through the same projection; a path the
  registry does not hold is unavailable.
- ``history://saved[/SESSION[/SEGMENT]]`` (Read, Glob, Grep): saved segments
  across the workspace, read from committed publications only, every part
  verified against its manifest digest. Read and Glob of the bare form or of
  a session list sources; Read of a segment renders its projection; Grep
  searches projections, with the same line numbers Read shows. Sessions
  whose records are unreadable or incompatible are left out of discovery and
  counted in the notice; an explicitly addressed one is an error.

Execution reads through the store asynchronously (so any target works) and
renders and searches in a worker thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ...addresses import Address, AddressError, ErrorKind, Operation, encode_component
from ...store import (
    InspectSessionRow,
    RecordError,
    SavedSource,
    SegmentError,
    SessionIncompatible,
    SessionMissing,
    agent_lines,
    is_session_id,
    list_segments,
    project,
    read_agent_tasks,
    read_committed,
    read_sources,
    retained_tasks,
    saved_catalog,
    saved_session,
)
from ...targets import LocalTarget, Target, TargetError
from ..engine.attempt import Prepared, Request
from ..engine.context import LiveHistorySource, ResolverContext
from ..engine.counts import counted
from ..engine.explicit_node import read_listing
from ..engine.options import GlobOptions, GrepOptions, ReadOptions
from ..engine.projection import page_lines, split_lines
from ..engine.results import GlobResult, GrepResult, ReadResult
from ..engine.search import GrepOutcome, grep_lines, limit_notice

ROOT = "history://root"
SAVED = "history://saved"
#: How many omitted sessions a notice names (the count is always complete).
_NAMED_OMISSIONS = 10


def _error(kind: ErrorKind, authored: str, reason: str) -> AddressError:
    return AddressError(kind, authored, reason)


def _failing(error: AddressError) -> Callable[[], object]:
    async def run() -> object:
        raise error

    return run


def prepare(address: Address, request: Request, context: ResolverContext) -> Prepared:
    if address.scope == "listing":
        return Prepared("virtual", _listing(address, request, context))
    if address.scope == "root":
        return Prepared("virtual", _root(address, request, context))
    return Prepared("virtual", _saved(address, request, context))


# history:// -------------------------------------------------------------------


def _listing(address: Address, request: Request, context: ResolverContext) -> Callable[[], object]:
    authored, canonical = address.authored, address.canonical
    # The root conversation, then its retained agents' in path order (the
    # live registry: no transcript is read), then the saved ones.
    agents = getattr(context.live_history, "agents", None)
    retained = [f"{ROOT}/{agent.path}" for agent in agents()] if callable(agents) else []
    lines = ([ROOT] if context.live_history is not None or context.session_id is not None else []) + retained + (
        [SAVED] if context.workspace_root is not None or context.store_target is not None else [])
    notice = None if lines else "no session and no workspace are open: there is no conversation history"

    async def run() -> object:
        return read_listing(lines, request, authored, canonical, notice)

    return run


# history://root ---------------------------------------------------------------


def _root(address: Address, request: Request, context: ResolverContext) -> Callable[[], object]:
    authored, canonical = address.authored, address.canonical
    live = context.live_history
    session_id = context.session_id
    if live is None and session_id is None:
        return _failing(_error(ErrorKind.OWNER_MISSING, authored, "no session is open; history://root belongs to the open session"))
    if address.path:
        return _agent_root("/".join(address.path), request, context, authored, canonical)
    if live is None:
        assert session_id is not None
        return _committed_root(session_id, request, context, authored, canonical)
    source: LiveHistorySource = live

    async def run() -> object:
        lines = source.lines()  # a snapshot taken on the loop, where the conversation changes
        return await asyncio.to_thread(_over_lines, lines, request, authored, canonical, canonical)

    return run


def _agent_root(path: str, request: Request, context: ResolverContext, authored: str, canonical: str) -> Callable[[], object]:
    """``history://root/PATH``: a retained agent's conversation, rendered
    from its own transcript (live when the session is open here, else
    committed)."""
    live = context.live_history
    missing = f"the session has no retained agent {path}; Read agent:// lists them"
    reader = getattr(live, "agent_lines", None)
    if callable(reader):

        async def run_live() -> object:
            lines = reader(path)
            if lines is None:
                raise _error(ErrorKind.UNAVAILABLE, authored, missing)
            notice = None if lines else f"retained agent {path} has no settled task yet"
            return await asyncio.to_thread(_over_lines, lines, request, authored, canonical, canonical, notice)

        return run_live
    session_id = context.session_id
    assert session_id is not None

    async def run() -> object:
        async def read() -> object:
            if not is_session_id(session_id):
                raise SessionMissing(session_id)
            saved = await saved_session(store_target(context), session_id)
            entry = next((agent for agent in saved.sidecar.agents if agent.path == path), None) if saved.sidecar else None
            if entry is None:
                raise _error(ErrorKind.UNAVAILABLE, authored, missing)
            current = [s for s in saved.sources if s.segment.number == saved.sidecar.current_segment] or saved.sources[-1:]
            records = (await read_sources(saved, current))[0] if current else []
            lines = agent_lines(retained_tasks(records, path, await read_agent_tasks(saved, path), entry.created_turn))
            notice = f"session {session_id} is not open in this server: its committed records, read-only"
            return await asyncio.to_thread(_over_lines, lines, request, authored, canonical, canonical, notice)

        return await _reading_store(
            authored, read,
            missing=f"session {session_id} is not open in this server and is not a saved session of this workspace",
            missing_kind=ErrorKind.OWNER_MISSING,
        )

    return run


def _committed_root(
    session_id: str, request: Request, context: ResolverContext, authored: str, canonical: str
) -> Callable[[], object]:
    """The committed current segment of a session this server has not open."""

    async def run() -> object:
        async def read() -> object:
            if not is_session_id(session_id):
                raise SessionMissing(session_id)
            saved = await saved_session(store_target(context), session_id)
            if saved.sidecar is None or not saved.sources:
                notice = f"session {session_id} is not open in this server and has nothing saved yet"
                return _over_lines([], request, authored, canonical, canonical, notice)
            current = [s for s in saved.sources if s.segment.number == saved.sidecar.current_segment] or [saved.sources[-1]]
            (records,) = await read_sources(saved, current)
            lines = split_lines(project(records))
            notice = (
                f"session {session_id} is not open in this server: its committed transcript "
                f"(segment {current[0].segment.number}), read-only; open the session to follow it live"
            )
            return await asyncio.to_thread(_over_lines, lines, request, authored, canonical, canonical, notice)

        return await _reading_store(
            authored,
            read,
            missing=f"session {session_id} is not open in this server and is not a saved session of this workspace",
            missing_kind=ErrorKind.OWNER_MISSING,
        )

    return run


async def _reading_store(
    authored: str, read: Callable[[], object], *, missing: str, missing_kind: ErrorKind = ErrorKind.MISSING_TARGET
) -> object:
    """Run a read of committed sessions, refusals as the address's errors."""
    try:
        return await read()
    except AddressError:
        raise
    except SessionMissing:
        raise _error(missing_kind, authored, missing) from None
    except SessionIncompatible as incompatible:
        raise _error(ErrorKind.UNAVAILABLE, authored, f"the saved session cannot be read: {incompatible.row.reason}") from None
    except (RecordError, SegmentError) as bad:
        raise _error(ErrorKind.UNREADABLE, authored, _bad_bytes(bad)) from None
    except TargetError as error:
        raise _error(ErrorKind.UNAVAILABLE, authored, f"the session store could not be read ({error.reason})") from None


# Describe (hover) -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HistoryFacts:
    """What a history:// address names now (``describe``'s status and kind)."""

    status: str
    kind: str
    reason: str | None = None
    #: What an existing history resource reads: the session and its state.
    detail: str | None = None


async def describe(address: Address, context: ResolverContext) -> HistoryFacts:
    """Metadata only: the open session's live history, or the lease head and
    manifest of a committed one (never a transcript part)."""
    authored = address.authored
    if address.scope == "listing":
        return HistoryFacts("discovery", "listing")
    if address.scope == "root":
        if address.path:
            path = "/".join(address.path)
            agents = getattr(context.live_history, "agents", None)
            known = [agent.path for agent in agents()] if callable(agents) else None
            if known is None:
                return HistoryFacts("exists", "virtual", detail=f"retained agent {path}'s conversation, if the session has it")
            if path not in known:
                return HistoryFacts("unavailable", "virtual", f"the session has no retained agent {path}")
            return HistoryFacts("exists", "virtual", detail=f"retained agent {path}'s conversation, live")
        live = context.live_history
        if live is not None:
            return HistoryFacts(
                "exists", "virtual", detail=f"the live conversation of session {live.session_id}, open in this server"
            )
        session_id = context.session_id
        if session_id is None:
            return HistoryFacts("unavailable", "virtual", "no session is open; history://root belongs to the open session")

        async def committed_root() -> HistoryFacts:
            if not is_session_id(session_id):
                raise SessionMissing(session_id)
            snapshot = await read_committed(store_target(context), session_id)
            if snapshot.manifest is None:
                return HistoryFacts("missing", "virtual", f"session {session_id} is not open in this server and has nothing saved yet")
            return HistoryFacts(
                "exists",
                "virtual",
                detail=f"the committed transcript of session {session_id}, which is not open in this server (read-only)",
            )

        missing = f"session {session_id} is not open in this server and is not a saved session of this workspace"
        return await _facts(authored, committed_root, missing, ErrorKind.OWNER_MISSING)
    if context.workspace_root is None and context.store_target is None:
        return HistoryFacts("unavailable", "listing", "no workspace is open; history://saved lists the workspace's sessions")
    if not address.path:
        return HistoryFacts("discovery", "listing")
    session_id = address.path[0]

    async def saved() -> HistoryFacts:
        if not is_session_id(session_id):
            raise SessionMissing(session_id)
        snapshot = await read_committed(store_target(context), session_id)
        names = [source.name for source in list_segments(snapshot.manifest.entries)] if snapshot.manifest else []
        if len(address.path) == 1:
            return HistoryFacts("discovery", "listing", None if names else "the session has no saved conversation yet")
        if address.path[1] not in names:
            return HistoryFacts("missing", "virtual", f"the saved session has no {address.path[1]}")
        return HistoryFacts("exists", "virtual", detail=f"a committed transcript segment of session {session_id}")

    return await _facts(authored, saved, "no such session in this workspace")


async def _facts(
    authored: str, read: Callable[[], object], missing: str, missing_kind: ErrorKind = ErrorKind.MISSING_TARGET
) -> HistoryFacts:
    try:
        return await _reading_store(authored, read, missing=missing, missing_kind=missing_kind)
    except AddressError as error:
        status = "missing" if error.kind is ErrorKind.MISSING_TARGET else "unavailable"
        return HistoryFacts(status, "virtual", error.reason)


# history://saved ----------------------------------------------------------------


def _saved_address(session_id: str, segment: str | None = None) -> str:
    text = f"{SAVED}/{encode_component(session_id)}"
    return f"{text}/{segment}" if segment is not None else text


def store_target(context: ResolverContext) -> Target:
    if context.store_target is not None:
        return context.store_target
    assert context.workspace_root is not None
    return LocalTarget(context.workspace_root)


def _saved(address: Address, request: Request, context: ResolverContext) -> Callable[[], object]:
    authored, canonical = address.authored, address.canonical
    if context.workspace_root is None and context.store_target is None:
        return _failing(
            _error(ErrorKind.OWNER_MISSING, authored, "no workspace is open; history://saved lists the workspace's sessions")
        )
    path = address.path

    async def read() -> object:
        target = store_target(context)
        if not path:
            return await _workspace(target, request, authored, canonical)
        session_id = path[0]
        if not is_session_id(session_id):
            raise _error(ErrorKind.MISSING_TARGET, authored, f"{session_id!r} is not a saved session of this workspace")
        return await _session(target, session_id, path[1] if len(path) > 1 else None, request, authored, canonical)

    async def run() -> object:
        return await _reading_store(authored, read, missing="no such session in this workspace")

    return run


def _bad_bytes(error: RecordError | SegmentError) -> str:
    if isinstance(error, SegmentError):
        where = f"{error.label} line {error.line}" if error.line is not None else error.label
        return f"the saved transcript is not valid: {where}: {error.reason}"
    return f"the saved transcript failed verification ({error.kind.value}): {error.reason}"


async def _workspace(target: Target, request: Request, authored: str, canonical: str) -> object:
    catalog = await saved_catalog(target)
    notice = _omissions(catalog.omitted)
    sources = list(catalog.sources)
    relative = {id(s): (s.session_id, s.name) for s in sources}
    if request.operation is Operation.READ:
        lines = [_saved_address(s.session_id, s.name) for s in sources]
        if not lines:
            notice = "\n".join(filter(None, ["no saved conversations in this workspace", notice]))
        return read_listing(lines, request, authored, canonical, notice)
    if request.operation is Operation.GLOB:
        return _glob(sources, lambda s: relative[id(s)], request, authored, canonical, notice)
    chosen = _filtered(sources, lambda s: relative[id(s)], request)
    outcome = GrepOutcome()
    skipped: list[str] = []
    by_session: dict[str, list[SavedSource]] = {}
    for source in chosen:
        by_session.setdefault(source.session_id, []).append(source)
    for session_id, own in by_session.items():
        try:
            saved = await saved_session(target, session_id)
            wanted = {source.name for source in own}
            own = [source for source in saved.sources if source.name in wanted]
            records = await read_sources(saved, own)
        except (SessionMissing, SessionIncompatible, RecordError, SegmentError) as error:
            # Discovery saw it, but it changed or failed verification since:
            # reported, not searched as if empty.
            skipped.append(f"{_saved_address(session_id)} ({_reason_of(error)})")
            continue
        if await _grep_sources(own, records, request, outcome):
            break
    return _grep_result(outcome, request, authored, canonical, [notice, _skipped(skipped)])


async def _session(
    target: Target, session_id: str, segment: str | None, request: Request, authored: str, canonical: str
) -> object:
    saved = await saved_session(target, session_id)
    sources = list(saved.sources)
    if segment is not None:
        chosen = [s for s in sources if s.name == segment]
        if not chosen:
            raise _error(ErrorKind.MISSING_TARGET, authored, f"the saved session has no {segment}")
        source = chosen[0]
        if request.operation is Operation.GLOB:
            return _glob(chosen, lambda s: (s.name,), request, authored, canonical, None)
        (records,) = await read_sources(saved, chosen)
        lines = split_lines(project(records))
        if request.operation is Operation.READ:
            return await asyncio.to_thread(_over_lines, lines, request, authored, canonical, canonical)
        outcome = GrepOutcome()
        await _grep_sources([source], [records], request, outcome, explicit=canonical)
        return _grep_result(outcome, request, authored, canonical, [])
    if request.operation is Operation.READ:
        lines = [_saved_address(session_id, s.name) for s in sources]
        notice = None if lines else "the session has no saved conversation yet"
        return read_listing(lines, request, authored, canonical, notice)
    if request.operation is Operation.GLOB:
        return _glob(sources, lambda s: (s.name,), request, authored, canonical, None)
    chosen = _filtered(sources, lambda s: (s.name,), request)
    outcome = GrepOutcome()
    await _grep_sources(chosen, await read_sources(saved, chosen), request, outcome)
    return _grep_result(outcome, request, authored, canonical, [])


def _glob(
    sources: Sequence[SavedSource],
    relative: Callable[[SavedSource], tuple[str, ...]],
    request: Request,
    authored: str,
    canonical: str,
    notice: str | None,
) -> GlobResult:
    assert isinstance(request.options, GlobOptions) and request.glob is not None
    matches: list[str] = []
    truncated = False
    clock = request.glob.clock()
    for source in sources:
        if request.glob.matches(relative(source), clock):
            if len(matches) == request.options.limit:
                truncated = True
                break
            matches.append(_saved_address(source.session_id, source.name))
    parts = [notice] if notice else []
    if truncated:
        parts.append(limit_notice(request.options.limit, "match", "matches"))
    return GlobResult(authored, canonical, tuple(matches), truncated, "\n".join(parts) or None)


def _filtered(
    sources: Sequence[SavedSource], relative: Callable[[SavedSource], tuple[str, ...]], request: Request
) -> list[SavedSource]:
    assert request.grep is not None
    plan = request.grep
    if plan.glob is None:
        return list(sources)
    clock = plan.glob.clock()
    return [s for s in sources if plan.glob.matches(relative(s), clock)]


async def _grep_sources(
    sources: Sequence[SavedSource], records: Sequence[list], request: Request, outcome: GrepOutcome, explicit: str | None = None
) -> bool:
    """Search each source's projection; True once the match limit is hit."""
    assert isinstance(request.options, GrepOptions) and request.grep is not None
    plan, options = request.grep, request.options

    def search() -> bool:
        for source, own in zip(sources, records):
            outcome.files_searched += 1
            address = explicit or _saved_address(source.session_id, source.name)
            if grep_lines(address, split_lines(project(own)), plan, options, outcome):
                outcome.truncated = True
                return True
        return False

    return await asyncio.to_thread(search)


def _grep_result(outcome: GrepOutcome, request: Request, authored: str, canonical: str, notices: list[str | None]) -> GrepResult:
    assert isinstance(request.options, GrepOptions)
    parts = [n for n in notices if n]
    if outcome.truncated:
        parts.append(limit_notice(request.options.limit, "matching line", "matching lines"))
    return GrepResult(authored, canonical, tuple(outcome.matches), outcome.files_searched, outcome.truncated, "\n".join(parts) or None)


def _over_lines(
    lines: list[str], request: Request, authored: str, canonical: str, address: str, notice: str | None = None
) -> ReadResult | GrepResult:
    """Read a page of, or Grep, one projection."""
    if request.operation is Operation.READ:
        assert isinstance(request.options, ReadOptions)
        return page_lines(lines, request.options, authored, canonical, "file", notice)
    if request.operation is Operation.GREP:
        assert isinstance(request.options, GrepOptions) and request.grep is not None
        outcome = GrepOutcome(files_searched=1)
        outcome.truncated = grep_lines(address, lines, request.grep, request.options, outcome)
        return _grep_result(outcome, request, authored, canonical, [notice])
    raise AddressError(ErrorKind.INTERNAL, authored, f"{request.operation.value} reached a history projection")


def _omissions(omitted: Sequence[InspectSessionRow]) -> str | None:
    if not omitted:
        return None
    named = "; ".join(_omission(row) for row in omitted[:_NAMED_OMISSIONS])
    more = f"; and {len(omitted) - _NAMED_OMISSIONS} more" if len(omitted) > _NAMED_OMISSIONS else ""
    return f"{len(omitted)} session(s) omitted (unreadable or incompatible records): {named}{more}"


def _omission(row: InspectSessionRow) -> str:
    # The row's reason names private storage files; the subject and kind say
    # what is wrong without them.
    what = f"{row.subject.value} {row.kind.value}" if row.kind is not None else f"{row.subject.value} unreadable"
    if row.observed_version is not None:
        what += f" (format version {row.observed_version!r})"
    return f"{row.name}: {what}"


def _skipped(skipped: list[str]) -> str | None:
    if not skipped:
        return None
    return f"{counted(len(skipped), 'session')} could not be searched: " + "; ".join(skipped)


def _reason_of(error: Exception) -> str:
    if isinstance(error, (RecordError, SegmentError)):
        return _bad_bytes(error)
    if isinstance(error, SessionIncompatible):
        return error.row.reason
    return str(error)
