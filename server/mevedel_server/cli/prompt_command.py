"""``mevedel prompt TEXT``: send a prompt to an ACP agent as the next turn
of a session, streaming the agent's answer to standard output.

The agent comes from ``$XDG_CONFIG_HOME/mevedel/config.json`` (the LSP's
setting names: ``agents``, ``defaultAgent``, ``permissions``, ...). The
session is ``--session ID``, else the one this CLI client holds in the
workspace, else this client's last session of the workspace when it is
free (continued, and said so), else a new one (``--new`` always starts
one). A last session another client holds now is not silently replaced by
a new one: the prompt is refused naming the holder, ``--new`` and
``session take-control``. A new session beside a held one is started after
the advisory (:mod:`.beside_held`: asked on a terminal, else refused unless
``--beside-held``). Reasoning, tool calls and permission decisions
go to standard error; the agent's permission questions are asked on the
terminal (without one, they are refused unless ``permissions`` allows
them). The agent gets mevedel's MCP tools (``mevedel mcp`` relaying to a
tool host in this process, as under the LSP server). Ctrl-C cancels the
turn (it settles as interrupted, and the CLI says why in the sentence the
editors' chats show: "Interrupted: cancelled by the user."); while the
agent is still starting, it stops the prompt before it reaches the agent
("Aborted before it reached the agent: ..."; no turn begins). A second
Ctrl-C, while the agent takes its time to stop or to start, ends the
agent's process. A question is answered by its
number; a typo asks again, an empty answer refuses. While another
``mevedel prompt`` of this client runs a turn of the session, the prompt is
refused without touching the session's lease; ``--queue`` adds it to the
session's queue (that process sends it when its turn settles) and
``--steer`` cancels that turn and has it sent next (:mod:`.queued_prompt`).
The process running the turns sends whatever was queued meanwhile before
it exits; its status is its own prompt's. With no TEXT the prompt is typed
on the terminal, up/down recalling the workspace's input history
(``prompt_line.py``); every prompt sent is recorded there. Exit status:
0 completed, 1 refused before anything was recorded, 2 the turn failed,
130 interrupted (or stopped while its agent started).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..agents import (
    PROMPT_ABORTED,
    AgentError,
    cli_config_path,
    load_cli_config,
    log_dir,
)
from ..artifacts import SessionArtifacts, session_artifacts
from ..loading import loading
from ..mcp_client import APPROVE_IN_A_TERMINAL, McpAccess, configured_access
from ..store import SessionAction, SessionService
from ..tool_server import ToolHost
from .agent_prestart import prestart_for
from .beside_held import add_beside_held_option, new_session
from .prompt_line import typed_prompt
from .queued_prompt import (
    STEER_SIGNAL,
    RunnerCheck,
    RunnerMark,
    RunnerRunning,
    interrupt_orphaned_turn,
    other_runner,
    queue_behind,
    refusal,
    turn_in_flight_refusal,
)
from .session_client import (
    CommandError,
    add_common,
    add_session_option,
    agent_task_line,
    emit,
    held_session,
    last_session,
    remember_session,
    run_command,
    workspace_location,
    workspace_root,
)
from .terminal_answer import read_answer

if TYPE_CHECKING:
    from ..agents import PermissionQuestion, TurnUpdate
    from ..resources import ResolverContext

TURN_FAILED = 2
INTERRUPTED = 130
#: Terminal attributes for the agent's reasoning.
DIM = "\x1b[2m"
PLAIN = "\x1b[0m"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("prompt", help="prompt an ACP agent: the next turn of a session")
    parser.add_argument("text", metavar="TEXT", nargs="?",
                        help="the prompt ('-' reads it from stdin; none: typed on the terminal, up/down recalling the input history)")
    parser.add_argument("--agent", metavar="NAME", help="an agent of the config file's 'agents' (default: the session's, else defaultAgent)")
    parser.add_argument("--attach", metavar="ADDRESS|PATH", action="append", default=[], help="attach a workspace file (repeatable)")
    parser.add_argument("--new", action="store_true", help="in a new session")
    add_beside_held_option(parser)
    parser.add_argument("--mode", metavar="ID", help="the agent's session mode (ACP), remembered in the session once the agent takes it")
    parser.add_argument("--set", metavar="ID=VALUE", action="append", default=[], dest="set_options",
                        help="an agent config option (model=..., reasoning effort...), remembered like --mode (repeatable)")
    parser.add_argument("--queue", action="store_true",
                        help="while your other `mevedel prompt` runs a turn of the session: send this when that turn settles")
    parser.add_argument("--steer", action="store_true",
                        help="while your other `mevedel prompt` runs a turn of the session: cancel that turn and send this at once")
    add_session_option(parser)
    add_common(parser)
    parser.set_defaults(run=run_prompt)


class TerminalFront:
    """The engine's front end on a terminal."""

    def __init__(self, json_output: bool) -> None:
        self.json_output = json_output
        self.at_line_start = True
        #: A run of reasoning is being written (dimmed, on stderr).
        self.reasoning = False
        #: Queue entries already said.
        self.said: set = set()
        #: The prompt's last ``settled`` update (its reason, as the editors get it).
        self.settled: TurnUpdate | None = None

    def turn_update(self, update: TurnUpdate) -> None:
        if update.phase == "settled" and update.agent_path is None:
            self.settled = update
        if self.json_output:
            return
        # A sub-agent's activity is indented under the tool call that started
        # it (its reasoning left out); the turn's own is not.
        nested = update.agent_path is not None
        indent = "    " if nested else ""
        if nested and update.phase == "starting":
            self.note(f"{indent}[agent {update.agent} started]")
        for event in update.events:
            if event.kind == "reasoning" and event.text:
                if not nested:
                    self._reason(event.text)
                continue
            self._end_reasoning()
            if event.kind == "response" and event.text:
                text = (indent if self.at_line_start else "") + event.text
                if indent:
                    body, end = (text[:-1], "\n") if text.endswith("\n") else (text, "")
                    text = body.replace("\n", "\n" + indent) + end
                sys.stdout.write(text)
                sys.stdout.flush()
                self.at_line_start = event.text.endswith("\n")
            elif event.kind == "tool_call" and (event.title or event.status):
                self.note(f"{indent}[tool {event.title or event.call_id}: {event.status or 'started'}]")
            elif event.kind == "permission":
                self.note(f"{indent}[permission {event.text}: {event.decision}]")
            elif event.kind == "plan":
                self.note(f"{indent}[plan]\n" + (event.text or ""))
        if nested:
            if update.phase == "settled":
                self.note(indent + agent_task_line(update.agent, update.outcome, update.reason))
            return
        if update.phase == "starting":
            self.note(f"[starting {update.agent}]")
        if update.phase == "settled":
            self._end_reasoning()
        if update.phase == "settled" and not self.at_line_start:
            sys.stdout.write("\n")
            sys.stdout.flush()
            self.at_line_start = True

    def _reason(self, text: str) -> None:
        """The agent's thought chunks: dimmed on a terminal (marked
        ``[reasoning]`` elsewhere), on stderr beside the notes."""
        if not self.reasoning:
            if not self.at_line_start:
                sys.stdout.write("\n")
                sys.stdout.flush()
                self.at_line_start = True
            sys.stderr.write(DIM if sys.stderr.isatty() else "[reasoning] ")
            self.reasoning = True
        sys.stderr.write(text)
        sys.stderr.flush()

    def _end_reasoning(self) -> None:
        if self.reasoning:
            sys.stderr.write((PLAIN if sys.stderr.isatty() else "") + "\n")
            sys.stderr.flush()
            self.reasoning = False

    def note(self, text: str) -> None:
        self._end_reasoning()
        if not self.at_line_start:
            sys.stdout.write("\n")
            sys.stdout.flush()
            self.at_line_start = True
        print(text, file=sys.stderr, flush=True)

    def queue_changed(self, state: Any) -> None:
        """Queued prompts sent by this process (another ``mevedel prompt
        --queue`` or ``--steer`` added them) are said before their turn."""
        if self.json_output:
            return
        for entry in state.entries:
            if entry.state == "sending" and entry.entry_id not in self.said:
                self.said.add(entry.entry_id)
                first = entry.text.strip().splitlines()[0] if entry.text.strip() else ""
                self.note(f"[sending the {'steering' if entry.kind == 'steer' else 'queued prompt'} from {entry.host}: {first[:80]}]")
            elif entry.state == "review" and (entry.entry_id, entry.reason) not in self.said:
                self.said.add((entry.entry_id, entry.reason))
                self.note(f"[a queued prompt was not sent: {entry.reason}]")

    async def ask_permission(self, question: PermissionQuestion, timeout: float) -> str | None:
        if not sys.stdin.isatty():
            self.note(f"[{question.agent} asks permission: {question.title}; refused: no terminal to ask on]")
            return None
        lines = [f"{question.agent} asks permission: {question.title}"]
        lines += [f"  {index}. {name}" for index, (_oid, name, _kind) in enumerate(question.options, start=1)]
        self.note("\n".join(lines))
        count = len(question.options)
        prompt = "choose a number (empty: refuse): "
        while True:
            answer = await read_answer(prompt)
            if answer is None or not answer.strip():
                return None
            try:
                chosen = int(answer.strip())
            except ValueError:
                chosen = 0
            if 1 <= chosen <= count:
                return question.options[chosen - 1][0]
            prompt = f"{answer.strip()!r} is not one of 1-{count}; choose a number (empty: refuse): "


def why_interrupted(reason: str, began: bool = True) -> str:
    """Why a prompt was interrupted, in the sentence the editors' chats show
    (``reason`` of the settled ``mevedel/turn/didUpdate``); ``began`` False:
    stopped while its agent started, it never reached the agent."""
    said = "Interrupted" if began else "Aborted before it reached the agent"
    return f"{said}: {reason}{'' if reason.endswith('.') else '.'}"


def _tool_context(local: Path | None, service: SessionService, mcp: McpAccess | None, artifacts: SessionArtifacts | None = None):
    """The resolver context of a tool call by the session's agent: this
    CLI client's, as ``mevedel mcp`` binds it on its own (writes only while
    this client holds the session open and writable; ``mcp://`` through the
    CLI's configured servers). ``artifacts`` is the workspace's store, told
    of the artifact files the agent's ApplyPatch writes."""

    def context(session_id: str) -> ResolverContext:
        # Imported at the agent's first tool call: the resolvers are not
        # needed before the answer starts.
        from ..tool_server import StandaloneContext

        # One constructor, local or SSH (``local`` None): the session's
        # working directory (a Worktree Fork's checkout) comes with it.
        return StandaloneContext(local, service, session_id, mcp=mcp).resolver_context()

    context.artifacts = lambda: artifacts  # type: ignore[attr-defined]
    return context


async def _last_or_new(service: SessionService, arguments: argparse.Namespace, front: TerminalFront, rows: list) -> str:
    """The session a prompt goes to when this client holds none: its last
    session of the workspace when that is free (continued, and said so),
    else a new one. A last session another client holds is never left
    silently for a new one: the prompt is refused naming the holder.
    ``rows``: the prompt's listing."""
    last = last_session(arguments)
    row = None
    if last is not None:
        row = next((r for r in rows if r.session_id == last), None)
    if row is None:
        return (await new_session(service, arguments)).session_id
    name = f"{row.session_id} ({row.display_name})" if row.display_name != row.session_id else row.session_id
    holder = row.holder_host or "another client"
    if row.action is SessionAction.JOIN:
        # A new session would work beside the held one: the advisory's
        # flag is named with it, not left for the next refusal to say.
        raise CommandError("lease-held", f"your last session {name} is held by {holder}: `mevedel session take-control {row.session_id}` "
                                         "asks for it, `mevedel prompt --new --beside-held` starts a new session beside it "
                                         "(both change this project's files)")
    if row.action is SessionAction.TAKE_OVER:
        lapsed = "whose process here has ended" if row.holder_ended else "whose lease expired"
        raise CommandError("lease-held", f"your last session {name} was held by {holder}, {lapsed}: "
                                         f"`mevedel session take-control {row.session_id} --confirm-takeover` takes it over, "
                                         f"`mevedel prompt --new` starts a new session")
    if not arguments.json:
        front.note(f"[continuing your last session {name}; `mevedel prompt --new` starts a new one]")
    return row.session_id


async def _choose(engine: Any, session_id: str, arguments: argparse.Namespace) -> None:
    """``--mode`` and ``--set``: the choice the prompt applies first (the
    prompt fails, naming it, when the agent does not take it)."""
    from ..agents import parse_assignment

    try:
        config = dict(parse_assignment(text) for text in arguments.set_options)
        await engine.options.choose(session_id, agent=arguments.agent, mode=arguments.mode, config=config)
    except ValueError as error:
        raise CommandError("invalid-params", str(error)) from None
    except AgentError as error:
        raise CommandError(error.kind, error.message) from None


def run_prompt(arguments: argparse.Namespace) -> int:
    status = {"code": 0}
    text = sys.stdin.read() if arguments.text == "-" else arguments.text
    try:
        config = load_cli_config()
    except AgentError as error:
        raise SystemExit(f"mevedel: {error.message}") from None
    # The agent starts before the engine's imports, which take as long as
    # its own start (cli/agent_prestart.py).
    with loading():
        prestart_for(arguments, config)
        from ..agents import AgentEngine, kept_reads

    async def body(service: SessionService) -> None:
        nonlocal text
        if arguments.new and arguments.session is not None:
            raise CommandError("invalid-params", "give either --new or --session, not both")
        if arguments.queue and arguments.steer:
            raise CommandError("invalid-params", "give either --queue or --steer, not both")
        front = TerminalFront(arguments.json)
        service.sessions.reads_input_history = True  # read where the session is created or resumed
        # The lease names this process from its claim to its exit, not only
        # while its turn is open: killed while its agent starts, or while it
        # stops its agent after its last settlement, it is proven dead too.
        service.sessions.opens_for_turn = True
        # So is the workspace's file record: the turn's walk starts from it.
        service.sessions.open_reads = kept_reads()
        if text is None:
            text = await typed_prompt(service, front.note)
        service.sessions.input_to_record = text  # a resume writes it in its claim's program
        if arguments.new:
            session_id = (await new_session(service, arguments)).session_id
        else:
            # One listing says which session this client holds, and else
            # whether its last one is free (a round trip on SSH).
            rows = (await service.sessions.list()).rows
            try:
                session_id = await held_session(service, arguments.session, announce=arguments, rows=rows)
            except CommandError as error:
                if arguments.session is not None or error.kind != "owner-missing":
                    raise
                session_id = await _last_or_new(service, arguments, front, rows)
            if service.is_open(session_id):
                runner = await other_runner(service, session_id)
            else:
                # The runner record is read with the committed bytes; one
                # found stops the resume before the lease is claimed.
                service.sessions.resume_check = RunnerCheck(service)
                try:
                    await service.sessions.open(session_id, "resume")
                    runner = None
                except RunnerRunning as running:
                    runner = running.runner
                finally:
                    service.sessions.resume_check = None
            if runner is not None:
                # Another `mevedel prompt` of this client runs the session's
                # turn: its lease is left alone (opening it would take it).
                remember_session(arguments, session_id)
                if not (arguments.queue or arguments.steer):
                    raise refusal(session_id, runner)
                queued = await queue_behind(service, session_id, runner, text, arguments, steer=arguments.steer)
                said_history = await service.sessions.record_input(session_id, text, queued_for_runner=True)
                if said_history:
                    front.note(f"[{said_history}]")
                said = "steering: its turn is being cancelled; yours goes next" if arguments.steer else "queued: it is sent when the running turn settles"
                emit(arguments, queued, [f"[{said} (in pid {runner.pid}, which shows its answer)]"])
                return
        remember_session(arguments, session_id)
        if (arguments.queue or arguments.steer) and not arguments.json:
            front.note("[no other `mevedel prompt` of yours runs a turn of this session: sending it now]")
        said = await interrupt_orphaned_turn(service, session_id)
        if said:
            front.note(f"[{said}]")
        refused = turn_in_flight_refusal(service, session_id)
        if refused is not None:
            raise refused
        local = workspace_root(arguments)
        root = str(local) if local is not None else str(getattr(service.target, "root"))
        tool_host = ToolHost()
        try:
            # An agent cannot approve anything: a workspace .mcp.json server
            # it names runs only once the user approved it in a terminal.
            # An SSH workspace's .mcp.json is read through its target; its servers run here.
            mcp = configured_access(local or workspace_location(arguments), cli_config_path(),
                                    how_to_approve=APPROVE_IN_A_TERMINAL, remote=service.target)
        except ValueError as error:
            raise CommandError("invalid-params", str(error)) from None
        artifacts = session_artifacts(service)
        engine = AgentEngine(service, root=root, config=lambda: config, front=front, log_dir=log_dir(),
                             tool_host=tool_host, tool_context=_tool_context(local, service, mcp, artifacts),
                             local_cwd=str(local) if local is not None else None)
        engine.file_state.preload(service.sessions.open_found)
        if arguments.mode is not None or arguments.set_options:
            await _choose(engine, session_id, arguments)
        mark = RunnerMark(service, session_id)
        mark.ride_first_save()
        engine.before_turn.append(mark.turn_starting)
        engine.before_settle.append(mark.turn_settling)
        # After the runner record: the history's guarded write rides last
        # (a history changed meanwhile stops nothing that follows it).
        said = await service.sessions.record_input(session_id, text)
        if said:
            front.note(f"[{said}]")
        loop = asyncio.get_running_loop()
        await engine.queue.state(session_id)  # what an earlier process left, under the restart rules
        task = asyncio.ensure_future(engine.prompt(session_id, text, agent=arguments.agent, attachments=arguments.attach,
                                                   on_begun=lambda turn: mark.mark_after_first_save()))
        interrupted = {"yes": False, "killed": False}

        def cancel() -> None:
            # The first Ctrl-C asks the agent to end its turn; an agent may
            # take its time, or ignore it: the second ends its process.
            if not interrupted["yes"]:
                interrupted["yes"] = True
                front.note("[cancelling: waiting for the agent to stop; Ctrl-C again stops its process]")
                asyncio.ensure_future(engine.cancel(session_id))
            elif not interrupted["killed"]:
                interrupted["killed"] = engine.kill(session_id)
                if interrupted["killed"]:
                    front.note("[stopping the agent's process]")

        def steered() -> None:
            # Another `mevedel prompt --steer` queued steering for this
            # session: the turn ends, the steering goes next.
            front.note("[steering arrived from another `mevedel prompt`: cancelling this turn]")
            asyncio.ensure_future(engine.cancel(session_id))

        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(signal.SIGINT, cancel)
            loop.add_signal_handler(STEER_SIGNAL, steered)
        aborted: AgentError | None = None
        settled: TurnUpdate | None = None
        try:
            try:
                outcome = await task
            except AgentError as error:
                if error.kind != PROMPT_ABORTED:
                    raise CommandError(error.kind, error.message) from None
                # Stopped while its agent started (Ctrl-C, a steering): no
                # turn began; what was queued meanwhile still goes.
                outcome, aborted = None, error
            settled = front.settled  # its own, before any queued prompt's turn
            await engine.queue.drained()  # what was queued meanwhile goes, each its own turn
        except AgentError as error:
            raise CommandError(error.kind, error.message) from None
        finally:
            with contextlib.suppress(NotImplementedError):
                loop.remove_signal_handler(signal.SIGINT)
                loop.remove_signal_handler(STEER_SIGNAL)
            await mark.__aexit__()
            said = await service.sessions.input_recorded()  # when no commit carried it
            if said:
                front.note(f"[{said}]")
            try:
                await engine.stop_all()
            finally:
                try:
                    await tool_host.close()
                finally:
                    try:
                        if mcp is not None:
                            await mcp.connections.close_all()
                    finally:
                        await artifacts.close()  # the turn's artifact versions are recorded first
        reason = settled.reason if settled is not None else None
        if outcome is None:
            assert aborted is not None
            reason = reason or "aborted"
            data = {"session_id": session_id, "turn": None, "turn_id": None, "agent": settled.agent if settled else None,
                    "outcome": "interrupted", "stop_reason": None, "reason": reason,
                    "error": {"kind": aborted.kind, "message": aborted.message}}
            lines = [f"mevedel: {why_interrupted(reason, began=False)}"]  # no turn began: no turn to name
        else:
            data = {
                "session_id": outcome.session_id, "turn": outcome.turn, "turn_id": outcome.turn_id, "agent": outcome.agent,
                "outcome": outcome.outcome, "stop_reason": outcome.stop_reason, "reason": reason,
                "error": None if outcome.error is None else {"kind": outcome.error.kind, "message": outcome.error.message},
            }
            lines = []
            if outcome.outcome != "completed":
                lines.append(f"mevedel: turn {outcome.turn} of {outcome.session_id} {outcome.outcome}"
                             + (f": {outcome.error.message}" if outcome.error else ""))
            if outcome.outcome == "interrupted" and reason:
                lines.append(why_interrupted(reason))
        if arguments.json:
            emit(arguments, data, [])
        else:
            for line in lines:
                print(line, file=sys.stderr)
        if outcome is None or outcome.outcome == "interrupted" or interrupted["yes"]:
            status["code"] = INTERRUPTED
        elif outcome.outcome != "completed":
            status["code"] = TURN_FAILED

    code = run_command(arguments, body)
    return code or status["code"]
