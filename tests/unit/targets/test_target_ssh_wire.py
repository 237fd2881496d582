"""What travels to a remote target, without any server: ssh:// locations,
the frame codec (any byte passes, truncation and foreign frames are caught),
the remote program refusing a request cut short, and the remote sources
staying Python 3.7 compatible and standard-library only."""

from __future__ import annotations

import ast
import io
import os
import secrets
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mevedel_server.targets import executor, remote_program, wire
from mevedel_server.targets.remote_bundle import (
    compiled_script,
    remote_command,
    remote_script,
)
from mevedel_server.targets.remote_errors import SshLocationError
from mevedel_server.targets.ssh_config import SshLocation, parse_ssh_location

# -- locations -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ssh://host/srv/work", SshLocation("host", "/srv/work")),
        ("ssh://me@host:2222/srv/work", SshLocation("host", "/srv/work", "me", 2222)),
        ("ssh://me@[::1]:22/w", SshLocation("::1", "/w", "me", 22)),
        ("ssh://alias/~/projects/x", SshLocation("alias", "~/projects/x")),
        ("ssh://alias/~", SshLocation("alias", "~")),
        ("ssh://h/with%20space/%C3%A9", SshLocation("h", "/with space/\u00e9")),
    ],
)
def test_ssh_urls_parse(text, expected):
    assert parse_ssh_location(text) == expected


def test_a_host_with_a_separate_root():
    assert parse_ssh_location("me@alias", "/srv/w") == SshLocation("alias", "/srv/w", "me")
    assert parse_ssh_location("ssh://alias", "/srv/w") == SshLocation("alias", "/srv/w")
    assert parse_ssh_location("ssh://me@h:2200/w").display_host == "me@h:2200"
    assert parse_ssh_location("ssh://[::1]/w").display_host == "[::1]"


@pytest.mark.parametrize(
    ("text", "root", "reason"),
    [
        ("ssh://host", None, "names no directory"),
        ("ssh:///srv", None, "names no host"),
        ("ssh://host:99999/srv", None, "not a valid ssh:// address"),
        ("ssh://host:port/srv", None, "not a valid ssh:// address"),
        ("ssh://host/srv?x=1", None, "takes no '\\?query'"),
        ("ssh://me:secret@host/srv", None, "passwords do not belong"),
        ("ssh://host/a", "/b", "not both"),
        ("host", None, "names no directory"),
        ("host", "relative/dir", "must be absolute"),
        ("host/srv", None, "expected ssh://"),
        ("-oProxyCommand=x", "/srv", "expected ssh://"),
        ("", "/srv", "needs a host"),
    ],
)
def test_bad_locations_name_the_authored_text_and_the_reason(text, root, reason):
    with pytest.raises(SshLocationError, match=reason) as info:
        parse_ssh_location(text, root)
    assert text.replace(":secret@", ":***@") in str(info.value)
    assert "secret" not in str(info.value)


# -- frames ----------------------------------------------------------------------

values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**80), max_value=2**80) | st.binary(max_size=300) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=6),
    max_leaves=30,
)


@given(values)
def test_any_value_survives_a_frame(value):
    nonce = secrets.token_bytes(wire.NONCE_SIZE)
    data = b"".join(bytes(c) for c in wire.frame_chunks(nonce, value))
    assert wire.read_frame(io.BytesIO(data).read, nonce) == (nonce, value)


@given(st.lists(st.binary(max_size=50), max_size=5), st.data())
def test_a_truncated_frame_is_never_a_shorter_whole_one(payloads, data):
    nonce = secrets.token_bytes(wire.NONCE_SIZE)
    frame = b"".join(bytes(c) for c in wire.frame_chunks(nonce, payloads))
    cut = data.draw(st.integers(min_value=0, max_value=len(frame) - 1))
    with pytest.raises(wire.FrameError):
        wire.read_frame(io.BytesIO(frame[:cut]).read, nonce)


def test_a_frame_answering_another_request_is_refused():
    frame = b"".join(bytes(c) for c in wire.frame_chunks(b"a" * 16, ["done"]))
    with pytest.raises(wire.FrameError, match="another request"):
        wire.read_frame(io.BytesIO(frame).read, b"b" * 16)


def test_names_with_undecodable_bytes_round_trip_as_the_same_bytes():
    name = os.fsdecode(b"\xff\xfe-name")
    out = wire.encode_value(name, [])
    assert out[-1] == b"\xff\xfe-name"
    assert wire.decode_value(b"".join(out)) == name


@pytest.mark.parametrize(
    "body", [b"I" + (3).to_bytes(8, "big") + b"1-2", b"Q", b"B" + (99).to_bytes(8, "big") + b"short", b"NN"]
)
def test_malformed_values_are_refused(body):
    with pytest.raises(wire.FrameError):
        wire.decode_value(body)


# -- the remote program ------------------------------------------------------------


def _request(root, ops):
    dev, ino = executor.pin_root(str(root))
    return ["program", str(root), dev, ino, None, ops]


def test_the_remote_program_answers_with_the_requests_nonce(tmp_path):
    nonce = secrets.token_bytes(16)
    frame = b"".join(bytes(c) for c in wire.frame_chunks(nonce, _request(tmp_path, [["CreateExclusive", "f", False, b"1"]])))
    out = io.BytesIO()
    assert remote_program.serve(io.BytesIO(frame).read, out.write) == 0
    assert wire.read_frame(io.BytesIO(out.getvalue()).read, nonce)[1] == ["done", [["ok", None, None, False]], None]
    assert (tmp_path / "f").read_bytes() == b"1"


@pytest.mark.parametrize("compiled", [False, True], ids=["source", "compiled"])
def test_a_request_cut_short_runs_nothing_in_a_real_interpreter(tmp_path, compiled):
    """Through the same command and script the SSH target sends (the
    source, or the code objects compiled here for an interpreter like this
    one)."""
    nonce = secrets.token_bytes(16)
    frame = b"".join(bytes(c) for c in wire.frame_chunks(nonce, _request(tmp_path, [["MakeDirs", "made", False, None]])))
    script = compiled_script() if compiled else remote_script()
    for data, ran in ((frame[:-1], False), (frame, True)):
        proc = subprocess.run(["/bin/sh", "-c", remote_command(sys.executable, compiled)], input=script + data, capture_output=True)
        assert (proc.returncode == 0) is ran
        assert (tmp_path / "made").exists() is ran
        if ran:
            assert wire.read_frame(io.BytesIO(proc.stdout).read, nonce)[1][0] == "done"
        else:
            assert proc.stdout == b"" and b"short of a whole frame" in proc.stderr


def test_an_unknown_operation_fails_alone(tmp_path):
    answer = remote_program.answer(_request(tmp_path, [["Frobnicate", "x", True, None], ["ListDir", ".", False, None]]))
    assert answer == ["done", [["failed", None, "unsupported operation Frobnicate", False], ["ok", (), None, False]], None]


def test_a_malformed_request_is_an_error_answer_not_a_result(tmp_path):
    assert remote_program.answer(["program", str(tmp_path)])[0] == "error"
    assert remote_program.answer(["launch"])[0] == "error"


@pytest.mark.parametrize("module", [wire, executor, remote_program])
def test_remote_sources_are_python_37_and_stdlib_only(module):
    source = open(module.__file__, encoding="utf-8").read()
    tree = ast.parse(source, feature_version=(3, 7))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            imported.add((node.module or "").split(".")[0])
        # No walrus, no match, no f-string debugging: the grammar check above;
        # no calls added after 3.7 that we know we are tempted by:
        if isinstance(node, ast.Attribute):
            # (``os.readlink`` is as old as Python 3; ``Path.readlink`` is 3.9.)
            os_readlink = node.attr == "readlink" and isinstance(node.value, ast.Name) and node.value.id == "os"
            assert os_readlink or node.attr not in {"removeprefix", "removesuffix", "is_relative_to", "readlink"}, node.attr
    allowed = set(sys.stdlib_module_names) | {"__future__", "mevedel_wire", "mevedel_executor"}
    assert imported <= allowed, imported - allowed
    # It starts once per round trip: no module that costs tens of milliseconds.
    assert not imported & {"secrets", "random", "hashlib", "re", "json", "typing", "dataclasses"}
