"""Capacity views (issue 4, item 3): per node, pool, DeviceClass and namespace.

Inputs are plain records so the function is pure: every known device (:class:`CapacityDevice`,
idle ones included), which of them are unavailable (quarantined, restricted, Unhealthy: from the
governance state) and the common request size. Quarantined devices never count as idle: capacity
views exclude them (issue 4, item 5c).

- ``total``: devices known; ``allocated``: held by a ResourceClaim or a Pod;
- ``unavailable``: not allocated and not usable (quarantined, restricted, Unhealthy...);
- ``idle``: neither allocated nor unavailable;
- ``fragmented``: idle devices on a node whose idle count (for that class) is below the common
  request size, so no request of that size fits there.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CapacityDevice:
    """One device for the capacity views.

    ``pool`` is ``<driver>/<pool>`` for DRA devices and ``None`` for device-plugin ones;
    ``device_class`` is the DeviceClass (DRA) or extended resource name (device plugin);
    ``namespaces`` are those of the claims/Pods holding it (empty: not allocated).
    """

    node: str
    device_id: str
    device_class: str
    pool: str | None = None
    namespaces: tuple[str, ...] = ()

    @property
    def allocated(self) -> bool:
        return bool(self.namespaces)


@dataclass(frozen=True, slots=True)
class CapacityRow:
    """Counts for one key of one view."""

    view: str
    key: str
    total: int = 0
    allocated: int = 0
    idle: int = 0
    unavailable: int = 0
    fragmented: int = 0


VIEWS = ("node", "pool", "deviceClass", "namespace")


def common_request_size(request_counts: Iterable[int]) -> int:
    """The most frequent request size (ties: the smaller); 1 when there are none."""
    counts = Counter(c for c in request_counts if c > 0)
    if not counts:
        return 1
    return min(counts, key=lambda size: (-counts[size], size))


def capacity_views(
    devices: Iterable[CapacityDevice],
    unavailable: Mapping[tuple[str, str], str],
    request_size: int = 1,
) -> dict[str, list[CapacityRow]]:
    """Rows per view, sorted by key. ``unavailable`` maps ``(node, device_id)`` to the reason."""
    listed = sorted(devices, key=lambda d: (d.node, d.device_id))
    idle_per_node_class: Counter[tuple[str, str]] = Counter()
    for device in listed:
        if not device.allocated and (device.node, device.device_id) not in unavailable:
            idle_per_node_class[(device.node, device.device_class)] += 1
    tallies: dict[str, dict[str, Counter[str]]] = {v: defaultdict(Counter) for v in VIEWS}
    for device in listed:
        busy = device.allocated
        down = not busy and (device.node, device.device_id) in unavailable
        idle = not busy and not down
        fragmented = idle and idle_per_node_class[(device.node, device.device_class)] < request_size
        keys = {
            "node": [device.node],
            "pool": [device.pool] if device.pool else [],
            "deviceClass": [device.device_class],
            "namespace": sorted(set(device.namespaces)),
        }
        for view, names in keys.items():
            for name in names:
                tally = tallies[view][name]
                tally["total"] += 1
                tally["allocated"] += busy
                tally["unavailable"] += down
                tally["idle"] += idle
                tally["fragmented"] += fragmented
    return {
        view: [
            CapacityRow(
                view,
                key,
                tally["total"],
                tally["allocated"],
                tally["idle"],
                tally["unavailable"],
                tally["fragmented"],
            )
            for key, tally in sorted(tallies[view].items())
        ]
        for view in VIEWS
    }
