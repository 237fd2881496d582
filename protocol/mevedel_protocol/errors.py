"""How failures travel: the ``data`` of an LSP ResponseError, and its codes.

``data.kind`` is stable. Address-layer kinds are the values of
``mevedel_server.addresses.model.ErrorKind``; the protocol adds
``invalid-params`` for a request whose params do not match its type.
"""

import attrs

#: JSON-RPC / LSP error codes used by this server.
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
#: LSP 3.17 ``RequestFailed``: the request was valid but could not be served.
REQUEST_FAILED = -32803

#: The protocol-level kind for params that do not match the request type.
KIND_INVALID_PARAMS = "invalid-params"
KIND_INTERNAL = "internal"

#: Kinds that mean "the authored input was wrong" (code INVALID_PARAMS); every
#: other kind except ``internal`` means "the world was not as asked" (code
#: REQUEST_FAILED).
VALIDATION_KINDS = frozenset(
    {
        KIND_INVALID_PARAMS,
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
