"""Refusals of the artifact store. Each names the authored input (an item
id, a title, a file name) and says why, in words; none carries a path."""

from __future__ import annotations

from ..store import KindedRefusal


class ArtifactError(KindedRefusal):
    """Kinds are the protocol's error kinds: ``invalid-params``,
    ``missing-target``, ``conflict``, ``containment``, ``item-held``,
    ``item-lease-lost``, ``unavailable``, ``unreadable``, ``read-only``."""


def invalid(authored: str, reason: str) -> ArtifactError:
    return ArtifactError("invalid-params", authored, reason)


def missing(item_id: str) -> ArtifactError:
    return ArtifactError("missing-target", item_id, "no such item in the workspace's artifact store (list them with mevedel artifact list)")
