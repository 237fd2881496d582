"""Resource addresses: the pure grammar (no I/O, imports nothing of ours).

``parse_address`` turns authored text into a canonical ``Address``; the
operation matrix lives in ``matrix``; ``scan`` finds addresses in documents.
"""

from .encoding import decode_component, encode_component, encode_fragment
from .grammar import KNOWN_PREFIXES, MEMORY_KEYS, SKILL_ORIGINS, parse_address
from .matrix import RULES, Form, FormRule
from .model import SCHEMES, Address, AddressError, ErrorKind, Family, LocatorClass, Operation

__all__ = [
    "KNOWN_PREFIXES",
    "MEMORY_KEYS",
    "RULES",
    "SCHEMES",
    "SKILL_ORIGINS",
    "Address",
    "AddressError",
    "ErrorKind",
    "Family",
    "Form",
    "FormRule",
    "LocatorClass",
    "Operation",
    "decode_component",
    "encode_component",
    "encode_fragment",
    "parse_address",
]
