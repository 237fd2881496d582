"""Approvals of workspace MCP servers, remembered outside every workspace.

An approval is of one server of one workspace with one exact command line:
keyed by the workspace, the server's name and its fingerprint (command,
arguments, environment, the program it resolves to and the sha256 of every
workspace file its command line names), so a changed ``.mcp.json`` entry,
or a changed script it runs (a pull, a checkout), is not approved any more. The file is ``$XDG_STATE_HOME/mevedel/mcp-approvals.json``
(``~/.local/state/...`` by default), owner-only, replaced atomically.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from pathlib import Path

from ..state_directory import state_directory
from .config import McpServerSpec, NotJson, load_json


def default_approvals_path() -> Path:
    return Path(state_directory()) / "mcp-approvals.json"


class Approvals:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or default_approvals_path()

    def _load(self) -> list[dict]:
        try:
            raw = load_json(self.path.read_bytes(), str(self.path))
        except FileNotFoundError:
            return []
        except (OSError, NotJson):
            return []  # an unreadable file approves nothing
        records = raw.get("approved") if isinstance(raw, dict) else None
        return [r for r in records if isinstance(r, dict)] if isinstance(records, list) else []

    @staticmethod
    def _matches(record: dict, workspace: str, spec: McpServerSpec) -> bool:
        return (
            record.get("workspace") == workspace
            and record.get("name") == spec.name
            and record.get("fingerprint") == spec.fingerprint
        )

    def approved(self, workspace: str, spec: McpServerSpec) -> bool:
        return any(self._matches(r, workspace, spec) for r in self._load())

    def approve(self, workspace: str, spec: McpServerSpec) -> None:
        records = [r for r in self._load() if not (r.get("workspace") == workspace and r.get("name") == spec.name)]
        records.append(
            {
                "workspace": workspace,
                "name": spec.name,
                "fingerprint": spec.fingerprint,
                "command": spec.command_line,
                "program": spec.program,
                "files": {path: digest for path, digest in spec.files},
                "approvedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
        )
        self._write(records)

    def revoke(self, workspace: str, name: str) -> bool:
        records = self._load()
        kept = [r for r in records if not (r.get("workspace") == workspace and r.get("name") == name)]
        if len(kept) != len(records):
            self._write(kept)
        return len(kept) != len(records)

    def _write(self, records: list[dict]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, temporary = tempfile.mkstemp(prefix=".mcp-approvals.", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as stream:
                json.dump({"approved": records}, stream, indent=1)
                stream.flush()
                os.fsync(stream.fileno())
            os.replace(temporary, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
