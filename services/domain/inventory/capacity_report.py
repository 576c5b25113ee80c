"""The capacity views of the inventory (issue 4, item 3) over a :class:`~.snapshot.Snapshot`:
:func:`build_capacity` gathers every device with a node (DRA devices of node-scoped slices and
device-plugin capacity in kubelet's units, with unseen placeholders: :func:`plugin_resources`),
marks the unavailable ones from the inventory directory (:mod:`.directory`), and computes the
views with :func:`.capacity.capacity_views`.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from services.domain.events import DeviceSource
from services.domain.inventory.capacity import (
    CapacityDevice,
    CapacityRow,
    capacity_views,
    common_request_size,
)
from services.domain.inventory.directory import (
    InventoryDevice,
    build_directory,
    effective_identities,
)
from services.domain.inventory.identity import plugin_identity
from services.domain.inventory.snapshot import IdentityRow, ObservedDevice, Snapshot

PLUGIN_LOST: Final = "device-plugin-lost"
"""Unavailable reason of plugin capacity that is not allocatable (the plugin lost devices)."""


@dataclass(frozen=True, slots=True)
class PluginResource:
    """A node's device-plugin resource: capacity and allocatable (Node status), ``seen`` the
    distinct resourceIDs ever reported for it there, ``unseen`` = capacity - seen (>= 0)."""

    node: str
    resource_name: str
    capacity: int
    allocatable: int
    seen: int

    @property
    def unseen(self) -> int:
        return max(0, self.capacity - self.seen)


def plugin_resources(snapshot: Snapshot) -> list[PluginResource]:
    """Per node and extended resource of ``node_resources``, sorted."""
    seen: Counter[tuple[str, str]] = Counter(
        (d.node, d.resource_name)
        for d in snapshot.devices
        if d.source == DeviceSource.DEVICE_PLUGIN.value
    )
    rows = []
    for node, resources in sorted(snapshot.node_resources.items()):
        for name, capacity in sorted(resources.capacity.items()):
            rows.append(
                PluginResource(
                    node,
                    name,
                    capacity,
                    resources.allocatable.get(name, 0),
                    seen[(node, name)],
                )
            )
    return rows


@dataclass(frozen=True, slots=True)
class CapacityReport:
    """Rows per view (:data:`services.domain.inventory.capacity.VIEWS`), the request size used for
    ``fragmented`` and where it came from (``setting``, ``claims``, ``pods`` or ``default``)."""

    views: dict[str, list[CapacityRow]]
    request_size: int
    request_size_source: str
    unavailable: dict[tuple[str, str], str]


def request_size(snapshot: Snapshot, configured: int) -> tuple[int, str]:
    """``configured`` when set (> 0); else the most common ResourceClaim request count; else, with
    no counted claim request, the most common number of one resource's devices per Pod in the
    directory (device plugins); else 1."""
    if configured > 0:
        return configured, "setting"
    counts = [
        r.count
        for claim in snapshot.inventory.claims.values()
        for r in claim.requests
        if r.count is not None and r.count > 0
    ]
    if counts:
        return common_request_size(counts), "claims"
    per_pod: Counter[tuple[str, str, str, str]] = Counter()
    for d in snapshot.devices:
        if d.source == DeviceSource.DEVICE_PLUGIN.value:
            for ns, pod in set(d.pods):
                per_pod[(d.node, ns, pod, d.resource_name)] += 1
    if per_pod:
        return common_request_size(per_pod.values()), "pods"
    return 1, "default"


def _plugin_capacity_devices(
    snapshot: Snapshot,
    directory: Mapping[tuple[str, str], InventoryDevice],
    identities: Mapping[tuple[str, str], IdentityRow],
    unavailable: dict[tuple[str, str], str],
) -> list[CapacityDevice]:
    """Device-plugin capacity in kubelet's units (one per advertised resourceID: a time-sliced
    replica is one unit). Per node and resource the total is the Node's capacity: the reported
    IDs (allocated ones first, then unavailable, then the rest) and, for capacity never reported,
    idle placeholders ``<resource>#unseen-<n>``; allocated IDs beyond capacity still count.
    Capacity that is not allocatable (the plugin lost devices) makes that many otherwise idle
    units unavailable (``device-plugin-lost``)."""
    known: dict[tuple[str, str], list[ObservedDevice]] = defaultdict(list)
    for d in snapshot.devices:
        if d.source == DeviceSource.DEVICE_PLUGIN.value:
            known[(d.node, d.resource_name)].append(d)

    def reason(row: ObservedDevice) -> str | None:
        identity = identities.get((row.node, row.resource_id))
        device_id = identity.device_id if identity else plugin_identity(row.resource_id).device_id
        device = directory.get((row.node, device_id))
        return None if device is None else device.unavailable

    result: list[CapacityDevice] = []
    keys = set(known) | {
        (node, name) for node, r in snapshot.node_resources.items() for name in r.capacity
    }
    for node, name in sorted(keys):
        rows = sorted(known.get((node, name), []), key=lambda r: r.resource_id)
        resources = snapshot.node_resources.get(node)
        capacity = None if resources is None else resources.capacity.get(name, 0)
        allocatable = None if resources is None else resources.allocatable.get(name, 0)
        reasons = {r.resource_id: reason(r) for r in rows}
        busy = [r for r in rows if r.allocated]
        down = [r for r in rows if not r.allocated and reasons[r.resource_id]]
        free = [r for r in rows if not r.allocated and not reasons[r.resource_id]]
        chosen = busy + down + free
        if capacity is not None:
            chosen = busy + (down + free)[: max(0, capacity - len(busy))]
        units = [
            CapacityDevice(
                node=node,
                device_id=r.resource_id,
                device_class=name,
                namespaces=tuple(sorted({ns for ns, _ in r.pods})),
            )
            for r in chosen
        ]
        for r in chosen:
            why = reasons[r.resource_id]
            if why and not r.allocated:
                unavailable[(node, r.resource_id)] = why
        if capacity is not None:
            units += [
                CapacityDevice(node=node, device_id=f"{name}#unseen-{i}", device_class=name)
                for i in range(1, capacity - len(units) + 1)
            ]
            assert allocatable is not None
            lost = max(0, capacity - allocatable)
            already = sum(
                1 for u in units if not u.allocated and (node, u.device_id) in unavailable
            )
            if lost > already:
                idle = [
                    u for u in units if not u.allocated and (node, u.device_id) not in unavailable
                ]
                for unit in idle[-(lost - already) :]:  # placeholders (never reported) first
                    unavailable[(node, unit.device_id)] = PLUGIN_LOST
        result.extend(units)
    return result


def capacity_devices(
    snapshot: Snapshot, directory: Sequence[InventoryDevice] | None = None
) -> tuple[list[CapacityDevice], dict[tuple[str, str], str]]:
    """Every device with a node: DRA devices of node-scoped slices
    (:meth:`InventoryState.dra_capacity_devices`) and device-plugin capacity
    (:func:`_plugin_capacity_devices`), with the reason of each unavailable one by
    ``(node, device_id)``: quarantined, recovering, restricted, deferred, observed Unhealthy,
    tainted NoSchedule/NoExecute, or lost by the plugin."""
    listed = build_directory(snapshot) if directory is None else directory
    by_key = {(d.node, d.device_id): d for d in listed if d.node}
    unavailable: dict[tuple[str, str], str] = {}
    dra = snapshot.inventory.dra_capacity_devices()
    for device in dra:
        entry = by_key.get((device.node, device.device_id))
        if entry is not None and entry.unavailable:
            unavailable[(device.node, device.device_id)] = entry.unavailable
    plugin = _plugin_capacity_devices(snapshot, by_key, effective_identities(snapshot), unavailable)
    return [*dra, *plugin], unavailable


def build_capacity(
    snapshot: Snapshot,
    configured_request_size: int = 0,
    directory: Sequence[InventoryDevice] | None = None,
) -> CapacityReport:
    """Capacity views over :func:`capacity_devices`: an allocated device counts as allocated
    whatever its state, and a quarantined one is never idle."""
    listed, unavailable = capacity_devices(snapshot, directory)
    size, source = request_size(snapshot, configured_request_size)
    return CapacityReport(capacity_views(listed, unavailable, size), size, source, unavailable)
