"""Every failure leaves the server as an LSP ResponseError whose ``data`` is
``{"kind", "authored", "reason"}`` and whose message names the authored
input. No traceback reaches the client: unexpected exceptions are logged here
and answered as kind ``internal``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pygls.exceptions import JsonRpcException

from mevedel_protocol import ErrorData, converter, describe_structure_error, error_code
from mevedel_protocol.errors import KIND_INTERNAL, KIND_INVALID_PARAMS

from ..addresses import AddressError

_log = logging.getLogger(__name__)

T = TypeVar("T")


def failure(kind: str, authored: str, reason: str) -> JsonRpcException:
    data = converter.unstructure(ErrorData(kind=kind, authored=authored, reason=reason))
    return JsonRpcException(message=f"{authored}: {reason}", code=error_code(kind), data=data)


def address_failure(error: AddressError) -> JsonRpcException:
    return failure(error.kind.value, error.authored, error.reason)


def invalid_params(authored: str, reason: str) -> JsonRpcException:
    return failure(KIND_INVALID_PARAMS, authored, reason)


def internal_failure(authored: str) -> JsonRpcException:
    return failure(KIND_INTERNAL, authored, "internal error in the mevedel server (details are in its log)")


def structure_params(raw: Any, cls: type[T], method: str) -> T:
    """``raw`` (the request's params, as decoded JSON) as a ``cls``, or
    InvalidParams naming every offending field."""
    if not isinstance(raw, dict):
        kind = "absent" if raw is None else type(raw).__name__
        raise invalid_params(method, f"params must be an object, got {kind}")
    try:
        return converter.structure(raw, cls)
    except Exception as error:  # cattrs raises several exception types
        raise invalid_params(method, describe_structure_error(error)) from None


def answers_errors(method: str) -> Callable[[Callable[..., Awaitable[T]]], Callable[..., Awaitable[T]]]:
    """Turn AddressError into its ResponseError and anything unexpected into
    an ``internal`` one (logged with its traceback), keeping the server up."""

    def decorate(handler: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
        @functools.wraps(handler)
        async def answered(ls: Any, *args: Any) -> T:
            try:
                return await handler(ls, *args)
            except JsonRpcException:
                raise
            except AddressError as error:
                raise address_failure(error) from None
            except Exception:
                _log.exception("unexpected error in %s", method)
                raise internal_failure(method) from None

        return answered

    return decorate
