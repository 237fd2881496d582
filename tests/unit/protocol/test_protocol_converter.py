"""Messages go on the wire camelCased, and bad params are refused with a
message naming each offending field by its wire name."""

import pytest

from mevedel_protocol import (
    GrepParams,
    ReadParams,
    ReadResult,
    Settings,
    TruncatedLine,
    converter,
    describe_structure_error,
)


def _problem(raw, cls, path="params"):
    with pytest.raises(Exception) as caught:
        converter.structure(raw, cls)
    return describe_structure_error(caught.value, path)


def test_params_decode_from_camel_case():
    params = converter.structure({"address": "work://a", "charOffset": 4, "workDoneToken": "t1"}, ReadParams)
    assert params.address == "work://a" and params.char_offset == 4 and params.work_done_token == "t1"


def test_results_encode_to_camel_case_and_omit_absent_optionals():
    wire = converter.unstructure(ReadResult("a", "a", "x", 1, 1, 1, "file", [TruncatedLine(1, 2000)], next_offset=None))
    assert wire == {
        "address": "a",
        "canonical": "a",
        "text": "x",
        "startLine": 1,
        "endLine": 1,
        "totalLines": 1,
        "kind": "file",
        "truncatedLines": [{"line": 1, "charOffset": 2000}],
    }


def test_unknown_field_is_refused_by_name():
    assert _problem({"address": "work://", "limt": 3}, ReadParams) == "params: unknown field(s) limt"


def test_primitives_are_not_coerced():
    assert _problem({"address": 7}, ReadParams) == "params.address: expected a string, got a number"
    assert _problem({"address": "x", "offset": "3"}, ReadParams) == "params.offset: expected an integer, got a string"
    assert _problem({"address": "x", "offset": True}, ReadParams) == "params.offset: expected an integer, got a boolean"


def test_missing_required_and_bad_literal_are_named():
    assert _problem({"address": "x"}, GrepParams) == "params.pattern: required field missing"
    assert _problem({"view": "raw"}, ReadParams) == "params.view: must be one of 'numbered', 'plain'"


def test_settings_errors_use_nested_wire_paths():
    raw = {"memoryRoots": [{"path": "m", "location": "moon", "kind": "agents"}]}
    assert _problem(raw, Settings, "settings") == "settings.memoryRoots[0].location: must be one of 'local', 'global'"
    assert _problem({"skillRoots": "dir"}, Settings, "settings") == "settings.skillRoots: expected an array, got a string"


def test_current_session_accepts_an_id_or_a_folder_map():
    assert converter.structure({"currentSession": "s1"}, Settings).current_session == "s1"
    by_folder = converter.structure({"currentSession": {"file:///w": "s2"}}, Settings).current_session
    assert by_folder == {"file:///w": "s2"}
    assert "currentSession" in _problem({"currentSession": 5}, Settings, "settings")
