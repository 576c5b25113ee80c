"""Per-Pod-UID tombstones: what the directory remembers of a released Pod (issue 11 item 7).

A release (``PodDevicesReleased``, or a ``PodsListed`` snapshot that did not list a Pod holding a
device) leaves a :class:`Tombstone` for the Pod's UID carrying the release's ordering key (its
statusVersion: the Pod's resourceVersion at deletion or termination, or the LIST's). An
observation of that Pod at or before the key (a producer retry reordered after the release) then
adds no allocation back: :func:`services.domain.directory.apply_event` keeps the Pod out of the
device's allocations and says so (``Change.tombstoned``). A Pod UID is never reused, so a later
observation of a deleted Pod can only be such a reorder; one *after* the key (a newer state of a
Pod whose terminal phase was reported early) is applied as usual.

Retention (bounded, a function of the log alone): a tombstone is kept while its ``released_at``
(the release's ``observedAt``, UTC) is within :data:`TOMBSTONE_RETENTION` of the newest
tombstone's. The newest one is never dropped, so the set kept after any sequence of batches is
the same whatever the batch split (what replay ``--verify`` compares). A reordered observation
arriving more than that long after its Pod's release (in event time) is no longer recognised.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from services.domain.events import DeviceHealthObserved

TOMBSTONE_RETENTION: Final = timedelta(days=7)
"""How long (event time, before the newest tombstone) a released Pod's tombstone is kept."""


def _rank(status_version: int | None) -> int:
    # The directory's version rank (``directory.version_rank``; repeated here to avoid a cycle).
    return 0 if status_version is None else status_version


@dataclass(frozen=True, slots=True)
class Tombstone:
    """A released Pod: its UID, node, the release's ordering key (``status_version``; unordered
    releases leave none) and ``released_at`` (the release's ``observedAt``, UTC)."""

    pod_uid: str
    node: str
    status_version: int | None
    released_at: datetime

    def covers(self, event: DeviceHealthObserved) -> bool:
        """Whether ``event`` (an observation of this Pod) is not newer than the release. An
        unordered observation cannot be compared: it is not covered (the log's order decides,
        as for the device's own version rule)."""
        return (
            event.pod_uid == self.pod_uid
            and event.status_version is not None
            and self.status_version is not None
            and event.status_version <= self.status_version
        )


def later(old: Tombstone | None, new: Tombstone) -> Tombstone:
    """The tombstone kept when a Pod is released again: the higher ordering key, then the later
    ``released_at`` (the projection's upsert guard is the same comparison)."""
    if old is None:
        return new
    if (_rank(new.status_version), new.released_at) > (
        _rank(old.status_version),
        old.released_at,
    ):
        return new
    return old


def horizon(newest: datetime) -> datetime:
    """Tombstones released before this time are dropped, given the newest one's ``released_at``."""
    return newest - TOMBSTONE_RETENTION


def retained(tombstones: Mapping[str, Tombstone]) -> dict[str, Tombstone]:
    """``tombstones`` (by Pod UID) without those older than :func:`horizon` of the newest."""
    if not tombstones:
        return {}
    cut = horizon(max(t.released_at for t in tombstones.values()))
    return {uid: t for uid, t in tombstones.items() if t.released_at >= cut}


def merged(into: dict[str, Tombstone], new: Iterable[Tombstone]) -> dict[str, Tombstone]:
    """``into`` (changed in place and returned) with each of ``new`` merged by :func:`later`."""
    for tombstone in new:
        into[tombstone.pod_uid] = later(into.get(tombstone.pod_uid), tombstone)
    return into
