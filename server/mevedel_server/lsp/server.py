"""The mevedel language server: pygls' LanguageServer plus this client's
state (settings, and the current session of each workspace folder), and its
exit sequence: the exit hooks (``on_exit``), then every open session saved
and released, bounded in time."""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.exceptions import FeatureRequestError, JsonRpcException
from pygls.lsp.server import LanguageServer

from mevedel_protocol import Settings
from mevedel_protocol.errors import INTERNAL_ERROR

from ..version import LSP_NAME, VERSION
from .transport.wire_protocol import MevedelProtocol, plain_json_converter
from .workspaces import Folder, same_folder

if TYPE_CHECKING:
    from .session_registry import SessionRegistry

_log = logging.getLogger(__name__)

#: How long the exit hooks may run, together, before the exit goes on without them.
EXIT_HOOK_SECONDS = 2.0
#: How long saving and releasing the open sessions may take at exit (an
#: unreachable SSH host never answers) before the server exits anyway.
EXIT_RELEASE_SECONDS = 4.0


class MevedelLanguageServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__(
            LSP_NAME,
            VERSION,
            protocol_cls=MevedelProtocol,
            converter_factory=plain_json_converter,
            text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
        )
        self.settings = Settings()
        #: The workspaces' sessions (``sessions.register`` installs it).
        self.sessions: SessionRegistry | None = None
        #: Called after settings change (features re-publish what depends on them).
        self.on_settings_changed: list[Callable[[], None]] = []
        #: Async stop work of features (an agent engine stops its processes),
        #: run together once when the server ends, however it ends (shutdown,
        #: exit, end of input, SIGTERM, SIGHUP, SIGINT), before the open
        #: sessions are saved and released. A hook that fails is logged; one
        #: that outlasts ``EXIT_HOOK_SECONDS`` is cancelled.
        self.on_exit: list[Callable[[], Awaitable[None]]] = []
        #: The client asked to shut down (an exit after that is status 0).
        self.shutdown_requested = False
        #: The process status the exit notification asked for (None before it).
        self.exit_status: int | None = None
        #: The user accepted starting a session beside a held one
        #: (``handlers.start_session``): not asked again by this process.
        self.beside_held_accepted = False
        self._stopping: asyncio.Future[bool] | None = None

    def current_session(self, folder: Folder) -> str | None:
        opened = self.sessions.current(folder) if self.sessions is not None else None
        if opened is not None:
            return opened
        chosen = self.settings.current_session
        if chosen is None or isinstance(chosen, str):
            return chosen
        for uri, session_id in chosen.items():
            if same_folder(uri, folder):
                return session_id
        return None

    def report_server_error(self, error: Exception, source: Any) -> None:
        """Failures outside a request (a notification handler, a message that
        does not parse). pygls would show the exception text, which may hold
        a path; the user gets a fixed sentence and the log gets the rest."""
        if source is FeatureRequestError and _refusal(error):
            _log.info("refused: %s", error)  # the client's input; its error response says so
            return
        _log.error("server error (%s): %r", getattr(source, "__name__", source), error, exc_info=error)
        if source is FeatureRequestError:
            return  # the request's own error response already said it
        self.window_show_message(
            types.ShowMessageParams(
                type=types.MessageType.Error, message="mevedel-lsp hit an internal error; details are in its log"
            )
        )

    def settings_changed(self) -> None:
        for callback in self.on_settings_changed:
            callback()

    # The exit sequence ------------------------------------------------------------

    async def stop(self, reason: str) -> bool:
        """Run the exit hooks, then save and release every open session.
        Runs once; later calls wait for the first (``reason``, for the log,
        is the first caller's). False when a step gave up on its time limit
        (the caller should exit without waiting for anything else, see
        ``exit_now``)."""
        if self._stopping is None:
            _log.info("%s: stopping (exit hooks, then saving and releasing the open sessions)", reason)
            self._stopping = asyncio.ensure_future(self._stop())
        return await asyncio.shield(self._stopping)

    async def _stop(self) -> bool:
        finished = True
        if self.on_exit:
            hooks = asyncio.gather(*(_run_hook(hook) for hook in self.on_exit), return_exceptions=True)
            if await _within(EXIT_HOOK_SECONDS, hooks):
                for hook, outcome in zip(self.on_exit, hooks.result()):
                    if isinstance(outcome, BaseException):
                        _log.error("exit hook %s failed", getattr(hook, "__qualname__", hook), exc_info=outcome)
            else:
                _log.error("exit hooks still running after %s seconds; going on without them", EXIT_HOOK_SECONDS)
                finished = False
        if self.sessions is not None:
            closing = asyncio.ensure_future(self.sessions.close_all())
            if not await _within(EXIT_RELEASE_SECONDS, closing):
                _log.error(
                    "gave up saving and releasing the open sessions after %s seconds; "
                    "a session not released stays held until its lease expires",
                    EXIT_RELEASE_SECONDS,
                )
                finished = False
            elif not closing.cancelled() and closing.exception() is not None:  # exiting must not fail on one session
                _log.error("closing the sessions at exit", exc_info=closing.exception())
        return finished

    def exit_now(self, status: int, *, finished: bool = False) -> None:
        """End the process at once, once the exit sequence is over. Nothing
        after it is waited for: the interpreter's teardown would wait
        without a bound for every task left (one that swallows its
        cancellation never ends), for the default executor's threads (a
        program of a ``LocalTarget`` or a name lookup under way) and for
        threads a step that gave up (``finished`` False) left blocked."""
        if finished:
            _log.info("stopped; exiting with status %s", status)
        else:
            _log.info("exiting with status %s without waiting for unfinished work", status)
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(status)


def _refusal(error: BaseException | None) -> bool:
    """An error answer about the client's input (not a fault of ours)."""
    return isinstance(error, JsonRpcException) and error.code != INTERNAL_ERROR


class _QuietRefusals(logging.Filter):
    """pygls logs every error answer, and every message whose params do not
    decode, with a traceback; a refusal of the client's input (invalid
    params, a missing target) is no fault of the server, is logged as a
    warning by ``wire_protocol`` already, and its traceback only buries the
    real ones."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        if message.startswith("Unable to deserialize message"):
            return False
        return not (record.exc_info and _refusal(record.exc_info[1]) and message.startswith("Exception occurred"))


logging.getLogger("pygls.protocol.json_rpc").addFilter(_QuietRefusals())


async def _run_hook(hook: Callable[[], Awaitable[None]]) -> None:
    await hook()


async def _within(seconds: float, step: asyncio.Future) -> bool:
    """Whether ``step`` ended within ``seconds``. One that did not is
    cancelled and left behind, not awaited: the exit must not depend on
    its honouring the cancellation (``asyncio.timeout`` would wait for the
    block to end, and a stop that awaits its own task and swallows the
    CancelledError, then releases a lease on a host that never answers,
    never ends)."""
    done, _ = await asyncio.wait({step}, timeout=seconds)
    if done:
        return True
    step.cancel()
    return False


def build_server(features: Sequence[str]) -> MevedelLanguageServer:
    """A server with ``features`` registered: the names of this package's
    feature modules, each of which has ``register(ls)`` adding its handlers.
    The entry point chooses the list (``main.FEATURES``); the server never
    imports a feature, so no feature's import of the server runs back."""
    ls = MevedelLanguageServer()
    for name in features:
        importlib.import_module(f"{__package__}.{name}").register(ls)
    _register_exit(ls)
    _register_start(ls)
    return ls


def _register_start(ls: MevedelLanguageServer) -> None:
    """``initialized``: the workspace folders' session services start (and
    sweep their expired sessions in the background)."""

    @ls.feature(types.INITIALIZED)
    def initialized(ls: MevedelLanguageServer, *_args: Any) -> None:
        from .workspaces import folders

        if ls.sessions is not None:
            ls.sessions.start(folders(ls))


def _register_exit(ls: MevedelLanguageServer) -> None:
    """``shutdown`` and ``exit`` run the exit sequence (``stop``); end of
    input and signals run it from ``main.serve``."""
    # sessions.register answers shutdown by closing the sessions alone; the
    # exit hooks must run before that, so the exit sequence takes it over.
    ls.protocol.fm.features.pop(types.SHUTDOWN, None)

    @ls.feature(types.SHUTDOWN)
    async def shutdown(ls: MevedelLanguageServer, *_args: Any) -> None:
        ls.shutdown_requested = True
        await ls.stop("shutdown requested")

    @ls.feature(types.EXIT)
    async def exit_(ls: MevedelLanguageServer, *_args: Any) -> None:
        # The process ends here: pygls would end the event loop, whose
        # teardown waits for whatever is left (see exit_now).
        ls.exit_status = 0 if ls.shutdown_requested else 1
        finished = await ls.stop("exit without shutdown")
        ls.exit_now(ls.exit_status, finished=finished)
