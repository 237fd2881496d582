"""Settings merge key by key; a bad key keeps its previous value."""

from mevedel_protocol import Settings
from mevedel_server.lsp.configuration import merge_settings


def test_bare_and_nested_settings_apply():
    merged, problems = merge_settings(Settings(), {"completionLimit": 7})
    assert merged.completion_limit == 7 and problems == []
    merged, problems = merge_settings(Settings(), {"mevedel": {"currentSession": "s-1"}})
    assert merged.current_session == "s-1" and problems == []


def test_absent_keys_keep_and_null_restores_the_default():
    current, _ = merge_settings(Settings(), {"completionLimit": 7, "currentSession": "s-1"})
    merged, _ = merge_settings(current, {"currentSession": None})
    assert merged.completion_limit == 7 and merged.current_session is None


def test_each_invalid_setting_is_named_and_keeps_its_value():
    current, _ = merge_settings(Settings(), {"completionLimit": 7})
    merged, problems = merge_settings(
        current,
        {
            "completionLimit": 0,
            "skillRoots": [{"path": "s", "origin": "nowhere"}],
            "memoryRoots": [{"path": "", "location": "local", "kind": "agents"}],
            "currentSession": "a/b",
            "diagnostics": {"unknownSchemes": "all"},
        },
    )
    assert merged.completion_limit == 7
    assert merged.skill_roots == [] and merged.memory_roots == [] and merged.current_session is None
    assert merged.diagnostics.unknown_schemes == "all"
    messages = [problem.message for problem in problems]
    assert [m.split(":")[0] for m in messages] == [
        "mevedel setting completionLimit",
        "mevedel setting skillRoots",
        "mevedel setting memoryRoots",
        "mevedel setting currentSession",
    ]
    assert all(problem.is_error for problem in problems)
    assert "unknown skill origin 'nowhere'" in messages[1]


def test_unknown_keys_are_warnings_and_non_objects_are_refused():
    merged, problems = merge_settings(Settings(), {"colour": "blue"})
    assert merged == Settings()
    assert [p.is_error for p in problems] == [False] and "'colour'" in problems[0].message
    merged, problems = merge_settings(Settings(), ["completionLimit"])
    assert merged == Settings() and "must be an object" in problems[0].message


def test_follow_and_session_watch_settings_are_checked():
    merged, problems = merge_settings(
        Settings(), {"followPublished": False, "sessionWatch": {"idlePollSeconds": 30, "activePollSeconds": 0.5, "debounceMs": 5}}
    )
    assert problems == [] and merged.follow_published is False
    assert (merged.session_watch.idle_poll_seconds, merged.session_watch.active_poll_seconds) == (30, 0.5)
    assert merged.session_watch.debounce_ms == 5
    for bad, named in (
        ({"activePollSeconds": 0}, "activePollSeconds must be at least 0.1"),
        ({"idlePollSeconds": float("inf")}, "idlePollSeconds must be at least 0.1"),
        ({"debounceMs": 5000}, "debounceMs must be between 1 and 1000"),
    ):
        kept, problems = merge_settings(merged, {"sessionWatch": bad})
        assert kept.session_watch == merged.session_watch
        assert [p.message.split(":")[0] for p in problems] == ["mevedel setting sessionWatch"]
        assert named in problems[0].message
