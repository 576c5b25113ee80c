"""Governance decisions: what :func:`~services.domain.governance.machine.step` outputs.

Each decision is published on the decisions topic (for alerting and other consumers) and projected
to PostgreSQL (quarantine records, device governance state, the device timeline). A decision's id,
``"<seq>.<index>"``, is the governance-topic offset of the record that caused it and its index among
that record's decisions: a replay of the topic gives the same ids, so consumers can deduplicate.

``incident`` is a stable key of the incident the decision belongs to (e.g.
``quarantine/<node>/<resourceID>/<quarantineID>``); ``alert`` says whether it starts (``firing``)
or ends (``resolved``) an alert for that incident. Alertmanager's dedup follows the incident key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

import orjson

from services.domain.codec import EventDecodeError, parse_time
from services.domain.events import SCHEMA_VERSION, format_time


class DecisionKind(StrEnum):
    """Kinds of decision (stable names: they are on the wire and in the projection)."""

    STATE_CHANGED = "DeviceGovernanceChanged"  # every change of a device's governance state
    QUARANTINED = "DeviceQuarantined"
    QUARANTINE_EXTENDED = "QuarantineExtended"
    QUARANTINE_RELEASED = "QuarantineReleased"
    RESTRICTED = "DeviceRestricted"
    RESTRICTION_LIFTED = "RestrictionLifted"
    RESTRICTION_DEFERRED = "RestrictionDeferred"
    UNKNOWN_TOLERANCE_STARTED = "UnknownToleranceStarted"
    INCIDENT_OPENED = "DeviceIncidentOpened"  # devices of a node read Unknown: one node alert
    INCIDENT_RESOLVED = "DeviceIncidentResolved"  # that alert (or a deferral alert) is over
    QUARANTINE_NEEDS_OPERATOR = "QuarantineNeedsOperator"  # no recovery progress past the age
    QUARANTINE_OPERATOR_RESOLVED = "QuarantineOperatorResolved"  # progress again, or released
    RECOVERY_STAGE_STARTED = "RecoveryStageStarted"
    RECOVERY_STAGE_PASSED = "RecoveryStagePassed"
    RECOVERY_FAILED = "RecoveryFailed"
    LEASE_GRANTED = "RecoveryLeaseGranted"
    LEASE_DENIED = "RecoveryLeaseDenied"
    REPORT_REJECTED = "RecoveryReportRejected"
    NODE_INCIDENT_OPENED = "NodeIncidentOpened"
    NODE_INCIDENT_CLOSED = "NodeIncidentClosed"
    NODE_ESCALATION_RECOMMENDED = "NodeEscalationRecommended"
    BREAKER_OPENED = "BreakerOpened"
    BREAKER_RESET = "BreakerReset"
    AUTOMATION_PAUSED = "AutomationPaused"
    AUTOMATION_RESUMED = "AutomationResumed"
    DATA_QUALITY = "DataQualityFlagged"  # an inventory conflict raised or cleared
    IDENTITY_MERGED = "DeviceIdentityMerged"  # a reported resourceID identified as a device
    COMMAND_ACCEPTED = "CommandAccepted"
    COMMAND_REJECTED = "CommandRejected"
    ADOPTION_DECLARED = "AdoptionPhaseDeclared"  # a DRA adoption pool's accepted phase (issue 16)
    ADOPTION_VERDICT_CHANGED = "AdoptionVerdictChanged"  # a pool's gate verdict changed (issue 16)
    ADOPTION_RETIRED = "AdoptionPoolRetired"  # a DRA adoption pool retired by an operator
    WATCH_STALE = "WatchStale"  # no watch event, bookmark or LIST for watch_stale_seconds
    WATCH_FRESH = "WatchFresh"  # the watch delivered again
    NODE_FAULT_OPENED = "NodeFaultIncidentOpened"  # devices of a node faulted together
    NODE_FAULT_UPDATED = "NodeFaultIncidentUpdated"  # another device of the node joined it
    NODE_FAULT_CLOSED = "NodeFaultIncidentClosed"  # no device of the incident is held any more
    # Workload migration off quarantined devices (issue 13; services/domain/migration/outcomes.py)
    MIGRATION_PLANNED = "MigrationPlanned"
    MIGRATION_DEFERRED = "MigrationDeferred"
    MIGRATION_LEASE_GRANTED = "MigrationLeaseGranted"
    MIGRATION_LEASE_DENIED = "MigrationLeaseDenied"
    MIGRATION_LEASE_EXPIRED = "MigrationLeaseExpired"
    MIGRATION_LEASE_RELEASED = "MigrationLeaseReleased"
    MIGRATION_CHECKPOINT_REQUESTED = "MigrationCheckpointRequested"
    MIGRATION_CHECKPOINT_COMMITTED = "MigrationCheckpointCommitted"
    MIGRATION_EVICTION_REQUESTED = "MigrationEvictionRequested"
    MIGRATION_DEVICE_RELEASED = "MigrationDeviceReleased"
    MIGRATION_COMPLETED = "MigrationCompleted"
    MIGRATION_FAILED = "MigrationFailed"
    MIGRATION_EVIDENCE_KEPT = "MigrationEvidenceKept"
    MIGRATION_EVIDENCE_STORED = "MigrationEvidenceStored"
    MIGRATION_CANCELLED = "MigrationCancelled"
    MIGRATION_REPORT_REJECTED = "MigrationReportRejected"


class AlertAction(StrEnum):
    FIRING = "firing"
    RESOLVED = "resolved"


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


@dataclass(frozen=True, slots=True)
class Decision:
    """One decision. ``at`` is the governor's event time (UTC) when it was made; ``details`` holds
    kind-specific JSON values (strings, numbers, booleans, lists, null; times as RFC 3339 ``Z``)."""

    kind: DecisionKind
    seq: int
    index: int
    at: datetime
    node: str | None = None
    resource_id: str | None = None
    incident: str | None = None
    alert: AlertAction | None = None
    severity: Severity | None = None
    summary: str = ""
    details: dict[str, Any] = field(default_factory=dict, hash=False)

    @property
    def decision_id(self) -> str:
        return f"{self.seq}.{self.index}"


def decision_to_dict(decision: Decision) -> dict[str, Any]:
    """JSON object of a decision (camelCase, schema 1)."""
    return {
        "schema": SCHEMA_VERSION,
        "type": decision.kind.value,
        "id": decision.decision_id,
        "seq": decision.seq,
        "index": decision.index,
        "at": format_time(decision.at),
        "node": decision.node,
        "resourceID": decision.resource_id,
        "incident": decision.incident,
        "alert": None if decision.alert is None else decision.alert.value,
        "severity": None if decision.severity is None else decision.severity.value,
        "summary": decision.summary,
        "details": decision.details,
    }


def encode_decision(decision: Decision) -> bytes:
    """UTF-8 JSON of a decision, keys sorted (stable bytes for a replay comparison)."""
    return orjson.dumps(decision_to_dict(decision), option=orjson.OPT_SORT_KEYS)


def decode_decision(payload: bytes) -> Decision:
    """Parse a decision; raises :class:`EventDecodeError` on anything else."""
    try:
        obj = orjson.loads(payload)
        if not isinstance(obj, dict) or obj.get("schema") != SCHEMA_VERSION:
            raise EventDecodeError("not a schema-1 decision object")
        return Decision(
            kind=DecisionKind(obj["type"]),
            seq=int(obj["seq"]),
            index=int(obj["index"]),
            at=parse_time(obj["at"]),
            node=obj.get("node"),
            resource_id=obj.get("resourceID"),
            incident=obj.get("incident"),
            alert=None if obj.get("alert") is None else AlertAction(obj["alert"]),
            severity=None if obj.get("severity") is None else Severity(obj["severity"]),
            summary=obj.get("summary") or "",
            details=dict(obj.get("details") or {}),
        )
    except EventDecodeError:
        raise
    except (orjson.JSONDecodeError, KeyError, ValueError, TypeError) as exc:
        raise EventDecodeError(f"not a decision: {exc!r}") from None
