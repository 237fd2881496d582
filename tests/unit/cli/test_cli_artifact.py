"""``mevedel artifact ...`` as subprocesses: the workspace artifact store
from the command line, attached to the session this CLI client holds, with
refusals that name the input and never a traceback."""

from __future__ import annotations

from test_cli_session import cli, committed, ok, refused


def test_the_store_from_the_command_line(workspace, tmp_path):
    state = tmp_path / "state"
    sid = ok(cli(workspace, state, "session", "create", "--name", "Work", "--prompt", "draw", "--json"))["session_id"]
    (workspace / "page.html").write_text("<h1>v1</h1>\n")
    page = ok(cli(workspace, state, "artifact", "create", "artifact", "Landing page", "--file-name", "index.html", "--from", "page.html", "--json"))
    assert page["attached"] and page["primary"] == "index.html"
    doc = ok(cli(workspace, state, "artifact", "create", "document", "Notes", "--json"))
    ok(cli(workspace, state, "artifact", "detach", doc["id"], "--json"))
    listing = cli(workspace, state, "artifact", "list")
    assert listing.returncode == 0
    assert listing.stdout.splitlines() == [
        f"* {page['id']}  Landing page  (artifact, index.html, 1 version)",
        f"  {doc['id']}  Notes  (document, document.md, 1 version)",
    ]
    assert committed(workspace, sid).sidecar.attached_artifacts == [page["id"]]

    shown = ok(cli(workspace, state, "artifact", "show", page["id"], "--json"))
    ok(cli(workspace, state, "artifact", "write", page["id"], "-", "--base", shown["revision"], "--json", stdin="<h1>v2</h1>\n"))
    message = refused(cli(workspace, state, "artifact", "write", page["id"], "-", "--base", shown["revision"], "--json", stdin="x"), "conflict")
    assert page["id"] in message
    assert cli(workspace, state, "artifact", "show", page["id"]).stdout == "<h1>v2</h1>\n"
    ok(cli(workspace, state, "artifact", "save-version", page["id"], "--json"))
    versions = ok(cli(workspace, state, "artifact", "versions", page["id"], "--json"))["versions"]
    assert [v["reason"] for v in versions] == ["saved", "created"]
    ok(cli(workspace, state, "artifact", "restore", page["id"], "1", "--json"))
    assert cli(workspace, state, "artifact", "show", page["id"]).stdout == "<h1>v1</h1>\n"
    note = ok(cli(workspace, state, "artifact", "comment", page["id"], "make it bold", "--json"))
    assert note["session_id"] == sid
    copy = ok(cli(workspace, state, "artifact", "duplicate", page["id"], "--title", "Landing page v2", "--json"))
    assert copy["attached"] and copy["id"] != page["id"]
    ok(cli(workspace, state, "artifact", "delete", page["id"], "--json"))
    titles = [i["title"] for i in ok(cli(workspace, state, "artifact", "list", "--json"))["items"]]
    assert titles == ["Landing page v2", "Notes"]
    assert not (workspace / ".mevedel/artifacts" / page["id"]).exists()


def test_refusals_name_the_input(workspace, tmp_path):
    state = tmp_path / "state"
    assert "nosuch" in refused(cli(workspace, state, "artifact", "show", "nosuch", "--json"), "missing-target")
    assert "../x" in refused(cli(workspace, state, "artifact", "show", "../x", "--json"), "invalid-params")
    board = cli(workspace, state, "artifact", "create", "whiteboard", "B", "--from", "-", "--json", stdin="[]")
    assert "elements" in refused(board, "invalid-params")
    message = refused(cli(workspace, state, "artifact", "create", "artifact", "Tool", "--file-name", "run.sh", "--json"), "invalid-params")
    assert "run.sh" in message
    missing = refused(cli(workspace, state, "artifact", "create", "document", "D", "--from", "nope.md", "--json"), "missing-target")
    assert "nope.md" in missing
    item = ok(cli(workspace, state, "artifact", "create", "document", "D", "--json"))
    assert "session" in refused(cli(workspace, state, "artifact", "attach", item["id"], "--json"), "owner-missing")


def test_deleting_an_item_whose_primary_file_is_a_planted_link_fails_and_unlinks_nothing(workspace, tmp_path):
    state = tmp_path / "state"
    page = ok(cli(workspace, state, "artifact", "create", "artifact", "Page", "--file-name", "index.html", "--json"))
    primary = workspace / ".mevedel" / "artifacts" / page["id"] / "index.html"
    outside = tmp_path / "outside.html"
    outside.write_text("not yours\n")
    primary.unlink()
    primary.symlink_to(outside)
    message = refused(cli(workspace, state, "artifact", "delete", page["id"], "--json"), "containment")
    assert "index.html" in message and "symbolic link" in message and "nothing was deleted" in message
    assert primary.is_symlink() and outside.read_text() == "not yours\n"
    assert [i["id"] for i in ok(cli(workspace, state, "artifact", "list", "--json"))["items"]] == [page["id"]]
