"""Builders for the migration tests: workload facts, executor reports, and a governor run with a
quarantined device (times are seconds after ``T0``, :func:`tests.governance.strategies.at`)."""

from __future__ import annotations

from services.domain.events import Health
from services.domain.governance.decisions import Decision, DecisionKind
from services.domain.governance.policy import GovernancePolicy
from services.domain.migration.book import Migration
from services.domain.migration.records import MigrationReport, ReportKind, WorkloadOnDevice
from tests.governance.harness import GovernanceRun
from tests.governance.strategies import at, transition, watermark

K = DecisionKind
R = ReportKind
N1, N2 = "node-1", "node-2"

POLICY = GovernancePolicy(
    migration_node_burst=1,
    migration_node_refill_seconds=100.0,
    migration_fleet_burst=2,
    migration_fleet_refill_seconds=50.0,
    migration_lease_seconds=50.0,
    migration_takeover_seconds=300.0,
    migration_checkpoint_timeout_seconds=200.0,
)


def workload(
    node: str,
    resource_id: str,
    workload_uid: str,
    pod: str,
    cls: str | None,
    version: int,
    t: float,
    *,
    max_age: int | None = None,
    shard: str | None = None,
    present: bool = True,
    namespace: str = "team-a",
) -> WorkloadOnDevice:
    return WorkloadOnDevice(
        node=node,
        resource_id=resource_id,
        workload_uid=workload_uid,
        pod_uid=f"uid-{pod}",
        namespace=namespace,
        pod_name=pod,
        migration_class=cls,
        status_version=version,
        observed_at=at(t),
        checkpoint_max_age_seconds=max_age,
        shard=shard,
        present=present,
    )


def mreport(
    migration_id: str,
    kind: ReportKind,
    holder: str,
    token: int,
    t: float,
    *,
    checkpoint: tuple[str, float] | None = None,
    devices: tuple[tuple[str, str], ...] = (),
    detail: str = "",
) -> MigrationReport:
    return MigrationReport(
        migration_id=migration_id,
        kind=kind,
        holder=holder,
        reported_at=at(t),
        fencing_token=token,
        checkpoint_id=None if checkpoint is None else checkpoint[0],
        checkpoint_at=None if checkpoint is None else at(checkpoint[1]),
        devices=devices,
        detail=detail,
    )


def gov(policy: GovernancePolicy = POLICY) -> GovernanceRun:
    run = GovernanceRun(policy=policy)
    run.feed(watermark(0))
    return run


def healthy(run: GovernanceRun, node: str, resource_id: str, t: float = 0) -> None:
    run.feed(transition(node, resource_id, Health.HEALTHY, 1, t))


def quarantine(
    run: GovernanceRun, node: str, resource_id: str, t: float, version: int = 10
) -> list[Decision]:
    """An Unhealthy transition (the governor quarantines at once), then the clock to ``t``."""
    decided = run.feed(transition(node, resource_id, Health.UNHEALTHY, version, t))
    decided += run.feed(watermark(t))
    return decided


def of(decisions: list[Decision], kind: DecisionKind) -> list[Decision]:
    return [d for d in decisions if d.kind is kind]


def one(decisions: list[Decision], kind: DecisionKind) -> Decision:
    found = of(decisions, kind)
    assert len(found) == 1, f"expected one {kind.value}, got {[d.kind.value for d in decisions]}"
    return found[0]


def migration_kinds(decisions: list[Decision]) -> list[DecisionKind]:
    return [d.kind for d in decisions if d.kind.value.startswith("Migration")]


def migration(run: GovernanceRun, migration_id: str) -> Migration:
    return run.state.fleet.migrations.migrations[migration_id]


def only_migration(run: GovernanceRun) -> Migration:
    (m,) = run.state.fleet.migrations.migrations.values()
    return m
