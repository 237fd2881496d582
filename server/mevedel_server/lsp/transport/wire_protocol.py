"""How messages are decoded: every message is checked before pygls sees it,
custom params stay plain JSON, and requests whose params do not decode are
answered.

Every body the frame reader (``framing.py``) hands over goes through
:meth:`MevedelProtocol.receive`: strict UTF-8 JSON, then the envelope
(``jsonrpc`` "2.0"; ``id`` a number or a string; ``method`` a string;
``params`` an object or an array; no lone surrogate anywhere, no nesting
deeper than ``MAX_DEPTH``), then the LSP lifecycle (a request before
``initialize`` is ``server-not-initialized``, a second ``initialize`` and
any request after ``shutdown`` are ``invalid-request``; notifications then
are dropped, ``exit`` excepted). A request that fails a check is answered
with an error naming the field (``authored``: ``method``, ``id``,
``params.sessionId``...); one whose ``id`` is unusable is answered with
``id: null``, as JSON-RPC says; a notification is logged and dropped (lone
surrogates in a notification become U+FFFD, one UTF-16 unit for another, so
document offsets hold). No error a client receives carries a traceback:
an unexpected exception is answered as ``internal`` and logged.

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
import enum
import inspect
import json
import logging
import re
from typing import Any

import attrs
import msgspec
from cattrs import Converter
from lsprotocol import types
from lsprotocol.converters import get_converter
from lsprotocol.types import ResponseError
from pygls.exceptions import JsonRpcException
from pygls.protocol import (
    JsonRPCNotification,
    JsonRPCRequestMessage,
    JsonRPCResponseMessage,
    LanguageServerProtocol,
)

from mevedel_protocol import REQUESTS, describe_structure_error
from mevedel_protocol.errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    KIND_INTERNAL,
    KIND_INVALID_PARAMS,
    KIND_INVALID_REQUEST,
    KIND_PARSE_ERROR,
    KIND_SERVER_NOT_INITIALIZED,
    error_code,
)

from .framing import BrokenFrame, NotJson, decode_body, recover_id

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


#: Deepest nesting of objects and arrays a message may have.
MAX_DEPTH = 64
#: Ids beyond this are not numbers any client sends (LSP ids are integers).
_MAX_ID = 2**63
_ENVELOPE_KEYS = ("jsonrpc", "id", "method", "params", "result", "error")
_SURROGATE = re.compile("[\ud800-\udfff]")
#: A ``\uD800``-``\uDFFF`` escape in the raw body: only then can a decoded
#: string hold a lone surrogate (a raw one is not UTF-8).
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")
_ABSENT = object()


class _Phase(enum.Enum):
    NEW = "new"
    INITIALIZED = "initialized"
    SHUT_DOWN = "shut down"


#: The progress tokens any request may carry (LSP ``ProgressToken``).
_PROGRESS_TOKENS = ("workDoneToken", "partialResultToken")


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _surrogate_text(text: str) -> str:
    found = _SURROGATE.search(text)
    assert found is not None
    return f"contains a lone surrogate (\\u{ord(found.group()):04x}), which is not text"


def _usable_id(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return -_MAX_ID < value < _MAX_ID
    return isinstance(value, str) and _SURROGATE.search(value) is None


class _Refused(Exception):
    """A message that fails a check; answered (a request) or dropped."""

    def __init__(self, kind: str, authored: str, reason: str, *, answer_id: Any = None) -> None:
        super().__init__(f"{authored}: {reason}")
        self.kind, self.authored, self.reason, self.answer_id = kind, authored, reason, answer_id


def _check_params(value: Any, *, repair: bool) -> tuple[Any, str | None]:
    """``value`` walked without recursion: the path of the first string with
    a lone surrogate (None: none), after replacing them all by U+FFFD when
    ``repair``; raises ValueError when nested deeper than ``MAX_DEPTH``."""
    found: str | None = None
    # (container, key, value, path, depth)
    stack: list[tuple[Any, Any, Any, str, int]] = [(None, None, value, "params", 1)]
    while stack:
        parent, key, item, path, depth = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item) is not None:
                found = found or path
                if repair and parent is not None:
                    parent[key] = _SURROGATE.sub("\ufffd", item)
            continue
        if isinstance(item, dict):
            children = list(item.items())
        elif isinstance(item, list):
            children = list(enumerate(item))
        else:
            continue
        if depth > MAX_DEPTH:
            raise ValueError(f"{path} is nested more than {MAX_DEPTH} levels deep")
        for child_key, child in children:
            if isinstance(child_key, str) and _SURROGATE.search(child_key) is not None:
                found = found or f"{path} (a key)"
                if repair:
                    del item[child_key]
                    child_key = _SURROGATE.sub("\ufffd", child_key)
                    item[child_key] = child
            child_path = f"{path}[{child_key}]" if isinstance(child_key, int) else f"{path}.{child_key}"
            stack.append((item, child_key, child, child_path, depth + 1))
    return value, found


class MevedelProtocol(LanguageServerProtocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._phase = _Phase.NEW
        #: The method of each request being served, for its internal error.
        self._serving: dict[Any, str] = {}

    # Receiving -----------------------------------------------------------------

    def receive(self, body: bytes) -> bool:
        """Handle one message body; False when it is not JSON at all (the
        frame reader then skips to the next frame header)."""
        try:
            data = decode_body(body)
        except NotJson as error:
            self._refuse(_Refused(KIND_PARSE_ERROR, "message body", str(error), answer_id=recover_id(body)))
            return False
        try:
            message = self._check(data, surrogates=_SURROGATE_ESCAPE.search(body) is not None)
        except _Refused as refused:
            self._refuse(refused)
            return True
        if message is None:
            return True
        try:
            structured = self.structure_message(message)
        except JsonRpcException as error:
            self._undecodable(message, error)
            return True
        try:
            self.handle_message(structured)
        except Exception:
            _log.exception("handling %s", message.get("method", "a response"))
            msg_id = message.get("id")
            if "method" in message and msg_id is not None:
                self._send_response(msg_id, error=self._internal(message["method"]))
        return True

    def frame_broken(self, broken: BrokenFrame) -> None:
        """A frame the reader skipped: its request, when its ``id`` can be
        recovered, gets the error; otherwise it goes out with ``id: null``."""
        self._refuse(_Refused(KIND_PARSE_ERROR, broken.part, broken.reason, answer_id=recover_id(broken.body)))

    def _check(self, data: Any, *, surrogates: bool) -> dict[str, Any] | None:
        """The envelope checked and trimmed to its JSON-RPC members; None when
        the message is dropped (a notification the lifecycle refuses)."""
        if not isinstance(data, dict):
            raise _Refused(KIND_INVALID_REQUEST, "message", f"must be a JSON object, not {_json_kind(data)}")
        message = {key: data[key] for key in _ENVELOPE_KEYS if key in data}
        if len(message) != len(data):
            _log.debug("ignoring unknown message members %s", sorted(set(data) - set(_ENVELOPE_KEYS)))
        msg_id = message.get("id", _ABSENT)
        usable = msg_id is not _ABSENT and _usable_id(msg_id)
        answer_id = msg_id if usable else None
        method = message.get("method", _ABSENT)
        if method is _ABSENT and msg_id is not _ABSENT and ("result" in message or "error" in message):
            return self._checked_response(message, usable)
        if msg_id is not _ABSENT and not usable:
            what = _json_kind(msg_id)
            reason = (
                "contains a lone surrogate, which is not text"
                if isinstance(msg_id, str)
                else f"must be an integer or a string, not {what}"
                if not isinstance(msg_id, int) or isinstance(msg_id, bool)
                else f"is out of range (at most {_MAX_ID - 1} in magnitude)"
            )
            raise _Refused(KIND_INVALID_REQUEST, "id", reason)
        if message.get("jsonrpc") != "2.0":
            got = message.get("jsonrpc", _ABSENT)
            reason = "is missing" if got is _ABSENT else f'must be "2.0", not {json.dumps(got)[:40]}'
            raise _Refused(KIND_INVALID_REQUEST, "jsonrpc", reason, answer_id=answer_id)
        if method is _ABSENT:
            raise _Refused(KIND_INVALID_REQUEST, "method", "is missing", answer_id=answer_id)
        if not isinstance(method, str):
            raise _Refused(KIND_INVALID_REQUEST, "method", f"must be a string, not {_json_kind(method)}", answer_id=answer_id)
        if _SURROGATE.search(method) is not None:
            raise _Refused(KIND_INVALID_REQUEST, "method", _surrogate_text(method), answer_id=answer_id)
        is_request = usable
        if not self._admitted(method, answer_id if is_request else _ABSENT):
            return None
        params = message.get("params", _ABSENT)
        if params is not _ABSENT and params is not None and not isinstance(params, (dict, list)):
            reason = f"params must be an object or an array, not {_json_kind(params)}"
            if not is_request:
                _log.warning("dropping notification %s: %s", method, reason)
                return None
            raise _Refused(KIND_INVALID_PARAMS, method, reason, answer_id=answer_id)
        if params is not _ABSENT and isinstance(params, (dict, list)):
            try:
                _params, surrogate_at = _check_params(params, repair=not is_request) if surrogates else _depth_only(params)
            except ValueError as error:
                if not is_request:
                    _log.warning("dropping notification %s: %s", method, error)
                    return None
                raise _Refused(KIND_INVALID_PARAMS, method, str(error), answer_id=answer_id) from None
            if surrogate_at is not None:
                if is_request:
                    raise _Refused(
                        KIND_INVALID_PARAMS, surrogate_at, "contains a lone surrogate, which is not text", answer_id=answer_id
                    )
                _log.warning("notification %s: replaced lone surrogates in %s by U+FFFD", method, surrogate_at)
        if is_request and isinstance(params, dict):
            # A progress token is an integer or a string (LSP ProgressToken),
            # for every method: anything else is the client's mistake, named
            # here, not a failure inside the handler.
            for key in _PROGRESS_TOKENS:
                token = params.get(key, _ABSENT)
                if token is not _ABSENT and (isinstance(token, bool) or not isinstance(token, (int, str))):
                    raise _Refused(
                        KIND_INVALID_PARAMS, f"params.{key}", f"must be an integer or a string (a progress token), not {_json_kind(token)}",
                        answer_id=answer_id,
                    )
        return message

    def _checked_response(self, message: dict[str, Any], usable: bool) -> dict[str, Any] | None:
        """A response to one of our requests: never answered; dropped when it
        cannot be matched, failed when its content is unusable."""
        if not usable or message.get("jsonrpc") != "2.0":
            _log.warning("dropping a response with an unusable id or jsonrpc member")
            return None
        if message.get("error", _ABSENT) is None:
            del message["error"]  # a result with "error": null
        error = message.get("error", _ABSENT)
        if error is not _ABSENT:
            if not isinstance(error, dict) or not isinstance(error.get("code"), int) or not isinstance(error.get("message"), str):
                self._fail_response(message["id"], "the client's error response is malformed")
                return None
        return message

    def _fail_response(self, msg_id: Any, why: str) -> None:
        _log.warning("response %r: %s", msg_id, why)
        future = self._request_futures.pop(msg_id, None)
        self._result_types.pop(msg_id, None)
        if future is not None and not future.done():
            future.set_exception(JsonRpcException(message=why, code=INVALID_PARAMS))

    def _admitted(self, method: str, request_id: Any) -> bool:
        """The LSP lifecycle: raises for a request it refuses, False for a
        notification it drops (``request_id`` is ``_ABSENT`` for one)."""
        is_request = request_id is not _ABSENT
        phase = self._phase
        if not is_request:
            if method in REQUESTS:
                # Without an id nothing could be answered, not even a refusal.
                _log.warning("dropping %s sent as a notification: it is a request and needs an id", method)
                return False
            if method == types.EXIT or phase is _Phase.INITIALIZED:
                return True
            _log.warning("dropping notification %s: the server is %s", method, "not initialized" if phase is _Phase.NEW else phase.value)
            return False
        if phase is _Phase.NEW and method != types.INITIALIZE:
            raise _Refused(
                KIND_SERVER_NOT_INITIALIZED, method, "the server is not initialized yet: send initialize first", answer_id=request_id
            )
        if phase is _Phase.INITIALIZED and method == types.INITIALIZE:
            raise _Refused(
                KIND_INVALID_REQUEST, method, "the server is already initialized: initialize is sent once", answer_id=request_id
            )
        if phase is _Phase.SHUT_DOWN:
            raise _Refused(
                KIND_INVALID_REQUEST, method, "the server is shutting down: no request is served after shutdown", answer_id=request_id
            )
        return True

    def _refuse(self, refused: _Refused) -> None:
        _log.warning("refused %s: %s", refused.kind, refused)
        authored, reason = _printable(refused.authored), _printable(refused.reason)
        data = {"kind": refused.kind, "authored": authored, "reason": reason}
        error = ResponseError(code=error_code(refused.kind), message=f"{authored}: {reason}", data=data)
        self._send_json({"jsonrpc": self.VERSION, "id": refused.answer_id, "error": _unstructured(error)})

    def _undecodable(self, message: dict[str, Any], error: JsonRpcException) -> None:
        """pygls could not structure a notification or a response."""
        cause = error.__cause__ if error.__cause__ is not None else error
        if "method" in message:
            _log.warning("dropping notification %s: invalid params: %s", message["method"], describe_structure_error(cause))
        else:
            self._fail_response(message["id"], f"the client's result does not decode: {describe_structure_error(cause)}")

    def _internal(self, method: str) -> ResponseError:
        reason = "internal error in the mevedel server (details are in its log)"
        return ResponseError(
            code=INTERNAL_ERROR, message=f"{method}: {reason}", data={"kind": KIND_INTERNAL, "authored": method, "reason": reason}
        )

    def _handle_request(self, msg_id: Any, method_name: str, params: Any) -> None:
        self._serving[msg_id] = method_name
        if method_name == types.INITIALIZE:
            self._phase = _Phase.INITIALIZED
        elif method_name == types.SHUTDOWN:
            self._phase = _Phase.SHUT_DOWN
        super()._handle_request(msg_id, method_name, params)

    # pygls' own ------------------------------------------------------------------

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
        method = self._serving.pop(msg_id, None)
        if error is not None and _leaks(error):
            # pygls answers an unexpected exception with its text and
            # traceback; they belong in the log (pygls logged them).
            error = self._internal(method or "the request")
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
            self._serving[message.id] = message.method
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


def _depth_only(params: Any) -> tuple[Any, None]:
    """The depth check of :func:`_check_params`, for a body without
    surrogate escapes (the common case)."""
    stack: list[tuple[Any, int]] = [(params, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > MAX_DEPTH:
            raise ValueError(f"params is nested more than {MAX_DEPTH} levels deep")
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return params, None


def _unstructured(error: ResponseError) -> dict[str, Any]:
    out: dict[str, Any] = {"code": error.code, "message": error.message}
    if error.data is not None:
        out["data"] = error.data
    return out


def _leaks(error: ResponseError) -> bool:
    """An error pygls built from an exception (its text, a traceback)."""
    data = error.data
    if isinstance(data, dict) and "traceback" in data:
        return True
    return error.code == INTERNAL_ERROR and not (isinstance(data, dict) and data.get("kind") == KIND_INTERNAL)


def _printable(text: str) -> str:
    """``text`` with lone surrogates written as escapes (they cannot be encoded)."""
    return _SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", text)
