"""One governor run with every migration metric in it (issue 13 item 5), shared by the domain
test (``test_migration_metrics``) and the API's ``/metrics`` test: three workloads on node-1, each
device quarantined (times in seconds after ``T0``):

- W (team-a, checkpointed) on GPU-0: planned at 10, checkpoint requested at 12, committed at 42,
  released at 50, completed at 60 (within its 50 s lease);
- X (team-b, non-recoverable) on GPU-1: evidence kept at 10;
- Y (team-c, checkpointed) on GPU-2: deferred rate-limited at 11 (the node's one token went to
  W), planned at 110 when the bucket refilled, checkpoint requested at 112, failed
  checkpoint-timeout at 120.

Quarantined idle GPU-seconds up to the newest decision (120; no watermark given): GPU-0 50..120 (70), GPU-1 10..120
(110), GPU-2 11..110 (99): 279."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from services.domain.governance.decisions import Decision
from services.domain.migration.metrics import MigrationFact, namespace_of
from tests.governance.harness import GovernanceRun
from tests.governance.migration_builders import (
    N1,
    N2,
    POLICY,
    R,
    healthy,
    mreport,
    quarantine,
    workload,
)
from tests.governance.strategies import watermark

IDLE_GPU_SECONDS = 279.0


def facts_of(decisions: Iterable[Decision]) -> list[MigrationFact]:
    """The decisions as the projection adapter reads them back (``migration_metrics_sql``)."""
    return [
        MigrationFact(
            kind=d.kind.value,
            at=d.at,
            node=d.node or "",
            resource_id=d.resource_id or "",
            migration_id=(d.incident or "").removeprefix("migration/")
            if d.kind.value.startswith("Migration")
            else "",
            namespace=namespace_of((d.details.get("pods") or [""])[0]),
            reason=str(d.details.get("reason") or ""),
            waiting_for=str(d.details.get("waitingFor") or ""),
        )
        for d in decisions
    ]


def migration_of(run: GovernanceRun, workload_uid: str) -> str:
    (m,) = [
        m for m in run.state.fleet.migrations.migrations.values() if m.workload_uid == workload_uid
    ]
    return m.migration_id


def scenario(
    run: GovernanceRun | None = None, pause: Callable[[str], None] | None = None
) -> GovernanceRun:
    """Run the scenario (module docstring) in ``run`` (a new one by default); ``pause(step)`` is
    called after the steps ``"deferred"`` (Y waiting) and ``"done"``."""
    run = run or GovernanceRun(policy=POLICY)
    run.feed(watermark(0))
    healthy(run, N2, "GPU-0")
    run.feed(workload(N1, "GPU-0", "W", "w-0", "checkpointed", 5, 1, max_age=600))
    run.feed(workload(N1, "GPU-1", "X", "x-0", None, 5, 1, namespace="team-b"))
    run.feed(
        workload(N1, "GPU-2", "Y", "y-0", "checkpointed", 5, 1, max_age=600, namespace="team-c")
    )
    quarantine(run, N1, "GPU-0", 10)
    quarantine(run, N1, "GPU-1", 10)
    quarantine(run, N1, "GPU-2", 11)
    if pause:
        pause("deferred")
    w = migration_of(run, "W")
    y = ""
    steps = [
        (12, lambda: mreport(w, R.LEASE_REQUESTED, "exec-a", 0, 12)),
        (42, lambda: mreport(w, R.CHECKPOINT_COMMITTED, "exec-a", 1, 42, checkpoint=("c1", 40))),
        (50, lambda: mreport(w, R.EVICTED, "exec-a", 1, 50)),
        (60, lambda: mreport(w, R.REPLACEMENT_OBSERVED, "exec-a", 1, 60, devices=((N2, "GPU-0"),))),
        (110, None),
        (112, lambda: mreport(y, R.LEASE_REQUESTED, "exec-a", 0, 112)),
        (120, lambda: mreport(y, R.CHECKPOINT_TIMED_OUT, "exec-a", 1, 120)),
    ]
    for t, report in steps:
        run.feed(watermark(t))  # the governor decides at its event time, not the report's
        if t == 110:
            y = migration_of(run, "Y")
        if report is not None:
            run.feed(report())
    if pause:
        pause("done")
    return run
