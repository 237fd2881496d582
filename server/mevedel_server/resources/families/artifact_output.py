"""Where a session's kept tool output lives (``SESSION/tool-results/``)
and how one piece is written: what ``artifact://`` (:mod:`.artifact`)
shows, kept apart from its resolver so that the agent engine writes an
execution log (:mod:`mevedel_server.agents.execution_log`) without loading
the resolver engine."""

from __future__ import annotations

from collections.abc import Sequence

from ...targets import ControlProgram, CreateExclusive, MakeDirs, Target, TargetError

BASE = "artifact://"
EXECUTIONS = "executions"
#: The session-relative directory artifact:// shows.
TOOL_RESULTS = "tool-results"


async def save_artifact(target: Target, tool_results: str, parts: Sequence[str], data: bytes) -> str | None:
    """Write one new artifact, ``parts`` below a session's ``tool-results/``
    (``tool_results``: its target path), through the target (exclusive:
    nothing is overwritten); its ``artifact://`` address, or None when the
    target refused."""
    directory = "/".join([tool_results, *parts[:-1]])
    program = ControlProgram([MakeDirs(directory, optional=True), CreateExclusive(f"{directory}/{parts[-1]}", data)])
    try:
        results = await target.run(program)
    except TargetError:
        return None
    if not all(result.ok for result in results[1:]):
        return None
    return BASE + "/".join(parts)
