"""Where an SSH target is and how to reach it.

A location is ``ssh://[user@]host[:port]/path`` or a host (an alias of the
user's ``~/.ssh/config`` works, as ``user@host`` does) with the root given
separately. A path ``/~`` or ``/~/dir`` is relative to the remote home
directory. Connection settings come from the user's usual OpenSSH client
configuration through asyncssh (host aliases, ``HostName``, ``Port``,
``User``, ``IdentityFile``, ``IdentityAgent``, ``UserKnownHostsFile``...),
with host key checking always on: a configuration that turns it off is
refused, never obeyed.

A host that goes silent is found out in bounded time, whatever the
configuration says: every connection sends keepalives (OpenSSH's
``ServerAliveInterval``/``ServerAliveCountMax`` when the configuration sets
them, else every :data:`KEEPALIVE_INTERVAL` seconds, :data:`KEEPALIVE_COUNT_MAX`
unanswered ones ending the connection), and connecting gives up after
``ConnectTimeout`` seconds (else :data:`CONNECT_TIMEOUT`). A value of 0,
which turns either off in OpenSSH, gets the default too: an editor's save
must not wait forever on a host that dropped off the network.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import quote, unquote, urlsplit

import msgspec

from .remote_errors import HostKeyRefused, SshLocationError

if TYPE_CHECKING:
    import asyncssh

SCHEME = "ssh://"

#: Seconds without a word from the host before a keepalive is sent, when
#: the SSH configuration sets no ``ServerAliveInterval`` (OpenSSH sends none).
KEEPALIVE_INTERVAL = 15.0
#: Keepalives left unanswered before the connection is given up for dead,
#: when the configuration sets no ``ServerAliveCountMax`` (OpenSSH's 3).
KEEPALIVE_COUNT_MAX = 3
#: Seconds connecting may take in all (TCP, handshake and login, every
#: attempt), when the configuration sets no ``ConnectTimeout``. OpenSSH
#: would wait for the system's TCP timeout, then without a bound for a
#: host that accepted the connection and never answers.
CONNECT_TIMEOUT = 15.0


class SshLocation(msgspec.Struct, frozen=True):
    host: str
    #: Absolute remote path, or ``~``-relative to the remote home.
    root: str
    user: str | None = None
    port: int | None = None

    @property
    def display_host(self) -> str:
        """The host as a person wrote it (for messages): ``[user@]host[:port]``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        user = f"{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port is not None else ""
        return f"{user}{host}{port}"

    @property
    def uri(self) -> str:
        """The canonical ``ssh://[user@]host[:port]/path`` of this location
        (``/~/...`` for a home-relative root), percent-encoding what a URL
        cannot carry as it is; :func:`parse_ssh_location` reads it back."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        user = f"{quote(self.user, safe='')}@" if self.user else ""
        port = f":{self.port}" if self.port is not None else ""
        path = self.root if self.root.startswith("/") else f"/{self.root}"
        return f"{SCHEME}{user}{host}{port}{quote(path, safe='/~', errors='surrogateescape')}"


def _check_root(authored: str, root: str) -> str:
    if not root:
        raise SshLocationError(authored, "names no directory on the host")
    if "\x00" in root:
        raise SshLocationError(authored, "the directory contains a NUL byte")
    if root == "~" or root.startswith("~/"):
        return root
    if not root.startswith("/"):
        raise SshLocationError(authored, "the directory must be absolute or start with '~/'")
    return root


def _url_root(path: str) -> str:
    # "/~/x" is home-relative; a URL path is otherwise absolute.
    if path == "/~" or path.startswith("/~/"):
        return path[1:]
    return path


def parse_ssh_location(location: str, root: str | None = None) -> SshLocation:
    """Parse ``ssh://[user@]host[:port]/path``, or a ``[user@]host`` with
    ``root``; raises :class:`SshLocationError` naming the authored text."""
    if not isinstance(location, str) or not location.strip():
        raise SshLocationError(str(location), "an SSH location needs a host")
    if location.startswith(SCHEME):
        try:
            parts = urlsplit(location)
            port = parts.port
        except ValueError as exc:
            raise SshLocationError(location, f"not a valid ssh:// address ({exc})") from None
        if parts.query or parts.fragment:
            raise SshLocationError(location, "an ssh:// address takes no '?query' or '#fragment'")
        if parts.password is not None:
            masked = location.replace(f":{parts.password}@", ":***@", 1)
            raise SshLocationError(masked, "passwords do not belong in an ssh:// address; use keys or an agent")
        host = parts.hostname
        if not host:
            raise SshLocationError(location, "names no host")
        path = _url_root(unquote(parts.path, errors="surrogateescape"))
        if root is not None and path and root != path:
            raise SshLocationError(location, "give the directory in the address or separately, not both")
        user = unquote(parts.username) if parts.username else None
        return SshLocation(host, _check_root(location, path or (root or "")), user, port)
    if "/" in location or location.startswith("-"):
        raise SshLocationError(location, "expected ssh://[user@]host[:port]/path or a host name")
    user, _, host = location.rpartition("@")
    if not host:
        raise SshLocationError(location, "names no host")
    return SshLocation(host, _check_root(location, root or ""), user or None, None)


async def client_options(location: SshLocation, config=(), **options) -> asyncssh.SSHClientConnectionOptions:
    """The asyncssh options for ``location``: the user's OpenSSH configuration
    (``config=()``: ``~/.ssh/config``; a list of paths: those files) under
    any explicit ``options``, with the bounds on a silent host (see the
    module) filled in where neither sets them. Refuses host key checking
    turned off."""
    # Here, so that parsing a location does not load asyncssh.
    from .asyncssh_import import asyncssh
    explicit = {k: v for k, v in options.items() if v != ()}
    if location.user:
        explicit["username"] = location.user
    try:
        resolved = await asyncssh.SSHClientConnectionOptions.construct(
            config=config, host=location.host, port=location.port if location.port is not None else (), **explicit
        )
        bounds = _silent_host_bounds(resolved)
        if bounds:
            resolved = await asyncssh.SSHClientConnectionOptions.construct(resolved, **bounds)
    except (OSError, ValueError, asyncssh.Error) as exc:
        raise SshLocationError(location.display_host, f"unusable SSH settings: {exc}") from None
    if resolved.known_hosts is None:
        raise HostKeyRefused(
            location.display_host,
            "host key checking is turned off for this host (UserKnownHostsFile none or known_hosts=None); "
            "refusing to connect to an unverified host",
        )
    return resolved


def _silent_host_bounds(resolved: asyncssh.SSHClientConnectionOptions) -> dict:
    """The defaults for the limits that ``resolved`` (the configuration
    and the explicit options) leaves unset or turned off."""
    bounds: dict = {}
    if not resolved.keepalive_interval:
        bounds["keepalive_interval"] = KEEPALIVE_INTERVAL
        if resolved.config.get("ServerAliveCountMax") is None and "keepalive_count_max" not in resolved.kwargs:
            bounds["keepalive_count_max"] = KEEPALIVE_COUNT_MAX
    if not resolved.connect_timeout:
        bounds["connect_timeout"] = CONNECT_TIMEOUT
    return bounds
