"""Loading backing files as text: UTF-8 only, binary refused, gzip bounded."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from mevedel_server.addresses.model import AddressError, ErrorKind
from mevedel_server.resources.engine import text_source
from mevedel_server.resources.engine.text_source import InflationBudget, read_text


def test_utf8_text_loads_without_a_byte_order_mark(tmp_path: Path):
    path = tmp_path / "a.txt"
    path.write_bytes("\ufeffhé\n".encode())
    assert read_text(path, "work://a.txt") == "hé\n"


@pytest.mark.parametrize(("data", "reason"), [(b"\x00\x01bin", "binary"), (b"\xff\xfe caf\xe9", "not UTF-8")])
def test_non_text_is_unreadable_and_names_only_the_address(tmp_path: Path, data: bytes, reason: str):
    path = tmp_path / "blob"
    path.write_bytes(data)
    with pytest.raises(AddressError) as caught:
        read_text(path, "artifact://blob")
    assert caught.value.kind is ErrorKind.UNREADABLE
    assert reason in caught.value.reason
    assert str(tmp_path) not in str(caught.value)


def test_missing_file_is_missing_target(tmp_path: Path):
    with pytest.raises(AddressError) as caught:
        read_text(tmp_path / "gone", "work://gone")
    assert caught.value.kind is ErrorKind.MISSING_TARGET


def test_gzip_is_inflated(tmp_path: Path):
    path = tmp_path / "run.log.gz"
    path.write_bytes(gzip.compress(b"one\ntwo\n"))
    assert read_text(path, "artifact://executions/run.log", compressed=True) == "one\ntwo\n"


def test_inflation_is_bounded_per_file(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(text_source, "MAX_FILE_BYTES", 1000)
    path = tmp_path / "bomb.log.gz"
    path.write_bytes(gzip.compress(b"a" * 5000))
    with pytest.raises(AddressError) as caught:
        read_text(path, "artifact://executions/bomb.log", compressed=True)
    assert caught.value.kind is ErrorKind.UNREADABLE
    assert "bound" in caught.value.reason


def test_inflation_is_bounded_per_operation(tmp_path: Path):
    path = tmp_path / "x.log.gz"
    path.write_bytes(gzip.compress(b"b" * 3000))
    budget = InflationBudget(remaining=4000)
    read_text(path, "artifact://executions/x.log", compressed=True, budget=budget)
    with pytest.raises(AddressError):
        read_text(path, "artifact://executions/x.log", compressed=True, budget=budget)
    assert budget.exhausted


def test_damaged_gzip_is_unreadable(tmp_path: Path):
    path = tmp_path / "bad.log.gz"
    path.write_bytes(b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(AddressError) as caught:
        read_text(path, "artifact://executions/bad.log", compressed=True)
    assert caught.value.kind is ErrorKind.UNREADABLE
