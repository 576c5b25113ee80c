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
- a terminal phase (``Succeeded``/``Failed``) emits one ``PodDevicesReleased(terminated)``;
- DELETED emits ``PodDevicesReleased(deleted)`` unless the Pod was already released, and forgets the
  Pod; it never re-derives health from the last object state (stream-07);
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
    fingerprint; ``released`` is true once a terminal phase was published.
    """

    node: str
    namespace: str
    name: str
    status_version: int | None
    released: bool
    devices: Mapping[str, Fingerprint]


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


def _observe(
    previous: TrackedPod | None, reading: PodReading, *, changed_only: bool
) -> tuple[TrackedPod | None, list[Event]]:
    """Process a reading known to be newer than ``previous`` (or unordered)."""
    if previous is not None and previous.released:
        # A terminal Pod never runs again and kubelet stops writing its health
        # (kubernetes#132978): nothing after the release is news.
        return replace(
            previous, status_version=_newest(previous.status_version, reading.status_version)
        ), []
    if reading.node is None or not reading.uid:
        return previous, []
    devices = _devices(reading)
    old = _NO_DEVICES if previous is None else previous.devices
    events: list[Event] = [
        o
        for o in reading.observations
        if not changed_only or old.get(o.resource_id) != devices[o.resource_id]
    ]
    tracked = TrackedPod(
        node=reading.node,
        namespace=reading.namespace,
        name=reading.name,
        status_version=_newest(
            None if previous is None else previous.status_version, reading.status_version
        ),
        released=reading.terminal,
        devices=devices,
    )
    if reading.terminal:
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
        if previous is None or previous.released:
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


class PodTracker:
    """Per-Pod memory of the watcher, keyed by Pod UID (see the module docstring).

    Not thread-safe; one watcher owns one tracker.
    """

    def __init__(self) -> None:
        self._pods: dict[str, TrackedPod] = {}

    def __len__(self) -> int:
        return len(self._pods)

    def __contains__(self, uid: object) -> bool:
        return uid in self._pods

    def __iter__(self) -> Iterator[str]:
        return iter(self._pods)

    def nodes(self) -> set[str]:
        """The nodes of the tracked Pods."""
        return {pod.node for pod in self._pods.values()}

    def get(self, uid: str) -> TrackedPod | None:
        """What is tracked for the Pod, or ``None``."""
        return self._pods.get(uid)

    def _store(self, uid: str, tracked: TrackedPod | None) -> None:
        if tracked is None:
            self._pods.pop(uid, None)
        else:
            self._pods[uid] = tracked

    def apply(self, kind: WatchKind, reading: PodReading) -> list[Event]:
        """Process one watch event about ``reading``'s Pod; returns the events to publish."""
        if not reading.uid:
            return []
        tracked, events = step(self._pods.get(reading.uid), kind, reading)
        self._store(reading.uid, tracked)
        return events

    def reconcile(
        self, readings: Iterable[PodReading], list_version: int | None, observed_at: datetime
    ) -> list[Event]:
        """Process a complete LIST: re-emit each listed Pod's observations, and release (reason
        ``deleted``, at ``list_version``, the LIST's resourceVersion) every tracked Pod that is
        not listed, unless it was already released. ``observed_at`` (UTC) stamps the releases.
        """
        events: list[Event] = []
        listed: set[str] = set()
        for reading in readings:
            if not reading.uid:
                continue
            listed.add(reading.uid)
            tracked, produced = relist_step(self._pods.get(reading.uid), reading)
            self._store(reading.uid, tracked)
            events.extend(produced)
        for uid in [uid for uid in self._pods if uid not in listed]:
            gone = self._pods.pop(uid)
            if not gone.released:
                events.append(
                    _release(
                        gone, uid, ReleaseReason.DELETED, list_version, observed_at, gone.devices
                    )
                )
        return events
