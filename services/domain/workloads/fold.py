"""What the projection keeps of the ``PodWorkloadObserved`` records: per Pod UID, the newest.

The rule (:func:`supersedes`) is the one of the device observations: a record with a comparable
``statusVersion`` replaces one with a smaller one or with none; an unordered record (``None``)
replaces only an unordered one. Applying it record by record in log order, or first reducing a
batch with :func:`latest_per_pod` and then applying the winner to the stored row with the same
rule (the projection's guarded upsert), gives the same row: replay and any batch split agree.
"""

from __future__ import annotations

from collections.abc import Iterable

from services.domain.workloads.events import PodWorkloadObserved


def supersedes(incoming: int | None, stored: int | None) -> bool:
    """Whether a record at ``incoming`` replaces the stored one at ``stored``."""
    if stored is None:
        return True
    return incoming is not None and incoming > stored


def latest_per_pod(records: Iterable[PodWorkloadObserved]) -> list[PodWorkloadObserved]:
    """The record each Pod UID keeps after ``records`` (in log order), sorted by Pod UID."""
    kept: dict[str, PodWorkloadObserved] = {}
    for record in records:
        old = kept.get(record.pod_uid)
        if old is None or supersedes(record.status_version, old.status_version):
            kept[record.pod_uid] = record
    return [kept[uid] for uid in sorted(kept)]
