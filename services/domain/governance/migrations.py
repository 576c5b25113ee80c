"""The migration policy (:mod:`services.domain.migration`) in the governor: its records are folded
at the governor's event time, it learns of quarantines from the governor's own decisions, and its
outcomes become decisions (``Migration*``, incident ``migration/<id>``), so ``replay --governance
--verify`` covers them. The book lives in the fleet's snapshot
(:attr:`~.state.FleetGov.migrations`)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Final

from services.domain.governance import context
from services.domain.governance.decisions import Decision, DecisionKind
from services.domain.governance.device_state import DeviceKey, GovState
from services.domain.governance.policy import GovernancePolicy
from services.domain.migration import evidence, machine, reports
from services.domain.migration.limits import MigrationPolicy
from services.domain.migration.outcomes import Outcome
from services.domain.migration.records import (
    MigrationEvidence,
    MigrationReport,
    WorkloadOnDevice,
)

QUARANTINE_ON: Final = frozenset({DecisionKind.QUARANTINED})
QUARANTINE_OFF: Final = frozenset({DecisionKind.QUARANTINE_RELEASED})
QUARANTINE_STATES: Final = frozenset({GovState.QUARANTINED, GovState.RECOVERING})
AVAILABLE_STATES: Final = frozenset({GovState.AVAILABLE, GovState.UNKNOWN_TOLERATED})


def migration_policy(policy: GovernancePolicy) -> MigrationPolicy:
    """The ``migration_*`` fields of the governor's policy."""
    return MigrationPolicy(
        node_burst=policy.migration_node_burst,
        node_refill_seconds=policy.migration_node_refill_seconds,
        fleet_burst=policy.migration_fleet_burst,
        fleet_refill_seconds=policy.migration_fleet_refill_seconds,
        lease_seconds=policy.migration_lease_seconds,
        takeover_seconds=policy.migration_takeover_seconds,
        checkpoint_timeout_seconds=policy.migration_checkpoint_timeout_seconds,
    )


def gate(ctx: context.Ctx) -> str | None:
    """Why no migration may start now (the breaker is open, automation is paused), or ``None``."""
    fleet = ctx.state.fleet
    if fleet.breaker_open:
        return "breaker-open"
    if fleet.automation_paused:
        return "automation-paused"
    return None


def governed_key(ctx: context.Ctx, key: DeviceKey) -> DeviceKey:
    """The key the governor holds ``key`` under (a reported resourceID merged onto a device)."""
    return ctx.state.aliases.get(key, key)


def quarantine_version(ctx: context.Ctx, key: DeviceKey) -> tuple[bool, int | None]:
    """Whether the device is quarantined, and its status version (the idempotency key's)."""
    device = ctx.state.devices.get(governed_key(ctx, key))
    if device is None or device.state not in QUARANTINE_STATES:
        return False, None
    return True, device.status_version


def restricted(ctx: context.Ctx, key: DeviceKey) -> bool:
    """Whether new work should avoid the device: its governance state is neither Available nor
    UnknownTolerated. A device the governor never saw has nothing against it."""
    device = ctx.state.devices.get(governed_key(ctx, key))
    return device is not None and device.state not in AVAILABLE_STATES


def _at(ctx: context.Ctx, fallback: datetime) -> datetime:
    return ctx.now if ctx.now is not None else fallback


def on_workload(ctx: context.Ctx, fact: WorkloadOnDevice) -> None:
    book = ctx.state.fleet.migrations
    key = governed_key(ctx, fact.device_key)
    # The governor's state is the truth of the quarantine (a book started after it began).
    active, version = quarantine_version(ctx, key)
    if not active:
        book.quarantined.pop(key, None)
    elif key not in book.quarantined:  # a book started after the quarantine began
        book.quarantined[key] = version
    if key != fact.device_key:
        fact = _rekeyed(fact, key)
    publish(
        ctx, machine.on_workload(book, fact, _at(ctx, fact.observed_at), gate(ctx), _policy(ctx))
    )


def on_report(ctx: context.Ctx, r: MigrationReport) -> None:
    outcomes = reports.on_report(
        ctx.state.fleet.migrations,
        r,
        _at(ctx, r.reported_at),
        gate(ctx),
        lambda key: restricted(ctx, key),
        _policy(ctx),
    )
    publish(ctx, outcomes)


def on_evidence(ctx: context.Ctx, r: MigrationEvidence) -> None:
    """A non-recoverable migration's evidence (:mod:`services.domain.migration.evidence`)."""
    publish(ctx, evidence.on_evidence(ctx.state.fleet.migrations, r, _at(ctx, r.reported_at)))


def after_step(ctx: context.Ctx) -> None:
    """At the end of a step: the quarantines it began or ended, then the deadlines due at the
    event time and the waiting migrations the gate and buckets now allow."""
    book = ctx.state.fleet.migrations
    for decision in list(ctx.decisions):
        on = decision.kind in QUARANTINE_ON
        if not (on or decision.kind in QUARANTINE_OFF):
            continue
        if decision.node is None or decision.resource_id is None:
            continue
        key = (decision.node, decision.resource_id)
        _, version = quarantine_version(ctx, key)
        outcomes = machine.on_quarantine(
            book, key, version, on, decision.at, gate(ctx), _policy(ctx)
        )
        publish(ctx, outcomes)
    if ctx.now is not None and not book.empty():
        publish(ctx, machine.advance(book, ctx.now, gate(ctx), _policy(ctx)))


def publish(ctx: context.Ctx, outcomes: list[Outcome]) -> None:
    for o in outcomes:
        ctx.decisions.append(
            Decision(
                kind=DecisionKind(o.kind.value),
                seq=ctx.seq,
                index=len(ctx.decisions),
                at=o.at,
                node=o.node or None,
                resource_id=o.resource_id or None,
                incident=f"migration/{o.migration_id}",
                summary=o.summary,
                details=dict(sorted(o.details.items())),
            )
        )


def _policy(ctx: context.Ctx) -> MigrationPolicy:
    return migration_policy(ctx.policy)


def _rekeyed(fact: WorkloadOnDevice, key: DeviceKey) -> WorkloadOnDevice:
    return replace(fact, node=key[0], resource_id=key[1])
