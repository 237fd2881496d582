"""The CLI tells the person of a command a previous owner may have left
running before anything changes the workspace: a turn's begin, Rewind,
Redo and a restore are refused with ``unsettled-mutation``, naming what to
do; acknowledged, they go through."""

from __future__ import annotations

from test_cli_session import cli, ok, refused, unprovable_latch_left


def test_every_mutating_entry_is_refused_until_the_latch_is_settled(workspace, tmp_path):
    me = tmp_path / "me"
    (workspace / "a.txt").write_text("one\n")
    unprovable_latch_left(workspace, me)
    for args in (("turn", "begin", "second"), ("rewind", "1", "--before", "--yes"), ("redo", "20261204T000000-0000000000000000"),
                 ("restore", "a.txt", "--before", "1", "--yes")):
        message = refused(cli(workspace, me, *args, "--json"), "unsettled-mutation")
        assert "may still be running and cannot be proven gone" in message, args
        assert "mevedel session acknowledge-mutation" in message, args
    assert ok(cli(workspace, me, "session", "acknowledge-mutation", "--json"))["cleared"] is True
    assert ok(cli(workspace, me, "rewind", "1", "--before", "--yes", "--json"))
    assert ok(cli(workspace, me, "turn", "begin", "second", "--json"))["turn"] == 1
