"""Governance state: per device, per node and fleet-wide, with a JSON snapshot form.

The state is mutable and owned by one :func:`~services.domain.governance.machine.step` caller (the
governor); ``step`` records which devices, nodes and quarantine records it touched
(:attr:`GovernorState.dirty_devices`, ...) so the projection writes only those rows. Snapshots
(``to_json``/``from_json``) round-trip exactly (times as RFC 3339 ``Z`` strings, floats as orjson's
shortest round-trip form), so a governor restored from PostgreSQL continues exactly like one that
never stopped.

Names: *observed* health is what Kubernetes says (Pod status); *effective* health adds node facts
(lost heartbeat, lost device plugin); the *governance state* is what devicestate decided.
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from services.domain.events import DeviceSource, Health, format_time, parse_time
from services.domain.governance.inputs import RecoveryStage

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


def _t(value: datetime | None) -> str | None:
    return None if value is None else format_time(value)


def _pt(value: Any) -> datetime | None:
    return None if value is None else parse_time(value)


def _req_t(value: Any) -> datetime:
    return parse_time(value)


@dataclass(slots=True)
class QuarantineRecord:
    """One quarantine of one device (and its ResourceClaim, for DRA).

    ``quarantine_id`` is the idempotency key: ``<node>/<resourceID>@<statusVersion>`` for a system
    quarantine (a duplicate or replayed observation finds the same id and makes no second record),
    ``manual/<commandID>`` for an operator's. ``fencing_token`` grows by one at every lease grant;
    a report carrying an older token is rejected. ``confirmed_fault`` is true once a fault was seen
    during the quarantine (an Unhealthy observation or a failed recovery stage): a release with no
    confirmed fault counts as a false quarantine.
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

    def to_json(self) -> dict[str, Any]:
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
            "expiresAt": _t(self.expires_at),
            "releasedAt": _t(self.released_at),
            "releaseReason": self.release_reason,
            "releasedBy": self.released_by,
            "confirmedFault": self.confirmed_fault,
            "leaseHolder": self.lease_holder,
            "fencingToken": self.fencing_token,
            "leaseExpiresAt": _t(self.lease_expires_at),
            "recoveryStage": None if self.recovery_stage is None else self.recovery_stage.value,
            "recoveryAttempts": self.recovery_attempts,
            "stageDeadline": _t(self.stage_deadline),
            "nextRecoveryAt": _t(self.next_recovery_at),
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
            created_at=_req_t(obj["createdAt"]),
            resource_claim=obj.get("resourceClaim"),
            status=QuarantineStatus(obj["status"]),
            expires_at=_pt(obj.get("expiresAt")),
            released_at=_pt(obj.get("releasedAt")),
            release_reason=obj.get("releaseReason"),
            released_by=obj.get("releasedBy"),
            confirmed_fault=bool(obj.get("confirmedFault")),
            lease_holder=obj.get("leaseHolder"),
            fencing_token=int(obj.get("fencingToken") or 0),
            lease_expires_at=_pt(obj.get("leaseExpiresAt")),
            recovery_stage=None if stage is None else RecoveryStage(stage),
            recovery_attempts=int(obj.get("recoveryAttempts") or 0),
            stage_deadline=_pt(obj.get("stageDeadline")),
            next_recovery_at=_pt(obj.get("nextRecoveryAt")),
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
    unknown_episodes: list[datetime] = field(default_factory=list)
    unhealthy_transitions: list[datetime] = field(default_factory=list)
    pending: PendingAction | None = None
    pending_reason: str | None = None
    quarantine: QuarantineRecord | None = None
    fencing_token: int = 0
    alert_incident: str | None = None
    cleared: bool = False
    cleared_version: int | None = None
    reported_id: str | None = None
    uuid: str | None = None

    @property
    def key(self) -> DeviceKey:
        return (self.node, self.resource_id)

    def to_json(self) -> dict[str, Any]:
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
            "unknownSince": _t(self.unknown_since),
            "deadline": _t(self.deadline),
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
            observed_at=_req_t(obj["observedAt"]),
            state_since=_req_t(obj["stateSince"]),
            state=GovState(obj["state"]),
            status_version=None if version is None else int(version),
            raw_health=obj.get("rawHealth"),
            message=obj.get("message"),
            resource_claim=obj.get("resourceClaim"),
            pods=tuple(obj.get("pods") or ()),
            effective_reason=obj.get("effectiveReason"),
            unknown_since=_pt(obj.get("unknownSince")),
            deadline=_pt(obj.get("deadline")),
            unknown_episodes=[_req_t(t) for t in obj.get("unknownEpisodes") or ()],
            unhealthy_transitions=[_req_t(t) for t in obj.get("unhealthyTransitions") or ()],
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
        )


@dataclass(slots=True)
class NodeGov:
    """What the governor knows of one node: its Lease heartbeat and extended-resource counts."""

    node: str
    last_renewed_at: datetime | None = None
    heartbeat_lost_since: datetime | None = None
    incident: str | None = None
    capacity: dict[str, int] = field(default_factory=dict)
    allocatable: dict[str, int] = field(default_factory=dict)
    plugin_lost: dict[str, datetime] = field(default_factory=dict)
    plugin_incidents: dict[str, str] = field(default_factory=dict)
    escalation_incident: str | None = None
    unknown_incident: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "unknownIncident": self.unknown_incident,
            "lastRenewedAt": _t(self.last_renewed_at),
            "heartbeatLostSince": _t(self.heartbeat_lost_since),
            "incident": self.incident,
            "capacity": dict(sorted(self.capacity.items())),
            "allocatable": dict(sorted(self.allocatable.items())),
            "pluginLost": {k: format_time(v) for k, v in sorted(self.plugin_lost.items())},
            "pluginIncidents": dict(sorted(self.plugin_incidents.items())),
            "escalationIncident": self.escalation_incident,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> NodeGov:
        return cls(
            node=obj["node"],
            last_renewed_at=_pt(obj.get("lastRenewedAt")),
            heartbeat_lost_since=_pt(obj.get("heartbeatLostSince")),
            incident=obj.get("incident"),
            capacity=dict(obj.get("capacity") or {}),
            allocatable=dict(obj.get("allocatable") or {}),
            plugin_lost={k: _req_t(v) for k, v in (obj.get("pluginLost") or {}).items()},
            plugin_incidents=dict(obj.get("pluginIncidents") or {}),
            escalation_incident=obj.get("escalationIncident"),
            unknown_incident=obj.get("unknownIncident"),
        )


@dataclass(slots=True)
class TokenBucket:
    """A token bucket on event time: ``tokens`` at ``updated_at``; see
    :mod:`services.domain.governance.limits`."""

    tokens: float
    updated_at: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "updatedAt": _t(self.updated_at)}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> TokenBucket:
        return cls(tokens=float(obj["tokens"]), updated_at=_pt(obj.get("updatedAt")))


@dataclass(slots=True)
class FleetGov:
    """Fleet-wide state: event-time watermarks, limits, breaker, automation switch."""

    partitions: int = 0
    watermarks: dict[int, datetime] = field(default_factory=dict)
    watermark: datetime | None = None
    fleet_bucket: TokenBucket | None = None
    node_buckets: dict[str, TokenBucket] = field(default_factory=dict)
    breaker_open: bool = False
    breaker_opened_at: datetime | None = None
    breaker_incident: str | None = None
    signals: list[tuple[datetime, str, str]] = field(default_factory=list)
    """Bad signals within the breaker window, sorted by time (then node, resourceID)."""
    automation_paused: bool = False
    paused_by: str | None = None
    pause_reason: str | None = None
    deferred: list[DeviceKey] = field(default_factory=list)
    commands_seen: list[str] = field(default_factory=list)
    signal_devices: Counter[tuple[str, str]] = field(default_factory=Counter)
    """Derived from ``signals`` (not snapshotted): signals per device in the window."""
    signal_nodes: Counter[str] = field(default_factory=Counter)
    """Derived from ``signals``: signals per node in the window."""

    def recount_signals(self) -> None:
        """Rebuild the derived counters from ``signals`` (after a restore or a reset)."""
        self.signal_devices = Counter((n, r) for _, n, r in self.signals if r)
        self.signal_nodes = Counter(n for _, n, _ in self.signals)

    def to_json(self) -> dict[str, Any]:
        return {
            "partitions": self.partitions,
            "watermarks": {str(p): format_time(t) for p, t in sorted(self.watermarks.items())},
            "watermark": _t(self.watermark),
            "fleetBucket": None if self.fleet_bucket is None else self.fleet_bucket.to_json(),
            "nodeBuckets": {n: b.to_json() for n, b in sorted(self.node_buckets.items())},
            "breakerOpen": self.breaker_open,
            "breakerOpenedAt": _t(self.breaker_opened_at),
            "breakerIncident": self.breaker_incident,
            "signals": [[format_time(t), n, r] for t, n, r in self.signals],
            "automationPaused": self.automation_paused,
            "pausedBy": self.paused_by,
            "pauseReason": self.pause_reason,
            "deferred": [list(k) for k in self.deferred],
            "commandsSeen": list(self.commands_seen),
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> FleetGov:
        bucket = obj.get("fleetBucket")
        fleet = cls(
            partitions=int(obj.get("partitions") or 0),
            watermarks={int(p): _req_t(t) for p, t in (obj.get("watermarks") or {}).items()},
            watermark=_pt(obj.get("watermark")),
            fleet_bucket=None if bucket is None else TokenBucket.from_json(bucket),
            node_buckets={
                n: TokenBucket.from_json(b) for n, b in (obj.get("nodeBuckets") or {}).items()
            },
            breaker_open=bool(obj.get("breakerOpen")),
            breaker_opened_at=_pt(obj.get("breakerOpenedAt")),
            breaker_incident=obj.get("breakerIncident"),
            signals=[(_req_t(t), n, r) for t, n, r in obj.get("signals") or ()],
            automation_paused=bool(obj.get("automationPaused")),
            paused_by=obj.get("pausedBy"),
            pause_reason=obj.get("pauseReason"),
            deferred=[(k[0], k[1]) for k in obj.get("deferred") or ()],
            commands_seen=list(obj.get("commandsSeen") or ()),
        )
        fleet.recount_signals()
        return fleet


class TimerKind(StrEnum):
    DEVICE = "device"  # re-check a device (tolerance, stage timeout, stability, expiry, hold-down)
    HEARTBEAT = "heartbeat"  # re-check a node's heartbeat


@dataclass(slots=True)
class GovernorState:
    """Everything the governor knows. ``timers`` is a heap of ``(due, kind, node, resourceID)``
    re-checks; it is not snapshotted but rebuilt from the state (:meth:`rebuild_timers`), and a
    timer that is no longer due does nothing when it fires."""

    devices: dict[DeviceKey, DeviceGov] = field(default_factory=dict)
    nodes: dict[str, NodeGov] = field(default_factory=dict)
    fleet: FleetGov = field(default_factory=FleetGov)
    timers: list[tuple[datetime, str, str, str]] = field(default_factory=list)
    dirty_devices: set[DeviceKey] = field(default_factory=set)
    dirty_nodes: set[str] = field(default_factory=set)
    touched_quarantines: dict[str, QuarantineRecord] = field(default_factory=dict)
    timer_set: set[tuple[datetime, str, str, str]] = field(default_factory=set)
    by_node: dict[str, set[DeviceKey]] = field(default_factory=dict)
    """Index node -> device keys (derived; rebuilt on restore)."""
    node_names: set[str] = field(default_factory=set)
    """Nodes known through devices or node facts (derived; rebuilt on restore)."""

    def add_device(self, device: DeviceGov) -> None:
        self.devices[device.key] = device
        self.by_node.setdefault(device.node, set()).add(device.key)
        self.node_names.add(device.node)

    def add_node(self, node: NodeGov) -> None:
        self.nodes[node.node] = node
        self.node_names.add(node.node)

    def devices_on(self, node: str) -> list[DeviceGov]:
        """Devices of ``node`` in key order (a deterministic order for decisions)."""
        return [self.devices[k] for k in sorted(self.by_node.get(node, ()))]

    def schedule(self, due: datetime, kind: TimerKind, node: str, resource_id: str = "") -> None:
        """Re-check the device (or the node's heartbeat) when the watermark reaches ``due``.
        Scheduling the same entry twice keeps one."""
        entry = (due, kind.value, node, resource_id)
        if entry not in self.timer_set:
            self.timer_set.add(entry)
            heapq.heappush(self.timers, entry)

    def pop_due(self, watermark: datetime) -> tuple[datetime, str, str, str] | None:
        """The earliest entry due at ``watermark`` (removed), or ``None``."""
        if not self.timers or self.timers[0][0] > watermark:
            return None
        entry = heapq.heappop(self.timers)
        self.timer_set.discard(entry)
        return entry

    def clear_dirty(self) -> None:
        """Forget what was touched (the projection wrote it)."""
        self.dirty_devices.clear()
        self.dirty_nodes.clear()
        self.touched_quarantines.clear()

    def rebuild_timers(self, grace_seconds: float) -> None:
        """Recreate the timer heap from device and node state (after a restore).

        :func:`~services.domain.governance.machine.step` fires every timer due at the watermark
        before it returns, so the live heap holds exactly the deadlines after the watermark: the
        same set is rebuilt here, and a restored governor fires the same timers in the same order.
        """
        from datetime import timedelta

        self.timers = []
        self.timer_set = set()
        after = self.fleet.watermark
        for device in self.devices.values():
            for due in device_deadlines(device):
                if after is None or due > after:
                    self.schedule(due, TimerKind.DEVICE, device.node, device.resource_id)
        for node in self.nodes.values():
            if node.last_renewed_at is not None and node.heartbeat_lost_since is None:
                due = node.last_renewed_at + timedelta(seconds=grace_seconds)
                if after is None or due > after:
                    self.schedule(due, TimerKind.HEARTBEAT, node.node)

    @classmethod
    def restore(
        cls,
        devices: list[dict[str, Any]],
        nodes: list[dict[str, Any]],
        fleet: dict[str, Any] | None,
        grace_seconds: float,
    ) -> GovernorState:
        """Rebuild from snapshot JSON objects (``device_governance.snapshot`` etc.)."""
        state = cls(
            nodes={n.node: n for n in map(NodeGov.from_json, nodes)},
            fleet=FleetGov() if fleet is None else FleetGov.from_json(fleet),
        )
        for device in map(DeviceGov.from_json, devices):
            state.add_device(device)
        state.node_names.update(state.nodes)
        state.rebuild_timers(grace_seconds)
        return state

    def snapshot(self) -> dict[str, Any]:
        """The whole state as one JSON-ready object (tests compare snapshots byte for byte)."""
        return {
            "devices": [self.devices[k].to_json() for k in sorted(self.devices)],
            "nodes": [self.nodes[k].to_json() for k in sorted(self.nodes)],
            "fleet": self.fleet.to_json(),
        }


def device_deadlines(device: DeviceGov) -> list[datetime]:
    """The times at which the device's governance may change without a new observation: the
    tolerance deadline and the quarantine's expiry, stage deadline and hold-down."""
    due = [device.deadline] if device.deadline is not None else []
    q = device.quarantine
    if q is not None:
        due.extend(t for t in (q.expires_at, q.stage_deadline, q.next_recovery_at) if t is not None)
    return due
