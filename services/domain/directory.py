"""The device directory as a pure fold over the event log.

``apply_event(devices, event)`` is the only place that decides what an event does to the
directory; the PostgreSQL projection (``services/adapters/projection``), the replay and the property tests
all call it, so incremental processing, batched processing and replay agree by construction.
No wall clock: every time comes from the events.

Ordering rule (the dedup key is ``(node, resourceID, statusVersion)``): an observation is applied
only when its statusVersion is greater than the device's; an equal one is a duplicate, a smaller
one is stale. An unordered observation (no comparable resourceVersion) ranks 0: it may create a
device but never overwrites one (see ``../shared/examples/stream-10`` lines 15-16).

Releases (issue 11 item 7): a ``PodDevicesReleased`` removes the Pod's allocations on its node; a
``PodsListed`` snapshot removes those of the Pods on its node (in its UID range) it does not list,
observed at or before the LIST. Both leave a tombstone per released Pod UID
(:mod:`services.domain.tombstones`, :func:`tombstones_of`): an applied observation the Pod's
tombstone covers (older than the release) still sets the device's health, as any observation of
the device at that version does, but adds no allocation back (``Change.tombstoned``). Keeping the
device's version rule untouched keeps the worker's early dedup (a rank per device) exact.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum

from services.domain.events import (
    ClaimRef,
    ContainerRef,
    DeviceHealthObserved,
    DeviceSource,
    Event,
    Health,
    PodDevicesReleased,
    PodsListed,
)
from services.domain.tombstones import Tombstone, merged

DeviceKey = tuple[str, str]
"""``(node, resourceID)``."""


def version_rank(status_version: int | None) -> int:
    """Order of a statusVersion for the version guard: ``None`` (unordered) ranks lowest, as 0.

    KEP-5504 forbids ``"0"`` as a resourceVersion, so 0 cannot collide with a real one.
    """
    return 0 if status_version is None else status_version


@dataclass(frozen=True, slots=True, order=True)
class Allocation:
    """A Pod currently holding the device, as its latest applied observation said."""

    pod_uid: str
    namespace: str
    pod_name: str
    containers: tuple[ContainerRef, ...]
    claim: ClaimRef | None
    status_version: int | None


@dataclass(frozen=True, slots=True)
class DeviceRecord:
    """Current state of one device ``(node, resourceID)`` in the directory.

    ``status_version`` is the statusVersion of the observation that set ``health``;
    ``last_transition_at`` is the ``observedAt`` (UTC) of the observation that last changed
    ``health`` (the first observation counts as a transition). ``allocations`` are sorted by Pod UID.
    """

    node: str
    resource_id: str
    resource_name: str
    source: DeviceSource
    health: Health
    raw_health: str | None
    message: str | None
    status_version: int | None
    last_observed_at: datetime
    last_transition_at: datetime
    allocations: tuple[Allocation, ...]
    flags: tuple[str, ...]

    @property
    def key(self) -> DeviceKey:
        return (self.node, self.resource_id)

    @property
    def ordered(self) -> bool:
        """False while the device's state comes from an unordered observation."""
        return self.status_version is not None


class Outcome(StrEnum):
    """What an event did to one device."""

    APPLIED = "applied"  # an observation newer than the device's state
    DUPLICATE = "duplicate"  # same statusVersion as the device's state: a no-op
    STALE = "stale"  # older statusVersion than the device's state: a no-op
    RELEASED = "released"  # a Pod's allocation was removed (a release or a snapshot)
    FROZEN = "frozen"  # a frozen Healthy (terminated Pod): recorded in history, state unchanged


@dataclass(frozen=True, slots=True)
class Change:
    """The effect of one event on one device.

    ``record`` is the device's state after the event (unchanged for a no-op). ``transition`` is true
    when the observation changed the device's health (or created the device). ``tombstoned``: an
    applied observation of a released Pod (its tombstone covers it) whose allocation was not
    added back. ``released``: the allocations a release or snapshot removed.
    """

    key: DeviceKey
    outcome: Outcome
    record: DeviceRecord
    transition: bool = False
    tombstoned: bool = False
    released: tuple[Allocation, ...] = ()

    @property
    def changed(self) -> bool:
        return self.outcome in (Outcome.APPLIED, Outcome.RELEASED)


def _with_allocation(
    allocations: tuple[Allocation, ...], new: Allocation
) -> tuple[Allocation, ...]:
    if not allocations or (len(allocations) == 1 and allocations[0].pod_uid == new.pod_uid):
        return (new,)  # the usual cases (first sighting, the same Pod again), without sorting
    kept = [a for a in allocations if a.pod_uid != new.pod_uid]
    kept.append(new)
    return tuple(sorted(kept))


def allocation_of(event: DeviceHealthObserved) -> Allocation:
    """The allocation an applied observation gives the device (unless its Pod terminated or
    its tombstone covers it)."""
    return Allocation(
        pod_uid=event.pod_uid,
        namespace=event.namespace,
        pod_name=event.pod_name,
        containers=tuple(sorted(event.containers)),
        claim=event.claim,
        status_version=event.status_version,
    )


def same_allocation(a: DeviceHealthObserved, b: DeviceHealthObserved) -> bool:
    """Whether :func:`allocation_of` gives equal allocations for ``a`` and ``b``, told cheaply
    for observations of one Pod change decoded from one record (their containers and claim
    are the same objects, :class:`~services.domain.event_codec.SharedParts`); false when it
    cannot tell."""
    return (
        a.containers is b.containers
        and a.claim is b.claim
        and a.pod_uid == b.pod_uid
        and a.status_version == b.status_version
        and a.pod_name == b.pod_name
        and a.namespace == b.namespace
    )


def apply_observation(
    current: DeviceRecord | None,
    event: DeviceHealthObserved,
    tombstone: Tombstone | None = None,
    allocation: Allocation | None = None,
) -> Change:
    """Apply one observation to one device's state (``None``: the device is not known yet).

    ``tombstone``: the Pod's, when it was released; if it covers the observation, the device's
    allocations stay as they were (``Change.tombstoned``). An observation of a terminated Pod
    (``pod_terminated``) adds no allocation either: the Pod holds nothing any more. A
    :attr:`~services.domain.events.DeviceHealthObserved.frozen` Healthy of a known device leaves
    its state as it was (``Outcome.FROZEN``, recorded in history only, issue 15 item 2); of a
    device not known yet it creates it, as any first observation does. ``allocation``: the
    event's :func:`allocation_of` when the caller has it already (the devices of one Pod
    change share it), else computed here."""
    if current is not None:
        new_rank, old_rank = (
            version_rank(event.status_version),
            version_rank(current.status_version),
        )
        if new_rank == old_rank:
            return Change(current.key, Outcome.DUPLICATE, current)
        if new_rank < old_rank:
            return Change(current.key, Outcome.STALE, current)
        if event.frozen:
            return Change(current.key, Outcome.FROZEN, current)
    transition = current is None or current.health is not event.health
    previous_allocations = () if current is None else current.allocations
    tombstoned = tombstone is not None and tombstone.covers(event)
    allocations = (
        previous_allocations
        if tombstoned or event.pod_terminated
        else _with_allocation(
            previous_allocations, allocation_of(event) if allocation is None else allocation
        )
    )
    record = DeviceRecord(
        node=event.node,
        resource_id=event.resource_id,
        resource_name=event.resource_name,
        source=event.source,
        health=event.health,
        raw_health=event.raw_health,
        message=event.message,
        status_version=event.status_version,
        last_observed_at=event.observed_at,
        last_transition_at=event.observed_at
        if transition or current is None
        else current.last_transition_at,
        allocations=allocations,
        flags=event.flags,
    )
    return Change(record.key, Outcome.APPLIED, record, transition=transition, tombstoned=tombstoned)


def _released_by(allocation: Allocation, event: PodDevicesReleased) -> bool:
    if allocation.pod_uid != event.pod_uid:
        return False
    if event.status_version is None or allocation.status_version is None:
        return True
    # An allocation seen at a newer resourceVersion than the release belongs to a later Pod state.
    return allocation.status_version <= event.status_version


def apply_release(current: DeviceRecord, event: PodDevicesReleased) -> Change | None:
    """Remove the Pod's allocation from one device; ``None`` when the Pod did not hold it."""
    return _without(current, [a for a in current.allocations if _released_by(a, event)])


def _without(current: DeviceRecord, gone: list[Allocation]) -> Change | None:
    if not gone:
        return None
    dropped = {id(a) for a in gone}
    kept = tuple(a for a in current.allocations if id(a) not in dropped)
    return Change(
        current.key, Outcome.RELEASED, replace(current, allocations=kept), released=tuple(gone)
    )


def _vanished(allocation: Allocation, event: PodsListed) -> bool:
    """Whether the snapshot says the allocation's Pod was gone at the LIST: in its UID range, not
    listed, and observed at or before the LIST (unordered allocations count as before)."""
    if not event.covers(allocation.pod_uid) or event.lists(allocation.pod_uid):
        return False
    version = allocation.status_version
    return version is None or version <= version_rank(event.list_version)


def apply_snapshot(current: DeviceRecord, event: PodsListed) -> Change | None:
    """Remove from one device (on the snapshot's node) the allocations of the Pods the snapshot
    says vanished before its LIST; ``None`` when there are none. A snapshot without a
    comparable ``list_version`` cannot tell an older Pod from a newer one and releases nothing.
    """
    if event.list_version is None:
        return None
    return _without(current, [a for a in current.allocations if _vanished(a, event)])


def devices_held_by(
    devices: Mapping[DeviceKey, DeviceRecord], node: str, pod_uid: str
) -> list[DeviceRecord]:
    """Devices on ``node`` that list ``pod_uid`` among their allocations, sorted by key."""
    return sorted(
        (
            d
            for d in devices.values()
            if d.node == node and any(a.pod_uid == pod_uid for a in d.allocations)
        ),
        key=lambda d: d.key,
    )


_NO_TOMBSTONES: Mapping[str, Tombstone] = {}


def apply_event(
    devices: Mapping[DeviceKey, DeviceRecord],
    event: Event,
    tombstones: Mapping[str, Tombstone] = _NO_TOMBSTONES,
) -> list[Change]:
    """Apply one event to the directory ``devices`` (not modified) and return its effects.

    For an observation, ``devices`` must hold the device's current record if it exists (and
    ``tombstones``, by Pod UID, the observed Pod's tombstone if it has one); for a release, every
    device on the event's node that the Pod holds; for a snapshot, every device on its node that
    any Pod holds. Returns one :class:`Change` for an observation and one per released device for
    a release or a snapshot (none if nothing was released).
    """
    if isinstance(event, DeviceHealthObserved):
        return [
            apply_observation(devices.get(event.device_key), event, tombstones.get(event.pod_uid))
        ]
    changes = []
    if isinstance(event, PodsListed):
        held = sorted(
            (d for d in devices.values() if d.node == event.node and d.allocations),
            key=lambda d: d.key,
        )
        for record in held:
            change = apply_snapshot(record, event)
            if change is not None:
                changes.append(change)
        return changes
    for record in devices_held_by(devices, event.node, event.pod_uid):
        change = apply_release(record, event)
        if change is not None:
            changes.append(change)
    return changes


def tombstones_of(event: Event, changes: list[Change]) -> list[Tombstone]:
    """The tombstones ``event`` leaves, given its ``changes`` (from :func:`apply_event`): one for
    a release's Pod (whether it held anything or not: an older observation may still be on its
    way), one per Pod a snapshot released (at the LIST's version); none for an observation or
    an unordered release (no ordering key: the log's order decides, as before)."""
    if isinstance(event, PodDevicesReleased):
        if event.status_version is None:  # nothing can be told older than an unordered release
            return []
        return [Tombstone(event.pod_uid, event.node, event.status_version, event.observed_at)]
    if isinstance(event, PodsListed):
        uids = sorted({a.pod_uid for change in changes for a in change.released})
        return [Tombstone(uid, event.node, event.list_version, event.observed_at) for uid in uids]
    return []


def fold(
    events: list[Event],
    devices: dict[DeviceKey, DeviceRecord] | None = None,
    tombstones: dict[str, Tombstone] | None = None,
) -> dict[DeviceKey, DeviceRecord]:
    """Apply ``events`` in order to ``devices`` (a new empty directory by default); returns it.
    ``tombstones`` (by Pod UID; a new empty dict by default) is updated in place.

    The reference semantics of the projection: replaying a log through :func:`fold` gives the
    directory the PostgreSQL projection must hold after consuming the same log.
    """
    state: dict[DeviceKey, DeviceRecord] = {} if devices is None else devices
    released: dict[str, Tombstone] = {} if tombstones is None else tombstones
    for event in events:
        changes = apply_event(state, event, released)
        for change in changes:
            if change.changed:
                state[change.key] = change.record
        merged(released, tombstones_of(event, changes))
    return state
