"""work:// on a workspace reached over SSH: Read of the session's files
(``SESSION/local/``) and the shared scope (``.mevedel/shared/``) through the
store's target, so the same pinned, symlink-refusing remote programs serve
them. The local searches walk local trees, so Glob, Grep and the bare
``work://`` union answer ``unavailable`` on such a workspace.
"""

from __future__ import annotations

from ..addresses.encoding import encode_component
from ..addresses.model import Address, AddressError, ErrorKind, Operation
from ..targets import ControlProgram, ListDir, Read, Stat, Status, TargetError
from .attempt import Prepared, Request
from .context import ResolverContext
from .options import ReadOptions
from .projection import page_lines, split_lines
from .text_source import decode_text


def prepare(address: Address, request: Request, context: ResolverContext) -> Prepared:
    authored, canonical = address.authored, address.canonical
    target = context.store_target
    assert target is not None and context.remote_workspace
    if address.scope == "listing" or request.operation is not Operation.READ:
        return Prepared("file", _failing(AddressError(
            ErrorKind.UNAVAILABLE, authored, "only Read of an explicit work:// address is served on an SSH workspace"
        )))
    if address.scope == "shared":
        base, root = "work://shared/", ".mevedel/shared"
    else:
        if context.remote_session is None:
            return Prepared("file", _failing(AddressError(
                ErrorKind.OWNER_MISSING, authored, "no session is open; work:// session files belong to the open session"
            )))
        base, root = "work://", f".mevedel/sessions/{context.remote_session}/local"
    parts = tuple(address.path)
    path = "/".join((root, *parts))

    async def run() -> object:
        assert isinstance(request.options, ReadOptions)
        try:
            # One round trip tries both: exactly one fits the entry's type.
            found = await target.run(ControlProgram([Read(path, optional=True), ListDir(path, optional=True)]))
            as_file, as_dir = found[0], found[1]
            if as_file.ok:
                text = decode_text(as_file.value, authored)
                notice = None if text else f"{canonical} is an empty file"
                return page_lines(split_lines(text), request.options, authored, canonical, "file", notice)
            if as_dir.ok:
                names = [n for n in as_dir.value if parts or n != "shared" or base == "work://shared/"]
                kinds = await target.run(ControlProgram([Stat(f"{path}/{n}", optional=True) for n in names])) if names else []
                lines = [
                    base + "/".join(encode_component(p) for p in (*parts, name)) + ("/" if k.ok and k.value.kind == "directory" else "")
                    for name, k in zip(names, kinds)
                    if k.ok and k.value.kind in ("file", "directory")
                ]
                notice = None if lines else f"{canonical} is an empty directory"
                return page_lines(lines, request.options, authored, canonical, "directory", notice)
            if Status.ABSENT in (as_file.status, as_dir.status):
                raise AddressError(ErrorKind.MISSING_TARGET, authored, "does not exist")
            raise AddressError(ErrorKind.UNAVAILABLE, authored, "cannot be read on the SSH workspace (not a plain file or directory)")
        except TargetError as error:
            raise AddressError(ErrorKind.UNAVAILABLE, authored, f"the SSH workspace could not be read ({error.reason})") from None

    return Prepared("file", run)


def _failing(error: AddressError):
    async def run() -> object:
        raise error

    return run
