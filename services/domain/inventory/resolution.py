"""What resolving DRA identities needs so that the result does not depend on the order in which
the health topic's partitions are read (issue 10, part 2).

A CDI-form resourceID resolves through a ResourceClaim (:func:`.identity.dra_identity`), and the
claim's records are not in the Pod's partition: an unallocated claim is keyed
``claim:<ns>/<name>``, an allocated one by its node (or ``claim:...`` again when no single node
holds it, :func:`.events.record_key`). Whether the worker read the claim before or after the Pod's
observation is an accident of the interleaving, so what the inventory knows is kept in a form whose
end state is the same for every interleaving that keeps each partition's order:

- **objects by resourceVersion**: a record of an object is folded only when its resourceVersion is
  not older than the last one folded for that object, a deletion included (:attr:`versions`); an older
  form read later from another partition changes nothing. A record without a resourceVersion
  always applies (a watcher never sends one; tests may);
- **allocations are remembered**: per claim ``(namespace, name)`` and claim UID, the allocated
  form with the highest resourceVersion ever read (:attr:`allocations`), kept after the claim is
  deallocated or deleted: the claim UID is part of a CDI-form ID, so the mapping of that ID to a
  device is a fact that does not expire, and a Pod's observation read after its claim's deletion
  resolves as one read before it;
- **UUIDs are remembered**: per ``driver/pool/device``, the ``uuid`` attribute of the slice record
  with the highest resourceVersion that published one (:attr:`uuids`);
- **aliases remember what they were reported with** (:attr:`inputs`: the namespace and the
  :class:`~services.domain.events.ClaimRef` of the latest observation of the alias that named a
  ResourceClaim), indexed by claim (:meth:`aliases_of_claim`) and by device
  (:meth:`aliases_of_device`), so that a claim or a slice read later re-resolves them.

Everything here is a function of the set of records read (a maximum by resourceVersion, or the
latest record of one partition), never of their interleaving. It grows with the claims and
devices ever seen, as the aliases themselves do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar

from services.domain.events import ClaimRef
from services.domain.inventory.events import InventoryObserved
from services.domain.inventory.objects import (
    DeviceClassInfo,
    ResourceClaimInfo,
    ResourceSliceInfo,
)

Alias = tuple[str, str]
"""``(node, resourceID)``: a reported device."""
ClaimKey = tuple[str, str]
"""``(namespace, name)`` of a ResourceClaim."""
K = TypeVar("K")
ObjectId = tuple[str, ...]
"""An object's identity across its records: ``("slice", driver, pool, name)``,
``("claim", namespace, name)`` or ``("class", name)``."""


def object_id(obj: ResourceSliceInfo | ResourceClaimInfo | DeviceClassInfo) -> ObjectId:
    """The identity of an object across its records (see :data:`ObjectId`)."""
    if isinstance(obj, ResourceSliceInfo):
        return ("slice", obj.driver, obj.pool, obj.name)
    if isinstance(obj, ResourceClaimInfo):
        return ("claim", obj.namespace, obj.name)
    return ("class", obj.name)


@dataclass(frozen=True, slots=True)
class AliasInput:
    """What an alias was last reported with: the Pod's namespace and the claim it named."""

    namespace: str
    claim: ClaimRef

    @property
    def claim_key(self) -> ClaimKey:
        assert self.claim.resource_claim_name is not None
        return (self.namespace, self.claim.resource_claim_name)


@dataclass(slots=True)
class Resolutions:
    """The order-independent knowledge of the identity fold (see the module docstring)."""

    versions: dict[ObjectId, int] = field(default_factory=dict)
    allocations: dict[ClaimKey, dict[str, ResourceClaimInfo]] = field(default_factory=dict)
    uuids: dict[str, tuple[int, str]] = field(default_factory=dict)
    """``driver/pool/device`` -> (resourceVersion of the slice record, uuid)."""
    inputs: dict[Alias, AliasInput] = field(default_factory=dict)
    _by_claim: dict[ClaimKey, set[Alias]] = field(default_factory=dict, repr=False, compare=False)
    _by_device: dict[str, set[Alias]] = field(default_factory=dict, repr=False, compare=False)

    # -- objects -------------------------------------------------------------------------------

    def stale(self, event: InventoryObserved) -> bool:
        """Whether ``event`` is older than a record of its object already folded (the same
        resourceVersion is the same object: it applies again, changing nothing)."""
        version = event.obj.resource_version
        held = self.versions.get(object_id(event.obj))
        return version is not None and held is not None and version < held

    def learn(self, event: InventoryObserved) -> bool:
        """Remember what ``event`` says (its version, a claim's allocation, a slice's UUIDs), stale
        or not; returns whether an allocation or a UUID changed."""
        return self.learn_object(event.obj, event.deleted)

    def learn_object(
        self, obj: ResourceSliceInfo | ResourceClaimInfo | DeviceClassInfo, deleted: bool
    ) -> bool:
        """:meth:`learn` of an object read back from storage (its latest record, or tombstone)."""
        version = obj.resource_version
        key = object_id(obj)
        held = self.versions.get(key)
        if version is not None and (held is None or version >= held):
            self.versions[key] = version
        if isinstance(obj, ResourceClaimInfo):
            return self.learn_allocation(obj)
        if isinstance(obj, ResourceSliceInfo) and not deleted:
            return self.learn_uuids(obj)
        return False

    def learn_allocation(self, claim: ResourceClaimInfo) -> bool:
        """Keep ``claim`` as its UID's allocation when it is allocated and not older than the one
        kept; returns whether it changed."""
        if not claim.results:
            return False
        by_uid = self.allocations.setdefault((claim.namespace, claim.name), {})
        held = by_uid.get(claim.uid)
        if held is not None and (_rank(held) > _rank(claim) or held == claim):
            return False
        by_uid[claim.uid] = claim
        return True

    def learn_uuids(self, resource_slice: ResourceSliceInfo) -> bool:
        """Keep the UUIDs ``resource_slice`` publishes where it is the newest record to publish
        one for the device; returns whether a UUID changed."""
        rank = _rank(resource_slice)
        changed = False
        prefix = f"{resource_slice.driver}/{resource_slice.pool}/"
        for device in resource_slice.devices:
            if device.uuid is None:
                continue
            device_id = prefix + device.name
            held = self.uuids.get(device_id)
            if held is None or (rank >= held[0] and held[1] != device.uuid):
                self.uuids[device_id] = (rank, device.uuid)
                changed = True
        return changed

    def uuid(self, device_id: str) -> str | None:
        held = self.uuids.get(device_id)
        return None if held is None else held[1]

    def allocation(
        self, key: ClaimKey, resource_id: str, current: ResourceClaimInfo | None
    ) -> ResourceClaimInfo | None:
        """The claim form to resolve ``resource_id`` through: the allocation of the claim UID the
        ID names, else the newest allocation of the claim, else ``current`` (the claim as held:
        unallocated, or ``None`` when not seen)."""
        by_uid = self.allocations.get(key)
        if not by_uid:
            return current
        for uid in sorted(by_uid):
            if f"{uid}-" in resource_id:
                return by_uid[uid]
        return max(by_uid.values(), key=lambda c: (_rank(c), c.uid))

    # -- aliases -------------------------------------------------------------------------------

    def remember(self, alias: Alias, namespace: str, claim: ClaimRef | None) -> None:
        """Record what ``alias`` was reported with (only an observation naming a claim counts)."""
        if claim is None or claim.resource_claim_name is None:
            return
        new = AliasInput(namespace, claim)
        old = self.inputs.get(alias)
        if old == new:
            return
        if old is not None:
            _unindex(self._by_claim, old.claim_key, alias)
        self.inputs[alias] = new
        self._by_claim.setdefault(new.claim_key, set()).add(alias)

    def file_device(self, alias: Alias, old: str | None, new: str | None) -> None:
        """Move ``alias`` from device ``old`` to ``new`` in the device index."""
        if old == new:
            return
        if old is not None:
            _unindex(self._by_device, old, alias)
        if new is not None:
            self._by_device.setdefault(new, set()).add(alias)

    def forget(self, alias: Alias, device: str | None) -> None:
        """Drop what ``alias`` was reported with and its place under ``device`` (retention:
        :mod:`.expiry`)."""
        old = self.inputs.pop(alias, None)
        if old is not None:
            _unindex(self._by_claim, old.claim_key, alias)
        if device is not None:
            _unindex(self._by_device, device, alias)

    def aliases_of_claim(self, key: ClaimKey) -> list[Alias]:
        """Aliases last reported with claim ``key``, sorted."""
        return sorted(self._by_claim.get(key, ()))

    def aliases_of_device(self, device_id: str) -> list[Alias]:
        """DRA aliases whose identity is ``device_id``, sorted."""
        return sorted(self._by_device.get(device_id, ()))

    def reindex(self, devices: dict[Alias, str]) -> None:
        """Rebuild the indexes from :attr:`inputs` and ``devices`` (alias -> the device_id of its
        DRA identity), after a load from storage."""
        self._by_claim = {}
        for alias, given in self.inputs.items():
            self._by_claim.setdefault(given.claim_key, set()).add(alias)
        self._by_device = {}
        for alias, device_id in devices.items():
            self._by_device.setdefault(device_id, set()).add(alias)


def _unindex(index: dict[K, set[Alias]], key: K, alias: Alias) -> None:
    held = index.get(key)
    if held is not None:
        held.discard(alias)
        if not held:
            del index[key]


def _rank(obj: ResourceClaimInfo | ResourceSliceInfo) -> int:
    return -1 if obj.resource_version is None else obj.resource_version
