"""Resource addresses: the pure grammar (no I/O, imports nothing of ours).

``parse_address`` turns authored text into a canonical ``Address``; the
operation matrix lives in ``matrix``; ``scan`` finds addresses in documents.
"""

from .encoding import decode_component, encode_component, encode_fragment
from .grammar import KNOWN_PREFIXES, MEMORY_KEYS, SKILL_ORIGINS, parse_address
from .matrix import RULES, Form, FormRule
from .model import (
    SCHEMES,
    Address,
    AddressError,
    ErrorKind,
    Family,
    LocatorClass,
    Operation,
)
from .scan import (
    PUBLIC_SCHEMES,
    AddressSpan,
    address_at,
    classify_span,
    find_address_spans,
    find_addresses,
    is_near_miss,
)

__all__ = [
    "KNOWN_PREFIXES",
    "PUBLIC_SCHEMES",
    "MEMORY_KEYS",
    "RULES",
    "SCHEMES",
    "SKILL_ORIGINS",
    "Address",
    "AddressError",
    "AddressSpan",
    "ErrorKind",
    "Family",
    "Form",
    "FormRule",
    "LocatorClass",
    "Operation",
    "address_at",
    "classify_span",
    "decode_component",
    "encode_component",
    "encode_fragment",
    "find_address_spans",
    "find_addresses",
    "is_near_miss",
    "parse_address",
]
