"""The evidence fold (issue 13 item 3): accepted only for an evidence-kept migration and the Pods
it lists, the first per (migration, Pod UID) kept, a repeat idempotent; wire round trip; the
remembered Pod UIDs survive the fleet snapshot."""

from __future__ import annotations

from typing import Any

import pytest

from services.domain.codec import EventDecodeError
from services.domain.governance.input_codec import decode_input, encode_input
from services.domain.migration.book import MigrationBook
from services.domain.migration.records import EvidencePod, MigrationEvidence
from services.domain.migration.wire import from_dict, to_dict
from tests.governance.harness import GovernanceRun
from tests.governance.migration_builders import (
    N1,
    K,
    R,
    gov,
    healthy,
    mreport,
    of,
    one,
    only_migration,
    quarantine,
    workload,
)
from tests.governance.strategies import at


def pod(name: str, version: str = "7", **status: Any) -> EvidencePod:
    return EvidencePod("team-a", name, f"uid-{name}", version, {"phase": "Running", **status})


def evidence(
    mid: str, *pods: EvidencePod, t: float = 20, holder: str = "exec-a"
) -> MigrationEvidence:
    return MigrationEvidence(mid, holder, at(t - 1), at(t), pods)


def kept_run() -> tuple[GovernanceRun, str]:
    run = gov()
    healthy(run, N1, "GPU-0")
    run.feed(workload(N1, "GPU-0", "W", "infer-0", None, 5, 1))
    decided = quarantine(run, N1, "GPU-0", 10)
    one(decided, K.MIGRATION_EVIDENCE_KEPT)
    return run, only_migration(run).migration_id


def test_the_first_evidence_per_pod_is_stored_and_a_repeat_stores_nothing() -> None:
    run, mid = kept_run()
    book = run.state.fleet.migrations
    d = one(run.feed(evidence(mid, pod("infer-0"))), K.MIGRATION_EVIDENCE_STORED)
    assert d.details["storedPodUIDs"] == ["uid-infer-0"]
    assert d.details["phase"] == "evidence-kept"
    (row,) = book.pending_evidence
    assert (row["migration_id"], row["pod_uid"], row["status"]["phase"]) == (
        mid,
        "uid-infer-0",
        "Running",
    )
    assert (row["node"], row["resource_id"], row["holder"]) == (N1, "GPU-0", "exec-a")
    run.state.clear_dirty()
    assert book.pending_evidence == []

    again = one(
        run.feed(evidence(mid, pod("infer-0", "9", phase="Failed"), t=30)),
        K.MIGRATION_EVIDENCE_STORED,
    )
    assert again.details["storedPodUIDs"] == []
    assert again.details["duplicatePodUIDs"] == ["uid-infer-0"]
    assert book.pending_evidence == []  # the first is kept


def test_pods_the_migration_does_not_list_are_refused() -> None:
    run, mid = kept_run()
    d = one(run.feed(evidence(mid, pod("infer-0"), pod("other"))), K.MIGRATION_EVIDENCE_STORED)
    assert (d.details["storedPodUIDs"], d.details["refusedPodUIDs"]) == (
        ["uid-infer-0"],
        ["uid-other"],
    )
    assert [r["pod_uid"] for r in run.state.fleet.migrations.pending_evidence] == ["uid-infer-0"]


def test_a_pod_uid_under_another_namespace_or_name_is_refused_and_keeps_no_place() -> None:
    # The first evidence per Pod UID is kept for good: one that names another Pod (a bug, a
    # hand-made POST) must not take the place of the real Pod's.
    run, mid = kept_run()
    wrong = [
        EvidencePod("elsewhere", "infer-0", "uid-infer-0", "7", {"phase": "Bogus"}),
        EvidencePod("team-a", "other-pod", "uid-infer-0", "7", {"phase": "Bogus"}),
    ]
    d = one(run.feed(evidence(mid, *wrong)), K.MIGRATION_EVIDENCE_STORED)
    assert (d.details["storedPodUIDs"], d.details["refusedPodUIDs"]) == (
        [],
        ["uid-infer-0", "uid-infer-0"],
    )
    assert run.state.fleet.migrations.pending_evidence == []
    d = one(run.feed(evidence(mid, pod("infer-0"), t=30)), K.MIGRATION_EVIDENCE_STORED)
    assert d.details["storedPodUIDs"] == ["uid-infer-0"]
    [row] = run.state.fleet.migrations.pending_evidence
    assert (row["namespace"], row["pod_name"]) == ("team-a", "infer-0")


def test_evidence_for_an_unknown_or_movable_migration_is_rejected() -> None:
    run, _ = kept_run()
    d = one(run.feed(evidence("m-0123456789abcdef0123", pod("x"))), K.MIGRATION_REPORT_REJECTED)
    assert d.details["rejectReason"] == "unknown migration"
    assert run.state.fleet.migrations.pending_evidence == []

    moving = gov()
    healthy(moving, N1, "GPU-0")
    moving.feed(workload(N1, "GPU-0", "W", "train-0", "sharded", 5, 1))
    quarantine(moving, N1, "GPU-0", 10)
    mid = only_migration(moving).migration_id
    d = one(moving.feed(evidence(mid, pod("train-0"))), K.MIGRATION_REPORT_REJECTED)
    assert "phase planned" in d.details["rejectReason"]
    assert not of(
        moving.feed(mreport(mid, R.LEASE_REQUESTED, "a", 0, 21)), K.MIGRATION_EVIDENCE_STORED
    )


def test_the_stored_pod_uids_survive_the_snapshot() -> None:
    run, mid = kept_run()
    run.feed(evidence(mid, pod("infer-0")))
    book = run.state.fleet.migrations
    restored = MigrationBook.from_json(book.to_json())
    assert restored.evidence == {mid: ["uid-infer-0"]}
    assert "evidence" not in MigrationBook().to_json()  # older snapshots stay identical


def test_wire_round_trip_and_bad_records() -> None:
    record = evidence("m-0123456789abcdef0123", pod("infer-0", message="a\nb"))
    assert decode_input(encode_input(record)) == record
    obj = to_dict(record)
    assert obj["version"] == 1 and obj["type"] == "MigrationEvidence"
    with pytest.raises(EventDecodeError, match="version"):
        from_dict({**obj, "version": 2})
    with pytest.raises(EventDecodeError, match="pods"):
        from_dict({**obj, "pods": [{"namespace": "a", "name": "b", "uid": "c"}]})
