"""The device directory as a pure fold over the event log.

``apply_event(devices, event)`` is the only place that decides what an event does to the
directory; the PostgreSQL projection (``services/adapters/projection``), the replay and the property tests
all call it, so incremental processing, batched processing and replay agree by construction.
No wall clock: every time comes from the events.

Ordering rule (the dedup key is ``(node, resourceID, statusVersion)``): an observation is applied
only when its statusVersion is greater than the device's; an equal one is a duplicate, a smaller
one is stale. An unordered observation (no comparable resourceVersion) ranks 0: it may create a
device but never overwrites one (see ``../shared/examples/stream-10`` lines 15-16).
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
)

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
    RELEASED = "released"  # a Pod's allocation was removed


@dataclass(frozen=True, slots=True)
class Change:
    """The effect of one event on one device.

    ``record`` is the device's state after the event (unchanged for a no-op). ``transition`` is true
    when the observation changed the device's health (or created the device).
    """

    key: DeviceKey
    outcome: Outcome
    record: DeviceRecord
    transition: bool = False

    @property
    def changed(self) -> bool:
        return self.outcome in (Outcome.APPLIED, Outcome.RELEASED)


def _with_allocation(
    allocations: tuple[Allocation, ...], new: Allocation
) -> tuple[Allocation, ...]:
    kept = [a for a in allocations if a.pod_uid != new.pod_uid]
    kept.append(new)
    return tuple(sorted(kept))


def _allocation_of(event: DeviceHealthObserved) -> Allocation:
    return Allocation(
        pod_uid=event.pod_uid,
        namespace=event.namespace,
        pod_name=event.pod_name,
        containers=tuple(sorted(event.containers)),
        claim=event.claim,
        status_version=event.status_version,
    )


def apply_observation(current: DeviceRecord | None, event: DeviceHealthObserved) -> Change:
    """Apply one observation to one device's state (``None``: the device is not known yet)."""
    allocation = _allocation_of(event)
    if current is not None:
        new_rank, old_rank = (
            version_rank(event.status_version),
            version_rank(current.status_version),
        )
        if new_rank == old_rank:
            return Change(current.key, Outcome.DUPLICATE, current)
        if new_rank < old_rank:
            return Change(current.key, Outcome.STALE, current)
    transition = current is None or current.health is not event.health
    previous_allocations = () if current is None else current.allocations
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
        allocations=_with_allocation(previous_allocations, allocation),
        flags=event.flags,
    )
    return Change(record.key, Outcome.APPLIED, record, transition=transition)


def _released_by(allocation: Allocation, event: PodDevicesReleased) -> bool:
    if allocation.pod_uid != event.pod_uid:
        return False
    if event.status_version is None or allocation.status_version is None:
        return True
    # An allocation seen at a newer resourceVersion than the release belongs to a later Pod state.
    return allocation.status_version <= event.status_version


def apply_release(current: DeviceRecord, event: PodDevicesReleased) -> Change | None:
    """Remove the Pod's allocation from one device; ``None`` when the Pod did not hold it."""
    kept = tuple(a for a in current.allocations if not _released_by(a, event))
    if len(kept) == len(current.allocations):
        return None
    return Change(current.key, Outcome.RELEASED, replace(current, allocations=kept))


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


def apply_event(devices: Mapping[DeviceKey, DeviceRecord], event: Event) -> list[Change]:
    """Apply one event to the directory ``devices`` (not modified) and return its effects.

    For an observation, ``devices`` must hold the device's current record if it exists; for a
    release, every device on the event's node that the Pod holds. Returns one :class:`Change` for
    an observation and one per released device for a release (none if the Pod held nothing).
    """
    if isinstance(event, DeviceHealthObserved):
        return [apply_observation(devices.get(event.device_key), event)]
    changes = []
    for record in devices_held_by(devices, event.node, event.pod_uid):
        change = apply_release(record, event)
        if change is not None:
            changes.append(change)
    return changes


def fold(
    events: list[Event], devices: dict[DeviceKey, DeviceRecord] | None = None
) -> dict[DeviceKey, DeviceRecord]:
    """Apply ``events`` in order to ``devices`` (a new empty directory by default); returns it.

    The reference semantics of the projection: replaying a log through :func:`fold` gives the
    directory the PostgreSQL projection must hold after consuming the same log.
    """
    state: dict[DeviceKey, DeviceRecord] = {} if devices is None else devices
    for event in events:
        for change in apply_event(state, event):
            if change.changed:
                state[change.key] = change.record
    return state
