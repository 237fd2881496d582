"""The committed JSON Schema is exactly what the attrs classes generate."""

import json

from mevedel_protocol import REQUESTS
from mevedel_protocol.schema import SCHEMA_PATH, build_schema, render_schema


def test_committed_schema_is_current():
    committed = SCHEMA_PATH.read_text(encoding="utf-8") if SCHEMA_PATH.exists() else ""
    assert committed == render_schema(), "protocol/schema is stale: run python -m mevedel_protocol.schema"


def test_every_request_has_params_and_result_definitions():
    schema = build_schema()
    assert set(schema["requests"]) == set(REQUESTS)
    for method, entry in schema["requests"].items():
        for part in ("params", "result"):
            reference = entry[part]["$ref"].removeprefix("#/$defs/")
            assert reference in schema["$defs"], f"{method} {part} refers to missing {reference}"


def test_schema_uses_wire_names_and_marks_required_fields():
    definitions = build_schema()["$defs"]
    read = definitions["ReadParams"]
    assert "charOffset" in read["properties"] and "char_offset" not in read["properties"]
    assert "required" not in read  # every Read param is optional
    grep = definitions["GrepParams"]
    assert grep["required"] == ["address", "pattern"]
    assert grep["properties"]["ignoreCase"] == {"type": "boolean", "default": False}
    assert definitions["ReadParams"]["properties"]["view"]["enum"] == ["numbered", "plain"]


def test_schema_is_json_round_trippable():
    assert json.loads(render_schema()) == build_schema()
