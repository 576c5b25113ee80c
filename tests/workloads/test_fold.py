"""Which record per Pod the projection keeps: order-independent of the batch split."""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import UTC, datetime

from services.domain.workloads.events import PodWorkloadObserved
from services.domain.workloads.fold import latest_per_pod, supersedes
from services.domain.workloads.migration import MigrationClass

AT = datetime(2026, 12, 2, tzinfo=UTC)
BASE = PodWorkloadObserved("gpu-1", "ns", "p", "uid-1", None, AT)


def test_supersedes_like_device_observations() -> None:
    assert supersedes(5, None) and supersedes(None, None) and supersedes(6, 5)
    assert not supersedes(None, 5) and not supersedes(5, 5) and not supersedes(4, 5)


def _one_by_one(stored: PodWorkloadObserved | None, records: list[PodWorkloadObserved]):  # type: ignore[no-untyped-def]
    for r in records:
        if stored is None or supersedes(r.status_version, stored.status_version):
            stored = r
    return stored


def test_reduce_then_apply_equals_one_by_one_for_every_split() -> None:
    versions = [None, 3, None, 7, 5, None]
    records = [
        replace(BASE, status_version=v, migration_class=list(MigrationClass)[i % 3])
        for i, v in enumerate(versions)
    ]
    for stored_version in (None, 1, 4, 9):
        stored = replace(BASE, status_version=stored_version, pod_name="stored")
        expected = _one_by_one(stored, records)
        for cut in range(len(records) + 1):
            row = stored
            for part in (records[:cut], records[cut:]):
                for winner in latest_per_pod(part):
                    row = _one_by_one(row, [winner])
            assert row == expected, (stored_version, cut)


def test_latest_per_pod_keeps_one_row_per_uid_sorted() -> None:
    a = [replace(BASE, pod_uid=u, status_version=v) for u, v in itertools.product("ba", (2, 1))]
    kept = latest_per_pod(a)
    assert [(r.pod_uid, r.status_version) for r in kept] == [("a", 2), ("b", 2)]
