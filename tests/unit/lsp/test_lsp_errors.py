"""Failures become ResponseErrors with stable data and no traceback."""

import logging

import pytest
from pygls.exceptions import JsonRpcException

from mevedel_server.addresses import AddressError, ErrorKind
from mevedel_server.lsp.errors import answers_errors


def _raising(error: Exception):
    @answers_errors("mevedel/test/method")
    async def handler(ls, params):
        raise error

    return handler


async def _caught(error: Exception) -> JsonRpcException:
    with pytest.raises(JsonRpcException) as caught:
        await _raising(error)(None, {})
    return caught.value


async def test_validation_and_execution_kinds_get_their_codes():
    malformed = await _caught(AddressError(ErrorKind.MALFORMED_ADDRESS, "work://%zz", "bad escape"))
    assert (malformed.code, malformed.message) == (-32602, "work://%zz: bad escape")
    assert malformed.data == {"kind": "malformed-address", "authored": "work://%zz", "reason": "bad escape"}
    missing = await _caught(AddressError(ErrorKind.MISSING_TARGET, "work://x", "does not exist"))
    assert missing.code == -32803 and missing.data["kind"] == "missing-target"


async def test_unexpected_exceptions_are_internal_and_logged_not_sent(caplog):
    with caplog.at_level(logging.ERROR):
        internal = await _caught(RuntimeError("/secret/path exploded"))
    assert internal.code == -32603
    assert internal.data == {
        "kind": "internal",
        "authored": "mevedel/test/method",
        "reason": "internal error in the mevedel server (details are in its log)",
    }
    assert "/secret/path" not in internal.message
    assert "RuntimeError: /secret/path exploded" in caplog.text
