"""The worker's early dedup never drops a ``PodsListed`` snapshot (issue 11 item 7): its table
is keyed ``(node, resourceID)`` with a statusVersion rank, which a snapshot does not have."""

from __future__ import annotations

from datetime import UTC, datetime

from services.domain.events import PodsListed
from services.domain.log import LoggedEvent, LogPosition
from streams.dedup_table import select_new

AT = datetime(2026, 12, 2, 1, 0, tzinfo=UTC)


def test_snapshots_always_pass_the_dedup_table() -> None:
    snapshot = PodsListed(node="gpu-node-a", list_version=50, observed_at=AT, pod_uids=("uid-b",))
    # The same snapshot twice (a redelivery or a second LIST at the same version), and one whose
    # version is lower than anything the table knows: all are the projection's to judge.
    older = PodsListed(node="gpu-node-a", list_version=1, observed_at=AT)
    records = [
        LoggedEvent(LogPosition("t", 0, offset), event)
        for offset, event in enumerate([snapshot, snapshot, older])
    ]
    selection = select_new(records, {"gpu-node-a\x1fGPU-0": 10**9})
    assert selection.records == records
    assert (selection.duplicates, selection.stale, selection.ranks) == (0, 0, {})
