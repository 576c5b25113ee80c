"""The inventory as a pure fold: DRA objects, node capacities and resolved identities, with the
conflicts issue 4 asks to flag (never merge silently):

- ``ambiguous-resource-id``: a reported resourceID could be several devices;
- ``resource-id-reused``: one resourceID on a node resolved to two different devices;
- ``plugin-and-dra``: a node offers one extended resource through both a device plugin (Node
  capacity) and DRA (a DeviceClass with that ``extendedResourceName`` whose driver publishes on the
  node), or one physical GPU (same UUID) is reported by both (KEP-5004: never both);
- ``vanished-from-slice``: a device left its ResourceSlice.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from services.domain.events import DeviceHealthObserved, DeviceSource
from services.domain.inventory.capacity import CapacityDevice
from services.domain.inventory.events import InventoryObserved
from services.domain.inventory.identity import (
    Identity,
    IdentityStatus,
    dra_identity,
    plugin_identity,
)
from services.domain.inventory.objects import (
    DeviceClassInfo,
    ResourceClaimInfo,
    ResourceSliceInfo,
)


class ConflictKind(StrEnum):
    AMBIGUOUS_RESOURCE_ID = "ambiguous-resource-id"
    RESOURCE_ID_REUSED = "resource-id-reused"
    PLUGIN_AND_DRA = "plugin-and-dra"
    VANISHED = "vanished-from-slice"


@dataclass(frozen=True, slots=True, order=True)
class Conflict:
    """A data-quality finding: what, where, about which device or resource, and why."""

    kind: ConflictKind
    node: str
    subject: str
    detail: str


@dataclass(slots=True)
class InventoryState:
    """Everything the inventory knows (mutable; one owner)."""

    slices: dict[tuple[str, str, str], ResourceSliceInfo] = field(default_factory=dict)
    claims: dict[tuple[str, str], ResourceClaimInfo] = field(default_factory=dict)
    classes: dict[str, DeviceClassInfo] = field(default_factory=dict)
    node_capacity: dict[str, dict[str, int]] = field(default_factory=dict)
    aliases: dict[tuple[str, str], Identity] = field(default_factory=dict)

    def slice_index(self) -> dict[tuple[str, str], list[ResourceSliceInfo]]:
        """``(driver, pool)`` -> slices, for :func:`~.identity.dra_identity`."""
        index: dict[tuple[str, str], list[ResourceSliceInfo]] = defaultdict(list)
        for (driver, pool, _), resource_slice in sorted(self.slices.items()):
            index[(driver, pool)].append(resource_slice)
        return index

    def apply(self, event: InventoryObserved) -> list[Conflict]:
        """Apply one inventory event; returns the devices that vanished from a slice."""
        obj = event.obj
        if isinstance(obj, ResourceSliceInfo):
            key = (obj.driver, obj.pool, obj.name)
            old = self.slices.get(key)
            if event.deleted:
                self.slices.pop(key, None)
            else:
                self.slices[key] = obj
            before = {d.name for d in old.devices} if old else set()
            after = set() if event.deleted else {d.name for d in obj.devices}
            allocated = {r.device_id for c in self.claims.values() for r in c.results}
            return [
                Conflict(
                    ConflictKind.VANISHED,
                    obj.node or f"pool:{obj.driver}/{obj.pool}",
                    f"{obj.driver}/{obj.pool}/{name}",
                    f"device left ResourceSlice {obj.name}"
                    + (
                        " while allocated" if f"{obj.driver}/{obj.pool}/{name}" in allocated else ""
                    ),
                )
                for name in sorted(before - after)
            ]
        if isinstance(obj, ResourceClaimInfo):
            if event.deleted:
                self.claims.pop((obj.namespace, obj.name), None)
            else:
                self.claims[(obj.namespace, obj.name)] = obj
            return []
        if event.deleted:
            self.classes.pop(obj.name, None)
        else:
            self.classes[obj.name] = obj
        return []

    def set_capacity(self, node: str, capacity: Iterable[tuple[str, int]]) -> None:
        """A Node's extended-resource capacity (from ``NodeResourcesChanged``)."""
        self.node_capacity[node] = dict(capacity)

    def resolve(self, event: DeviceHealthObserved) -> tuple[Identity, list[Conflict]]:
        """The physical identity of an observation, remembered as an alias, and any conflict."""
        if event.source is DeviceSource.DEVICE_PLUGIN:
            identity = plugin_identity(event.resource_id)
        else:
            identity = dra_identity(
                event.resource_id, event.namespace, event.claim, self.claims, self.slice_index()
            )
        conflicts: list[Conflict] = []
        if identity.status is IdentityStatus.AMBIGUOUS:
            conflicts.append(
                Conflict(
                    ConflictKind.AMBIGUOUS_RESOURCE_ID,
                    event.node,
                    event.resource_id,
                    identity.reason or "ambiguous",
                )
            )
        alias = (event.node, event.resource_id)
        previous = self.aliases.get(alias)
        if (
            previous is not None
            and previous.status is not IdentityStatus.UNRESOLVED
            and identity.status is not IdentityStatus.UNRESOLVED
            and previous.device_id != identity.device_id
            and previous.status is not IdentityStatus.AMBIGUOUS
            and identity.status is not IdentityStatus.AMBIGUOUS
        ):
            conflicts.append(
                Conflict(
                    ConflictKind.RESOURCE_ID_REUSED,
                    event.node,
                    event.resource_id,
                    f"reported for {previous.device_id} and for {identity.device_id}",
                )
            )
        if identity.status is not IdentityStatus.UNRESOLVED or previous is None:
            self.aliases[alias] = identity
        return identity, conflicts

    def ownership_conflicts(self) -> list[Conflict]:
        """Nodes where a device plugin and DRA both offer a resource or a GPU (KEP-5004)."""
        found: set[Conflict] = set()
        drivers_on_node: dict[str, set[str]] = defaultdict(set)
        uuids_on_node: dict[str, dict[str, str]] = defaultdict(dict)
        for resource_slice in self.slices.values():
            if resource_slice.node:
                drivers_on_node[resource_slice.node].add(resource_slice.driver)
                for device in resource_slice.devices:
                    if device.uuid:
                        uuids_on_node[resource_slice.node][device.uuid] = (
                            f"{resource_slice.driver}/{resource_slice.pool}/{device.name}"
                        )
        for device_class in self.classes.values():
            resource = device_class.extended_resource_name
            if resource is None:
                continue
            for node, drivers in drivers_on_node.items():
                if (
                    drivers & set(device_class.drivers)
                    and self.node_capacity.get(node, {}).get(resource, 0) > 0
                ):
                    found.add(
                        Conflict(
                            ConflictKind.PLUGIN_AND_DRA,
                            node,
                            resource,
                            f"{resource} is in the Node's capacity (device plugin) and backed by "
                            f"DRA through DeviceClass {device_class.name}",
                        )
                    )
        for (node, resource_id), identity in self.aliases.items():
            if identity.owner is DeviceSource.DEVICE_PLUGIN and identity.uuid:
                dra_device = uuids_on_node.get(node, {}).get(identity.uuid)
                if dra_device is not None:
                    found.add(
                        Conflict(
                            ConflictKind.PLUGIN_AND_DRA,
                            node,
                            identity.uuid,
                            f"GPU {identity.uuid} is reported by a device plugin ({resource_id}) "
                            f"and published by DRA as {dra_device}",
                        )
                    )
        return sorted(found)

    def dra_capacity_devices(self) -> list[CapacityDevice]:
        """Every DRA device of every slice on a node (idle ones included), with the DeviceClass
        that selects its driver and the namespaces of the claims holding it."""
        holders: dict[str, set[str]] = defaultdict(set)
        for claim in self.claims.values():
            for result in claim.results:
                holders[result.device_id].add(claim.namespace)
        classes_by_driver: dict[str, str] = {}
        for device_class in sorted(self.classes.values(), key=lambda c: c.name):
            for driver in device_class.drivers:
                classes_by_driver.setdefault(driver, device_class.name)
        devices = []
        for (driver, pool, _), resource_slice in sorted(self.slices.items()):
            if not resource_slice.node:
                continue
            for device in resource_slice.devices:
                device_id = f"{driver}/{pool}/{device.name}"
                devices.append(
                    CapacityDevice(
                        node=resource_slice.node,
                        device_id=device_id,
                        device_class=classes_by_driver.get(driver, driver),
                        pool=f"{driver}/{pool}",
                        namespaces=tuple(sorted(holders.get(device_id, ()))),
                    )
                )
        return devices
