"""The execution log's bound: whole output below it, head and tail with one
marker above it, never a UTF-8 character split at either cut."""

from __future__ import annotations

from mevedel_server.agents.execution_log import ExecutionLog, log_name


def test_output_under_the_bound_is_kept_whole():
    log = ExecutionLog("a.log", 1024)
    for chunk in (b"one\n", b"two\n"):
        log.add(chunk)
    assert log.content() == b"one\ntwo\n" and log.cut == 0


def test_over_the_bound_the_head_and_tail_stay_whole_characters():
    log = ExecutionLog("b.log", 1024)
    for i in range(2000):
        log.add(f"ligne {i} é€😀\n".encode())  # two-, three- and four-byte characters
    content = log.content()
    text = content.decode("utf-8")  # no split character at either cut
    assert text.startswith("ligne 0 é€😀\n") and text.endswith("ligne 1999 é€😀\n")
    assert text.count("bytes of output cut here") == 1
    assert 1024 - 8 <= len(content) <= 1024 + 200  # the bound, plus its one marker line


def test_names_say_the_turn_and_program():
    assert log_name(3, "/usr/bin/make -j8").startswith("turn-3-make-")
    assert log_name(None, "  ").startswith("command-")
