"""How failures travel: the ``data`` of an LSP ResponseError, and its codes.

``data.kind`` is stable. Address-layer kinds are the values of
``mevedel_server.addresses.model.ErrorKind``; the protocol adds
``invalid-params`` for a request whose params do not match its type, and
the envelope and lifecycle kinds (``parse-error``, ``invalid-request``,
``server-not-initialized``) with JSON-RPC's and LSP's own codes.
"""

import attrs

#: JSON-RPC / LSP error codes used by this server.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
#: LSP: a request other than ``initialize`` before ``initialize``.
SERVER_NOT_INITIALIZED = -32002
#: LSP 3.17 ``RequestFailed``: the request was valid but could not be served.
REQUEST_FAILED = -32803

#: The protocol-level kind for params that do not match the request type.
KIND_INVALID_PARAMS = "invalid-params"
KIND_INTERNAL = "internal"
#: A frame or body that is not one JSON message (code PARSE_ERROR).
KIND_PARSE_ERROR = "parse-error"
#: A JSON message that is not a valid request, or a request the server's
#: lifecycle refuses (a second ``initialize``, anything after ``shutdown``).
KIND_INVALID_REQUEST = "invalid-request"
#: A request before ``initialize``.
KIND_SERVER_NOT_INITIALIZED = "server-not-initialized"

#: The kinds of the JSON-RPC / LSP envelope and lifecycle, with their own codes.
PROTOCOL_ERROR_CODES = {
    KIND_PARSE_ERROR: PARSE_ERROR,
    KIND_INVALID_REQUEST: INVALID_REQUEST,
    KIND_SERVER_NOT_INITIALIZED: SERVER_NOT_INITIALIZED,
}

#: Kinds that mean "the authored input was wrong" (code INVALID_PARAMS, or the
#: protocol kind's own code); every other kind except ``internal`` means "the
#: world was not as asked" (code REQUEST_FAILED, or the protocol kind's own).
VALIDATION_KINDS = frozenset(
    {
        KIND_INVALID_PARAMS,
        KIND_PARSE_ERROR,
        KIND_INVALID_REQUEST,
        "malformed-address",
        "unknown-scheme",
        "unsupported-operation",
        "containment",
        "invalid-option",
        "invalid-patch",
    }
)


def error_code(kind: str) -> int:
    """The ResponseError code that carries an error of ``kind``."""
    if kind == KIND_INTERNAL:
        return INTERNAL_ERROR
    if kind in PROTOCOL_ERROR_CODES:
        return PROTOCOL_ERROR_CODES[kind]
    return INVALID_PARAMS if kind in VALIDATION_KINDS else REQUEST_FAILED


@attrs.define
class ErrorData:
    """``ResponseError.data`` of every failure this server reports.

    ``authored`` is the input the failure is about, exactly as the client sent
    it (an address, a patch file header, a param name); ``reason`` says what is
    wrong with it and never contains a backing path.
    """

    kind: str
    authored: str
    reason: str
