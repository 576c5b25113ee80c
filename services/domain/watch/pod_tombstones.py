"""What the watcher keeps of a released terminal Pod (issue 15 item 2): a small, bounded tombstone.

A Pod that reached ``Succeeded`` or ``Failed`` never runs again, but it stays in the API (and in
every LIST) until someone deletes it, and a flood of Failed Pods that no one deletes must not grow
the watcher's memory. Once its release is published the tracker drops the Pod and keeps only a
:class:`PodTombstone` by UID: the newest resourceVersion seen (the stale check still holds) and a
digest of the devices its status last reported (so a repeated MODIFIED of a terminated Pod, e.g.
a finalizer removed, publishes nothing, while a post-mortem change of ``allocatedResourcesStatus``
does). About 150 bytes per Pod in CPython.

Bound: at most :data:`MAX_POD_TOMBSTONES` tombstones; beyond it the oldest inserted is dropped
(FIFO). A dropped Pod seen again is read as a new Pod: its observations are published once more
(harmless: the directory drops an observation whose statusVersion it has already applied) and no
second release is published (a terminal Pod's release is published only while it is tracked).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

MAX_POD_TOMBSTONES: Final = 100_000
"""Default bound of the tombstones one watcher keeps (about 15 MB at ~150 bytes each)."""


@dataclass(frozen=True, slots=True)
class PodTombstone:
    """A released terminal Pod: its newest comparable resourceVersion (``None``: every reading was
    unordered, KEP-5504) and a digest of the devices its last reading reported (an ``int`` that
    only this process compares: never persisted or sent)."""

    status_version: int | None
    devices_digest: int


class PodTombstones:
    """The tombstones by Pod UID, bounded by ``limit`` (oldest dropped first). Not thread-safe."""

    def __init__(self, limit: int = MAX_POD_TOMBSTONES) -> None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        self._limit = limit
        self._by_uid: OrderedDict[str, PodTombstone] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_uid)

    def __contains__(self, uid: object) -> bool:
        return uid in self._by_uid

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_uid)

    def get(self, uid: str) -> PodTombstone | None:
        """The Pod's tombstone, or ``None``."""
        return self._by_uid.get(uid)

    def put(self, uid: str, tombstone: PodTombstone) -> None:
        """Keep (or update) ``uid``'s tombstone, dropping the oldest beyond the bound."""
        self._by_uid[uid] = tombstone
        while len(self._by_uid) > self._limit:
            self._by_uid.popitem(last=False)

    def pop(self, uid: str) -> PodTombstone | None:
        """Forget ``uid`` (its Pod was deleted); its tombstone, or ``None``."""
        return self._by_uid.pop(uid, None)
