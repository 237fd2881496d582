"""Packed generations: old publications kept in a session's pack.

Every settled turn leaves a generation that Redo offers, and each generation
directory holds a whole copy of the transcript part that was open then (up
to 64 KiB), of the open index pages, the sidecar and a manifest naming every
logical file: most of a long session's disk is these near-identical copies.
Collection (:mod:`~..workspace_wide.collection`) therefore moves the
generations it retains beyond the recent window into the session's *pack*,
where consecutive versions of one logical file are stored as deltas.

Layout
------
The pack is the set of *volumes* ``.publications/.pack-<32 hex>.mvpack``
(dot-named, so a reader that predates packing ignores them). A volume is
written once, whole and flushed, by ``CreateExclusive`` (not deferred: a
power loss cannot tear it under its name), and never changes: it is
``MAGIC``, a msgpack :class:`PackVolume`, and the SHA-256 of the two. A
volume altered afterwards is refused whole, never half-read: readers list
it as unreadable, and nothing removes it. It holds

- packed generations: publication ID, the manifest's modification time
  (target seconds, what Redo and collection order generations by) and the
  SHA-256 of the manifest's bytes, which are a blob like any other;
- blobs, addressed by SHA-256 and size: ``base`` (another blob of the pack,
  or None), how many leading bytes of the base open this blob, and the rest
  deflated with the base's following bytes (or its last 32 KiB) as the
  preset dictionary. A transcript part or index page only grows, so a new
  version costs its new lines; a manifest or sidecar differs from the
  previous one in a few fields, which the dictionary finds.

Records name each other by digest, never by position, so a volume can be
copied into a later one verbatim: a packing step folds the small volumes
into the one it writes (``replaces``) and removes them after the barrier. A
crash between leaves both, which read the same (the first copy of a digest
or a generation wins; they are identical).

A packed generation's manifest is the very manifest its directory held, so
its entries still name ``.publications/<id>/NNNNNN.data`` paths; a reader
takes the loose file while it exists and the pack's blob of the same
digest and size otherwise (:func:`read_entries`), and verifies either.
Sessions written before packing have no volume and read as before.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Literal

import msgspec

from ...lazy_decoder import LazyDecoder
from ...targets import (
    ControlProgram,
    ListDir,
    OpResult,
    Read,
    Status,
    Target,
    raise_for_result,
)
from ..layout import SessionPaths
from .records import PUBLICATION_ID_PATTERN, ManifestEntry, RecordError, RecordErrorKind

PACK_FORMAT = 1
MAGIC = b"mevedel-pack 1\n"
VOLUME_PREFIX = ".pack-"
VOLUME_SUFFIX = ".mvpack"
#: A delta chain longer than this is cut by storing the blob whole.
MAX_CHAIN = 64
#: The dictionary deflate can use.
_WINDOW = 32 * 1024
_DIGEST_SIZE = 32
#: Reconstructed blob bytes a :class:`Pack` keeps for the next delta.
_MEMO_BYTES = 8 * 1024 * 1024

_VOLUME_NAME = re.compile(rf"^\.pack-{PUBLICATION_ID_PATTERN}\.mvpack\Z")
#: A temporary file a crash left while a volume was being created.
VOLUME_DEBRIS = re.compile(rf"^\.\.pack-{PUBLICATION_ID_PATTERN}\.mvpack\.[0-9a-z]+\.tmp\Z")

Sha256 = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}\Z")]
Size = Annotated[int, msgspec.Meta(ge=0, le=2**53)]


class PackedBlob(msgspec.Struct, array_like=True, forbid_unknown_fields=True, frozen=True, gc=False):
    sha256: Sha256
    size: Size
    #: The blob whose leading bytes this one continues (None: stored whole).
    base: Sha256 | None
    #: How many leading bytes of the base open this blob.
    prefix: Size
    #: The rest, deflated (zlib) with the base's dictionary (:func:`_zdict`).
    data: bytes


class PackedGeneration(msgspec.Struct, array_like=True, forbid_unknown_fields=True, frozen=True, gc=False):
    publication_id: Annotated[str, msgspec.Meta(pattern=rf"^{PUBLICATION_ID_PATTERN}\Z")]
    #: SHA-256 of the manifest's bytes (a blob of the pack).
    manifest: Sha256
    manifest_size: Size
    #: The manifest's modification time, in whole seconds of the target clock.
    mtime: Size


class PackVolume(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    format: Literal[1]
    session_id: str
    #: Volumes whose every record this one holds (removed once it is durable).
    replaces: list[str] = []
    generations: list[PackedGeneration] = []
    blobs: list[PackedBlob] = []


_encoder = msgspec.msgpack.Encoder()
_decoder = LazyDecoder(msgspec.msgpack.Decoder, PackVolume)


def is_volume_name(name: str) -> bool:
    return bool(_VOLUME_NAME.match(name))


def volume_name(token: str) -> str:
    """The volume name for a fresh 32-hex token."""
    name = f"{VOLUME_PREFIX}{token}{VOLUME_SUFFIX}"
    if not is_volume_name(name):
        raise ValueError(f"{token!r} is not 32 hexadecimal digits")
    return name


def encode_volume(volume: PackVolume) -> bytes:
    body = MAGIC + _encoder.encode(volume)
    return body + hashlib.sha256(body).digest()


def decode_volume(label: str, raw: bytes, session_id: str) -> PackVolume:
    """A volume's record, refused whole (:class:`RecordError`) when torn,
    altered, of another format or of another session."""
    if len(raw) < len(MAGIC) + _DIGEST_SIZE or not raw.startswith(MAGIC):
        raise RecordError(RecordErrorKind.MALFORMED, label, "not a pack volume (no pack header)")
    body, digest = raw[:-_DIGEST_SIZE], raw[-_DIGEST_SIZE:]
    if hashlib.sha256(body).digest() != digest:
        raise RecordError(RecordErrorKind.DIGEST_MISMATCH, label, "the pack volume does not match its own SHA-256 (torn or altered)")
    try:
        volume = _decoder.decode(body[len(MAGIC) :])
    except msgspec.ValidationError as exc:
        raise RecordError(RecordErrorKind.INVALID_VALUE, label, f"the pack volume is invalid: {exc}") from None
    except msgspec.DecodeError as exc:
        raise RecordError(RecordErrorKind.MALFORMED, label, f"the pack volume is unreadable: {exc}") from None
    if volume.session_id != session_id:
        raise RecordError(RecordErrorKind.INVALID_VALUE, label, f"the pack volume belongs to session {volume.session_id}")
    return volume


def _zdict(base: bytes, prefix: int) -> bytes:
    rest = base[prefix:]
    return (rest if rest else base)[-_WINDOW:]


def _common_prefix(a: bytes, b: bytes) -> int:
    low, high = 0, min(len(a), len(b))
    if a[:high] == b[:high]:
        return high
    while low < high:  # a[:low] == b[:low] and a[:high] != b[:high]
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def _deflate(data: bytes, zdict: bytes) -> bytes:
    compressor = zlib.compressobj(9, zdict=zdict) if zdict else zlib.compressobj(9)
    return compressor.compress(data) + compressor.flush()


def _inflate(data: bytes, zdict: bytes, expected: int) -> bytes:
    inflater = zlib.decompressobj(zdict=zdict) if zdict else zlib.decompressobj()
    out = inflater.decompress(data, expected + 1)
    if len(out) > expected or not inflater.eof:
        raise zlib.error("the deflated bytes are not the recorded size")
    return out


def make_blob(data: bytes, base: tuple[str, bytes] | None = None) -> PackedBlob:
    """``data`` as a blob: a delta of ``base`` (its digest and bytes) when
    that is smaller than the bytes deflated alone."""
    sha = hashlib.sha256(data).hexdigest()
    whole = PackedBlob(sha, len(data), None, 0, _deflate(data, b""))
    if base is None or not base[1]:
        return whole
    prefix = _common_prefix(data, base[1])
    delta = PackedBlob(sha, len(data), base[0], prefix, _deflate(data[prefix:], _zdict(base[1], prefix)))
    return delta if len(delta.data) < len(whole.data) else whole


class Pack:
    """Every record of the volumes read, first copy of each winning."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.volumes: dict[str, PackVolume] = {}
        self.blobs: dict[str, PackedBlob] = {}
        self.generations: dict[str, PackedGeneration] = {}
        #: Volumes that cannot be trusted (altered after they were written),
        #: with why: their records are not read, and nothing removes them.
        self.unreadable: dict[str, str] = {}
        self._memo: OrderedDict[str, bytes] = OrderedDict()
        self._memo_size = 0

    def add(self, name: str, volume: PackVolume) -> None:
        self.volumes[name] = volume
        for blob in volume.blobs:
            self.blobs.setdefault(blob.sha256, blob)
        for generation in volume.generations:
            self.generations.setdefault(generation.publication_id, generation)

    def depth(self, sha256: str) -> int:
        """Deltas between this blob and one stored whole (0: itself)."""
        depth, blob = 0, self.blobs.get(sha256)
        while blob is not None and blob.base is not None and depth <= MAX_CHAIN:
            depth += 1
            blob = self.blobs.get(blob.base)
        return depth

    def get(self, sha256: str, size: int) -> bytes | None:
        """The bytes with this digest and size, rebuilt and verified; None
        when the pack does not hold them (or they do not verify)."""
        blob = self.blobs.get(sha256)
        if blob is None or blob.size != size:
            return None
        chain = [blob]
        while chain[-1].base is not None and chain[-1].base not in self._memo:
            following = self.blobs.get(chain[-1].base)  # type: ignore[arg-type]
            if following is None or len(chain) > MAX_CHAIN:
                return None  # a base is missing, or a cycle
            chain.append(following)
        data = self._memo.get(chain[-1].base) if chain[-1].base is not None else None  # type: ignore[arg-type]
        for link in reversed(chain):
            try:
                if link.base is None:
                    data = _inflate(link.data, b"", link.size)
                else:
                    assert data is not None
                    if link.prefix > len(data):
                        return None
                    data = data[: link.prefix] + _inflate(link.data, _zdict(data, link.prefix), link.size - link.prefix)
            except zlib.error:
                return None
            if len(data) != link.size or hashlib.sha256(data).hexdigest() != link.sha256:
                return None
            self._remember(link.sha256, data)
        return data

    def _remember(self, sha256: str, data: bytes) -> None:
        if sha256 in self._memo:
            self._memo.move_to_end(sha256)
            return
        self._memo[sha256] = data
        self._memo_size += len(data)
        while self._memo_size > _MEMO_BYTES and len(self._memo) > 1:
            _, dropped = self._memo.popitem(last=False)
            self._memo_size -= len(dropped)

    def manifest_bytes(self, publication_id: str) -> bytes | None:
        generation = self.generations.get(publication_id)
        if generation is None:
            return None
        return self.get(generation.manifest, generation.manifest_size)


#: Volumes already decoded, by name (a volume never changes under its name).
VolumeCache = dict[str, PackVolume]


async def read_pack(
    target: Target, paths: SessionPaths, names: Iterable[str] | None = None, *, cache: VolumeCache | None = None
) -> Pack:
    """The session's pack: the volumes ``names`` (from a listing of
    ``.publications/`` the caller made) or those a listing finds. A volume
    that vanished between listing and reading was folded into a newer one
    by a packing step, so the directory is listed again."""
    listed = None if names is None else [n for n in names if is_volume_name(n)]
    for _ in range(4):
        if listed is None:
            listing = ListDir(paths.publications_dir, optional=True)
            result = (await target.run(ControlProgram([listing])))[0]
            if result.status is Status.ABSENT:
                return Pack(paths.session_id)
            raise_for_result(listing, result)
            listed = [n for n in result.value if is_volume_name(n)]
        pack = Pack(paths.session_id)
        wanted = sorted(n for n in listed if cache is None or n not in cache)
        ops = [Read(f"{paths.publications_dir}/{name}", optional=True) for name in wanted]
        results = (await target.run(ControlProgram(ops))).results if ops else []
        vanished = False
        for name, op, result in zip(wanted, ops, results):
            if result.status is Status.ABSENT:
                vanished = True
                continue
            raise_for_result(op, result)
            try:
                volume = decode_volume(paths.label(f".publications/{name}"), result.value, paths.session_id)
            except RecordError as error:
                pack.unreadable[name] = str(error)
                continue
            if cache is not None:
                cache[name] = volume
            pack.add(name, volume)
        for name in sorted(listed):
            if cache is not None and name in cache and name not in pack.volumes and name not in pack.unreadable:
                pack.add(name, cache[name])
        if not vanished:
            if cache is not None:
                for gone in set(cache) - set(listed):
                    del cache[gone]
            return pack
        listed = None
    raise RecordError(RecordErrorKind.MISSING, paths.label(".publications"), "the pack kept changing while it was read")


class EntryReader:
    """Reads the bytes manifest entries name: the loose published file
    while it exists, else the pack's blob of the same digest and size
    (loaded once, on the first miss); each verified against the entry."""

    def __init__(self, target: Target, paths: SessionPaths, pack: Pack | None = None, *, cache: VolumeCache | None = None) -> None:
        self.target = target
        self.paths = paths
        self.pack = pack
        self.cache = cache

    async def complete(self, published: Sequence[str], results: Sequence[OpResult], digests: Mapping[str, tuple[str, int]]) -> list[OpResult]:
        """``results`` of reading the loose files ``published`` (session
        relative), with each absent one answered from the pack when it
        holds the bytes ``digests`` names for that path (a packed
        generation's directory is gone); the caller verifies as before."""
        out = list(results)
        for index, (path, result) in enumerate(zip(published, results)):
            if result.status is not Status.ABSENT or path not in digests:
                continue
            if self.pack is None:
                self.pack = await read_pack(self.target, self.paths, cache=self.cache)
            data = self.pack.get(*digests[path])
            if data is not None:
                out[index] = OpResult(Status.OK, data)
        return out

    async def read(self, entries: Sequence[ManifestEntry], *, batch: int = 0) -> list[bytes | None]:
        """One answer per entry: its verified bytes, or None when neither
        the loose file nor the pack holds them. ``batch``: reads a program."""
        unique = list(dict.fromkeys(e.published for e in entries))
        ops = [Read(self.paths.inside(p), optional=True) for p in unique]
        step = batch or len(ops) or 1
        results = []
        for start in range(0, len(ops), step):
            results.extend((await self.target.run(ControlProgram(ops[start : start + step]))).results)
        loose: dict[str, bytes | None] = {}
        for path, op, result in zip(unique, ops, results):
            if result.status not in (Status.OK, Status.ABSENT):
                raise_for_result(op, result)
            loose[path] = result.value if result.status is Status.OK else None
        out: list[bytes | None] = []
        for entry in entries:
            data = loose[entry.published]
            if data is None:
                if self.pack is None:
                    self.pack = await read_pack(self.target, self.paths, cache=self.cache)
                data = self.pack.get(entry.sha256, entry.size)
            elif len(data) != entry.size or hashlib.sha256(data).hexdigest() != entry.sha256:
                data = None
            out.append(data)
        return out
