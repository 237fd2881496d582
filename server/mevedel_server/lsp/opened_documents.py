"""The text of the document a request names.

An editor sends hover, completion, definition and document links for
documents it opened (``textDocument/didOpen``), whose text the server
holds. A request for a URI it never opened is answered from the file on
disk when that is a regular file of bounded size -- opened without
following a final link, never blocking (a FIFO, ``/dev/zero``) -- and
refused with ``invalid-params`` naming the URI otherwise; pygls alone would
read any path whole (hanging on ``/dev/zero``) and fail ``internal`` on a
file that does not exist.
"""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING

from pygls.uris import to_fs_path
from pygls.workspace import TextDocument

from .errors import invalid_params

if TYPE_CHECKING:
    from .server import MevedelLanguageServer

#: The largest file read for a document the editor did not open.
MAX_UNOPENED_BYTES = 16 * 1024 * 1024


def text_document(ls: MevedelLanguageServer, uri: str) -> TextDocument:
    """The open document ``uri``, or the file it names read from disk."""
    if uri in ls.workspace.text_documents:
        return ls.workspace.get_text_document(uri)
    path = to_fs_path(uri) if uri.startswith("file:") else None
    if not path:
        raise invalid_params(uri, "is not open in the editor (send textDocument/didOpen first), and is not a file to read")
    return TextDocument(uri, source=_read(uri, path))


def _read(uri: str, path: str) -> str:
    def refused(why: str) -> Exception:
        return invalid_params(uri, f"is not open in the editor (send textDocument/didOpen first), and {why}")

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as error:
        raise refused(f"cannot be read ({error.strerror or error})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise refused("is not a regular file")
        if info.st_size > MAX_UNOPENED_BYTES:
            raise refused(f"is larger than {MAX_UNOPENED_BYTES} bytes")
        chunks = []
        left = MAX_UNOPENED_BYTES + 1
        while left > 0 and (chunk := os.read(fd, min(left, 1024 * 1024))):
            chunks.append(chunk)
            left -= len(chunk)
        if left <= 0:
            raise refused(f"is larger than {MAX_UNOPENED_BYTES} bytes")
    except OSError as error:
        raise refused(f"cannot be read ({error.strerror or error})") from None
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", "replace")
