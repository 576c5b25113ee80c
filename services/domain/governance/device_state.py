"""Governance state of one device: its state names, its quarantine record and its row
(:class:`DeviceGov`), each with an exact JSON snapshot form (times RFC 3339 ``Z``).

Names: *observed* health is what Kubernetes says (Pod status); *effective* health adds node facts
(lost heartbeat, lost device plugin); the *governance state* is what devicestate decided. Node and
fleet state, and the whole governor's state, are in :mod:`.state`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from services.domain.codec import parse_time
from services.domain.events import DeviceSource, Health, format_time
from services.domain.governance.inputs import RecoveryStage
from services.domain.governance.taint_state import DriverTaint

DeviceKey = tuple[str, str]
"""``(node, resourceID)``."""


class GovState(StrEnum):
    """Governance state of a device.

    - ``Available``: no restriction (observed Healthy, or nothing against it).
    - ``UnknownTolerated``: effective health Unknown, inside the tolerance window; alerting, not
      restricted (the examples' ``UNKNOWN_TOLERATED``).
    - ``Restricted``: Unknown past the tolerance window: new allocations should avoid the device;
      no fault is confirmed (the examples' ``SUSPECT``).
    - ``Deferred``: a restriction or quarantine is due but held back by a blast-radius limit (rate
      limit, open breaker, paused automation); alerting.
    - ``Quarantined``: an active quarantine record (the examples' ``QUARANTINED``).
    - ``Recovering``: quarantined, reporting Healthy, going through probe -> canary -> stability
      (the examples' ``RECOVERING``); still quarantined until released.
    """

    AVAILABLE = "Available"
    UNKNOWN_TOLERATED = "UnknownTolerated"
    RESTRICTED = "Restricted"
    DEFERRED = "Deferred"
    QUARANTINED = "Quarantined"
    RECOVERING = "Recovering"


class PendingAction(StrEnum):
    QUARANTINE = "quarantine"
    RESTRICT = "restrict"


class QuarantineKind(StrEnum):
    SYSTEM = "system"  # from an Unhealthy observation
    MANUAL = "manual"  # from an operator command


class QuarantineStatus(StrEnum):
    ACTIVE = "active"
    RECOVERING = "recovering"
    RELEASED = "released"


def optional_time_text(value: datetime | None) -> str | None:
    """RFC 3339 ``Z`` text of a snapshot time, ``None`` kept."""
    return None if value is None else format_time(value)


def optional_time(value: Any) -> datetime | None:
    """A snapshot time read back (``None`` kept); ``ValueError`` for text that is not RFC 3339."""
    return None if value is None else parse_time(value)


@dataclass(slots=True)
class QuarantineRecord:
    """One quarantine of one device (and its ResourceClaim, for DRA).

    ``quarantine_id`` is the idempotency key: ``<node>/<resourceID>@<statusVersion>`` for a system
    quarantine (a duplicate or replayed observation finds the same id and makes no second record),
    ``manual/<commandID>`` for an operator's. ``fencing_token`` grows by one at every lease grant;
    a report carrying an older token is rejected. ``confirmed_fault`` is true once a fault was seen
    during the quarantine (an Unhealthy observation or a failed recovery stage): a release with no
    confirmed fault counts as a false quarantine. ``operator_due_at`` is when the quarantine,
    without recovery progress, needs an operator; ``needs_operator`` once that was decided
    (:mod:`.quarantine_age`).
    """

    quarantine_id: str
    node: str
    resource_id: str
    kind: QuarantineKind
    reason: str
    actor: str
    created_at: datetime
    resource_claim: str | None = None
    status: QuarantineStatus = QuarantineStatus.ACTIVE
    expires_at: datetime | None = None
    released_at: datetime | None = None
    release_reason: str | None = None
    released_by: str | None = None
    confirmed_fault: bool = False
    lease_holder: str | None = None
    fencing_token: int = 0
    lease_expires_at: datetime | None = None
    recovery_stage: RecoveryStage | None = None
    recovery_attempts: int = 0
    stage_deadline: datetime | None = None
    next_recovery_at: datetime | None = None
    operator_due_at: datetime | None = None
    needs_operator: bool = False

    def to_json(self) -> dict[str, Any]:
        obj = self._json()
        # Absent when unset (issue 15 item 4): older snapshots stay identical.
        if self.operator_due_at is not None:
            obj["operatorDueAt"] = format_time(self.operator_due_at)
        if self.needs_operator:
            obj["needsOperator"] = True
        return obj

    def _json(self) -> dict[str, Any]:
        return {
            "quarantineID": self.quarantine_id,
            "node": self.node,
            "resourceID": self.resource_id,
            "kind": self.kind.value,
            "reason": self.reason,
            "actor": self.actor,
            "createdAt": format_time(self.created_at),
            "resourceClaim": self.resource_claim,
            "status": self.status.value,
            "expiresAt": optional_time_text(self.expires_at),
            "releasedAt": optional_time_text(self.released_at),
            "releaseReason": self.release_reason,
            "releasedBy": self.released_by,
            "confirmedFault": self.confirmed_fault,
            "leaseHolder": self.lease_holder,
            "fencingToken": self.fencing_token,
            "leaseExpiresAt": optional_time_text(self.lease_expires_at),
            "recoveryStage": None if self.recovery_stage is None else self.recovery_stage.value,
            "recoveryAttempts": self.recovery_attempts,
            "stageDeadline": optional_time_text(self.stage_deadline),
            "nextRecoveryAt": optional_time_text(self.next_recovery_at),
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> QuarantineRecord:
        stage = obj.get("recoveryStage")
        return cls(
            quarantine_id=obj["quarantineID"],
            node=obj["node"],
            resource_id=obj["resourceID"],
            kind=QuarantineKind(obj["kind"]),
            reason=obj["reason"],
            actor=obj["actor"],
            created_at=parse_time(obj["createdAt"]),
            resource_claim=obj.get("resourceClaim"),
            status=QuarantineStatus(obj["status"]),
            expires_at=optional_time(obj.get("expiresAt")),
            released_at=optional_time(obj.get("releasedAt")),
            release_reason=obj.get("releaseReason"),
            released_by=obj.get("releasedBy"),
            confirmed_fault=bool(obj.get("confirmedFault")),
            lease_holder=obj.get("leaseHolder"),
            fencing_token=int(obj.get("fencingToken") or 0),
            lease_expires_at=optional_time(obj.get("leaseExpiresAt")),
            recovery_stage=None if stage is None else RecoveryStage(stage),
            recovery_attempts=int(obj.get("recoveryAttempts") or 0),
            stage_deadline=optional_time(obj.get("stageDeadline")),
            next_recovery_at=optional_time(obj.get("nextRecoveryAt")),
            operator_due_at=optional_time(obj.get("operatorDueAt")),
            needs_operator=bool(obj.get("needsOperator")),
        )

    def to_row(self) -> dict[str, Any]:
        """Columns of the ``quarantines`` table."""
        return {
            "quarantine_id": self.quarantine_id,
            "node": self.node,
            "resource_id": self.resource_id,
            "resource_claim": self.resource_claim,
            "kind": self.kind.value,
            "status": self.status.value,
            "reason": self.reason,
            "actor": self.actor,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "released_at": self.released_at,
            "release_reason": self.release_reason,
            "released_by": self.released_by,
            "confirmed_fault": self.confirmed_fault,
            "lease_holder": self.lease_holder,
            "fencing_token": self.fencing_token,
            "lease_expires_at": self.lease_expires_at,
            "recovery_stage": None if self.recovery_stage is None else self.recovery_stage.value,
            "recovery_attempts": self.recovery_attempts,
        }


@dataclass(slots=True)
class DeviceGov:
    """Governance state of one device ``(node, resource_id)``.

    ``resource_id`` is the device's key on its node: its physical identity when the worker
    resolved one (``HealthTransition.device_id``), else the resourceID as reported;
    ``reported_id`` is the resourceID of the latest observation (a CDI-form ID changes per claim).
    ``merged_ids``: reported resourceIDs whose records were merged into this one once the worker
    identified them as this device (``DeviceIdentified``, :mod:`.identities`), sorted; a later
    transition under one of them is governed here.
    """

    node: str
    resource_id: str
    resource_name: str
    source: DeviceSource
    observed_health: Health
    observed_at: datetime
    state_since: datetime
    state: GovState = GovState.AVAILABLE
    status_version: int | None = None
    raw_health: str | None = None
    message: str | None = None
    resource_claim: str | None = None
    pods: tuple[str, ...] = ()
    effective_reason: str | None = None
    unknown_since: datetime | None = None
    deadline: datetime | None = None
    unknown_episodes: tuple[datetime, ...] = ()
    unhealthy_transitions: tuple[datetime, ...] = ()
    """Event times of the device's recent Unknown episodes and Unhealthy transitions; tuples,
    replaced whole (the empty one shared: most devices have none; issue 12)."""
    pending: PendingAction | None = None
    pending_reason: str | None = None
    quarantine: QuarantineRecord | None = None
    fencing_token: int = 0
    alert_incident: str | None = None
    cleared: bool = False
    cleared_version: int | None = None
    reported_id: str | None = None
    uuid: str | None = None
    merged_ids: tuple[str, ...] = ()
    driver_taint: DriverTaint | None = None
    """The ResourceSlice taint that counts as a fault on this device (issue 15), if any."""
    _key: DeviceKey | None = field(default=None, init=False, repr=False, compare=False)
    """The last :attr:`key` built: the state's dict, node index and dirty set share one tuple
    per device instead of one each (issue 12, the worker's memory per device)."""

    @property
    def key(self) -> DeviceKey:
        """``(node, resource_id)``; the same tuple object until either changes (a merge
        renames a device: :mod:`.identities`)."""
        key = self._key
        if key is None or key[1] is not self.resource_id or key[0] is not self.node:
            key = self._key = (self.node, self.resource_id)
        return key

    def to_json(self) -> dict[str, Any]:
        obj = self._json()
        if self.merged_ids:  # absent otherwise: older snapshots stay identical
            obj["mergedIDs"] = list(self.merged_ids)
        if self.driver_taint is not None:  # absent otherwise: older snapshots stay identical
            obj["driverTaint"] = self.driver_taint.to_json()
        return obj

    def _json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "resourceID": self.resource_id,
            "resourceName": self.resource_name,
            "source": self.source.value,
            "observedHealth": self.observed_health.value,
            "observedAt": format_time(self.observed_at),
            "stateSince": format_time(self.state_since),
            "state": self.state.value,
            "statusVersion": None if self.status_version is None else str(self.status_version),
            "rawHealth": self.raw_health,
            "message": self.message,
            "resourceClaim": self.resource_claim,
            "pods": list(self.pods),
            "effectiveReason": self.effective_reason,
            "unknownSince": optional_time_text(self.unknown_since),
            "deadline": optional_time_text(self.deadline),
            "unknownEpisodes": [format_time(t) for t in self.unknown_episodes],
            "unhealthyTransitions": [format_time(t) for t in self.unhealthy_transitions],
            "pending": None if self.pending is None else self.pending.value,
            "pendingReason": self.pending_reason,
            "quarantine": None if self.quarantine is None else self.quarantine.to_json(),
            "fencingToken": self.fencing_token,
            "alertIncident": self.alert_incident,
            "reportedID": self.reported_id,
            "uuid": self.uuid,
            "cleared": self.cleared,
            "clearedVersion": None if self.cleared_version is None else str(self.cleared_version),
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> DeviceGov:
        version = obj.get("statusVersion")
        pending = obj.get("pending")
        quarantine = obj.get("quarantine")
        return cls(
            node=obj["node"],
            resource_id=obj["resourceID"],
            resource_name=obj["resourceName"],
            source=DeviceSource(obj["source"]),
            observed_health=Health(obj["observedHealth"]),
            observed_at=parse_time(obj["observedAt"]),
            state_since=parse_time(obj["stateSince"]),
            state=GovState(obj["state"]),
            status_version=None if version is None else int(version),
            raw_health=obj.get("rawHealth"),
            message=obj.get("message"),
            resource_claim=obj.get("resourceClaim"),
            pods=tuple(obj.get("pods") or ()),
            effective_reason=obj.get("effectiveReason"),
            unknown_since=optional_time(obj.get("unknownSince")),
            deadline=optional_time(obj.get("deadline")),
            unknown_episodes=tuple(parse_time(t) for t in obj.get("unknownEpisodes") or ()),
            unhealthy_transitions=tuple(
                parse_time(t) for t in obj.get("unhealthyTransitions") or ()
            ),
            pending=None if pending is None else PendingAction(pending),
            pending_reason=obj.get("pendingReason"),
            quarantine=None if quarantine is None else QuarantineRecord.from_json(quarantine),
            fencing_token=int(obj.get("fencingToken") or 0),
            alert_incident=obj.get("alertIncident"),
            reported_id=obj.get("reportedID"),
            uuid=obj.get("uuid"),
            cleared=bool(obj.get("cleared")),
            cleared_version=None
            if obj.get("clearedVersion") is None
            else int(obj["clearedVersion"]),
            merged_ids=tuple(obj.get("mergedIDs") or ()),
            driver_taint=None
            if obj.get("driverTaint") is None
            else DriverTaint.from_json(obj["driverTaint"]),
        )
