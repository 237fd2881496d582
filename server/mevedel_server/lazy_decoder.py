"""A msgspec decoder made at its first use.

Making a decoder analyses its type then and there: every annotation of
every struct it reaches is evaluated (they are strings under ``from
__future__ import annotations``). The record modules' decoders made at
import cost every command that imports them (``session list`` imports the
transcript, the recovery journal, the pending inputs... and decodes none of
them) about 4 ms of its start; a command pays now for the ones it uses."""

from __future__ import annotations

from typing import Any


class LazyDecoder:
    """``decoder_class(*args, **options)`` once ``decode`` is first called;
    from then on ``decode`` is that decoder's own (no extra call)."""

    def __init__(self, decoder_class: type, *args: Any, **options: Any) -> None:
        self._make = (decoder_class, args, options)

    def decode(self, data: Any) -> Any:
        decoder_class, args, options = self._make
        decoder = decoder_class(*args, **options)
        self.decode = decoder.decode  # type: ignore[method-assign]
        return decoder.decode(data)
