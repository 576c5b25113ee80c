"""What the migration policy decides: :class:`Outcome`\\ s, which the governor publishes as
decisions of the same kind names (``services.domain.governance.decisions``), and the helpers that
record them."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from services.domain.events import format_time
from services.domain.migration.book import FailReason, Migration, Phase


class OutcomeKind(StrEnum):
    """Decision kinds (stable names: on the wire and in the projection)."""

    PLANNED = "MigrationPlanned"
    DEFERRED = "MigrationDeferred"
    LEASE_GRANTED = "MigrationLeaseGranted"
    LEASE_DENIED = "MigrationLeaseDenied"
    LEASE_EXPIRED = "MigrationLeaseExpired"
    LEASE_RELEASED = "MigrationLeaseReleased"
    CHECKPOINT_REQUESTED = "MigrationCheckpointRequested"
    CHECKPOINT_COMMITTED = "MigrationCheckpointCommitted"
    EVICTION_REQUESTED = "MigrationEvictionRequested"
    DEVICE_RELEASED = "MigrationDeviceReleased"
    COMPLETED = "MigrationCompleted"
    FAILED = "MigrationFailed"
    EVIDENCE_KEPT = "MigrationEvidenceKept"
    CANCELLED = "MigrationCancelled"
    REPORT_REJECTED = "MigrationReportRejected"


@dataclass(frozen=True, slots=True)
class Outcome:
    """One decision about migration ``migration_id`` (of device ``(node, resource_id)``) at event
    time ``at`` (UTC). ``details``: the migration's view after the decision (``migrationID``,
    ``phase``, ``workloadUID``, ``pods``, lease, ...; JSON values) and the kind's own fields."""

    kind: OutcomeKind
    at: datetime
    migration_id: str
    node: str
    resource_id: str
    summary: str
    details: dict[str, Any] = field(default_factory=dict, hash=False)


def view(m: Migration) -> dict[str, Any]:
    """The migration fields every decision carries: ``GET /v1/migrations`` serves the latest.
    ``pods`` are ``namespace/name``; ``podUIDs`` the same Pods' UIDs, in the same order (the
    executor evicts only these Pods, never a replacement created under the same name)."""
    obj = m.to_json()
    obj["podUIDs"] = [p["uid"] for p in obj["pods"]]
    obj["pods"] = [f"{p['namespace']}/{p['name']}" for p in obj["pods"]]
    return obj


def emit(
    out: list[Outcome], kind: OutcomeKind, m: Migration, at: datetime, summary: str, **extra: Any
) -> None:
    details = view(m)
    details.update({k: format_time(v) if isinstance(v, datetime) else v for k, v in extra.items()})
    out.append(Outcome(kind, at, m.migration_id, m.node, m.resource_id, summary, details))


def name(m: Migration) -> str:
    scope = f" shard {m.shard}" if m.shard else ""
    return f"migration {m.migration_id} (workload {m.workload_uid}{scope} off {m.node}/{m.resource_id})"


def fail(
    out: list[Outcome], m: Migration, at: datetime, reason: FailReason, detail: str = ""
) -> None:
    """Finish ``m`` as failed with ``reason``; its lease ends with it."""
    m.phase = Phase.FAILED
    m.reason = reason
    m.detail = detail
    m.updated_at = at
    m.lease_expires_at = None
    m.takeover_due = None
    emit(
        out,
        OutcomeKind.FAILED,
        m,
        at,
        f"{name(m)} failed: {reason.value}{': ' + detail if detail else ''}",
    )
