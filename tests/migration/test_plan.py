"""Which step the executor takes from the governor's record (services/processes/migration/plan.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from services.processes.migration.plan import (
    MigrationView,
    Step,
    checkpoint_overdue,
    lease_lost,
    next_step,
    renew_due,
)

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
ME, OTHER = "exec-a", "exec-b"


def _item(
    phase: str, holder: str | None = None, expires_in: float | None = None, **details: Any
) -> dict[str, Any]:
    expires = None if expires_in is None else (NOW + timedelta(seconds=expires_in)).isoformat()
    base = {
        "migrationID": "m-0123456789abcdef0123",
        "phase": phase,
        "node": "gpu-node-a",
        "resourceID": "GPU-1",
        "workloadUID": "w-uid",
        "migrationClass": "checkpointed",
        "pods": ["ml/train-0", "ml/train-1"],
        "holder": holder,
        "fencingToken": 3 if holder else 0,
        "leaseExpiresAt": expires,
    }
    return {**base, "details": {**base, "podUIDs": ["u0", "u1"], **details}}


def test_the_view_reads_the_pods_with_their_uids_and_the_checkpoint_fields() -> None:
    m = MigrationView.of(
        _item(
            "checkpoint-requested",
            ME,
            60,
            checkpointMaxAgeSeconds=900,
            checkpointRequestedAt="2026-12-03T11:58:00Z",
            checkpointDue="2026-12-03T12:13:00Z",
        )
    )
    assert m.pods == (("ml", "train-0", "u0"), ("ml", "train-1", "u1"))
    assert m.checkpoint_max_age_seconds == 900
    assert m.checkpoint_requested_at == NOW - timedelta(minutes=2)
    assert not checkpoint_overdue(m, NOW)
    assert checkpoint_overdue(m, NOW + timedelta(minutes=13))


def test_the_view_reads_the_shard_of_a_sharded_migration() -> None:
    assert MigrationView.of(_item("eviction-requested", ME, 60, shard="index-3")).shard == "index-3"
    assert MigrationView.of(_item("eviction-requested", ME, 60, shard=None)).shard is None


@pytest.mark.parametrize(
    ("phase", "holder", "expires_in", "step"),
    [
        ("planned", None, None, Step.REQUEST_LEASE),
        ("planned", OTHER, 30, Step.WAIT),  # another executor holds it
        ("planned", OTHER, -1, Step.REQUEST_LEASE),  # its lease expired: take over
        ("planned", ME, 30, Step.WAIT),  # granted; the next phase is not recorded yet
        ("checkpoint-requested", ME, 30, Step.CHECKPOINT),
        ("checkpoint-requested", ME, -1, Step.REQUEST_LEASE),  # ours expired: ask again
        ("checkpoint-requested", OTHER, 30, Step.WAIT),
        ("eviction-requested", ME, 30, Step.EVICT),
        ("eviction-requested", None, None, Step.REQUEST_LEASE),  # released: resume from the record
        ("released", ME, 30, Step.REPLACEMENT),
        ("evidence-kept", None, None, Step.EVIDENCE),
        ("completed", ME, 30, Step.NONE),
        ("failed", None, None, Step.NONE),
        ("waiting", None, None, Step.NONE),
    ],
)
def test_next_step(phase: str, holder: str | None, expires_in: float | None, step: Step) -> None:
    assert next_step(MigrationView.of(_item(phase, holder, expires_in)), ME, NOW) is step


def test_renewal_is_due_at_half_the_lease_period() -> None:
    assert not renew_due(MigrationView.of(_item("checkpoint-requested", ME, 61)), NOW, 120)
    assert renew_due(MigrationView.of(_item("checkpoint-requested", ME, 60)), NOW, 120)


@pytest.mark.parametrize(
    ("holder", "token", "reason", "lost"),
    [
        (ME, 3, "the lease expired", True),
        (ME, 3, "stale lease: token 3 of exec-a, current 4 held by exec-b", True),
        (ME, 2, "the lease expired", False),  # an older lease of ours: the record moved on
        (OTHER, 3, "the lease expired", False),  # another executor's report
        (ME, 3, "not expected in phase eviction-requested", False),  # not about the lease
        (ME, 3, "checkpoint too old", False),
    ],
)
def test_a_refused_report_stops_the_work_only_for_a_lease_reason(
    holder: str, token: int, reason: str, lost: bool
) -> None:
    item = _item("eviction-requested", ME, 30)
    item["lastDecision"] = "MigrationReportRejected"
    item["details"].update(reportHolder=holder, reportFencingToken=token, rejectReason=reason)
    assert lease_lost(item, ME, 3) is lost
    item["lastDecision"] = "MigrationLeaseGranted"
    assert lease_lost(item, ME, 3) is False
