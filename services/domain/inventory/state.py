"""The inventory as a pure fold: DRA objects, node capacities and resolved identities, with the
conflicts issue 4 asks to flag (never merge silently):

- ``ambiguous-resource-id``: a reported resourceID could be several devices;
- ``resource-id-reused``: one resourceID on a node resolved to two different devices;
- ``plugin-and-dra``: a node offers one extended resource through both a device plugin (Node
  capacity) and DRA (a DeviceClass with that ``extendedResourceName`` whose driver publishes on the
  node), or one physical GPU (same UUID) is reported by both (KEP-5004: never both);
- ``vanished-from-slice``: a device left its ResourceSlice.

The state keeps indexes beside its dicts (the slices of each pool, the slices and aliases of each
node), so that resolving an observation and checking one node's ownership cost what that pool or
node holds, not the whole fleet. They follow :meth:`InventoryState.apply`,
:meth:`~InventoryState.resolve` and :meth:`~InventoryState.set_capacity`; after filling the dicts
directly (a load from storage), call :meth:`~InventoryState.reindex`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum

from services.domain.events import ClaimRef, DeviceHealthObserved, DeviceSource
from services.domain.inventory.capacity import CapacityDevice
from services.domain.inventory.events import InventoryObserved
from services.domain.inventory.identity import (
    ClaimIndex,
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
from services.domain.inventory.resolution import Alias, Resolutions

_DRA = DeviceSource.DRA
_PHYSICAL = (IdentityStatus.RESOLVED, IdentityStatus.REPORTED)


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


SliceKey = tuple[str, str, str]
"""``(driver, pool, slice name)``."""

IdentityChange = tuple[Alias, Identity | None, Identity]
"""``(alias, identity before, identity after)`` of an alias a DRA object re-resolved."""


@dataclass(slots=True)
class InventoryState:
    """Everything the inventory knows (mutable; one owner)."""

    slices: dict[SliceKey, ResourceSliceInfo] = field(default_factory=dict)
    claims: dict[tuple[str, str], ResourceClaimInfo] = field(default_factory=dict)
    classes: dict[str, DeviceClassInfo] = field(default_factory=dict)
    node_capacity: dict[str, dict[str, int]] = field(default_factory=dict)
    aliases: dict[tuple[str, str], Identity] = field(default_factory=dict)
    first_seen: dict[tuple[str, str], datetime] = field(default_factory=dict)
    """Event time of each alias's first observation (``device_identities.observed_at``)."""
    resolutions: Resolutions = field(default_factory=Resolutions)
    """Versions, allocations, UUIDs and alias inputs: what keeps the fold order-independent."""
    # Indexes (see the module docstring): pool -> its slices sorted by name; node -> the keys of
    # its slices; node -> the resourceIDs it has aliases for.
    _pools: dict[tuple[str, str], list[ResourceSliceInfo]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _node_slices: dict[str, set[SliceKey]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _node_aliases: dict[str, set[str]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        self.reindex()

    def reindex(self) -> None:
        """Rebuild the indexes from the dicts (after changing them other than through the
        methods)."""
        self._pools = {}
        self._node_slices = {}
        self._node_aliases = {}
        for key, resource_slice in sorted(self.slices.items()):
            self._pools.setdefault(key[:2], []).append(resource_slice)
            if resource_slice.node:
                self._node_slices.setdefault(resource_slice.node, set()).add(key)
        for node, resource_id in self.aliases:
            self._node_aliases.setdefault(node, set()).add(resource_id)
        self.resolutions.reindex(
            {
                alias: identity.device_id
                for alias, identity in self.aliases.items()
                if identity.owner is _DRA and identity.status in _PHYSICAL
            }
        )

    def slice_index(self) -> Mapping[tuple[str, str], list[ResourceSliceInfo]]:
        """``(driver, pool)`` -> slices (sorted by name), for :func:`~.identity.dra_identity`.
        The state's own index: read it, do not change it."""
        return self._pools

    def has_slices(self, node: str) -> bool:
        """Whether ``node`` has a ResourceSlice (no slice: no DRA ownership on it)."""
        return node in self._node_slices

    def nodes(self) -> list[str]:
        """Nodes with at least one ResourceSlice, sorted."""
        return sorted(self._node_slices)

    def nodes_with_drivers(self, drivers: Iterable[str]) -> set[str]:
        """Nodes with a ResourceSlice of one of ``drivers``."""
        wanted = set(drivers)
        if not wanted:
            return set()
        return {
            node
            for node, keys in self._node_slices.items()
            if any(key[0] in wanted for key in keys)
        }

    def _put_slice(self, key: SliceKey, new: ResourceSliceInfo | None) -> None:
        """Set (``new``) or remove (``None``) one slice, keeping the indexes."""
        old = self.slices.pop(key, None)
        if old is not None and old.node:
            held = self._node_slices.get(old.node)
            if held is not None:
                held.discard(key)
                if not held:
                    del self._node_slices[old.node]
        pool = [s for s in self._pools.get(key[:2], ()) if s.name != key[2]]
        if new is not None:
            self.slices[key] = new
            pool.append(new)
            pool.sort(key=lambda s: s.name)
            if new.node:
                self._node_slices.setdefault(new.node, set()).add(key)
        if pool:
            self._pools[key[:2]] = pool
        else:
            self._pools.pop(key[:2], None)

    def apply(self, event: InventoryObserved) -> list[Conflict]:
        """Apply one inventory event; returns the devices that vanished from a slice.

        An event older than the last one folded for its object (by resourceVersion, a deletion
        included: :meth:`Resolutions.stale`) changes no object, only what the resolutions learn
        from it (a claim's allocation, a slice's UUIDs)."""
        stale = self.resolutions.stale(event)
        self.resolutions.learn(event)
        if stale:
            return []
        obj = event.obj
        if isinstance(obj, ResourceSliceInfo):
            key = (obj.driver, obj.pool, obj.name)
            old = self.slices.get(key)
            self._put_slice(key, None if event.deleted else obj)
            before = {d.name for d in old.devices} if old else set()
            after = set() if event.deleted else {d.name for d in obj.devices}
            vanished = sorted(before - after)
            if not vanished:
                return []
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
                for name in vanished
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
        """The physical identity of an observation, remembered as an alias, and any conflict.

        A DRA observation resolves through the claim the alias was last reported with
        (:meth:`Resolutions.remember`) and what the resolutions know, so the alias reads the same
        whether its claim came before or after it (:meth:`reresolve`). The alias keeps its
        identity when this one is unresolved."""
        alias = (event.node, event.resource_id)
        self.first_seen.setdefault(alias, event.observed_at)
        if event.source is DeviceSource.DEVICE_PLUGIN:
            identity = plugin_identity(event.resource_id)
        else:
            self.resolutions.remember(alias, event.namespace, event.claim)
            identity = self._dra_identity(alias, event.namespace, event.claim)
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
            self._set_alias(alias, previous, identity)
        return identity, conflicts

    def reresolve(self, event: InventoryObserved) -> list[IdentityChange]:
        """Resolve again the aliases a DRA object can change (a claim: those last reported with
        it; a slice: those of its devices, for their UUIDs), after :meth:`apply`; returns the
        aliases whose identity changed, sorted. An unresolved result keeps the alias as it is."""
        obj = event.obj
        if isinstance(obj, ResourceClaimInfo):
            aliases = self.resolutions.aliases_of_claim((obj.namespace, obj.name))
        elif isinstance(obj, ResourceSliceInfo) and not event.deleted:
            prefix = f"{obj.driver}/{obj.pool}/"
            aliases = sorted(
                {
                    a
                    for d in obj.devices
                    for a in self.resolutions.aliases_of_device(prefix + d.name)
                }
            )
        else:
            return []
        changes: list[IdentityChange] = []
        for alias in aliases:
            before = self.aliases.get(alias)
            given = self.resolutions.inputs.get(alias)
            namespace, claim = ("", None) if given is None else (given.namespace, given.claim)
            after = self._dra_identity(alias, namespace, claim)
            if after == before or (
                after.status is IdentityStatus.UNRESOLVED
                and before is not None
                and before.status is not IdentityStatus.UNRESOLVED
            ):
                continue
            self._set_alias(alias, before, after)
            changes.append((alias, before, after))
        return changes

    def _dra_identity(self, alias: Alias, namespace: str, claim: ClaimRef | None) -> Identity:
        """:func:`~.identity.dra_identity` of ``alias`` through the claim it was last reported with
        (else ``claim``), resolved on the claim's remembered allocation, with the remembered UUID."""
        given = self.resolutions.inputs.get(alias)
        if given is not None:
            namespace, claim = given.namespace, given.claim
        claims: ClaimIndex = self.claims
        if claim is not None and claim.resource_claim_name is not None:
            key = (namespace, claim.resource_claim_name)
            chosen = self.resolutions.allocation(key, alias[1], self.claims.get(key))
            claims = {} if chosen is None else {key: chosen}
        identity = dra_identity(alias[1], namespace, claim, claims, self._pools)
        if identity.status in _PHYSICAL:
            uuid = self.resolutions.uuid(identity.device_id)
            if uuid is not None and uuid != identity.uuid:
                identity = replace(identity, uuid=uuid)
        return identity

    def _set_alias(self, alias: Alias, previous: Identity | None, identity: Identity) -> None:
        self.aliases[alias] = identity
        if previous is None:
            self._node_aliases.setdefault(alias[0], set()).add(alias[1])
        self.resolutions.file_device(alias, _indexed(previous), _indexed(identity))

    def forget(self, alias: Alias) -> None:
        """Drop ``alias`` as if it had never been observed (retention: :mod:`.expiry`)."""
        identity = self.aliases.pop(alias, None)
        self.first_seen.pop(alias, None)
        held = self._node_aliases.get(alias[0])
        if held is not None:
            held.discard(alias[1])
            if not held:
                del self._node_aliases[alias[0]]
        self.resolutions.forget(alias, _indexed(identity))

    def ownership_conflicts(self, nodes: Iterable[str] | None = None) -> list[Conflict]:
        """Nodes where a device plugin and DRA both offer a resource or a GPU (KEP-5004); only
        those of ``nodes`` when given (each node's findings depend on that node's slices,
        capacity and aliases, and on the DeviceClasses)."""
        found: set[Conflict] = set()
        wanted = self._node_slices if nodes is None else set(nodes)
        extended = [c for c in self.classes.values() if c.extended_resource_name is not None]
        for node in wanted:
            keys = self._node_slices.get(node)
            if not keys:
                continue
            drivers: set[str] = set()
            uuids: dict[str, str] = {}
            for key in keys:
                resource_slice = self.slices[key]
                drivers.add(resource_slice.driver)
                for device in resource_slice.devices:
                    if device.uuid:
                        uuids[device.uuid] = (
                            f"{resource_slice.driver}/{resource_slice.pool}/{device.name}"
                        )
            capacity = self.node_capacity.get(node, {})
            for device_class in extended:
                resource = device_class.extended_resource_name
                assert resource is not None
                if drivers & set(device_class.drivers) and capacity.get(resource, 0) > 0:
                    found.add(
                        Conflict(
                            ConflictKind.PLUGIN_AND_DRA,
                            node,
                            resource,
                            f"{resource} is in the Node's capacity (device plugin) and backed by "
                            f"DRA through DeviceClass {device_class.name}",
                        )
                    )
            for resource_id in self._node_aliases.get(node, ()):
                identity = self.aliases[(node, resource_id)]
                if identity.owner is DeviceSource.DEVICE_PLUGIN and identity.uuid:
                    dra_device = uuids.get(identity.uuid)
                    if dra_device is not None:
                        found.add(
                            Conflict(
                                ConflictKind.PLUGIN_AND_DRA,
                                node,
                                identity.uuid,
                                f"GPU {identity.uuid} is reported by a device plugin "
                                f"({resource_id}) and published by DRA as {dra_device}",
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


def _indexed(identity: Identity | None) -> str | None:
    """The device an alias is filed under in :class:`Resolutions`' device index, if any."""
    if identity is None or identity.owner is not _DRA or identity.status not in _PHYSICAL:
        return None
    return identity.device_id
