"""``mevedel address ADDRESS... [--json]``: validate and canonicalise addresses.

Prints one line per address, in argument order: with ``--json`` one JSON
object (``authored``, ``canonical``, ``family``, ``locator_class``,
``operations`` or ``authored``, ``error: {kind, reason}``), otherwise a
readable line. Exits 1 when any address is invalid. Nothing is resolved: this
is the pure grammar, so it needs no session and touches no storage.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..addresses import Address, AddressError, Operation, parse_address
from .authored import shown


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "address",
        help="validate and canonicalise resource addresses",
        description="Validate resource addresses and print their canonical form, family, "
        "locator class and allowed operations.",
    )
    parser.add_argument("addresses", metavar="ADDRESS", nargs="+", help="an address such as work://notes.md")
    parser.add_argument("--json", action="store_true", help="print one JSON object per address")
    parser.set_defaults(run=run)


def describe(text: str) -> dict[str, Any]:
    """The JSON object printed for one authored address."""
    try:
        address = parse_address(text)
    except AddressError as error:
        return {"authored": text, "error": {"kind": error.kind.value, "reason": error.reason}}
    return {
        "authored": text,
        "canonical": address.canonical,
        "family": address.family.value,
        "locator_class": address.locator_class.value,
        "operations": _operations(address),
    }


def _operations(address: Address) -> list[str]:
    # Matrix order (Read, Glob, Grep, ApplyPatch), not set order.
    return [operation.value for operation in Operation if operation in address.operations]


def _line(result: dict[str, Any]) -> str:
    authored = shown(result["authored"])
    if "error" in result:
        error = result["error"]
        return f"{authored}  invalid ({error['kind']}): {error['reason']}"
    operations = ", ".join(result["operations"])
    return f"{authored}  ->  {result['canonical']}  [{result['family']}, {result['locator_class']}; {operations}]"


def run(arguments: argparse.Namespace) -> int:
    results = [describe(text) for text in arguments.addresses]
    for result in results:
        print(json.dumps(result) if arguments.json else _line(result))
    sys.stdout.flush()
    return 1 if any("error" in result for result in results) else 0
