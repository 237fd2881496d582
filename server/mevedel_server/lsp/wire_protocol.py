"""How messages are decoded: custom params stay plain JSON, and requests
whose params do not decode are answered.

pygls' default converter turns the params of methods it does not know (ours)
into namedtuples, renaming keys that are not identifiers; ours are decoded by
``mevedel_protocol``'s converter instead, so they must arrive as the JSON the
client sent.

pygls decodes a standard method's params while parsing the JSON message; when
that fails it logs and drops the message, so the client would wait forever
for an answer. Here such a request becomes an InvalidParams response naming
the method and the offending fields, and the server carries on.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import Any

import msgspec

import attrs
from cattrs import Converter
from lsprotocol.converters import get_converter
from lsprotocol.types import ResponseError
from mevedel_protocol import describe_structure_error
from mevedel_protocol.errors import INVALID_PARAMS, KIND_INVALID_PARAMS
from pygls.exceptions import JsonRpcException
from pygls.protocol import JsonRPCNotification, JsonRPCRequestMessage, JsonRPCResponseMessage, LanguageServerProtocol

_log = logging.getLogger(__name__)
_ENCODER = msgspec.json.Encoder()


def _keep_json(message: dict[str, Any], cls: type) -> Any:
    # A request without params reaches its handler as None, which then says so.
    return cls(**{"params": None, **message}) if cls is not JsonRPCResponseMessage else cls(**{"result": None, **message})


def plain_json_converter() -> Converter:
    """lsprotocol's converter, with custom-method params and results kept as
    plain JSON values."""
    converter = get_converter()
    for envelope in (JsonRPCRequestMessage, JsonRPCNotification, JsonRPCResponseMessage):
        converter.register_structure_hook(envelope, _keep_json)
    return converter


@attrs.define
class UndecodableRequest:
    """A request whose envelope was fine but whose params were not."""

    id: int | str
    method: str
    jsonrpc: str
    reason: str


class MevedelProtocol(LanguageServerProtocol):
    def structure_message(self, data: dict[str, Any]):
        try:
            return super().structure_message(data)
        except JsonRpcException as error:
            request_id = data.get("id")
            method = data.get("method")
            if isinstance(request_id, (int, str)) and isinstance(method, str) and "error" not in data:
                cause = error.__cause__ if error.__cause__ is not None else error
                return UndecodableRequest(request_id, method, str(data.get("jsonrpc")), describe_structure_error(cause))
            raise

    def _send_response(self, msg_id: Any, result: Any = None, error: ResponseError | None = None) -> None:
        # A result that is already JSON (our handlers build their results that
        # way) goes out as it is: cattrs would otherwise walk every value of a
        # 200-item completion list again, which costs more than computing it.
        if error is None and isinstance(result, (dict, list)):
            self._send_json({"jsonrpc": self.VERSION, "id": msg_id, "result": result})
            return
        super()._send_response(msg_id, result=result, error=error)

    def _send_json(self, message: dict[str, Any]) -> None:
        """Writes a message that is plain JSON values. msgspec encodes a
        200-item completion list several times faster than ``json.dumps``,
        and its output is bytes, so ``Content-Length`` is the byte length
        whatever the text holds."""
        if self.writer is None:
            _log.error("cannot send a response: no transport")
            return
        try:
            body = _ENCODER.encode(message)
        except (TypeError, msgspec.EncodeError) as error:
            # Not plain JSON after all: pygls' own path reports it as it always did.
            _log.debug("falling back to pygls encoding: %s", error)
            self._send_data(message)
            return
        header = b"Content-Length: %d\r\nContent-Type: %s; charset=%s\r\n\r\n" % (
            len(body),
            self.CONTENT_TYPE.encode(),
            self.CHARSET.encode(),
        ) if self._include_headers else b""
        written = self.writer.write(header + body)
        if inspect.isawaitable(written):
            asyncio.ensure_future(written)

    def handle_message(self, message: Any) -> None:
        if isinstance(message, UndecodableRequest):
            _log.warning("invalid params for %s: %s", message.method, message.reason)
            self._send_response(
                message.id,
                error=ResponseError(
                    code=INVALID_PARAMS,
                    message=f"{message.method}: invalid params: {message.reason}",
                    data={"kind": KIND_INVALID_PARAMS, "authored": message.method, "reason": message.reason},
                ),
            )
            return
        super().handle_message(message)
