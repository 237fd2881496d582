"""The package exports its names without loading its message modules: each
name, and each catalog entry's classes, import their module when first read
(the language server's start makes no class it does not use)."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import pytest

import mevedel_protocol
from mevedel_protocol import COMMANDS, NOTIFICATIONS, REQUESTS


def loaded_after(code: str) -> set[str]:
    """The package's modules a fresh process holds after running ``code``."""
    probe = f"import sys\n{code}\nprint('\\n'.join(m for m in sorted(sys.modules) if m.startswith('mevedel_protocol')))\n"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return set(result.stdout.split())


@pytest.mark.parametrize("name", mevedel_protocol.__all__)
def test_every_exported_name_is_what_its_module_defines(name):
    value = getattr(mevedel_protocol, name)
    if isinstance(value, type(mevedel_protocol)):
        assert value is importlib.import_module(f"mevedel_protocol.{name}")
    else:
        modules = [importlib.import_module(f"mevedel_protocol.{m.name}") for m in pkgutil.iter_modules(mevedel_protocol.__path__)]
        assert [m.__name__ for m in modules if m.__dict__.get(name) is value]


def test_the_converter_is_the_converter_not_its_module():
    assert callable(mevedel_protocol.converter.structure)


def test_a_name_the_package_does_not_export_is_an_attribute_error():
    with pytest.raises(AttributeError, match="ReadParam"):
        mevedel_protocol.ReadParam  # noqa: B018


def test_every_catalog_entry_names_a_class_of_the_package():
    for message in (*REQUESTS.values(), *NOTIFICATIONS.values()):
        for cls in (message.params, message.result):
            assert cls is None or (isinstance(cls, type) and cls.__module__.startswith("mevedel_protocol."))
    assert set(COMMANDS.values()) <= set(REQUESTS)


def test_reading_the_catalog_loads_only_the_messages_asked_for():
    names = loaded_after("from mevedel_protocol import REQUESTS, methods\nassert methods.TURN_LIST in REQUESTS")
    assert "mevedel_protocol.session" not in names
    assert "mevedel_protocol.artifact" not in names
    names = loaded_after("from mevedel_protocol import REQUESTS, methods\nREQUESTS[methods.ARTIFACT_LIST].params")
    assert "mevedel_protocol.artifact" in names
    assert "mevedel_protocol.session" not in names
