"""The ACP SDK loaded through the agents package (agents/sdk_import.py)
has the very models the SDK alone has: the same fields, the same
validation and the same JSON on the wire; only the JSON-schema field
descriptions pydantic copies from attribute docstrings are left out."""

from __future__ import annotations

import json
import subprocess
import sys

# Every model of acp.schema: its fields, its JSON schema without the
# descriptions, and what validating one sample does.
PROBE = r"""
import json, sys
if sys.argv[1] == "through-agents":
    import mevedel_server.agents  # noqa: F401
import pydantic
from acp import schema

def strip(node):
    if isinstance(node, dict):
        return {k: strip(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [strip(v) for v in node]
    return node

models = {}
described = 0
for name, model in sorted(vars(schema).items()):
    if isinstance(model, type) and issubclass(model, pydantic.BaseModel) and model.__module__ == schema.__name__:
        fields = model.model_fields
        described += sum(1 for field in fields.values() if field.description)
        models[name] = [sorted(fields), strip(model.model_json_schema())]
block = schema.TextContentBlock.model_validate({"type": "text", "text": "hi", "annotations": {"priority": 0.5}})
try:
    schema.TextContentBlock.model_validate({"type": "text"})
    refused = None
except pydantic.ValidationError as error:
    refused = [e["loc"] for e in error.errors()]
print(json.dumps({"models": models, "wire": block.model_dump(mode="json", by_alias=True, exclude_none=True),
                  "refused": refused, "described": described}))
"""


def _load(how: str) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, how], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_the_sdk_loaded_through_the_agents_package_has_the_sdks_own_models() -> None:
    plain, trimmed = _load("plain"), _load("through-agents")
    assert len(plain["models"]) > 100
    assert trimmed["models"] == plain["models"]
    assert trimmed["wire"] == plain["wire"] == {"type": "text", "text": "hi", "annotations": {"priority": 0.5}}
    assert trimmed["refused"] == plain["refused"] == [["text"]]
    # What is left out: the descriptions copied from attribute docstrings.
    assert plain["described"] > 100
    assert trimmed["described"] < plain["described"]
