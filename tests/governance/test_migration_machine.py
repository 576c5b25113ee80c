"""Golden cases of workload migration in the governor (issue 13 item 2), through ``machine.step``:
the checkpointed path to completion, each failure reason, non-recoverable and sharded workloads,
the lease and its fencing token, the gate (paused automation) and the token buckets."""

from __future__ import annotations

from services.domain.governance.inputs import CommandAction
from services.domain.governance.state import GovernorState
from services.domain.migration.book import FailReason, Phase
from tests.governance.migration_builders import (
    N1,
    N2,
    K,
    R,
    gov,
    healthy,
    migration_kinds,
    mreport,
    of,
    one,
    only_migration,
    quarantine,
    workload,
)
from tests.governance.strategies import at, command, watermark


def checkpointed_on_g0(max_age: int | None = 600):  # type: ignore[no-untyped-def]
    """Workload W (two Pods, GPU-0 and GPU-1 of node-1, checkpointed) and GPU-0 quarantined."""
    run = gov()
    healthy(run, N1, "GPU-1")
    healthy(run, N2, "GPU-0")
    run.feed(workload(N1, "GPU-0", "W", "train-0", "checkpointed", 5, 1, max_age=max_age))
    run.feed(workload(N1, "GPU-1", "W", "train-1", "checkpointed", 6, 1, max_age=max_age))
    decided = quarantine(run, N1, "GPU-0", 10)
    return run, decided


def leased(run, holder: str = "exec-a", t: float = 11) -> int:  # type: ignore[no-untyped-def]
    m = only_migration(run)
    granted = one(
        run.feed(mreport(m.migration_id, R.LEASE_REQUESTED, holder, 0, t)),
        K.MIGRATION_LEASE_GRANTED,
    )
    return int(granted.details["fencingToken"])


def test_a_checkpointed_workload_migrates_whole_to_completion() -> None:
    run, decided = checkpointed_on_g0()
    planned = one(decided, K.MIGRATION_PLANNED)
    m = only_migration(run)
    assert planned.incident == f"migration/{m.migration_id}"
    assert (planned.node, planned.resource_id) == (N1, "GPU-0")
    assert planned.details["pods"] == ["team-a/train-0", "team-a/train-1"]  # fixed topology
    assert (
        planned.details["workloadUID"] == "W" and planned.details["statusVersion"] == "10"
    )  # the quarantine's
    mid = m.migration_id
    decided = run.feed(mreport(mid, R.LEASE_REQUESTED, "exec-a", 0, 11))
    assert migration_kinds(decided) == [K.MIGRATION_LEASE_GRANTED, K.MIGRATION_CHECKPOINT_REQUESTED]
    assert decided[0].details["fencingToken"] == 1
    decided = run.feed(
        mreport(mid, R.CHECKPOINT_COMMITTED, "exec-a", 1, 20, checkpoint=("ckpt-7", 19))
    )
    assert migration_kinds(decided) == [
        K.MIGRATION_CHECKPOINT_COMMITTED,
        K.MIGRATION_EVICTION_REQUESTED,
    ]
    decided = run.feed(mreport(mid, R.EVICTED, "exec-a", 1, 30))
    assert migration_kinds(decided) == [K.MIGRATION_DEVICE_RELEASED]
    assert not run.state.fleet.migrations.workloads  # the evicted Pods hold nothing any more
    decided = run.feed(
        mreport(mid, R.REPLACEMENT_OBSERVED, "exec-a", 1, 40, devices=((N2, "GPU-0"),))
    )
    done = one(decided, K.MIGRATION_COMPLETED)
    assert done.details["phase"] == "completed" and done.details["checkpointID"] == "ckpt-7"
    assert only_migration(run).phase is Phase.COMPLETED
    assert not run.state.fleet.migrations.owners


def test_a_checkpoint_older_than_the_declared_age_is_refused_and_a_fresh_one_accepted() -> None:
    run, _ = checkpointed_on_g0(max_age=30)
    token = leased(run)
    run.feed(watermark(45))  # the check's time is the governor's event time, not the report's
    mid = only_migration(run).migration_id
    rejected = one(
        run.feed(mreport(mid, R.CHECKPOINT_COMMITTED, "exec-a", token, 45, checkpoint=("old", 14))),
        K.MIGRATION_REPORT_REJECTED,
    )
    assert "older than" in rejected.details["rejectReason"]
    assert only_migration(run).phase is Phase.CHECKPOINT_REQUESTED
    decided = run.feed(
        mreport(mid, R.CHECKPOINT_COMMITTED, "exec-a", token, 45, checkpoint=("new", 15))
    )
    assert K.MIGRATION_EVICTION_REQUESTED in migration_kinds(decided)


def test_a_checkpoint_from_the_future_is_refused_and_nothing_is_evicted() -> None:
    # Fresh by the age check (now - checkpointAt is negative), but taken after it was reported:
    # a clock far ahead or a bad answer. Evicting on it would lose the work since the last real
    # checkpoint. A clock a little ahead (within the skew) is still accepted.
    for max_age in (30, None):
        run, _ = checkpointed_on_g0(max_age=max_age)
        token = leased(run)
        mid = only_migration(run).migration_id
        future = 45 + 3600  # an hour after its report
        rejected = one(
            run.feed(
                mreport(mid, R.CHECKPOINT_COMMITTED, "exec-a", token, 45, checkpoint=("f", future))
            ),
            K.MIGRATION_REPORT_REJECTED,
        )
        assert "in the future" in rejected.details["rejectReason"], rejected.details
        assert only_migration(run).phase is Phase.CHECKPOINT_REQUESTED
        decided = run.feed(
            mreport(mid, R.CHECKPOINT_COMMITTED, "exec-a", token, 46, checkpoint=("ok", 50))
        )
        assert K.MIGRATION_EVICTION_REQUESTED in migration_kinds(decided), max_age


def test_a_pod_disruption_budget_refusal_fails_the_migration() -> None:
    run, _ = checkpointed_on_g0()
    token = leased(run)
    mid = only_migration(run).migration_id
    run.feed(mreport(mid, R.CHECKPOINT_COMMITTED, "exec-a", token, 20, checkpoint=("c", 19)))
    failed = one(
        run.feed(
            mreport(
                mid,
                R.EVICTION_REFUSED,
                "exec-a",
                token,
                21,
                detail="pdb/train: 0 disruptions allowed",
            )
        ),
        K.MIGRATION_FAILED,
    )
    assert failed.details["reason"] == FailReason.PDB_REFUSED.value
    assert "0 disruptions" in failed.details["detail"]
    assert K.MIGRATION_DEVICE_RELEASED not in migration_kinds(run.decisions)


def test_a_checkpoint_that_never_comes_times_out_on_event_time() -> None:
    run, _ = checkpointed_on_g0()
    leased(run, t=11)  # checkpoint due at 10 + 200 (the watermark was 10 at the grant)
    run.feed(watermark(40))
    mid = only_migration(run).migration_id
    run.feed(mreport(mid, R.LEASE_RENEWED, "exec-a", 1, 40))
    run.feed(watermark(80))
    run.feed(mreport(mid, R.LEASE_RENEWED, "exec-a", 1, 80))
    run.feed(watermark(120))
    run.feed(mreport(mid, R.LEASE_RENEWED, "exec-a", 1, 120))
    run.feed(watermark(160))
    run.feed(mreport(mid, R.LEASE_RENEWED, "exec-a", 1, 160))
    assert only_migration(run).phase is Phase.CHECKPOINT_REQUESTED
    failed = one(run.feed(watermark(210)), K.MIGRATION_FAILED)
    assert failed.details["reason"] == FailReason.CHECKPOINT_TIMEOUT.value
    assert failed.at == at(210)


def test_the_executor_may_report_the_checkpoint_timed_out() -> None:
    run, _ = checkpointed_on_g0()
    token = leased(run)
    mid = only_migration(run).migration_id
    failed = one(
        run.feed(mreport(mid, R.CHECKPOINT_TIMED_OUT, "exec-a", token, 30)), K.MIGRATION_FAILED
    )
    assert failed.details["reason"] == "checkpoint-timeout"


def test_a_migration_nobody_leases_fails_lease_lost_after_the_takeover_window() -> None:
    run, _ = checkpointed_on_g0()
    assert not of(run.feed(watermark(309)), K.MIGRATION_FAILED)
    failed = one(run.feed(watermark(310)), K.MIGRATION_FAILED)  # planned at 10, takeover 300 s
    assert failed.details["reason"] == FailReason.LEASE_LOST.value


def test_an_expired_lease_goes_to_another_executor_and_the_old_token_is_fenced_off() -> None:
    run, _ = checkpointed_on_g0()
    assert leased(run, "exec-a", 11) == 1
    mid = only_migration(run).migration_id
    denied = one(
        run.feed(mreport(mid, R.LEASE_REQUESTED, "exec-b", 0, 20)), K.MIGRATION_LEASE_DENIED
    )
    assert "held by exec-a" in denied.details["rejectReason"]
    expired = one(run.feed(watermark(60)), K.MIGRATION_LEASE_EXPIRED)  # granted at 10 for 50 s
    assert expired.details["expiredHolder"] == "exec-a"
    assert leased(run, "exec-b", 61) == 2
    assert only_migration(run).phase is Phase.CHECKPOINT_REQUESTED  # resumed where it was
    stale = one(
        run.feed(mreport(mid, R.CHECKPOINT_COMMITTED, "exec-a", 1, 62, checkpoint=("c", 61))),
        K.MIGRATION_REPORT_REJECTED,
    )
    assert "stale lease" in stale.details["rejectReason"]
    decided = run.feed(mreport(mid, R.CHECKPOINT_COMMITTED, "exec-b", 2, 63, checkpoint=("c", 61)))
    assert K.MIGRATION_EVICTION_REQUESTED in migration_kinds(decided)


def test_an_expired_lease_nobody_takes_over_fails_lease_lost() -> None:
    run = gov()
    run.feed(workload(N1, "GPU-0", "JS", "js-a-0", "sharded", 5, 1, shard="a"))
    quarantine(run, N1, "GPU-0", 10)
    leased(run)
    run.feed(watermark(60))
    assert not of(run.feed(watermark(359)), K.MIGRATION_FAILED)
    failed = one(run.feed(watermark(360)), K.MIGRATION_FAILED)
    assert failed.details["reason"] == "lease-lost"


def test_a_replacement_on_a_restricted_device_fails_the_migration() -> None:
    run, _ = checkpointed_on_g0()
    token = leased(run)
    mid = only_migration(run).migration_id
    run.feed(mreport(mid, R.CHECKPOINT_COMMITTED, "exec-a", token, 20, checkpoint=("c", 19)))
    run.feed(mreport(mid, R.EVICTED, "exec-a", token, 21))
    quarantine(run, N2, "GPU-5", 22)
    failed = one(
        run.feed(
            mreport(
                mid,
                R.REPLACEMENT_OBSERVED,
                "exec-a",
                token,
                30,
                devices=((N2, "GPU-0"), (N2, "GPU-5")),
            )
        ),
        K.MIGRATION_FAILED,
    )
    assert failed.details["reason"] == FailReason.REPLACEMENT_RESTRICTED.value
    assert "node-2/GPU-5" in failed.details["detail"]


def test_a_workload_gone_fails_the_migration() -> None:
    run, _ = checkpointed_on_g0()
    token = leased(run)
    mid = only_migration(run).migration_id
    failed = one(
        run.feed(mreport(mid, R.WORKLOAD_GONE, "exec-a", token, 20, detail="Job deleted")),
        K.MIGRATION_FAILED,
    )
    assert failed.details["reason"] == "workload-gone"
    rejected = one(
        run.feed(mreport(mid, R.EVICTED, "exec-a", token, 21)), K.MIGRATION_REPORT_REJECTED
    )
    assert rejected.details["rejectReason"] == "the migration is failed"


def test_a_non_recoverable_workload_keeps_its_evidence_and_is_never_evicted() -> None:
    run = gov()
    run.feed(workload(N1, "GPU-0", "D", "web-0", None, 5, 1))
    run.feed(workload(N1, "GPU-0", "X", "odd-0", "live-migrate", 5, 1))
    decided = quarantine(run, N1, "GPU-0", 10)
    kept = of(decided, K.MIGRATION_EVIDENCE_KEPT)
    assert [d.details["workloadUID"] for d in kept] == ["D", "X"]
    assert kept[0].details["classReason"] is None
    assert kept[1].details["classReason"] == "unknown migration class 'live-migrate'"
    assert not of(decided, K.MIGRATION_PLANNED)
    # The Pod's status moves on (a new resourceVersion): the same quarantine, decided once.
    assert not migration_kinds(run.feed(workload(N1, "GPU-0", "D", "web-0", None, 6, 12)))
    mid = kept[0].details["migrationID"]
    denied = one(
        run.feed(mreport(mid, R.LEASE_REQUESTED, "exec-a", 0, 11)), K.MIGRATION_LEASE_DENIED
    )
    assert denied.details["rejectReason"] == "the migration is evidence-kept"


def test_a_sharded_workload_moves_only_the_affected_shard_without_a_checkpoint() -> None:
    run = gov()
    run.feed(workload(N1, "GPU-0", "JS", "js-a-0", "sharded", 5, 1, shard="a"))
    run.feed(workload(N1, "GPU-1", "JS", "js-b-0", "sharded", 5, 1, shard="b"))
    run.feed(workload(N1, "GPU-0", "JS", "js-a-1", "sharded", 5, 1, shard="a"))
    planned = one(quarantine(run, N1, "GPU-0", 10), K.MIGRATION_PLANNED)
    assert planned.details["pods"] == ["team-a/js-a-0", "team-a/js-a-1"]
    assert planned.details["shard"] == "a"
    decided = run.feed(mreport(planned.details["migrationID"], R.LEASE_REQUESTED, "exec-a", 0, 11))
    assert migration_kinds(decided) == [K.MIGRATION_LEASE_GRANTED, K.MIGRATION_EVICTION_REQUESTED]


def test_a_device_owned_by_a_migration_is_never_planned_twice() -> None:
    run, _ = checkpointed_on_g0()
    # Again the same fact, a newer one, and GPU-1 of the same workload quarantined too.
    run.feed(workload(N1, "GPU-0", "W", "train-0", "checkpointed", 5, 12, max_age=600))
    run.feed(workload(N1, "GPU-0", "W", "train-0", "checkpointed", 9, 13, max_age=600))
    quarantine(run, N1, "GPU-1", 14)
    assert len(of(run.decisions, K.MIGRATION_PLANNED)) == 1
    assert len(run.state.fleet.migrations.migrations) == 1


def test_nothing_starts_while_automation_is_paused() -> None:
    run = gov()
    quarantine(run, N1, "GPU-0", 10)
    run.feed(command("c1", CommandAction.PAUSE, 11, reason="maintenance"))
    decided = run.feed(workload(N1, "GPU-0", "W", "train-0", "checkpointed", 5, 11))
    deferred = one(decided, K.MIGRATION_DEFERRED)
    assert deferred.details["waitingFor"] == "automation-paused"
    mid = deferred.details["migrationID"]
    denied = one(
        run.feed(mreport(mid, R.LEASE_REQUESTED, "exec-a", 0, 11)), K.MIGRATION_LEASE_DENIED
    )
    assert "automation-paused" in denied.details["rejectReason"]
    planned = one(run.feed(command("c2", CommandAction.RESUME, 20)), K.MIGRATION_PLANNED)
    assert planned.details["migrationID"] == mid


def test_the_node_bucket_holds_back_a_second_migration_until_it_refills() -> None:
    run = gov()
    run.feed(workload(N1, "GPU-0", "A", "a-0", "checkpointed", 5, 1))
    run.feed(workload(N1, "GPU-1", "B", "b-0", "checkpointed", 5, 1))
    assert of(quarantine(run, N1, "GPU-0", 10), K.MIGRATION_PLANNED)
    deferred = one(quarantine(run, N1, "GPU-1", 11), K.MIGRATION_DEFERRED)
    assert deferred.details["waitingFor"] == "rate-limited"
    assert not of(run.feed(watermark(109)), K.MIGRATION_PLANNED)
    planned = one(run.feed(watermark(110)), K.MIGRATION_PLANNED)  # one token per 100 s
    assert planned.details["workloadUID"] == "B"


def test_a_waiting_migration_is_cancelled_when_the_quarantine_ends() -> None:
    run = gov()
    healthy(run, N1, "GPU-0")
    run.feed(
        command(
            "q1",
            CommandAction.QUARANTINE,
            5,
            node=N1,
            resource_id="GPU-0",
            expires=9000,
            reason="suspect",
        )
    )
    run.feed(command("c1", CommandAction.PAUSE, 6, reason="maintenance"))
    run.feed(workload(N1, "GPU-0", "W", "train-0", "checkpointed", 5, 7))
    assert only_migration(run).phase is Phase.WAITING
    decided = run.feed(
        command("r1", CommandAction.RELEASE, 8, node=N1, resource_id="GPU-0", reason="false alarm")
    )
    assert K.QUARANTINE_RELEASED in [d.kind for d in decided]
    one(decided, K.MIGRATION_CANCELLED)
    assert only_migration(run).phase is Phase.CANCELLED
    assert not run.state.fleet.migrations.owners


def test_a_restored_governor_continues_the_migration_alike() -> None:
    run, _ = checkpointed_on_g0()
    token = leased(run)
    snapshot = run.state.snapshot()
    restored = GovernorState.restore(
        snapshot["devices"], snapshot["nodes"], snapshot["fleet"], 120.0, snapshot["workloads"]
    )
    assert restored.snapshot() == snapshot
    mid = only_migration(run).migration_id
    from services.domain.governance.machine import step

    record = mreport(mid, R.CHECKPOINT_COMMITTED, "exec-a", token, 20, checkpoint=("c", 19))
    assert step(restored, record, 99, run.policy) == step(run.state, record, 99, run.policy)
    assert restored.snapshot() == run.state.snapshot()


def test_finished_migrations_are_kept_whole_up_to_a_bound_and_never_planned_again() -> None:
    run = gov()
    quarantine(run, N1, "GPU-0", 10)
    facts = [workload(N1, "GPU-0", f"D{i:03}", f"web-{i:03}", None, 5, 11) for i in range(105)]
    for fact in facts:
        run.feed(fact)
    book = run.state.fleet.migrations
    assert len(of(run.decisions, K.MIGRATION_EVIDENCE_KEPT)) == 105
    assert len(book.migrations) == 100 and len(book.finished_ids) == 5
    first = book.finished_ids[0]
    assert not migration_kinds(run.feed(facts[0]))  # the same key: decided once
    rejected = one(
        run.feed(mreport(first, R.LEASE_REQUESTED, "exec-a", 0, 12)), K.MIGRATION_REPORT_REJECTED
    )
    assert rejected.details["rejectReason"] == "finished migration"
