"""The reconcile check (issue 4, item 5c): ResourceSlices against Node capacity, per node and
extended resource named by a DeviceClass's ``extendedResourceName``. Pure, over a
:class:`~.snapshot.Snapshot`.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

from services.domain.inventory.snapshot import Snapshot


@dataclass(frozen=True, slots=True)
class Divergence:
    """Per node and extended resource named by a DeviceClass's ``extendedResourceName``: the
    devices that node's ResourceSlices advertise through the class's drivers, and what the Node
    exposes (``node_resources``). ``status``: ``match``/``mismatch`` when both sides offer it,
    ``dra-only`` or ``plugin-only`` when one side does (KEP-5004: an extended resource served by
    DRA does not appear in Node capacity, so a DRA-only node is not a divergence)."""

    node: str
    resource_name: str
    slice_devices: int
    node_capacity: int
    node_allocatable: int
    device_classes: tuple[str, ...]

    @property
    def difference(self) -> int:
        return self.slice_devices - self.node_capacity

    @property
    def status(self) -> str:
        if self.slice_devices and self.node_capacity:
            return "match" if self.difference == 0 else "mismatch"
        return "dra-only" if self.slice_devices else "plugin-only"

    @property
    def both_sides(self) -> bool:
        return bool(self.slice_devices and self.node_capacity)


def divergence(snapshot: Snapshot) -> list[Divergence]:
    """The reconcile check, sorted by (node, resource)."""
    drivers_of: dict[str, set[str]] = defaultdict(set)
    classes_of: dict[str, set[str]] = defaultdict(set)
    for device_class in snapshot.inventory.classes.values():
        if device_class.extended_resource_name:
            drivers_of[device_class.extended_resource_name].update(device_class.drivers)
            classes_of[device_class.extended_resource_name].add(device_class.name)
    if not drivers_of:
        return []
    advertised: Counter[tuple[str, str]] = Counter()
    for resource_slice in snapshot.inventory.slices.values():
        if not resource_slice.node:
            continue
        for resource, drivers in drivers_of.items():
            if resource_slice.driver in drivers:
                advertised[(resource_slice.node, resource)] += len(resource_slice.devices)
    keys = {k for k, n in advertised.items() if n > 0}
    for node, resources in snapshot.node_resources.items():
        for resource in drivers_of:
            if resources.capacity.get(resource, 0) > 0:
                keys.add((node, resource))
    rows = []
    for node, resource in sorted(keys):
        counts = snapshot.node_resources.get(node)
        rows.append(
            Divergence(
                node=node,
                resource_name=resource,
                slice_devices=advertised[(node, resource)],
                node_capacity=0 if counts is None else counts.capacity.get(resource, 0),
                node_allocatable=0 if counts is None else counts.allocatable.get(resource, 0),
                device_classes=tuple(sorted(classes_of[resource])),
            )
        )
    return rows
