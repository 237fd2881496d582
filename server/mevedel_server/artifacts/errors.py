"""Refusals of the artifact store. Each names the authored input (an item
id, a title, a file name) and says why, in words; none carries a path."""

from __future__ import annotations


class ArtifactError(Exception):
    #: Stable kinds, the protocol's error kinds: ``invalid-params``,
    #: ``missing-target``, ``conflict``, ``item-held``, ``item-lease-lost``,
    #: ``unavailable``, ``unreadable``, ``read-only``.
    def __init__(self, kind: str, authored: str, reason: str) -> None:
        super().__init__(f"{authored}: {reason}")
        self.kind = kind
        self.authored = authored
        self.reason = reason


def invalid(authored: str, reason: str) -> ArtifactError:
    return ArtifactError("invalid-params", authored, reason)


def missing(item_id: str) -> ArtifactError:
    return ArtifactError("missing-target", item_id, "no such item in the workspace's artifact store (list them with mevedel artifact list)")
