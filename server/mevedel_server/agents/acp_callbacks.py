"""The client side of ACP for one agent process: every request and
notification the agent sends lands in :class:`AcpCallbacks` and is routed to
the session's running turn (:class:`~.engine.RunningAgent`): updates to its
recorder, permission questions to the front end, ``fs/*`` through the
workspace files with their checkpoint, ``terminal/*`` to the terminals.
The engine starts one per agent process; nothing here drives a turn."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from acp import RequestError, schema

from ..targets import TargetError
from .execution_log import ExecutionLog, log_name
from .terminals import Terminal

if TYPE_CHECKING:
    from .engine import AgentTurn, RunningAgent

_log = logging.getLogger(__name__)

#: Tool kinds ``permissions: allow-reads`` answers without asking.
READ_KINDS = {"read", "search", "fetch", "think"}


@dataclass(frozen=True)
class PermissionQuestion:
    """An agent's permission question as the front end asks it."""

    session_id: str
    agent: str
    title: str
    tool_kind: str | None
    #: ``(option_id, name, kind)`` as the agent offered them.
    options: tuple[tuple[str, str, str], ...]


class AcpCallbacks:
    """The client side of ACP for one agent process: everything the agent
    asks of us lands here and is routed to the session's turn."""

    def __init__(self, running: RunningAgent) -> None:
        self.running = running

    def _turn(self, session_id: str) -> AgentTurn | None:
        turn = self.running.turn
        if turn is None or session_id != self.running.process.native_session_id:
            return None
        turn.last_activity = time.monotonic()
        return turn

    def _require_turn(self, session_id: str, what: str) -> AgentTurn:
        turn = self._turn(session_id)
        if turn is None:
            raise RequestError.invalid_request({"reason": f"{what} is only served during a prompt turn of this session"})
        return turn

    def on_connect(self, conn: Any) -> None:
        pass

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if isinstance(update, schema.SessionInfoUpdate) and session_id == self.running.process.native_session_id:
            # The agent's title for the conversation (during or after a
            # turn): the session's display name, unless it was named.
            if isinstance(update.title, str) and update.title.strip():
                await self.running.engine.apply_title(self.running.session_id, update.title)
            return
        if isinstance(update, (schema.CurrentModeUpdate, schema.ConfigOptionUpdate)) and session_id == self.running.process.native_session_id:
            await self.running.engine.options.agent_changed(self.running, update)
            return
        turn = self._turn(session_id)
        if turn is not None:  # replayed history (session/load) records nothing
            turn.recorder.on_update(update)

    async def request_permission(self, session_id: str, tool_call: Any, options: list, **kwargs: Any) -> Any:
        turn = self._require_turn(session_id, "a permission question")
        engine = self.running.engine
        config = engine.config()
        title = tool_call.title or tool_call.kind or "a tool call"
        choices = tuple((o.option_id, o.name, o.kind) for o in options)
        allow = next((o for o in options if o.kind == "allow_once"), None) or next((o for o in options if o.kind.startswith("allow")), None)
        reject = next((o for o in options if o.kind == "reject_once"), None) or next((o for o in options if o.kind.startswith("reject")), None)
        chosen: str | None = None
        why = ""
        if turn.cancelled:
            why = "cancelled"
        elif config.permissions == "allow-all" or (config.permissions == "allow-reads" and tool_call.kind in READ_KINDS):
            chosen, why = (allow.option_id, f"allowed by the {config.permissions} setting") if allow else (None, "no option allows it")
        else:
            # What the agent said before asking reaches the editor first.
            turn.recorder.feed.flush()
            question = PermissionQuestion(self.running.session_id, turn.agent, title, tool_call.kind, choices)
            task = asyncio.ensure_future(engine.front.ask_permission(question, config.permission_timeout_seconds))
            turn.permission_tasks.add(task)
            try:
                chosen = await asyncio.wait_for(asyncio.shield(task), config.permission_timeout_seconds)
                why = "declined" if chosen is None else ""
            except asyncio.TimeoutError:
                task.cancel()
                why = f"no answer within {config.permission_timeout_seconds:g} s"
            except asyncio.CancelledError:
                if not turn.cancelled:
                    raise
                why = "cancelled"
            except Exception:
                _log.exception("asking a permission question failed")
                why = "the question could not be asked"
            finally:
                turn.permission_tasks.discard(task)
            if chosen is not None and chosen not in {o.option_id for o in options}:
                chosen, why = None, "declined"
        if chosen is not None:
            option = next(o for o in options if o.option_id == chosen)
            allowed = option.kind.startswith("allow")
            turn.recorder.record_permission(tool_call.tool_call_id, title, option.name + (f" ({why})" if why else ""), allowed)
            return schema.RequestPermissionResponse(outcome=schema.AllowedOutcome(option_id=chosen, outcome="selected"))
        turn.recorder.record_permission(tool_call.tool_call_id, title, f"refused: {why}", False)
        if reject is not None and why != "cancelled":
            return schema.RequestPermissionResponse(outcome=schema.AllowedOutcome(option_id=reject.option_id, outcome="selected"))
        return schema.RequestPermissionResponse(outcome=schema.DeniedOutcome(outcome="cancelled"))

    async def read_text_file(self, session_id: str, path: str, line: int | None = None, limit: int | None = None, **kwargs: Any) -> Any:
        self._require_turn(session_id, "fs/read_text_file")
        try:
            text = await self.running.files.read_text(path, line, limit)
        except TargetError as error:
            raise _unreachable(f"{path} could not be read", error) from None
        return schema.ReadTextFileResponse(content=text)

    async def write_text_file(self, session_id: str, path: str, content: str, **kwargs: Any) -> Any:
        self._require_turn(session_id, "fs/write_text_file")
        engine = self.running.engine
        files = self.running.files
        relative = files.relative(path)
        need = not engine.service.turns.captured(self.running.session_id, relative)
        # The file-state record's snapshot of what is written rides the write.
        snapshot = engine.write_snapshot(self.running.session_id, relative)
        first = engine.written_ops(self.running.session_id, relative) if need else []
        try:
            outcome = await files.write_text(path, content, read_before=need, then=snapshot, first=first)
        except TargetError as error:
            unknown = getattr(error, "outcome_unknown", False)
            if need and unknown:
                # The state before the write was read in the program whose
                # answer was lost: the checkpoint cannot hold it, and says so.
                engine.record_pre_state(
                    self.running.session_id, relative, None,
                    gap=f"the connection was lost during the agent's write ({error.reason}); its state before is unknown",
                )
            what = f"{path} may or may not have been written" if unknown else f"{path} was not written"
            raise _unreachable(what, error) from None
        for directory in outcome.made:
            engine.record_pre_state(self.running.session_id, directory, None, directory=True)
        if outcome.read_before:
            engine.record_pre_state(self.running.session_id, outcome.relative, outcome.before)
        engine.remember_written(self.running.session_id, outcome.relative, snapshot=(snapshot, outcome.then))
        return schema.WriteTextFileResponse()

    async def create_terminal(self, session_id: str, command: str, args: list[str] | None = None, env: list | None = None,
                              cwd: str | None = None, output_byte_limit: int | None = None, **kwargs: Any) -> Any:
        self._require_turn(session_id, "terminal/create")
        variables = {v.name: v.value for v in env or ()}
        config = self.running.engine.config()
        turn = self.running.turn
        log = ExecutionLog(log_name(turn.turn if turn else None, command if isinstance(command, str) else ""), config.execution_log_max_bytes)
        terminal = await self.running.terminals.create(
            command, args, variables, cwd, output_byte_limit, cap=config.terminal_output_max_bytes, log=log
        )
        meta = log_meta(terminal) or {"mevedel": {}}
        if terminal.asked is not None:
            meta["mevedel"] |= {"outputByteLimit": terminal.limit, "reason": f"output is capped at {terminal.limit} bytes (terminalOutputMaxBytes), not the {terminal.asked} asked for"}
        return schema.CreateTerminalResponse(terminal_id=terminal.terminal_id, field_meta=meta if meta["mevedel"] else None)

    async def terminal_output(self, session_id: str, terminal_id: str, **kwargs: Any) -> Any:
        terminal = self.running.terminals.output(terminal_id)
        status = None
        if terminal.done.is_set():
            status = schema.TerminalExitStatus(exit_code=terminal.exit_code, signal=terminal.signal)
        return schema.TerminalOutputResponse(
            output=terminal.text, truncated=terminal.truncated, exit_status=status, field_meta=log_meta(terminal)
        )

    async def wait_for_terminal_exit(self, session_id: str, terminal_id: str, **kwargs: Any) -> Any:
        terminal = await self.running.terminals.wait(terminal_id)
        return schema.WaitForTerminalExitResponse(exit_code=terminal.exit_code, signal=terminal.signal, field_meta=log_meta(terminal))

    async def kill_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> Any:
        await self.running.terminals.kill(terminal_id)
        return schema.KillTerminalResponse()

    async def release_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> Any:
        await self.running.terminals.release(terminal_id)
        return schema.ReleaseTerminalResponse()

    async def ext_method(self, method: str, params: dict) -> dict:
        raise RequestError.method_not_found(method)

    async def ext_notification(self, method: str, params: dict) -> None:
        return None


def _unreachable(what: str, error: TargetError) -> RequestError:
    """What the agent is told when the workspace's target failed under a
    request (an SSH workspace whose connection dropped, say): what is known
    of the outcome and what to do, never a bare "Internal error"."""
    check = " (read it before relying on it)" if getattr(error, "outcome_unknown", False) else ""
    _log.warning("%s: %s", what, error)
    return RequestError(-32603, f"{what}: {error}{check}", {"reason": str(error)})


def log_meta(terminal: Terminal) -> dict | None:
    """Where the command's whole output is kept (``_meta.mevedel``): the
    address to Read or Grep once it ended, in this turn or a later one."""
    log = terminal.log
    if log is None:
        return None
    return {"mevedel": {"outputArtifact": log.address, "outputArtifactMaxBytes": log.cap,
                        "outputArtifactNote": "the command's whole output (bounded), readable with Read or Grep once it ended"}}
