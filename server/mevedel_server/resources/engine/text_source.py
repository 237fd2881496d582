"""Loading a backing file as text, with gzip for retired execution logs.

Errors name the authored address and a reason built from the failure kind;
an ``OSError``'s own text (which carries the path) never reaches a message.
"""

from __future__ import annotations

import gzip
import io
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from ...addresses import AddressError, ErrorKind

#: The most bytes one file may contribute to a Read or search (after inflation).
MAX_FILE_BYTES = 64 * 1024 * 1024
#: The most inflated bytes one operation may produce across all its files.
MAX_OPERATION_INFLATION = 512 * 1024 * 1024

_CHUNK = 1024 * 1024


@dataclass(slots=True)
class InflationBudget:
    """Bytes of gzip output one operation may still produce."""

    remaining: int = field(default=MAX_OPERATION_INFLATION)
    #: Set once the operation ran out; a search stops instead of skipping.
    exhausted: bool = False


def read_bytes(path: Path, authored: str, *, compressed: bool = False, budget: InflationBudget | None = None) -> bytes:
    try:
        if compressed:
            return _inflate(path, authored, budget or InflationBudget())
        if path.stat().st_size > MAX_FILE_BYTES:
            raise too_large(authored)
        return path.read_bytes()
    except FileNotFoundError:
        raise AddressError(ErrorKind.MISSING_TARGET, authored, "does not exist") from None
    except IsADirectoryError:
        raise AddressError(ErrorKind.UNREADABLE, authored, "is a directory, not a file") from None
    except PermissionError:
        raise AddressError(ErrorKind.UNREADABLE, authored, "cannot be read: permission denied") from None
    except OSError as error:
        reason = os.strerror(error.errno) if error.errno else "the storage could not be read"
        raise AddressError(ErrorKind.UNREADABLE, authored, f"cannot be read: {reason}") from None


def decode_text(data: bytes, authored: str) -> str:
    if b"\0" in data:
        raise AddressError(ErrorKind.UNREADABLE, authored, "is binary content, not text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise AddressError(ErrorKind.UNREADABLE, authored, "is not UTF-8 text") from None
    return text.removeprefix("\ufeff")


def read_text(path: Path, authored: str, *, compressed: bool = False, budget: InflationBudget | None = None) -> str:
    return decode_text(read_bytes(path, authored, compressed=compressed, budget=budget), authored)


def text_of_bytes(data: bytes, authored: str, *, compressed: bool = False, budget: InflationBudget | None = None) -> str:
    """:func:`read_text` of bytes already read (from a remote target), with
    the same bounds and messages."""
    if compressed:
        data = _inflate(io.BytesIO(data), authored, budget or InflationBudget())
    elif len(data) > MAX_FILE_BYTES:
        raise too_large(authored)
    return decode_text(data, authored)


def too_large(authored: str) -> AddressError:
    return AddressError(ErrorKind.UNREADABLE, authored, "is larger than the 64 MiB read bound")


def _inflate(path: Path | io.BytesIO, authored: str, budget: InflationBudget) -> bytes:
    limit = min(MAX_FILE_BYTES, budget.remaining)
    chunks: list[bytes] = []
    size = 0
    try:
        with gzip.open(path, "rb") as stream:
            while chunk := stream.read(_CHUNK):
                size += len(chunk)
                if size > limit:
                    budget.exhausted = limit < MAX_FILE_BYTES
                    which = "512 MiB per-operation" if budget.exhausted else "64 MiB per-file"
                    raise AddressError(ErrorKind.UNREADABLE, authored, f"inflates past the {which} bound")
                chunks.append(chunk)
    except (gzip.BadGzipFile, EOFError, zlib.error):
        raise AddressError(ErrorKind.UNREADABLE, authored, "is stored compressed but its gzip data is damaged") from None
    budget.remaining -= size
    return b"".join(chunks)
