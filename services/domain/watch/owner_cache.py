"""The watcher's memory of Pod owners (ReplicaSets, Jobs, Deployments...), by owner UID.

Bounded (least recently used out first): a fleet has far fewer owners than Pods, and a
forgotten owner is only read again. Only what the chain and the migration class need is kept
(``metadata.uid``, ``ownerReferences``, ``annotations``), never the whole object. Failed reads
are never cached: the next resolution asks again. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Final

from services.domain.workloads.migration import (
    CLASS_ANNOTATION,
    MAX_AGE_ANNOTATION,
    SHARD_ANNOTATION,
)

DEFAULT_OWNER_CACHE_SIZE: Final = 10_000
_KEPT_ANNOTATIONS: Final = (CLASS_ANNOTATION, MAX_AGE_ANNOTATION, SHARD_ANNOTATION)


def compact_owner(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The part of an owner object the chain and the migration class read."""
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    annotations = metadata.get("annotations")
    annotations = annotations if isinstance(annotations, Mapping) else {}
    return {
        "metadata": {
            "uid": metadata.get("uid"),
            "name": metadata.get("name"),
            "ownerReferences": metadata.get("ownerReferences") or [],
            "annotations": {k: annotations[k] for k in _KEPT_ANNOTATIONS if k in annotations},
        }
    }


class OwnerCache:
    """At most ``limit`` owners (compacted), least recently used evicted first."""

    def __init__(self, limit: int = DEFAULT_OWNER_CACHE_SIZE) -> None:
        if limit < 1:
            raise ValueError("the owner cache holds at least one owner")
        self.limit = limit
        self._owners: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._owners)

    def get(self, uid: str) -> dict[str, Any] | None:
        found = self._owners.get(uid)
        if found is not None:
            self._owners.move_to_end(uid)
        return found

    def put(self, uid: str, obj: Mapping[str, Any]) -> None:
        self._owners[uid] = compact_owner(obj)
        self._owners.move_to_end(uid)
        while len(self._owners) > self.limit:
            self._owners.popitem(last=False)

    def clear(self) -> None:
        """Forget every owner (after a LIST: annotations may have changed meanwhile)."""
        self._owners.clear()
