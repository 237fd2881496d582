"""The custom resource requests over stdio: success shapes, every error kind
they can produce, progress, and the applyPatch command."""

from __future__ import annotations

import os

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from mevedel_protocol import methods

from .conftest import SESSION, request


async def failure(client, method: str, params) -> JsonRpcException:
    with pytest.raises(JsonRpcException) as caught:
        await request(client, method, params)
    error = caught.value
    assert set(error.data) == {"kind", "authored", "reason"}
    assert error.message == f"{error.data['authored']}: {error.data['reason']}"
    return error


def _no_backing_paths(workspace, payload) -> None:
    assert str(workspace) not in repr(payload)


async def test_read_a_page_of_a_file(client, workspace):
    page = await request(client, methods.RESOURCE_READ, {"address": "work://shared/notes.md", "offset": 2, "limit": 2})
    assert page["address"] == "work://shared/notes.md"
    assert page["text"] == "     2\talpha line\n     3\tbeta line"
    assert (page["startLine"], page["endLine"], page["totalLines"], page["nextOffset"]) == (2, 3, 4, 4)
    assert page["kind"] == "file"
    assert "next page: Read work://shared/notes.md offset=4" in page["notice"]
    plain = await request(client, methods.RESOURCE_READ, {"address": "work://shared/notes.md", "view": "plain"})
    assert plain["text"] == "# Notes\nalpha line\nbeta line\nalpha again"
    assert "nextOffset" not in plain


async def test_non_ascii_text_arrives_whole_and_the_stream_stays_framed(client, workspace):
    # Responses are UTF-8 on the wire: a Content-Length counting characters
    # instead of bytes would cut this one short and garble the next message.
    text = "Grüße, 日本語, emoji \U0001F600 and a tab\tend"
    (workspace / ".mevedel" / "shared" / "unicode.md").write_text(text + "\n", encoding="utf-8")
    for _ in range(2):
        plain = await request(client, methods.RESOURCE_READ, {"address": "work://shared/unicode.md", "view": "plain"})
        assert plain["text"] == text
    after = await request(client, methods.RESOURCE_READ, {"address": "work://shared/notes.md", "view": "plain"})
    assert after["text"].startswith("# Notes")


async def test_read_normalises_the_authored_spelling(client, workspace):
    page = await request(client, methods.RESOURCE_READ, {"address": "work://shared/a%2db.md"})
    assert page["address"] == "work://shared/a%2db.md" and page["canonical"] == "work://shared/a-b.md"


async def test_read_a_long_line_by_character_pages(client, workspace):
    (workspace / ".mevedel" / "shared" / "long.md").write_text("x" * 50 + "y" * 50 + "\n")
    page = await request(client, methods.RESOURCE_READ, {"address": "work://shared/long.md", "maxLineChars": 60})
    assert page["truncatedLines"] == [{"line": 1, "charOffset": 60}]
    rest = await request(
        client, methods.RESOURCE_READ, {"address": "work://shared/long.md", "offset": 1, "charOffset": 60, "maxLineChars": 60}
    )
    assert rest["text"] == "     1\t" + "y" * 40


async def test_read_session_files_and_listings(client, workspace):
    page = await request(client, methods.RESOURCE_READ, {"address": "work://plans/plan.md", "view": "plain"})
    assert page["text"] == "step one\nstep two"
    listing = await request(client, methods.RESOURCE_READ, {"address": "work://"})
    assert "work://plans/" in listing["text"] or "work://plans" in listing["text"]
    _no_backing_paths(workspace, listing)


async def test_glob(client, workspace):
    found = await request(client, methods.RESOURCE_GLOB, {"address": "work://shared/drafts", "pattern": "*.md"})
    assert found["matches"] == ["work://shared/drafts/first.md"]
    assert found["truncated"] is False
    bounded = await request(client, methods.RESOURCE_GLOB, {"address": "work://shared/big", "limit": 3})
    assert len(bounded["matches"]) == 3 and bounded["truncated"] is True


async def test_grep_with_context(client, workspace):
    found = await request(
        client,
        methods.RESOURCE_GREP,
        {"address": "work://shared/notes.md", "pattern": "ALPHA", "ignoreCase": True, "contextLines": 1},
    )
    assert [(m["line"], m["column"], m["preview"]) for m in found["matches"]] == [
        (2, 1, "alpha line"),
        (4, 1, "alpha again"),
    ]
    assert found["matches"][0]["before"] == [{"line": 1, "text": "# Notes"}]
    assert found["filesSearched"] == 1


async def test_grep_reports_progress_on_a_client_token(client, workspace):
    client.progress_reports["grep-1"] = []
    found = await request(
        client, methods.RESOURCE_GREP, {"address": "work://shared", "pattern": "entry 1\\d", "workDoneToken": "grep-1"}
    )
    assert len(found["matches"]) == 10
    reports = client.progress_reports["grep-1"]
    assert [report.kind for report in reports] == ["begin", "end"]
    assert reports[0].title == "Grep work://shared"
    assert reports[1].message.startswith("10 matches in ")
    client.progress_reports["grep-2"] = []
    await failure(client, methods.RESOURCE_GREP, {"address": "work://shared/nope", "pattern": "x", "workDoneToken": "grep-2"})
    assert [(r.kind, getattr(r, "message", None)) for r in client.progress_reports["grep-2"]][-1] == ("end", "failed")


async def test_describe(client, workspace):
    found = await request(client, methods.ADDRESS_DESCRIBE, {"address": "work://shared/notes.md"})
    assert found == {
        "address": "work://shared/notes.md",
        "canonical": "work://shared/notes.md",
        "family": "work",
        "locatorClass": "exact",
        "operations": ["Read", "Glob", "Grep", "ApplyPatch"],
        "status": "exists",
        "kind": "file",
        "size": len("# Notes\nalpha line\nbeta line\nalpha again\n"),
        "uri": (workspace / ".mevedel" / "shared" / "notes.md").as_uri(),
    }
    listing = await request(client, methods.ADDRESS_DESCRIBE, {"address": "artifact://"})
    assert listing["locatorClass"] == "discovery" and listing["uri"].startswith("mevedel-resource:/")
    assert SESSION in listing["uri"]
    missing = await request(client, methods.ADDRESS_DESCRIBE, {"address": "work://shared/gone.md"})
    assert missing["status"] == "missing"


async def test_validation_errors(client, workspace):
    cases = [
        (methods.RESOURCE_READ, {"address": "work://shared/%zz"}, "malformed-address"),
        (methods.RESOURCE_READ, {"address": "wrok://x"}, "unknown-scheme"),
        (methods.RESOURCE_READ, {"address": "https://example.com"}, "unknown-scheme"),
        (methods.RESOURCE_GLOB, {"address": "agent://"}, "unsupported-operation"),
        (methods.RESOURCE_READ, {"address": "work://shared/notes.md", "offset": 0}, "invalid-option"),
        (methods.RESOURCE_GREP, {"address": "work://shared", "pattern": "("}, "invalid-option"),
        (methods.ADDRESS_DESCRIBE, {"address": "work://shared/../x"}, "malformed-address"),
    ]
    for method, params, kind in cases:
        error = await failure(client, method, params)
        assert (error.data["kind"], error.code) == (kind, -32602), params
        assert error.data["authored"] == params["address"]


async def test_containment_error(client, workspace, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("secret\n")
    os.symlink(outside, workspace / ".mevedel" / "shared" / "escape")
    error = await failure(client, methods.RESOURCE_READ, {"address": "work://shared/escape/secret.md"})
    assert error.data["kind"] == "containment"
    assert str(outside) not in error.message and str(workspace) not in error.message


async def test_execution_errors(client, workspace):
    (workspace / ".mevedel" / "shared" / "blob.bin").write_bytes(b"\x00\x01\x02binary")
    cases = [
        ({"address": "work://shared/nope.md"}, "missing-target"),
        ({"address": "work://shared/notes.md", "offset": 99}, "out-of-range"),
        ({"address": "memory://local-mevedel/topic.md"}, "unavailable"),
        ({"address": "work://shared/blob.bin"}, "unreadable"),
        ({"address": "work://plans/plan.md", "sessionId": "2026-01-01T00-00-000000000000"}, "missing-target"),
    ]
    for params, kind in cases:
        error = await failure(client, methods.RESOURCE_READ, params)
        assert (error.data["kind"], error.code) == (kind, -32803), params
        _no_backing_paths(workspace, (error.message, error.data))
    out_of_range = await failure(client, methods.RESOURCE_READ, {"address": "work://shared/notes.md", "offset": 99})
    assert "retry Read work://shared/notes.md offset=1" in out_of_range.data["reason"]


async def test_owner_missing_without_a_session(client, workspace):
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"currentSession": None}))
    error = await failure(client, methods.RESOURCE_READ, {"address": "work://plans/plan.md"})
    assert error.data["kind"] == "owner-missing"
    # The shared scope belongs to the workspace, not the session.
    page = await request(client, methods.RESOURCE_READ, {"address": "work://shared/a-b.md"})
    assert page["kind"] == "file"
    # An explicit session still works.
    page = await request(client, methods.RESOURCE_READ, {"address": "work://plans/plan.md", "sessionId": SESSION})
    assert page["totalLines"] == 2


async def test_memory_roots_from_settings(client, workspace):
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(
            settings={"memoryRoots": [{"path": "memory", "location": "local", "kind": "mevedel"}]}
        )
    )
    page = await request(client, methods.RESOURCE_READ, {"address": "memory://local-mevedel/topic.md", "view": "plain"})
    assert page["text"] == "remembered"


async def test_virtual_uri_errors(client, workspace):
    bad = await failure(client, methods.RESOURCE_READ, {"uri": "mevedel-resource:/nope"})
    assert bad.data["kind"] == "invalid-params"
    gone = await failure(client, methods.RESOURCE_READ, {"uri": "mevedel-resource:/0123456789abcdef/_/work/shared"})
    assert gone.data["kind"] == "owner-missing"
    both = await failure(client, methods.RESOURCE_READ, {"uri": "mevedel-resource:/_/_/mevedel/", "address": "mevedel://"})
    assert both.data["kind"] == "invalid-params"


PATCH = """*** Begin Patch
*** Add File: work://shared/findings.md
+first finding
*** Update File: work://shared/notes.md
@@
 alpha line
-beta line
+beta line, revised
*** End Patch
"""


async def test_apply_patch(client, workspace):
    shared = workspace / ".mevedel" / "shared"
    result = await request(client, methods.RESOURCE_APPLY_PATCH, {"patch": PATCH})
    assert result["summary"] == "A work://shared/findings.md\nM work://shared/notes.md"
    assert result["changes"][0] == {"address": "work://shared/findings.md", "kind": "add", "added": 1, "removed": 0}
    assert (shared / "findings.md").read_text() == "first finding\n"
    assert "beta line, revised" in (shared / "notes.md").read_text()
    # The same hunk no longer applies: nothing changes, and the error says why.
    error = await failure(client, methods.RESOURCE_APPLY_PATCH, {"patch": PATCH.replace("findings", "other")})
    assert error.data["kind"] == "conflict" and error.code == -32803
    assert error.data["authored"] == "work://shared/notes.md"
    assert not (shared / "other.md").exists()


async def test_apply_patch_refusals(client, workspace):
    not_a_patch = await failure(client, methods.RESOURCE_APPLY_PATCH, {"patch": "hello"})
    assert not_a_patch.data["kind"] == "invalid-patch" and not_a_patch.code == -32602
    read_only = "*** Begin Patch\n*** Add File: mevedel://x.md\n+x\n*** End Patch\n"
    refused = await failure(client, methods.RESOURCE_APPLY_PATCH, {"patch": read_only})
    assert refused.data["kind"] == "unsupported-operation"


async def test_apply_patch_as_an_execute_command(client, workspace):
    patch = "*** Begin Patch\n*** Add File: work://shared/next.md\n+next step\n*** End Patch\n"
    result = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command=methods.COMMAND_APPLY_PATCH, arguments=[{"patch": patch}])
    )
    assert result["summary"] == "A work://shared/next.md"
    assert (workspace / ".mevedel" / "shared" / "next.md").read_text() == "next step\n"
    with pytest.raises(JsonRpcException) as caught:
        await client.workspace_execute_command_async(
            types.ExecuteCommandParams(command=methods.COMMAND_APPLY_PATCH, arguments=[])
        )
    assert caught.value.data["kind"] == "invalid-params"


async def test_a_patch_into_a_session_this_server_has_not_opened_is_refused_and_writes_nothing(client, workspace):
    # The current session is only named (a setting), not open here: its
    # work:// files are someone else's to write, and so are an unknown id's.
    local = workspace / ".mevedel" / "sessions" / SESSION / "local"
    before = sorted(p.relative_to(workspace) for p in workspace.rglob("*"))
    patch = "*** Begin Patch\n*** Add File: work://plans/next.md\n+next step\n*** End Patch\n"
    error = await failure(client, methods.RESOURCE_APPLY_PATCH, {"patch": patch})
    assert (error.data["kind"], error.data["authored"]) == ("owner-missing", "work://plans/next.md")
    assert f"session {SESSION} is not open for writing by this client" in error.data["reason"]
    unknown = await failure(client, methods.RESOURCE_APPLY_PATCH, {"patch": patch, "sessionId": "2026-01-01T00-00-000000000000"})
    assert unknown.data["kind"] == "owner-missing"
    assert not (local / "plans" / "next.md").exists()
    assert sorted(p.relative_to(workspace) for p in workspace.rglob("*")) == before
