"""Properties of workload migration in the governor (issue 13 item 2), through ``machine.step``:
any interleaving (with redeliveries) of the same executors' reports ends in the same state; two
executors racing for one migration make one eviction, and a stale fencing token is never
accepted; the token buckets bound how many migrations start per node and in the fleet."""

from __future__ import annotations

import os
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.domain.governance.decisions import Decision
from services.domain.governance.state import GovernorState
from services.domain.migration.book import FINISHED, Phase
from services.domain.migration.records import MigrationReport
from tests.governance.harness import GovernanceRun
from tests.governance.migration_builders import (
    POLICY,
    K,
    R,
    gov,
    mreport,
    of,
    quarantine,
    workload,
)
from tests.governance.strategies import watermark

PROPERTY_SETTINGS = settings(
    max_examples=int(os.environ.get("GOVERNANCE_PROPERTY_EXAMPLES", "100")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
WIDE = replace(POLICY, migration_fleet_burst=100, breaker_min_nodes=100, breaker_min_devices=1000)


def fleet_of_migrations(count: int) -> tuple[GovernanceRun, list[str]]:
    """``count`` checkpointed workloads, one per node, each on a quarantined GPU-0."""
    run = gov(WIDE)
    for i in range(count):
        run.feed(
            workload(f"node-{i}", "GPU-0", f"W{i}", f"train-{i}", "checkpointed", 5, 1, max_age=600)
        )
    for i in range(count):
        quarantine(run, f"node-{i}", "GPU-0", 10)
    ids = [d.details["migrationID"] for d in of(run.decisions, K.MIGRATION_PLANNED)]
    assert len(ids) == count
    return run, ids


def script(migration_id: str, i: int, renewals: int) -> list[MigrationReport]:
    """One executor's reports for migration ``i``: lease, renewals, checkpoint, eviction,
    replacement."""
    holder = f"exec-{i}"
    reports = [mreport(migration_id, R.LEASE_REQUESTED, holder, 0, 10)]
    reports += [mreport(migration_id, R.LEASE_RENEWED, holder, 1, 10) for _ in range(renewals)]
    reports += [
        mreport(migration_id, R.CHECKPOINT_COMMITTED, holder, 1, 10, checkpoint=(f"c{i}", 9)),
        mreport(migration_id, R.EVICTED, holder, 1, 10),
        mreport(
            migration_id, R.REPLACEMENT_OBSERVED, holder, 1, 10, devices=((f"node-{i}", "GPU-7"),)
        ),
    ]
    return reports


@st.composite
def interleavings(
    draw: st.DrawFn,
) -> tuple[int, list[int], list[tuple[int, int]], list[int], int]:
    count = draw(st.integers(1, 4))
    renewals = draw(st.lists(st.integers(0, 2), min_size=count, max_size=count))
    lengths = [4 + r for r in renewals]
    order = draw(st.permutations([i for i in range(count) for _ in range(lengths[i])]))
    # Redeliveries: (position in the interleaving, which earlier report to send again).
    repeats = draw(st.lists(st.tuples(st.integers(0, 100), st.integers(0, 100)), max_size=6))
    restart = draw(st.integers(0, len(order)))
    return count, list(order), repeats, renewals, restart


@PROPERTY_SETTINGS
@given(interleavings())
def test_any_interleaving_and_a_restart_of_the_same_reports_end_in_the_same_state(
    case: tuple[int, list[int], list[tuple[int, int]], list[int], int],
) -> None:
    count, order, repeats, renewals, restart = case
    sequential, ids = fleet_of_migrations(count)
    scripts = [script(ids[i], i, renewals[i]) for i in range(count)]
    for s in scripts:
        for r in s:
            sequential.feed(r)
    run, _ = fleet_of_migrations(count)
    sent: list[MigrationReport] = []
    cursor = [0] * count
    for position, i in enumerate(order):
        if position == restart:  # the governor restarts from its snapshot: nothing changes
            snap = run.state.snapshot()
            run.state = GovernorState.restore(
                snap["devices"], snap["nodes"], snap["fleet"], 120.0, snap.get("workloads")
            )
        for at_position, which in repeats:
            if at_position == position and sent:
                run.feed(sent[which % len(sent)])
        r = scripts[i][cursor[i]]
        cursor[i] += 1
        run.feed(r)
        sent.append(r)
    book, expected = run.state.fleet.migrations, sequential.state.fleet.migrations
    assert book.to_json() == expected.to_json()
    assert all(m.phase is Phase.COMPLETED for m in book.migrations.values())
    assert len(of(run.decisions, K.MIGRATION_DEVICE_RELEASED)) == count


@st.composite
def races(draw: st.DrawFn) -> list[tuple[str, int]]:
    """A schedule: an executor acts (``A``/``B``, with whether it renews first) or event time
    moves on by some seconds (``tick``)."""
    return draw(
        st.lists(
            st.one_of(
                st.tuples(st.sampled_from(["A", "B"]), st.integers(0, 1)),
                st.tuples(st.just("tick"), st.integers(0, 70)),
            ),
            min_size=5,
            max_size=60,
        )
    )


class Executor:
    """An executor following the log: it asks for the lease, then does the step the migration's
    phase asks for, reporting under its token; refused as stale, it stops and asks again."""

    def __init__(self, name: str, migration_id: str) -> None:
        self.name = name
        self.migration_id = migration_id
        self.token: int | None = None

    def act(
        self, run: GovernanceRun, renew: bool, now: float
    ) -> tuple[MigrationReport, list[Decision]]:
        m = run.state.fleet.migrations.migrations[self.migration_id]
        if self.token is None:
            r = mreport(self.migration_id, R.LEASE_REQUESTED, self.name, 0, now)
        elif renew:
            r = mreport(self.migration_id, R.LEASE_RENEWED, self.name, self.token, now)
        elif m.phase is Phase.CHECKPOINT_REQUESTED:
            r = mreport(
                self.migration_id,
                R.CHECKPOINT_COMMITTED,
                self.name,
                self.token,
                now,
                checkpoint=("c", now),
            )
        elif m.phase is Phase.EVICTION_REQUESTED:
            r = mreport(self.migration_id, R.EVICTED, self.name, self.token, now)
        else:
            r = mreport(
                self.migration_id,
                R.REPLACEMENT_OBSERVED,
                self.name,
                self.token,
                now,
                devices=(("node-0", "GPU-7"),),
            )
        decided = run.feed(r)
        for d in decided:
            if d.kind is K.MIGRATION_LEASE_GRANTED and d.details["holder"] == self.name:
                self.token = int(d.details["fencingToken"])
            if d.kind in (K.MIGRATION_REPORT_REJECTED, K.MIGRATION_LEASE_DENIED):
                self.token = None  # lost the lease (or never had it): stop, ask again
        return r, decided


@PROPERTY_SETTINGS
@given(races())
def test_two_executors_racing_make_one_eviction_and_no_stale_token_is_accepted(
    schedule: list[tuple[str, int]],
) -> None:
    run, (mid,) = fleet_of_migrations(1)
    executors = {n: Executor(n, mid) for n in ("A", "B")}
    now = 10.0
    granted: list[int] = []

    def act(name: str, renew: bool) -> None:
        m = run.state.fleet.migrations.migrations[mid]
        if m.phase in FINISHED:
            return
        r, decided = executors[name].act(run, renew, now)
        rejected = any(
            d.kind in (K.MIGRATION_REPORT_REJECTED, K.MIGRATION_LEASE_DENIED) for d in decided
        )
        if r.kind is not R.LEASE_REQUESTED and not rejected:
            assert (r.fencing_token == granted[-1] and r.holder == m.holder) or m.phase in FINISHED
        for d in decided:
            if d.kind is K.MIGRATION_LEASE_GRANTED and not d.details["renewed"]:
                granted.append(int(d.details["fencingToken"]))

    for what, amount in schedule:
        if what == "tick":
            now += amount
            run.feed(watermark(now))
        else:
            act(what, bool(amount))
    for _ in range(40):  # then A alone, with time moving, until the migration is over
        act("A", False)
        now += 20
        run.feed(watermark(now))
    assert run.state.fleet.migrations.migrations[mid].phase in FINISHED
    assert granted == list(range(1, len(granted) + 1))  # each new holder the next token
    assert len(of(run.decisions, K.MIGRATION_EVICTION_REQUESTED)) <= 1
    assert len(of(run.decisions, K.MIGRATION_DEVICE_RELEASED)) <= 1


@st.composite
def quarantine_waves(draw: st.DrawFn) -> list[tuple[str, float]]:
    """Devices quarantined at increasing times: ``(node, gap seconds since the previous)``."""
    return draw(
        st.lists(
            st.tuples(st.sampled_from(["node-0", "node-1", "node-2"]), st.floats(0, 120)),
            min_size=1,
            max_size=12,
        )
    )


@PROPERTY_SETTINGS
@given(quarantine_waves())
def test_the_token_buckets_bound_the_migrations_started(waves: list[tuple[str, float]]) -> None:
    policy = replace(
        POLICY, breaker_min_nodes=100, breaker_min_devices=1000, migration_takeover_seconds=1e6
    )
    run = gov(policy)
    t, devices = 10.0, []
    for i, (node, _) in enumerate(waves):
        run.feed(workload(node, f"GPU-{i}", f"W{i}", f"p{i}", "checkpointed", 5, 1))
    for i, (node, gap) in enumerate(waves):
        t += gap
        quarantine(run, node, f"GPU-{i}", t)
        devices.append(node)
    for _ in range(40):
        t += 50
        run.feed(watermark(t))
    planned = of(run.decisions, K.MIGRATION_PLANNED)
    assert len(planned) == len(waves)  # all started in the end: nothing lost
    groups: dict[str | None, list[float]] = {None: []}
    for d in planned:
        seconds = d.at.timestamp()
        groups.setdefault(d.node, []).append(seconds)
        groups[None].append(seconds)
    for node, times in groups.items():
        burst, refill = (
            (policy.migration_fleet_burst, policy.migration_fleet_refill_seconds)
            if node is None
            else (policy.migration_node_burst, policy.migration_node_refill_seconds)
        )
        times.sort()
        for i in range(len(times)):
            for j in range(i, len(times)):
                assert j - i + 1 <= burst + (times[j] - times[i]) / refill + 1e-6
