"""Shared by the governor's modules: the step context (state, offset, policy, decisions so far),
reason names and small helpers."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from services.domain.events import format_time
from services.domain.governance import node_index
from services.domain.governance.decisions import AlertAction, Decision, DecisionKind, Severity
from services.domain.governance.device_state import DeviceGov
from services.domain.governance.policy import GovernancePolicy
from services.domain.governance.state import GovernorState, NodeGov

SYSTEM_ACTOR: Final = "system"
COMMANDS_REMEMBERED: Final = 10_000
"""How many recent command IDs are kept to drop repeated commands (client retries)."""

REASON_UNHEALTHY: Final = "pod-status-unhealthy"
REASON_UNKNOWN: Final = node_index.REASON_UNKNOWN
REASON_UNRECOGNISED: Final = node_index.REASON_UNRECOGNISED
REASON_HEARTBEAT: Final = "node-heartbeat-lost"
REASON_PLUGIN: Final = "device-plugin-lost"
NODE_LEVEL_REASONS: Final = frozenset({REASON_HEARTBEAT, REASON_PLUGIN})


@dataclass(slots=True)
class Ctx:
    """One step's context: the state, the record's offset, the policy and the decisions so far."""

    state: GovernorState
    seq: int
    policy: GovernancePolicy
    decisions: list[Decision] = field(default_factory=list)

    @property
    def now(self) -> datetime | None:
        """The fleet watermark (event time), ``None`` until every partition reported one."""
        return self.state.fleet.watermark

    def emit(
        self,
        kind: DecisionKind,
        at: datetime,
        *,
        device: DeviceGov | None = None,
        node: str | None = None,
        incident: str | None = None,
        alert: AlertAction | None = None,
        severity: Severity | None = None,
        summary: str = "",
        **details: Any,
    ) -> None:
        self.decisions.append(
            Decision(
                kind=kind,
                seq=self.seq,
                index=len(self.decisions),
                at=at,
                node=device.node if device is not None else node,
                resource_id=device.resource_id if device is not None else None,
                incident=incident,
                alert=alert,
                severity=severity,
                summary=summary,
                details={k: json(v) for k, v in sorted(details.items())},
            )
        )

    def touch(self, device: DeviceGov) -> None:
        self.state.dirty_devices.add(device.key)
        if device.quarantine is not None:
            self.state.touched_quarantines[device.quarantine.quarantine_id] = device.quarantine


def json(value: Any) -> Any:
    if isinstance(value, datetime):
        return format_time(value)
    if isinstance(value, tuple):
        return [json(v) for v in value]
    return value


def due(ctx: Ctx, deadline: datetime | None) -> bool:
    return deadline is not None and ctx.now is not None and ctx.now >= deadline


def device_name(device: DeviceGov) -> str:
    return f"{device.node}/{device.resource_id}"


def node_of(ctx: Ctx, name: str) -> NodeGov:
    """The node's state row, made on first sight; marked dirty (the caller is about to change
    it)."""
    node = ctx.state.nodes.get(name)
    if node is None:
        node = NodeGov(name)
        ctx.state.add_node(node)
    ctx.state.dirty_nodes.add(name)
    return node
