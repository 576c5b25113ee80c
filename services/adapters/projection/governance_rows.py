"""The rows of one governor batch, encoded for :class:`~services.adapters.projection.
governance_store.GovernanceStore`: :func:`batch_rows` turns the folded state's dirty devices,
nodes and quarantines, the fleet and the batch's decisions into :class:`BatchRows` (one JSON
array per table, expanded with ``jsonb_to_recordset``). Pure: no I/O; every value comes from the
state (event times, never the wall clock).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

import orjson

from services.domain.events import Health
from services.domain.governance.decisions import Decision, DecisionKind, decision_to_dict
from services.domain.governance.device_state import DeviceGov, QuarantineStatus
from services.domain.governance.state import GovernorState

FLEET_ROW_ID: Final = 1
"""The id of the one row of ``governor_fleet``."""


@dataclass(frozen=True, slots=True)
class BatchRows:
    """The rows of one governor batch, encoded (``None``: nothing for that table)."""

    topic: str
    offset: int
    """Last governance-topic offset the batch consumed."""
    expected_offset: int | None
    """The offset recorded before the batch (what the state was restored or last written at)."""
    devices: str | None
    deleted_devices: list[tuple[str, str]]
    nodes: str | None
    deleted_nodes: list[str]
    fleet: str
    quarantines: str | None
    decisions: str | None
    commands: str | None
    highwater: int | None
    watermark: datetime | None
    workloads: str | None = None
    """``governor_workloads`` rows of the migration policy's facts added or changed."""
    deleted_workloads: list[tuple[str, str, str]] = field(default_factory=list)
    """``(node, resourceID, Pod UID)`` of the facts no longer held."""
    evidence: str | None = None
    """``migration_evidence`` rows accepted in the batch (inserted, never updated)."""
    labels: str | None = None
    """``governor_node_labels`` rows of the nodes whose labels changed in the batch."""
    deleted_labels: list[str] = field(default_factory=list)
    """Nodes whose labels the gate no longer holds."""
    pending: str | None = None
    """``governor_pending`` rows of the merge's records left pending since the last write."""
    deleted_pending: list[tuple[int, int, int]] = field(default_factory=list)
    """Sources ``(partition, offset, index)`` of the written pending records since released."""


def _json(rows: Sequence[Any]) -> str | None:
    return orjson.dumps(rows).decode() if rows else None


def effective_health(device: DeviceGov) -> Health:
    """The device's health once node facts count: a device whose node lost its heartbeat or its
    device plugin (``effective_reason``) reads Unknown unless it is observed Unhealthy."""
    if device.effective_reason is not None and device.observed_health is not Health.UNHEALTHY:
        return Health.UNKNOWN
    return device.observed_health


def device_row(device: DeviceGov) -> dict[str, Any]:
    """The ``device_governance`` row of one device."""
    quarantine = device.quarantine
    return {
        "node": device.node,
        "resource_id": device.resource_id,
        "resource_name": device.resource_name,
        "source": device.source.value,
        "resource_claim": device.resource_claim,
        "observed_health": device.observed_health.value,
        "effective_health": effective_health(device).value,
        "effective_reason": device.effective_reason,
        "state": device.state.value,
        "state_since": device.state_since,
        "status_version": None if device.status_version is None else str(device.status_version),
        "unknown_since": device.unknown_since,
        "deadline": device.deadline,
        "quarantine_id": None if quarantine is None else quarantine.quarantine_id,
        "snapshot": device.to_json(),
    }


def decision_row(decision: Decision) -> dict[str, Any]:
    """The ``governance_decisions`` row of one decision."""
    return {
        "seq": decision.seq,
        "idx": decision.index,
        "kind": decision.kind.value,
        "at": decision.at,
        "node": decision.node,
        "resource_id": decision.resource_id,
        "incident": decision.incident,
        "payload": decision_to_dict(decision),
    }


def command_row(decision: Decision) -> dict[str, Any] | None:
    """The ``governance_commands`` row of a ``CommandAccepted``/``CommandRejected`` decision
    (``None`` for other decisions, or one without a command id)."""
    if decision.kind not in (DecisionKind.COMMAND_ACCEPTED, DecisionKind.COMMAND_REJECTED):
        return None
    details = decision.details
    command_id = details.get("commandID")
    if not command_id:
        return None
    return {
        "command_id": str(command_id),
        "action": str(details.get("action") or ""),
        "actor": str(details.get("actor") or ""),
        "accepted": decision.kind is DecisionKind.COMMAND_ACCEPTED,
        "reason": str(details.get("reason") or ""),
        "seq": decision.seq,
        "request_fingerprint": details.get("requestFingerprint"),
    }


def batch_rows(
    state: GovernorState,
    decisions: Iterable[Decision],
    *,
    topic: str,
    offset: int,
    expected_offset: int | None,
    highwater: int | None = None,
) -> BatchRows:
    """Encode what one batch changed: the state's dirty devices and nodes, touched quarantines, the
    fleet, the nodes whose labels changed, the event-time merge's records left pending or released
    since the last write, and ``decisions``. Call before ``state.clear_dirty()``. The fleet row
    holds no node's labels nor pending records: its size does not grow with them."""
    devices, deleted_devices = [], []
    for key in sorted(state.dirty_devices):
        device = state.devices.get(key)
        if device is None:
            deleted_devices.append(key)
        else:
            devices.append(device_row(device))
    nodes, deleted_nodes = [], []
    for name in sorted(state.dirty_nodes):
        node = state.nodes.get(name)
        if node is None:
            deleted_nodes.append(name)
        else:
            nodes.append(
                {
                    "node": node.node,
                    "last_heartbeat_at": node.last_renewed_at,
                    "heartbeat_lost": node.heartbeat_lost_since is not None,
                    "incident": node.incident,
                    "snapshot": node.to_json(),
                }
            )
    fleet = state.fleet
    decision_rows, command_rows = [], []
    for decision in decisions:
        decision_rows.append(decision_row(decision))
        command = command_row(decision)
        if command is not None:
            command_rows.append(command)
    quarantines = [state.touched_quarantines[k].to_row() for k in sorted(state.touched_quarantines)]
    workloads, deleted_workloads = [], []
    book = fleet.migrations
    for wkey in sorted(book.dirty_workloads):
        snapshot = book.workload_row(wkey)
        if snapshot is None:
            deleted_workloads.append(wkey)
        else:
            workloads.append(
                {"node": wkey[0], "resource_id": wkey[1], "pod_uid": wkey[2], "snapshot": snapshot}
            )
    labels, deleted_labels = [], []
    adoption = fleet.adoption
    for name in sorted(adoption.dirty_labels):
        label_row = adoption.label_row(name)
        if label_row is None:
            deleted_labels.append(name)
        else:
            labels.append({"node": name, "snapshot": label_row})
    added, deleted_pending = fleet.pending_rows()
    pending = [
        {"source_partition": p, "source_offset": o, "source_index": i, "snapshot": wire}
        for (p, o, i), wire in added
    ]
    return BatchRows(
        topic=topic,
        offset=offset,
        expected_offset=expected_offset,
        devices=_json(devices),
        deleted_devices=deleted_devices,
        nodes=_json(nodes),
        deleted_nodes=deleted_nodes,
        fleet=orjson.dumps(
            [
                {
                    "id": FLEET_ROW_ID,
                    "watermark": fleet.watermark,
                    "breaker_open": fleet.breaker_open,
                    "automation_paused": fleet.automation_paused,
                    "snapshot": fleet.to_json(pending=False),
                }
            ]
        ).decode(),
        quarantines=_json(quarantines),
        decisions=_json(decision_rows),
        commands=_json(command_rows),
        highwater=highwater,
        watermark=fleet.watermark,
        workloads=_json(workloads),
        deleted_workloads=deleted_workloads,
        evidence=_json(book.pending_evidence),
        labels=_json(labels),
        deleted_labels=deleted_labels,
        pending=_json(pending),
        deleted_pending=deleted_pending,
    )


def active_quarantine(device: DeviceGov) -> bool:
    """Whether the device has a quarantine that is not released."""
    q = device.quarantine
    return q is not None and q.status is not QuarantineStatus.RELEASED
