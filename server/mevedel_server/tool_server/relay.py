"""``mevedel mcp`` in relay mode: the agent's stdio MCP server is a pipe to
the tool host (:mod:`.host`) of the mevedel process that started the agent.

The relay connects to ``MEVEDEL_TOOL_SOCKET``, sends ``MEVEDEL_TOOL_TOKEN``
on the first line and waits for the host's ``ok``; from then on it copies
bytes both ways between its standard input/output and the socket, with two
threads blocked in their reads (no polling). Every tool call runs in the
host's process; the relay only carries bytes.

It ends when either side closes: the host closing the connection ends it
at once (status 0); its standard input closing (the agent is done) shuts
the socket's sending half, and it ends when the host has answered what was
in flight and closed (at most :data:`DRAIN_TIMEOUT` later). A missing
socket, a refused token or a lost connection is one line on standard error
and status 1.
"""

from __future__ import annotations

import os
import socket
import sys
import threading

#: Environment variables the relay reads (the host sets them for the agent).
SOCKET_ENV = "MEVEDEL_TOOL_SOCKET"
TOKEN_ENV = "MEVEDEL_TOOL_TOKEN"
#: The host's answers to the token line.
ACCEPTED = b"ok\n"
REFUSED = b"refused\n"
#: Seconds a new connection has to send its token line (and the relay
#: waits for the answer).
HANDSHAKE_TIMEOUT = 10.0
#: Bytes per read.
CHUNK = 64 * 1024
#: Seconds the host has to finish after the agent closed our input.
DRAIN_TIMEOUT = 5.0

FAILED = 1


class RelayError(Exception):
    pass


def _fail(message: str) -> int:
    print(f"mevedel mcp: {message}", file=sys.stderr, flush=True)
    return FAILED


def _connect(socket_path: str, token: str) -> tuple[socket.socket, bytes]:
    """A connection the host accepted, and any bytes it sent after ``ok``."""
    if not socket_path:
        raise RelayError(f"{SOCKET_ENV} is empty; it names the tool socket of the mevedel server that started this agent")
    if not token or any(c in token for c in "\r\n\x00"):
        raise RelayError(f"{TOKEN_ENV} is empty or not one line; it is the token the mevedel server gave this agent")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(HANDSHAKE_TIMEOUT)
        try:
            sock.connect(socket_path)
        except (FileNotFoundError, ConnectionRefusedError):
            raise RelayError(
                f"no mevedel tool server at {socket_path} ({SOCKET_ENV}); the mevedel server that started this agent has exited"
            ) from None
        except OSError as error:
            raise RelayError(f"cannot connect to the mevedel tool server at {socket_path} ({SOCKET_ENV}): {error.strerror or error}") from None
        try:
            sock.sendall(token.encode("utf-8") + b"\n")
            reply = b""
            while b"\n" not in reply and len(reply) < 64:
                chunk = sock.recv(64)
                if not chunk:
                    break
                reply += chunk
        except TimeoutError:
            raise RelayError(f"the mevedel tool server at {socket_path} did not answer within {HANDSHAKE_TIMEOUT:g} s") from None
        except OSError as error:
            raise RelayError(f"the mevedel tool server at {socket_path} closed the connection: {error.strerror or error}") from None
        line, _, rest = reply.partition(b"\n")
        if line + b"\n" != ACCEPTED:
            raise RelayError(
                f"the mevedel tool server at {socket_path} refused the token in {TOKEN_ENV} "
                "(it is not one it gave, or its agent has stopped)"
            )
        sock.settimeout(None)
        return sock, rest
    except BaseException:
        sock.close()
        raise


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def relay_stdio(socket_path: str, token: str, *, stdin_fd: int = 0, stdout_fd: int = 1) -> int:
    """Relay an MCP session between stdio and the tool host; the exit status."""
    try:
        sock, early = _connect(socket_path, token)
    except RelayError as error:
        return _fail(str(error))
    done = threading.Event()
    outcome: dict[str, str | None] = {"down": None, "up": None}

    def down() -> None:  # host -> agent
        try:
            if early:
                _write_all(stdout_fd, early)
            while True:
                data = sock.recv(CHUNK)
                if not data:
                    outcome["down"] = "closed"
                    return
                _write_all(stdout_fd, data)
        except BrokenPipeError:
            outcome["down"] = "agent gone"
        except OSError as error:
            outcome["down"] = f"lost: {error.strerror or error}"
        finally:
            done.set()

    def up() -> None:  # agent -> host
        try:
            while True:
                data = os.read(stdin_fd, CHUNK)
                if not data:
                    break
                sock.sendall(data)
            outcome["up"] = "closed"
            try:
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        except OSError as error:
            outcome["up"] = f"lost: {error.strerror or error}"
        finally:
            done.set()

    readers = [threading.Thread(target=down, name="relay-down", daemon=True), threading.Thread(target=up, name="relay-up", daemon=True)]
    for thread in readers:
        thread.start()
    done.wait()
    if outcome["down"] is None:
        # Our input ended (the agent is done) or the host stopped reading:
        # the host answers what is in flight and closes.
        readers[0].join(DRAIN_TIMEOUT)
    try:
        sock.close()
    except OSError:
        pass
    down_said, up_said = outcome["down"] or "", outcome["up"] or ""
    if down_said.startswith("lost"):
        return _fail(f"the connection to the mevedel tool server at {socket_path} was {down_said}")
    if not down_said and up_said.startswith("lost"):
        return _fail(f"the connection to the mevedel tool server at {socket_path} was {up_said}")
    return 0
