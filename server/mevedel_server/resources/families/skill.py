"""skill:// — read-only skill packages, found in the configured skill roots.

A skill is a directory holding ``SKILL.md`` directly below a skill root. Its
source key is ``ORIGIN:REALPATH`` and ``skill://NAME@DIGEST`` names it by the
SHA-256 of that key: the digest is the authority, NAME a label that must
agree. ``skill://ORIGIN/NAME`` is an alias for the one current source with
that origin and name; an alias claimed by two sources is ambiguous and
resolves to nothing (no fallback).
"""

from __future__ import annotations

import hashlib
import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from ...addresses import (
    SKILL_ORIGINS,
    Address,
    AddressError,
    ErrorKind,
    Operation,
    encode_component,
)
from ..engine.attempt import Prepared, Request
from ..engine.containment import contain
from ..engine.context import ResolverContext
from ..engine.explicit_node import read_listing, run_node
from ..engine.places import Places
from ..engine.runners import fail, later
from ..engine.search import Scope, search
from ..engine.tree import Node, Tree, node_of, open_walks

SKILL_FILE = "SKILL.md"


@dataclass(frozen=True, slots=True)
class Skill:
    name: str
    origin: str
    directory: Path
    real: str
    digest: str

    @property
    def source_key(self) -> str:
        return f"{self.origin}:{self.real}"

    @property
    def exact(self) -> str:
        return f"skill://{encode_component(self.name)}@{self.digest}"

    @property
    def alias(self) -> str:
        return f"skill://{origin_text(self.origin)}/{encode_component(self.name)}"

    def still_current(self) -> bool:
        return os.path.realpath(self.directory) == self.real and (self.directory / SKILL_FILE).is_file()


def origin_text(origin: str) -> str:
    plugin = origin.removeprefix("plugin/")
    return origin if plugin == origin else "plugin/" + encode_component(plugin)


def source_digest(origin: str, real: str) -> str:
    return hashlib.sha256(f"{origin}:{real}".encode("utf-8")).hexdigest()


def _origin_rank(origin: str) -> tuple[int, str]:
    return (SKILL_ORIGINS.index(origin), "") if origin in SKILL_ORIGINS else (len(SKILL_ORIGINS), origin)


def discover_skills(context: ResolverContext) -> list[Skill]:
    """Every discoverable skill, ordered by origin then name."""
    found: dict[str, Skill] = {}
    for root in context.skill_roots:
        try:
            with os.scandir(root.path) as scan:
                entries = [entry for entry in scan if entry.is_dir()]
        except OSError:
            continue
        for entry in entries:
            directory = Path(entry.path)
            if not (directory / SKILL_FILE).is_file():
                continue
            real = os.path.realpath(directory)
            digest = source_digest(root.origin, real)
            found.setdefault(digest, Skill(entry.name, root.origin, directory, real, digest))
    return sorted(found.values(), key=lambda s: (_origin_rank(s.origin), s.name, s.digest))


def alias_groups(skills: list[Skill]) -> dict[tuple[str, str], list[Skill]]:
    groups: dict[tuple[str, str], list[Skill]] = defaultdict(list)
    for skill in skills:
        groups[(skill.origin, skill.name)].append(skill)
    return groups


def find_skill(address: Address, context: ResolverContext) -> Skill:
    """The exact current source an exact or alias address names."""
    authored = address.authored
    skills = discover_skills(context)
    assert address.key is not None and address.name is not None
    if address.scope == "exact":
        digest = address.key.rpartition("@")[2]
        for skill in skills:
            if skill.digest == digest:
                if skill.name != address.name:
                    raise AddressError(
                        ErrorKind.UNAVAILABLE, authored, f"this source key belongs to skill {skill.name!r}, not {address.name!r}"
                    )
                return skill
        raise AddressError(
            ErrorKind.UNAVAILABLE,
            authored,
            "no discovered skill has this source key (missing, disabled or changed); Read skill:// lists the current skills",
        )
    group = alias_groups(skills).get((address.key, address.name), [])
    if not group:
        raise AddressError(
            ErrorKind.UNAVAILABLE,
            authored,
            f"no skill {address.name!r} is discovered from {address.key}; Read skill:// lists the current skills",
        )
    if len(group) > 1:
        choices = ", ".join(skill.exact for skill in group)
        raise AddressError(
            ErrorKind.UNAVAILABLE, authored, f"the alias is ambiguous ({len(group)} sources); use one of {choices}"
        )
    return group[0]


def package_base(address: Address) -> str:
    """The address prefix of a package's descendants, in the authored form
    (an alias stays an alias in results)."""
    assert address.key is not None and address.name is not None
    if address.scope == "exact":
        return f"skill://{encode_component(address.name)}@{address.key.rpartition('@')[2]}/"
    return f"skill://{origin_text(address.key)}/{encode_component(address.name)}/"


def package_tree(skill: Skill, base: str, places: Places) -> Tree:
    """A skill package, served from its real directory (its identity)."""
    return Tree(places.local(Path(skill.real)), base, label=skill.origin)


def locate(address: Address, places: Places) -> tuple[Skill, Node]:
    skill = find_skill(address, places.context)
    tree = package_tree(skill, package_base(address), places)
    contain(tree.place, address.path, address.authored)
    return skill, node_of(tree, address.path)


def prepare(address: Address, request: Request, context: ResolverContext) -> Prepared:
    authored, canonical = address.authored, address.canonical
    places = Places(context)
    if address.scope == "listing":
        return Prepared("file", later(_run_listing, request, places, authored, canonical))
    try:
        skill, node = locate(address, places)
    except AddressError as error:
        if error.kind is ErrorKind.UNAVAILABLE:
            return Prepared("file", fail(error))
        raise
    return Prepared("file", later(_run_package, skill, node, request, authored, canonical))


async def _run_package(skill: Skill, node: Node, request: Request, authored: str, canonical: str) -> object:
    if not skill.still_current():
        raise AddressError(ErrorKind.UNAVAILABLE, authored, "the skill source changed or is no longer discoverable")
    return await run_node(node, request, authored, canonical)


def listing_lines(skills: list[Skill]) -> list[str]:
    groups = alias_groups(skills)
    lines = []
    for skill in skills:
        if len(groups[(skill.origin, skill.name)]) == 1:
            lines.append(f"{skill.alias} = {skill.exact}")
        else:
            lines.append(f"{skill.exact} ({skill.alias} is ambiguous)")
    return lines


async def _run_listing(request: Request, places: Places, authored: str, canonical: str) -> object:
    context = places.context
    skills = discover_skills(context)
    empty = "no skills are discovered" + ("" if context.skill_roots else ": no skill roots are configured")
    if request.operation is Operation.READ:
        return read_listing(listing_lines(skills), request, authored, canonical, None if skills else empty)
    groups = alias_groups(skills)
    trees = []
    for skill in skills:
        unique = len(groups[(skill.origin, skill.name)]) == 1
        trees.append(package_tree(skill, (skill.alias if unique else skill.exact) + "/", places))
    walks = await open_walks(trees, authored, request.operation)
    scopes = [Scope(walk.tree, (), walk=walk) for walk in walks if walk is not None]
    return await search(scopes, request, authored, canonical, notice=empty)
