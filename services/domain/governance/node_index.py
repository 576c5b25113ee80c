"""Per-node counts the governor checks on every transition, kept incrementally (issue 11).

A node with many devices made each transition scan the node (``check_escalation`` counted its
Unhealthy devices, ``sync_unknown_incident`` looked for an Unknown one), so a run was quadratic
in the node's device count. :class:`NodeIndex` holds, per node, the keys of its devices that read
Unhealthy and of those in the node's Unknown family; :meth:`NodeIndex.refresh` re-files one
device in O(1). It is derived state: never snapshotted, rebuilt device by device on restore, and
equal at every moment to :func:`recount` over the devices (a property test holds it to that).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from services.domain.events import Health
from services.domain.governance.device_state import DeviceGov, DeviceKey, GovState, PendingAction

REASON_UNKNOWN: Final = "pod-status-unknown"
REASON_UNRECOGNISED: Final = "unrecognised-health"
"""Device-level Unknown reasons (``effective_reason``); :mod:`.context` names them too."""


def unknown_family(device: DeviceGov) -> bool:
    """Device counts toward its node's Unknown incident: Unknown for a device-level reason (Pod
    status), not for a node fact (heartbeat, plugin loss), which has a node incident of its own."""
    if device.effective_reason not in (REASON_UNKNOWN, REASON_UNRECOGNISED):
        return False
    return device.state in (GovState.UNKNOWN_TOLERATED, GovState.RESTRICTED) or (
        device.state is GovState.DEFERRED and device.pending is PendingAction.RESTRICT
    )


@dataclass(slots=True)
class NodeIndex:
    """Node -> keys of its devices observed Unhealthy, and of its Unknown-family devices."""

    unhealthy: dict[str, set[DeviceKey]] = field(default_factory=dict)
    unknown: dict[str, set[DeviceKey]] = field(default_factory=dict)

    def refresh(self, device: DeviceGov) -> None:
        """File ``device`` by its current fields (idempotent, O(1))."""
        _file(self.unhealthy, device, device.observed_health is Health.UNHEALTHY)
        _file(self.unknown, device, unknown_family(device))

    def remove(self, device: DeviceGov) -> None:
        """Unfile ``device`` (it leaves the governor: merged into another, issue 10)."""
        _file(self.unhealthy, device, False)
        _file(self.unknown, device, False)

    def unhealthy_count(self, node: str) -> int:
        return len(self.unhealthy.get(node, ()))

    def unknown_members(self, node: str) -> list[DeviceKey]:
        """Keys of the node's Unknown-family devices in key order (the decisions' order)."""
        return sorted(self.unknown.get(node, ()))

    def any_unknown(self, node: str) -> bool:
        return bool(self.unknown.get(node))


def _file(index: dict[str, set[DeviceKey]], device: DeviceGov, member: bool) -> None:
    if member:
        index.setdefault(device.node, set()).add(device.key)
        return
    keys = index.get(device.node)
    if keys is not None and device.key in keys:
        keys.discard(device.key)
        if not keys:
            del index[device.node]


def recount(devices: Iterable[DeviceGov]) -> NodeIndex:
    """The index computed from scratch (what the incremental one must always equal)."""
    index = NodeIndex()
    for device in devices:
        index.refresh(device)
    return index
