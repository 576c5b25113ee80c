"""Governance state: per node, fleet-wide and the whole governor's (devices are in
:mod:`.device_state`), with a JSON snapshot form.

The state is mutable and owned by one :func:`~services.domain.governance.machine.step` caller (the
governor); ``step`` records which devices, nodes and quarantine records it touched
(:attr:`GovernorState.dirty_devices`, ...) so the projection writes only those rows. Snapshots
(``to_json``/``from_json``) round-trip exactly (times as RFC 3339 ``Z`` strings, floats as orjson's
shortest round-trip form), so a governor restored from PostgreSQL continues exactly like one that
never stopped.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from services.domain.governance.device_state import (
    DeviceGov,
    DeviceKey,
    QuarantineRecord,
)
from services.domain.governance.fleet_state import FleetGov as FleetGov
from services.domain.governance.fleet_state import NodeFault as NodeFault
from services.domain.governance.fleet_state import NodeGov as NodeGov
from services.domain.governance.fleet_state import TokenBucket as TokenBucket
from services.domain.governance.node_index import NodeIndex


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
    aliases: dict[DeviceKey, DeviceKey] = field(default_factory=dict)
    """``(node, reported resourceID)`` -> the key of the device it was merged into (derived from
    ``DeviceGov.merged_ids``; rebuilt on restore)."""
    index: NodeIndex = field(default_factory=NodeIndex)
    """Per-node Unhealthy and Unknown-family members (derived; rebuilt on restore), kept in
    step by :meth:`refresh` after every change of a device's health, state, reason or pending
    action, so per-transition node checks cost O(1) instead of a scan of the node."""

    def add_device(self, device: DeviceGov) -> None:
        self.devices[device.key] = device
        self.by_node.setdefault(device.node, set()).add(device.key)
        self.node_names.add(device.node)
        self.index.refresh(device)
        for merged in device.merged_ids:
            self.aliases[(device.node, merged)] = device.key

    def remove_device(self, key: DeviceKey) -> DeviceGov:
        """Take the device out of the state (and its indexes); its row is deleted with the batch
        (it is marked dirty). Only a merge removes a device (:mod:`.identities`)."""
        device = self.devices.pop(key)
        held = self.by_node.get(device.node)
        if held is not None:
            held.discard(key)
            if not held:
                del self.by_node[device.node]
        self.index.remove(device)
        self.dirty_devices.add(key)
        return device

    def refresh(self, device: DeviceGov) -> None:
        """Re-file ``device`` in the per-node index after a change of its ``observed_health``,
        ``state``, ``effective_reason`` or ``pending`` (O(1)); every such assignment calls it."""
        self.index.refresh(device)

    def device_count(self, node: str) -> int:
        """Devices the governor holds for ``node`` (O(1))."""
        return len(self.by_node.get(node, ()))

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
        self.fleet.migrations.dirty_workloads.clear()
        self.fleet.migrations.pending_evidence.clear()
        self.fleet.adoption.dirty_labels.clear()
        self.fleet.order.clear_written()

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
                try:
                    due = node.last_renewed_at + timedelta(seconds=grace_seconds)
                except OverflowError:  # a renewal dated 9999: no deadline
                    continue
                if after is None or due > after:
                    self.schedule(due, TimerKind.HEARTBEAT, node.node)

    @classmethod
    def restore(
        cls,
        devices: list[dict[str, Any]],
        nodes: list[dict[str, Any]],
        fleet: dict[str, Any] | None,
        grace_seconds: float,
        workloads: list[dict[str, Any]] | None = None,
        labels: list[dict[str, Any]] | None = None,
        pending: list[dict[str, Any]] | None = None,
    ) -> GovernorState:
        """Rebuild from snapshot JSON objects (``device_governance.snapshot`` etc.;
        ``workloads``: the migration policy's facts, ``governor_workloads.snapshot``; ``labels``:
        the nodes' labels, ``governor_node_labels.snapshot``, :meth:`.AdoptionGov.label_row`).
        Labels an older fleet snapshot holds (``nodeLabels``) are kept and marked dirty, so the
        first batch writes them to their nodes' rows. ``pending``: the event-time merge's pending
        records, ``governor_pending.snapshot`` (:meth:`.EventOrder.pending_rows`); those an older
        fleet snapshot holds (``order.pending``) likewise move to their rows with the first batch."""
        state = cls(
            nodes={n.node: n for n in map(NodeGov.from_json, nodes)},
            fleet=FleetGov() if fleet is None else FleetGov.from_json(fleet),
        )
        state.fleet.migrations.load_workloads(workloads or [])
        state.fleet.adoption.load_labels(labels or [])
        state.fleet.load_pending(pending or [])
        for device in map(DeviceGov.from_json, devices):
            state.add_device(device)
        state.node_names.update(state.nodes)
        state.rebuild_timers(grace_seconds)
        return state

    def snapshot(self) -> dict[str, Any]:
        """The whole state as one JSON-ready object (tests compare snapshots byte for byte)."""
        obj = {
            "devices": [self.devices[k].to_json() for k in sorted(self.devices)],
            "nodes": [self.nodes[k].to_json() for k in sorted(self.nodes)],
            "fleet": self.fleet.to_json(),
        }
        if self.fleet.migrations.workloads:  # absent otherwise: older snapshots stay identical
            obj["workloads"] = self.fleet.migrations.workload_rows()
        if self.fleet.adoption.labels:  # likewise
            obj["nodeLabels"] = self.fleet.adoption.label_rows()
        return obj


def device_deadlines(device: DeviceGov) -> list[datetime]:
    """The times at which the device's governance may change without a new observation: the
    tolerance deadline and the quarantine's expiry, stage deadline, hold-down and operator age
    (until it was decided)."""
    due = [device.deadline] if device.deadline is not None else []
    q = device.quarantine
    if q is not None:
        due.extend(t for t in (q.expires_at, q.stage_deadline, q.next_recovery_at) if t is not None)
        if q.operator_due_at is not None and not q.needs_operator:
            due.append(q.operator_due_at)
    return due
