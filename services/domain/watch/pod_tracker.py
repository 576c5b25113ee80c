"""The watcher's memory per Pod: turn watch events into only the device events that changed.

Pure: no I/O and no clock (times come from the :class:`~services.domain.pod_status.PodReading`
or the caller). :func:`step` decides for one Pod; :class:`PodTracker` only keeps its results in a
dict keyed by Pod UID. Per Pod it keeps a compact :class:`TrackedPod` (node, names, newest
resourceVersion, one :data:`Fingerprint` per resourceID), never the raw Pod, so memory stays
small at 100k+ Pods.

Rules (from ``../shared/examples``):

- an ADDED/MODIFIED whose resourceVersion is older than or equal to the newest one seen for the Pod
  is ignored (stream-08 out of order, stream-09 byte-identical repeat); an unordered reading
  (resourceVersion missing or not an integer, KEP-5504) is processed;
- only observations whose :data:`Fingerprint` changed are emitted, compared per resourceID, so the
  order of ``resources[]`` never matters (stream-02);
- a terminal phase (``Succeeded``/``Failed``) emits one ``PodDevicesReleased(terminated)`` if the
  Pod ever reported a device (a flood of Failed Pods without devices publishes nothing);
- the observations of a terminal Pod carry ``pod_terminated``: an Unhealthy or Unknown written
  after the Pod terminated (a post-mortem kubelet update) is published and applied, a Healthy is
  published *frozen* (recorded, no fresh evidence; issue 15 item 2);
- :class:`PodTracker` then drops the released Pod and keeps only a bounded tombstone
  (:mod:`services.domain.watch.pod_tombstones`) for the stale check and the post-mortem changes;
- DELETED emits ``PodDevicesReleased(deleted)`` unless the Pod was already released or never
  reported a device, and forgets the Pod; it never re-derives health from the last object state
  (stream-07);
- :meth:`PodTracker.reconcile` after a (re)LIST re-emits every listed Pod's current observations
  (the consumer's dedup on ``(node, resourceID, statusVersion)`` makes that harmless) and releases
  tracked Pods missing from the list.

Pods without ``spec.nodeName`` are not tracked: they hold no device.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from types import MappingProxyType
from typing import Final, TypeAlias

from services.domain.events import (
    ClaimRef,
    ContainerRef,
    DeviceHealthObserved,
    Event,
    Health,
    PodDevicesReleased,
    ReleaseReason,
)
from services.domain.pod_status import PodReading
from services.domain.watch.pod_tombstones import MAX_POD_TOMBSTONES, PodTombstone, PodTombstones


class WatchKind(StrEnum):
    """The watch event types that carry a Pod (Kubernetes ``watch.EventType``)."""

    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"


Fingerprint: TypeAlias = tuple[
    Health,
    str | None,
    str | None,
    str,
    tuple[ContainerRef, ...],
    ClaimRef | None,
    tuple[str, ...],
]
"""``(health, raw_health, message, resource_name, containers, claim, flags)`` of one observation:
what must differ for a new observation of the same resourceID to be worth publishing."""

_NO_DEVICES: Final[Mapping[str, Fingerprint]] = MappingProxyType({})


def fingerprint(observation: DeviceHealthObserved) -> Fingerprint:
    """The part of an observation that is compared between two readings of one Pod."""
    return (
        observation.health,
        observation.raw_health,
        observation.message,
        observation.resource_name,
        observation.containers,
        observation.claim,
        observation.flags,
    )


@dataclass(frozen=True, slots=True)
class TrackedPod:
    """What the tracker remembers about one scheduled Pod.

    ``status_version`` is the newest comparable resourceVersion seen (``None`` if every reading so
    far was unordered); ``devices`` maps each resourceID of the last processed reading to its
    fingerprint; ``released`` is true once a terminal phase was published; ``held`` once any
    reading reported a device (a Pod that never did is never released).
    """

    node: str
    namespace: str
    name: str
    status_version: int | None
    released: bool
    devices: Mapping[str, Fingerprint]
    held: bool = True


def is_stale(seen: int | None, incoming: int | None) -> bool:
    """True when ``incoming`` is not newer than ``seen``; unordered (``None``) is never stale."""
    return seen is not None and incoming is not None and incoming <= seen


def _newest(seen: int | None, incoming: int | None) -> int | None:
    if seen is None:
        return incoming
    if incoming is None:
        return seen
    return max(seen, incoming)


def _release(
    pod: TrackedPod,
    uid: str,
    reason: ReleaseReason,
    status_version: int | None,
    observed_at: datetime,
    resource_ids: Iterable[str],
) -> PodDevicesReleased:
    return PodDevicesReleased(
        node=pod.node,
        namespace=pod.namespace,
        pod_name=pod.name,
        pod_uid=uid,
        reason=reason,
        status_version=status_version,
        observed_at=observed_at,
        resource_ids=tuple(sorted(set(resource_ids))),
    )


def _devices(reading: PodReading) -> Mapping[str, Fingerprint]:
    if not reading.observations:
        return _NO_DEVICES
    return {o.resource_id: fingerprint(o) for o in reading.observations}


def devices_digest(devices: Mapping[str, Fingerprint]) -> int:
    """A digest of a reading's devices, for a tombstone (compared within this process only)."""
    return hash(frozenset(devices.items()))


def terminated_observations(
    reading: PodReading, old: Mapping[str, Fingerprint] | None
) -> list[Event]:
    """The observations of a terminal Pod's ``reading`` to publish, each with ``pod_terminated``:
    those whose fingerprint differs from ``old`` (``None``: all of them)."""
    devices = _devices(reading)
    return [
        replace(o, pod_terminated=True)
        for o in reading.observations
        if old is None or old.get(o.resource_id) != devices[o.resource_id]
    ]


def _observe(
    previous: TrackedPod | None, reading: PodReading, *, changed_only: bool
) -> tuple[TrackedPod | None, list[Event]]:
    """Process a reading known to be newer than ``previous`` (or unordered)."""
    if previous is not None and previous.released:
        # Kubelet may write once more after the Pod terminated (kubernetes PR #135202): a
        # post-mortem Unhealthy is a real fault. The release is not repeated.
        post_mortem = terminated_observations(reading, previous.devices if changed_only else None)
        return replace(
            previous,
            status_version=_newest(previous.status_version, reading.status_version),
            devices=_devices(reading),
        ), post_mortem
    if reading.node is None or not reading.uid:
        return previous, []
    devices = _devices(reading)
    old = _NO_DEVICES if previous is None else previous.devices
    if reading.terminal:
        events: list[Event] = terminated_observations(reading, old if changed_only else None)
    else:
        events = [
            o
            for o in reading.observations
            if not changed_only or old.get(o.resource_id) != devices[o.resource_id]
        ]
    held = bool(devices) or (previous is not None and previous.held)
    tracked = TrackedPod(
        node=reading.node,
        namespace=reading.namespace,
        name=reading.name,
        status_version=_newest(
            None if previous is None else previous.status_version, reading.status_version
        ),
        released=reading.terminal,
        devices=devices,
        held=held,
    )
    if reading.terminal and held:
        events.append(
            _release(
                tracked,
                reading.uid,
                ReleaseReason.TERMINATED,
                reading.status_version,
                reading.observed_at,
                [*old, *devices],
            )
        )
    return tracked, events


def step(
    previous: TrackedPod | None, kind: WatchKind, reading: PodReading
) -> tuple[TrackedPod | None, list[Event]]:
    """Decide what one watch event means for one Pod.

    ``previous`` is what was tracked for ``reading.uid`` (``None``: not tracked). Returns the new
    tracked state (``None``: forget the Pod) and the events to publish, observations first.
    """
    if kind is WatchKind.DELETED:
        # The DELETED object is the last state: its health was already published (or was stale),
        # so only the allocation ends here.
        if previous is None or previous.released or not previous.held:
            return None, []
        release = _release(
            previous,
            reading.uid,
            ReleaseReason.DELETED,
            reading.status_version,
            reading.observed_at,
            previous.devices,
        )
        return None, [release]
    if previous is not None and is_stale(previous.status_version, reading.status_version):
        return previous, []
    return _observe(previous, reading, changed_only=True)


def relist_step(
    previous: TrackedPod | None, reading: PodReading
) -> tuple[TrackedPod | None, list[Event]]:
    """Like :func:`step` for ADDED, but re-emits every current observation, changed or not: a
    LIST follows a gap in the watch, during which events may have been lost downstream."""
    if previous is not None and reading.status_version is not None:
        seen = previous.status_version
        if seen is not None and reading.status_version < seen:
            return previous, []
    return _observe(previous, reading, changed_only=False)


def tombstone_step(
    tombstone: PodTombstone, kind: WatchKind, reading: PodReading
) -> tuple[PodTombstone | None, list[Event]]:
    """Decide what one watch event (or listed reading) means for a released terminal Pod known
    only by its ``tombstone``. Returns the new tombstone (``None``: forget the Pod) and the events
    to publish: after DELETED nothing (the release was published); for a newer reading whose
    devices changed, every observation with ``pod_terminated`` (a post-mortem update)."""
    if kind is WatchKind.DELETED:
        return None, []
    if is_stale(tombstone.status_version, reading.status_version):
        return tombstone, []
    digest = devices_digest(_devices(reading))
    kept = PodTombstone(_newest(tombstone.status_version, reading.status_version), digest)
    if digest == tombstone.devices_digest:
        return kept, []
    return kept, terminated_observations(reading, None)


class PodTracker:
    """Per-Pod memory of the watcher, keyed by Pod UID (see the module docstring): the tracked
    Pods, and the tombstones of the released terminal ones (at most ``tombstone_limit``).

    Not thread-safe; one watcher owns one tracker.
    """

    def __init__(self, tombstone_limit: int = MAX_POD_TOMBSTONES) -> None:
        self._pods: dict[str, TrackedPod] = {}
        self._tombstones = PodTombstones(tombstone_limit)

    def __len__(self) -> int:
        return len(self._pods)

    def __contains__(self, uid: object) -> bool:
        return uid in self._pods

    def __iter__(self) -> Iterator[str]:
        return iter(self._pods)

    @property
    def tombstones(self) -> PodTombstones:
        """The released terminal Pods' tombstones (read-only use)."""
        return self._tombstones

    def nodes(self) -> set[str]:
        """The nodes of the tracked Pods."""
        return {pod.node for pod in self._pods.values()}

    def get(self, uid: str) -> TrackedPod | None:
        """What is tracked for the Pod, or ``None`` (also for a Pod kept as a tombstone)."""
        return self._pods.get(uid)

    def _store(self, uid: str, tracked: TrackedPod | None) -> None:
        if tracked is None:
            self._pods.pop(uid, None)
        elif tracked.released:
            # A released terminal Pod leaves memory: only what the stale check needs is kept.
            self._pods.pop(uid, None)
            digest = devices_digest(tracked.devices)
            self._tombstones.put(uid, PodTombstone(tracked.status_version, digest))
        else:
            self._pods[uid] = tracked

    def _at_tombstone(self, kind: WatchKind, reading: PodReading) -> list[Event] | None:
        tombstone = self._tombstones.get(reading.uid)
        if tombstone is None:
            return None
        kept, events = tombstone_step(tombstone, kind, reading)
        if kept is None:
            self._tombstones.pop(reading.uid)
        else:
            self._tombstones.put(reading.uid, kept)
        return events

    def apply(self, kind: WatchKind, reading: PodReading) -> list[Event]:
        """Process one watch event about ``reading``'s Pod; returns the events to publish."""
        if not reading.uid:
            return []
        at_tombstone = self._at_tombstone(kind, reading)
        if at_tombstone is not None:
            return at_tombstone
        tracked, events = step(self._pods.get(reading.uid), kind, reading)
        self._store(reading.uid, tracked)
        return events

    def reconcile(
        self, readings: Iterable[PodReading], list_version: int | None, observed_at: datetime
    ) -> list[Event]:
        """Process a complete LIST: re-emit each listed Pod's observations (a tombstoned Pod's
        only if they changed), and release (reason ``deleted``, at ``list_version``, the LIST's
        resourceVersion) every tracked Pod that is not listed, unless it was already released or
        never reported a device; unlisted tombstones are forgotten. ``observed_at`` (UTC) stamps
        the releases.
        """
        events: list[Event] = []
        listed: set[str] = set()
        for reading in readings:
            if not reading.uid:
                continue
            listed.add(reading.uid)
            at_tombstone = self._at_tombstone(WatchKind.MODIFIED, reading)
            if at_tombstone is not None:
                events.extend(at_tombstone)
                continue
            tracked, produced = relist_step(self._pods.get(reading.uid), reading)
            self._store(reading.uid, tracked)
            events.extend(produced)
        for uid in [uid for uid in self._tombstones if uid not in listed]:
            self._tombstones.pop(uid)
        for uid in [uid for uid in self._pods if uid not in listed]:
            gone = self._pods.pop(uid)
            if not gone.released and gone.held:
                events.append(
                    _release(
                        gone, uid, ReleaseReason.DELETED, list_version, observed_at, gone.devices
                    )
                )
        return events
