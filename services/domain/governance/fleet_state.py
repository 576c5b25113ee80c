"""Governance state of the nodes and the fleet (devices are in :mod:`.device_state`, the whole
governor's in :mod:`.state`), with their JSON snapshot forms: per node its heartbeat, capacity
and escalation (:class:`NodeGov`); the fleet's rate limits (:class:`TokenBucket`), breaker,
pause, event-time merge, watch freshness, node incidents (:class:`NodeFault`), adoption gate and
migrations (:class:`FleetGov`). Snapshots round-trip exactly, as :mod:`.state` says."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from services.domain.codec import parse_time
from services.domain.events import format_time
from services.domain.governance.adoption_state import AdoptionGov
from services.domain.governance.device_state import DeviceKey, optional_time, optional_time_text
from services.domain.governance.event_order import EventOrder, Source
from services.domain.governance.input_codec import keyed_from_dict, keyed_to_dict
from services.domain.migration.book import MigrationBook


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
    ceiling_incident: str | None = None
    """Set once the node reached ``max_devices_per_node`` (its one data-quality decision)."""

    def to_json(self) -> dict[str, Any]:
        obj = {
            "node": self.node,
            "unknownIncident": self.unknown_incident,
            "lastRenewedAt": optional_time_text(self.last_renewed_at),
            "heartbeatLostSince": optional_time_text(self.heartbeat_lost_since),
            "incident": self.incident,
            "capacity": dict(sorted(self.capacity.items())),
            "allocatable": dict(sorted(self.allocatable.items())),
            "pluginLost": {k: format_time(v) for k, v in sorted(self.plugin_lost.items())},
            "pluginIncidents": dict(sorted(self.plugin_incidents.items())),
            "escalationIncident": self.escalation_incident,
        }
        if self.ceiling_incident is not None:  # absent otherwise: older snapshots stay identical
            obj["ceilingIncident"] = self.ceiling_incident
        return obj

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> NodeGov:
        return cls(
            node=obj["node"],
            last_renewed_at=optional_time(obj.get("lastRenewedAt")),
            heartbeat_lost_since=optional_time(obj.get("heartbeatLostSince")),
            incident=obj.get("incident"),
            capacity=dict(obj.get("capacity") or {}),
            allocatable=dict(obj.get("allocatable") or {}),
            plugin_lost={k: parse_time(v) for k, v in (obj.get("pluginLost") or {}).items()},
            plugin_incidents=dict(obj.get("pluginIncidents") or {}),
            escalation_incident=obj.get("escalationIncident"),
            unknown_incident=obj.get("unknownIncident"),
            ceiling_incident=obj.get("ceilingIncident"),
        )


@dataclass(slots=True)
class TokenBucket:
    """A token bucket on event time: ``tokens`` at ``updated_at``; see
    :mod:`services.domain.governance.limits`."""

    tokens: float
    updated_at: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "updatedAt": optional_time_text(self.updated_at)}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> TokenBucket:
        return cls(tokens=float(obj["tokens"]), updated_at=optional_time(obj.get("updatedAt")))


@dataclass(slots=True)
class NodeFault:
    """An open node incident (issue 15 item 5): devices of ``node`` faulted together.
    ``incident`` is ``node-fault/<node>/<first fault time>``; ``members`` the resourceIDs in it
    (sorted), ``opened_at`` the event time (UTC) it opened."""

    node: str
    incident: str
    opened_at: datetime
    members: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "incident": self.incident,
            "openedAt": format_time(self.opened_at),
            "members": list(self.members),
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> NodeFault:
        return cls(
            node=obj["node"],
            incident=obj["incident"],
            opened_at=parse_time(obj["openedAt"]),
            members=list(obj.get("members") or ()),
        )


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
    clock_ahead: list[int] = field(default_factory=list)
    """Device-health partitions whose clock-ahead alert is firing (sorted)."""
    order: EventOrder = field(default_factory=EventOrder)
    """The event-time merge of the forwarded records (:mod:`.event_order`), pending ones included."""
    adoption: AdoptionGov = field(default_factory=AdoptionGov)
    """The adoption gate's inputs and last verdicts (:mod:`.adoption_verdicts`, issue 16)."""
    watch_seen_at: datetime | None = None
    """Latest event time the watch was known to deliver at (:mod:`.watch_freshness`)."""
    watch_stale_incident: str | None = None
    """The open ``watch-stale/...`` incident, while the watch is stale."""
    node_faults: dict[str, NodeFault] = field(default_factory=dict)
    """Open node incidents of simultaneous device faults, by node (:mod:`.node_faults`)."""
    recent_faults: dict[str, list[tuple[datetime, str]]] = field(default_factory=dict)
    """Per node, its device faults within the node-incident window: ``(time, resourceID)``."""
    faults_floor: datetime | None = field(default=None, compare=False, repr=False)
    """The oldest newest-fault time in :attr:`recent_faults` when last scanned (``None``: not
    known, e.g. since a node's faults were set): a lower bound while entries are only removed,
    so :func:`.node_faults.settle` need not scan them before event time passes it (derived)."""
    migrations: MigrationBook = field(default_factory=MigrationBook)
    """Workload migrations off quarantined devices (issue 13, :mod:`.migrations`)."""

    def recount_signals(self) -> None:
        """Rebuild the derived counters from ``signals`` (after a restore or a reset)."""
        self.signal_devices = Counter((n, r) for _, n, r in self.signals if r)
        self.signal_nodes = Counter(n for _, n, _ in self.signals)

    def to_json(self, *, pending: bool = True) -> dict[str, Any]:
        """The fleet's snapshot; ``pending=False``: without the merge's pending records (the
        ``governor_fleet`` row: they are rows of their own, :meth:`pending_rows`)."""
        obj = self._to_json(pending)
        # Absent otherwise: older snapshots stay identical.
        if not self.adoption.empty():
            obj["adoption"] = self.adoption.to_json()
        if not self.migrations.empty():
            obj["migrations"] = self.migrations.to_json()
        return obj

    def pending_rows(self) -> tuple[list[tuple[Source, dict[str, Any]]], list[Source]]:
        """The merge's pending records to write and the rows to delete since the last write
        (:meth:`.EventOrder.pending_rows`, in the governance codec's wire form)."""
        return self.order.pending_rows(keyed_to_dict)

    def load_pending(self, rows: list[dict[str, Any]]) -> None:
        """Hold the merge's pending records of ``rows`` (``governor_pending.snapshot``)."""
        self.order.load_pending(rows, keyed_from_dict)

    def _to_json(self, pending: bool) -> dict[str, Any]:
        return {
            "partitions": self.partitions,
            "watermarks": {str(p): format_time(t) for p, t in sorted(self.watermarks.items())},
            "watermark": optional_time_text(self.watermark),
            "fleetBucket": None if self.fleet_bucket is None else self.fleet_bucket.to_json(),
            "nodeBuckets": {n: b.to_json() for n, b in sorted(self.node_buckets.items())},
            "breakerOpen": self.breaker_open,
            "breakerOpenedAt": optional_time_text(self.breaker_opened_at),
            "breakerIncident": self.breaker_incident,
            "signals": [[format_time(t), n, r] for t, n, r in self.signals],
            "automationPaused": self.automation_paused,
            "pausedBy": self.paused_by,
            "pauseReason": self.pause_reason,
            "deferred": [list(k) for k in self.deferred],
            "commandsSeen": list(self.commands_seen),
            "clockAhead": list(self.clock_ahead),
            "order": self.order.to_json(keyed_to_dict, pending=pending),
            **self._issue15_json(),
        }

    def _issue15_json(self) -> dict[str, Any]:
        # Keys only when set: snapshots of governors without them stay byte-identical.
        obj: dict[str, Any] = {}
        if self.watch_seen_at is not None:
            obj["watchSeenAt"] = format_time(self.watch_seen_at)
        if self.watch_stale_incident is not None:
            obj["watchStaleIncident"] = self.watch_stale_incident
        if self.node_faults:
            obj["nodeFaults"] = {n: f.to_json() for n, f in sorted(self.node_faults.items())}
        if self.recent_faults:
            obj["recentFaults"] = {
                n: [[format_time(t), r] for t, r in faults]
                for n, faults in sorted(self.recent_faults.items())
            }
        return obj

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> FleetGov:
        bucket = obj.get("fleetBucket")
        fleet = cls(
            partitions=int(obj.get("partitions") or 0),
            watermarks={int(p): parse_time(t) for p, t in (obj.get("watermarks") or {}).items()},
            watermark=optional_time(obj.get("watermark")),
            fleet_bucket=None if bucket is None else TokenBucket.from_json(bucket),
            node_buckets={
                n: TokenBucket.from_json(b) for n, b in (obj.get("nodeBuckets") or {}).items()
            },
            breaker_open=bool(obj.get("breakerOpen")),
            breaker_opened_at=optional_time(obj.get("breakerOpenedAt")),
            breaker_incident=obj.get("breakerIncident"),
            signals=[(parse_time(t), n, r) for t, n, r in obj.get("signals") or ()],
            automation_paused=bool(obj.get("automationPaused")),
            paused_by=obj.get("pausedBy"),
            pause_reason=obj.get("pauseReason"),
            deferred=[(k[0], k[1]) for k in obj.get("deferred") or ()],
            commands_seen=list(obj.get("commandsSeen") or ()),
            clock_ahead=[int(p) for p in obj.get("clockAhead") or ()],
            order=EventOrder.from_json(obj.get("order"), keyed_from_dict),
            adoption=AdoptionGov.from_json(obj.get("adoption")),
            watch_seen_at=optional_time(obj.get("watchSeenAt")),
            watch_stale_incident=obj.get("watchStaleIncident"),
            node_faults={
                n: NodeFault.from_json(f) for n, f in (obj.get("nodeFaults") or {}).items()
            },
            recent_faults={
                n: [(parse_time(t), r) for t, r in faults]
                for n, faults in (obj.get("recentFaults") or {}).items()
            },
            migrations=MigrationBook.from_json(obj.get("migrations")),
        )
        fleet.recount_signals()
        return fleet
