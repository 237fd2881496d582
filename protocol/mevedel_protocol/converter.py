"""The cattrs converter for mevedel messages: lsprotocol's, so field names
are camelCase on the wire and absent optional fields are omitted, plus two
rules of our own for params coming in: unknown keys are refused (a misspelt
``limt`` must not be silently ignored) and primitives are not coerced (the
string ``"5"`` is not an ``offset``)."""

import re
from typing import Any, Union

import cattrs
from cattrs.cols import is_sequence, list_structure_factory
from lsprotocol.converters import get_converter


def _strict(expected: type, name: str):
    def structure(value: Any, _type: type) -> Any:
        # bool is an int subclass; a JSON true is never a line number.
        if isinstance(value, bool) and expected is not bool:
            raise TypeError(f"expected {name}, got a boolean")
        if not isinstance(value, expected):
            raise TypeError(f"expected {name}, got {_json_type(value)}")
        return value

    return structure


def _json_type(value: Any) -> str:
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
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


#: A session id for every workspace folder, or folder URI -> session id.
SessionChoice = Union[None, str, dict[str, str]]


def _structure_session_choice(value: Any, _type: type) -> Any:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        return dict(value)
    raise TypeError(f"expected a session id string or an object of folder URI -> session id, got {_json_type(value)}")


#: A config option's value: a value id, or true/false for a boolean option.
OptionValue = Union[str, bool]


def _structure_option_value(value: Any, _type: type) -> Any:
    if isinstance(value, (str, bool)):
        return value
    raise TypeError(f"expected a value id (a string) or a boolean, got {_json_type(value)}")


def _strict_list_factory(list_type: Any, converter: cattrs.Converter):
    items = list_structure_factory(list_type, converter)

    def structure(value: Any, _type: Any) -> Any:
        # A string is iterable, but it is not a list of roots.
        if not isinstance(value, list):
            raise TypeError(f"expected an array, got {_json_type(value)}")
        return items(value, _type)

    return structure


def make_converter() -> cattrs.Converter:
    converter = get_converter(cattrs.Converter(forbid_extra_keys=True))
    converter.register_structure_hook(str, _strict(str, "a string"))
    converter.register_structure_hook(int, _strict(int, "an integer"))
    converter.register_structure_hook(bool, _strict(bool, "a boolean"))
    converter.register_structure_hook_factory(is_sequence, _strict_list_factory)
    converter.register_structure_hook(SessionChoice, _structure_session_choice)
    converter.register_structure_hook(OptionValue, _structure_option_value)
    return converter


converter = make_converter()


def wire_name(attribute: str) -> str:
    """The camelCase wire name of a snake_case attribute (lsprotocol's rule)."""
    head, *rest = attribute.removesuffix("_").split("_")
    return head + "".join(part.title() for part in rest)


def _format_leaf(error: BaseException) -> str:
    if isinstance(error, KeyError):
        return "required field missing"
    if isinstance(error, cattrs.ForbiddenExtraKeysError):
        return "unknown field(s) " + ", ".join(sorted(error.extra_fields))
    if isinstance(error, AttributeError) and "keys" in str(error):
        return "expected an object"
    text = str(error)
    literal = re.search(r"not in literal (?:typing\.)?Literal\[(.*)\]\)?$", text)
    if literal:
        return f"must be one of {literal.group(1)}"
    return text


def _walk(error: BaseException, path: str) -> list[str]:
    if isinstance(error, cattrs.IterableValidationError):
        with_notes, without = error.group_exceptions()
        found = [m for sub, note in with_notes for m in _walk(sub, f"{path}[{note.index!r}]")]
    elif isinstance(error, cattrs.ClassValidationError):
        with_notes, without = error.group_exceptions()
        found = [m for sub, note in with_notes for m in _walk(sub, f"{path}.{wire_name(note.name)}")]
    else:
        return [f"{path}: {_format_leaf(error)}"]
    return found + [f"{path}: {_format_leaf(sub)}" for sub in without]


def describe_structure_error(error: BaseException, path: str = "params") -> str:
    """One line naming every offending field by its wire (camelCase) path."""
    return "; ".join(_walk(error, path))
