"""``mevedel artifact list|create|show|write|attach|detach|duplicate|delete|
versions|save-version|restore|comment|conversation``: the workspace artifact
store from the command line (``docs/artifacts.md``).

Items are named by id (``list`` shows ids beside titles). A command works
in the session this CLI client holds in the workspace, or ``--session``;
with none, nothing is attached. A live item's lease is taken by a write
and released when the command ends (a CLI process renews nothing between
commands), so an editor holding the item makes the write fail with
``item-held`` and ``request-handover`` asks it to hand it over.
"""

from __future__ import annotations

import argparse
import base64
import sys
from pathlib import Path
from typing import Any

from ..artifacts import Listed, SessionArtifacts, is_text_file, session_artifacts
from ..store import SessionService, describe_target_time
from .session_client import (
    CommandError,
    add_common,
    add_session_option,
    emit,
    held_session,
    run_command,
)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("artifact", help="the workspace's artifacts, documents and whiteboards")
    commands = parser.add_subparsers(title="artifact commands", metavar="SUBCOMMAND", required=True)

    def command(name: str, run, help_text: str, *, item: bool = True, description: str | None = None):
        sub = commands.add_parser(name, help=help_text, description=description or help_text)
        if item:
            sub.add_argument("item_id", metavar="ID", help="the item's id (see mevedel artifact list)")
        add_session_option(sub)
        add_common(sub)
        sub.set_defaults(run=run)
        return sub

    command("list", run_list, "every item by title; * marks those attached to the session", item=False)
    create = command("create", run_create, "create a document, whiteboard or artifact", item=False)
    create.add_argument("kind", choices=("document", "whiteboard", "artifact"))
    create.add_argument("title", metavar="TITLE")
    create.add_argument("--from", dest="source", metavar="FILE", help="its content: a file ('-' reads stdin); default empty")
    create.add_argument("--file-name", help="an artifact's primary file name (report.md, chart.png, page.html)")
    show = command("show", run_show, "print an item's content (and its discussion with --comments)")
    show.add_argument("--comments", action="store_true", help="also print the discussion")
    write = command(
        "write",
        run_write,
        "replace an item's content",
        description="Replace the item's primary file with FILE ('-' reads stdin) as one whole-item write. "
        "--base REVISION refuses the write (conflict) when the item changed since that revision.",
    )
    write.add_argument("source", metavar="FILE")
    write.add_argument("--base", metavar="REVISION", help="the revision the change was made on (see show --json)")
    command("attach", run_attach, "attach the item to the session")
    command("detach", run_detach, "detach the item from the session")
    duplicate = command("duplicate", run_duplicate, "an independent copy under a new id")
    duplicate.add_argument("--title", help="the copy's title (default: TITLE (copy))")
    command("delete", run_delete, "delete the item, its versions, discussion and conversation")
    command("versions", run_versions, "the versions kept, newest first")
    command("save-version", run_save_version, "record the current content as a version")
    restore = command("restore", run_restore, "restore a version (an ordinary write, itself revertible)")
    restore.add_argument("version", type=int, metavar="N")
    comment = command("comment", run_comment, "add a comment to the item's discussion")
    comment.add_argument("text", metavar="TEXT", help="the comment ('-' reads stdin)")
    command("request-handover", run_request_handover, "ask the process editing a document or whiteboard to hand it over")
    command("conversation", run_conversation, "open (creating on first use) the item's own conversation session")


def _read_source(given: str) -> bytes:
    if given == "-":
        return sys.stdin.buffer.read()
    try:
        return Path(given).read_bytes()
    except OSError as error:
        raise CommandError("missing-target", f"{given}: cannot be read ({error.strerror or error})") from None


def _text(given: str) -> str:
    return sys.stdin.read() if given == "-" else given


def _entry(listed: Listed) -> dict[str, Any]:
    meta = listed.item.meta
    return {
        "id": meta.id,
        "title": meta.title,
        "kind": meta.kind,
        "primary": meta.primary,
        "attached": listed.attached,
        "updated_at": meta.updated_at,
        "versions": listed.item.versions,
        "holder_host": listed.item.holder_host,
        "holder": listed.item.holder,
    }


def _line(listed: Listed) -> str:
    meta = listed.item.meta
    mark = "*" if listed.attached else " "
    held = f"  [being edited by {listed.item.holder}]" if listed.item.holder_host else ""
    count = listed.item.versions
    return f"{mark} {meta.id}  {meta.title}  ({meta.kind}, {meta.primary}, {count} version{'' if count == 1 else 's'}){held}"


def _with_store(arguments: argparse.Namespace, body) -> int:
    """Run ``body(work, session_id)`` with the workspace's store; the
    session is ``--session`` or the one this CLI client holds (resumed),
    else none."""

    async def run(service: SessionService) -> None:
        work = session_artifacts(service)
        try:
            sid = await _session(service, arguments.session)
            await body(work, sid)
        finally:
            await work.close()

    # One thing at a time: its programs run on this thread, with no hop to
    # a worker and back (about 0.1 ms of a 1 ms version save on a fast disk).
    return run_command(arguments, run, inline=True)


async def _session(service: SessionService, given: str | None) -> str | None:
    try:
        sid = await held_session(service, given)
    except CommandError as error:
        if given is None and error.kind == "owner-missing":
            return None
        raise
    await service.sessions.open(sid, "resume")
    return sid


def run_list(arguments: argparse.Namespace) -> int:
    async def body(work: SessionArtifacts, sid: str | None) -> None:
        items = await work.list(sid)
        lines = [_line(i) for i in items] or ["no artifacts, documents or whiteboards in this workspace"]
        emit(arguments, {"session_id": sid, "items": [_entry(i) for i in items]}, lines)

    return _with_store(arguments, body)


def run_create(arguments: argparse.Namespace) -> int:
    async def body(work: SessionArtifacts, sid: str | None) -> None:
        data = None if arguments.source is None else _read_source(arguments.source)
        listed = await work.create(sid, arguments.kind, arguments.title, data, file_name=arguments.file_name)
        emit(arguments, _entry(listed), [f"created {listed.item.item_id}  {listed.item.meta.title}" + (" (attached)" if listed.attached else "")])

    return _with_store(arguments, body)


def run_show(arguments: argparse.Namespace) -> int:
    async def body(work: SessionArtifacts, sid: str | None) -> None:
        item, attached = await work.read(sid, arguments.item_id)
        text = item.meta.kind != "artifact" or is_text_file(item.meta.primary)
        content = item.data.decode("utf-8", "replace") if text else base64.b64encode(item.data).decode("ascii")
        data = {
            "id": item.meta.id,
            "title": item.meta.title,
            "kind": item.meta.kind,
            "primary": item.meta.primary,
            "content": content,
            "encoding": "utf-8" if text else "base64",
            "revision": item.revision,
            "attached": attached,
            "writable": item.writable,
            "holder_host": item.holder_host,
            "holder": item.holder,
            "comments": [
                {
                    "number": c.number,
                    "at": c.at,
                    "author": c.author,
                    "text": c.text,
                    "session_id": c.session_id,
                    "delivered_in": c.delivered_in,
                }
                for c in item.comments
            ],
        }
        if arguments.json:
            emit(arguments, data, [])
            return
        if text:
            sys.stdout.write(content)
        else:
            sys.stdout.buffer.write(item.data)
        if arguments.comments:
            for c in item.comments:
                print(f"\n#{c.number} {c.author} at {describe_target_time(c.at)}{_routing(c)}: {c.text}")
        sys.stdout.flush()

    return _with_store(arguments, body)


def run_write(arguments: argparse.Namespace) -> int:
    async def body(work: SessionArtifacts, sid: str | None) -> None:
        revision = await work.write(sid, arguments.item_id, _read_source(arguments.source), base_revision=arguments.base)
        emit(arguments, {"id": arguments.item_id, "revision": revision}, [f"{arguments.item_id}: written (revision {revision[:12]})"])

    return _with_store(arguments, body)


def run_attach(arguments: argparse.Namespace) -> int:
    async def body(work: SessionArtifacts, sid: str | None) -> None:
        session_id, _ = await work.attach(sid, arguments.item_id)
        emit(arguments, {"id": arguments.item_id, "session_id": session_id, "attached": True}, [f"{arguments.item_id}: attached to {session_id}"])

    return _with_store(arguments, body)


def run_detach(arguments: argparse.Namespace) -> int:
    async def body(work: SessionArtifacts, sid: str | None) -> None:
        session_id, _ = await work.detach(sid, arguments.item_id)
        emit(arguments, {"id": arguments.item_id, "session_id": session_id, "attached": False}, [f"{arguments.item_id}: detached from {session_id}"])

    return _with_store(arguments, body)


def run_duplicate(arguments: argparse.Namespace) -> int:
    async def body(work: SessionArtifacts, sid: str | None) -> None:
        listed = await work.duplicate(sid, arguments.item_id, arguments.title)
        emit(arguments, _entry(listed), [f"duplicated {arguments.item_id} as {listed.item.item_id}  {listed.item.meta.title}"])

    return _with_store(arguments, body)


def run_delete(arguments: argparse.Namespace) -> int:
    async def body(work: SessionArtifacts, sid: str | None) -> None:
        kept = await work.delete(arguments.item_id)
        note = f" (its conversation {kept} is running a turn and stays as an ordinary session)" if kept else ""
        emit(arguments, {"id": arguments.item_id, "kept_session": kept}, [f"{arguments.item_id}: deleted{note}"])

    return _with_store(arguments, body)


def _version(entry) -> dict[str, Any]:
    return {
        "number": entry.number,
        "at": entry.at,
        "reason": entry.reason.value,
        "size": entry.size,
        "revision": entry.sha256,
        "session_id": entry.session_id,
        "turn": entry.turn,
    }


def _version_line(entry) -> str:
    origin = f", turn {entry.turn} of {entry.session_id}" if entry.turn is not None else ""
    return f"{entry.number:>4}  {describe_target_time(entry.at)}  {entry.reason.value}{origin}  {entry.size} bytes"


def run_versions(arguments: argparse.Namespace) -> int:
    async def body(work: SessionArtifacts, sid: str | None) -> None:
        versions = await work.versions(arguments.item_id)
        emit(arguments, {"id": arguments.item_id, "versions": [_version(v) for v in versions]}, [_version_line(v) for v in versions])

    return _with_store(arguments, body)


def run_save_version(arguments: argparse.Namespace) -> int:
    async def body(work: SessionArtifacts, sid: str | None) -> None:
        entry = await work.save_version(sid, arguments.item_id)
        emit(arguments, _version(entry), [f"{arguments.item_id}: version {entry.number} saved"])

    return _with_store(arguments, body)


def run_restore(arguments: argparse.Namespace) -> int:
    async def body(work: SessionArtifacts, sid: str | None) -> None:
        revision = await work.restore(sid, arguments.item_id, arguments.version)
        emit(arguments, {"id": arguments.item_id, "revision": revision}, [f"{arguments.item_id}: version {arguments.version} restored"])

    return _with_store(arguments, body)


def run_comment(arguments: argparse.Namespace) -> int:
    async def body(work: SessionArtifacts, sid: str | None) -> None:
        c = await work.comment(sid, arguments.item_id, _text(arguments.text))
        routed = f" (for {c.session_id})" if c.session_id else ""
        emit(
            arguments,
            {"id": arguments.item_id, "number": c.number, "at": c.at, "author": c.author, "text": c.text, "session_id": c.session_id},
            [f"{arguments.item_id}: comment #{c.number} added{routed}"],
        )

    return _with_store(arguments, body)


def _routing(comment) -> str:
    if comment.session_id is None:
        return ""
    if comment.delivered_in is None:
        return f" (for {comment.session_id}, not yet delivered)"
    return f" (for {comment.session_id}, delivered in turn {comment.delivered_in})"


def run_request_handover(arguments: argparse.Namespace) -> int:
    async def body(work: SessionArtifacts, sid: str | None) -> None:
        item = await work.request_handover(arguments.item_id)
        line = (
            f"{arguments.item_id}: asked {item.holder} to hand it over (at once when nobody has written it there for 10 seconds, else once nobody has)"
            if item.holder_host
            else f"{arguments.item_id}: nobody else is editing it; write it"
        )
        emit(arguments, {"id": arguments.item_id, "holder_host": item.holder_host, "holder": item.holder}, [line])

    return _with_store(arguments, body)


def run_conversation(arguments: argparse.Namespace) -> int:
    async def body(work: SessionArtifacts, sid: str | None) -> None:
        session_id, created = await work.conversation(arguments.item_id)
        emit(
            arguments,
            {"id": arguments.item_id, "session_id": session_id, "created": created},
            [f"{arguments.item_id}: conversation {session_id}" + (" (created)" if created else "")],
        )

    return _with_store(arguments, body)
