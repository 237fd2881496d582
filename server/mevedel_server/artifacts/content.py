"""What an item's primary file may hold, checked before anything is
written: a document is UTF-8 Markdown, a whiteboard an Excalidraw scene
(a JSON object whose ``elements`` is a list), an artifact's text file
UTF-8 and its image the bytes of one."""

from __future__ import annotations

import base64
import binascii
import json

from .errors import invalid
from .layout import MAX_ITEM_BYTES, is_text_file

EMPTY_SCENE = (
    json.dumps(
        {"type": "excalidraw", "version": 2, "source": "mevedel", "elements": [], "appState": {}, "files": {}},
        indent=2,
    )
    + "\n"
).encode()


def default_content(kind: str) -> bytes:
    return EMPTY_SCENE if kind == "whiteboard" else b""


def decode_payload(content: str, encoding: str, authored: str) -> bytes:
    if encoding == "base64":
        try:
            return base64.b64decode(content.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError, ValueError):
            raise invalid(authored, "is not valid base64") from None
    if encoding != "utf-8":
        raise invalid(authored, f"encoding {encoding!r} is not utf-8 or base64")
    try:
        return content.encode("utf-8")
    except UnicodeEncodeError:
        raise invalid(authored, "is not valid Unicode text (a lone surrogate)") from None


def check_content(kind: str, primary: str, data: bytes, authored: str) -> None:
    if len(data) > MAX_ITEM_BYTES:
        raise invalid(authored, f"is {len(data)} bytes; an item's primary file holds at most {MAX_ITEM_BYTES}")
    if kind == "artifact" and not is_text_file(primary):
        return
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise invalid(authored, f"{primary} must be UTF-8 text") from None
    if kind == "whiteboard":
        try:
            scene = json.loads(text)
        except ValueError as exc:
            raise invalid(authored, f"is not a whiteboard scene: not JSON ({exc})") from None
        if not isinstance(scene, dict) or not isinstance(scene.get("elements"), list):
            raise invalid(authored, "is not a whiteboard scene: an Excalidraw scene is a JSON object with an \"elements\" list")


def encode_for_reader(primary: str, kind: str, data: bytes) -> tuple[str, str]:
    """(content, encoding) of a read: base64 for an image or undecodable bytes."""
    if kind != "artifact" or is_text_file(primary):
        try:
            return data.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            pass
    return base64.b64encode(data).decode("ascii"), "base64"
