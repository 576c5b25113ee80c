"""Make every device event fit one Kafka record (issue 11): split a release or a snapshot, shorten
an observation.

The topic takes records of at most ``max.message.bytes`` (``KafkaSettings.max_message_bytes``,
1 MiB by default); a record the producer cannot send used to stop the watcher. Three events can
grow without bound (two with one Pod, one with one node); all are made to fit here, where the
watcher makes them:

- ``PodDevicesReleased`` lists every resourceID the Pod held. It is **split** into releases of
  chunks of ``resource_ids`` (sorted, each part otherwise identical). The fold is the same: a
  release removes every allocation of ``pod_uid`` on ``node`` whatever its list says
  (:func:`services.domain.directory.apply_release`), so the first part releases them all and the
  others find nothing left.
- ``DeviceHealthObserved`` lists the containers of the Pod that report the device (10,000
  containers sharing one GPU make one event of ~1.5 MB with 120-character names). It cannot be
  split into parts per container: the directory keys the observation by ``(node, resourceID,
  statusVersion)`` and replaces a Pod's allocation with the latest one, so a second part with
  the same statusVersion is a duplicate and would be dropped
  (:func:`services.domain.directory.apply_observation`). Instead its ``containers`` are **cut**
  to the longest sorted prefix that fits and the event carries the flag
  ``containers-truncated`` (:attr:`ProblemCode.CONTAINERS_TRUNCATED`), which the device record
  keeps in its ``flags``. Health, message, resource and claim are unchanged, so the device's
  health, its transitions and the set of Pods holding it are what the uncut event gives; only
  that Pod's allocation lists fewer containers.

- ``PodsListed`` lists every Pod UID a LIST found on a node. It is **split** into chunks of
  consecutive sorted UIDs, each covering its own UID range (``uidFrom``: its first UID, the
  first chunk the original's; ``uidTo``: the next chunk's first UID, the last chunk the
  original's), so each chunk is self-sufficient: it releases the unlisted Pods of its range
  only, and the chunks together release what the whole snapshot would.

Sizes are those of the JSON body (:func:`~services.domain.event_codec.encode_event`); the caller
passes the body budget :func:`event_budget` leaves of a record (:data:`RECORD_HEADROOM_BYTES` for
the key, the type header and the batch framing). Anything else too large (a node or inventory
record) is left to the producer, which dead-letters it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Final

from services.domain.event_codec import encode_event
from services.domain.events import DeviceHealthObserved, Event, PodDevicesReleased, PodsListed
from services.domain.pod_status import Problem, ProblemCode

RECORD_HEADROOM_BYTES: Final = 1024
"""Bytes of a record not left to its JSON body: the key (a node name, at most 253 bytes), the
``devicestate-type`` header and the record batch framing (about 100 bytes)."""

CONTAINERS_TRUNCATED: Final = ProblemCode.CONTAINERS_TRUNCATED.value
"""Flag of an observation whose ``containers`` were cut to fit one record."""


def event_budget(max_message_bytes: int) -> int:
    """The largest JSON body (bytes) of a record of at most ``max_message_bytes`` bytes."""
    return max_message_bytes - RECORD_HEADROOM_BYTES


@dataclass(slots=True)
class Fitted:
    """What :func:`fit_events` made: ``events`` to publish in order (a split event's parts in
    its place), ``sizes`` the JSON body of each in bytes (same order: what
    :func:`~services.domain.observations.group_pod_changes` needs to size a record without
    encoding it again), and one ``problems`` entry per observation it cut."""

    events: list[Event] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    def add(self, event: Event, size: int | None = None) -> None:
        self.events.append(event)
        self.sizes.append(_size(event) if size is None else size)


def _size(event: Event) -> int:
    return len(encode_event(event))


def _split_release(event: PodDevicesReleased, budget: int) -> list[PodDevicesReleased]:
    ids = sorted(event.resource_ids)
    parts: list[PodDevicesReleased] = []
    while ids:
        # The longest prefix that fits (binary search: the size grows with the prefix).
        low, high = 1, len(ids)
        while low < high:
            middle = (low + high + 1) // 2
            if _size(replace(event, resource_ids=tuple(ids[:middle]))) <= budget:
                low = middle
            else:
                high = middle - 1
        parts.append(replace(event, resource_ids=tuple(ids[:low])))
        ids = ids[low:]
    return parts


def _chunk(event: PodsListed, uids: list[str], start: int, end: int) -> PodsListed:
    return replace(
        event,
        pod_uids=tuple(uids[start:end]),
        uid_from=event.uid_from if start == 0 else uids[start],
        uid_to=event.uid_to if end == len(uids) else uids[end],
    )


def _split_snapshot(event: PodsListed, budget: int) -> list[PodsListed]:
    uids = sorted(event.pod_uids)
    parts: list[PodsListed] = []
    start = 0
    while start < len(uids):
        low, high = start + 1, len(uids)
        while low < high:
            middle = (low + high + 1) // 2
            if _size(_chunk(event, uids, start, middle)) <= budget:
                low = middle
            else:
                high = middle - 1
        parts.append(_chunk(event, uids, start, low))
        start = low
    return parts


def _cut_containers(event: DeviceHealthObserved, budget: int) -> DeviceHealthObserved:
    containers = sorted(event.containers)
    flags = tuple(sorted({*event.flags, CONTAINERS_TRUNCATED}))
    low, high = 0, len(containers)
    while low < high:
        middle = (low + high + 1) // 2
        if _size(replace(event, containers=tuple(containers[:middle]), flags=flags)) <= budget:
            low = middle
        else:
            high = middle - 1
    return replace(event, containers=tuple(containers[:low]), flags=flags)


def fit_events(events: list[Event], budget: int) -> Fitted:
    """Each event of ``events`` whose JSON body is over ``budget`` bytes split (a release) or
    cut (an observation's containers) as the module docstring says; the others unchanged, in
    order. A part that still does not fit (a single resourceID or an observation without
    containers over the budget: impossible within ``limits.field_violations`` for budgets of
    64 KiB and more) is left as it is, for the producer to dead-letter."""
    fitted = Fitted()
    for event in events:
        size = _size(event)
        if size <= budget:
            fitted.add(event, size)
        elif isinstance(event, PodDevicesReleased):
            for part in _split_release(event, budget):
                fitted.add(part)
        elif isinstance(event, PodsListed):
            for chunk in _split_snapshot(event, budget):
                fitted.add(chunk)
        else:
            cut = _cut_containers(event, budget)
            fitted.add(cut)
            fitted.problems.append(
                Problem(
                    ProblemCode.CONTAINERS_TRUNCATED,
                    f"Pod {event.namespace}/{event.pod_name} resourceID {event.resource_id!r}: "
                    f"{len(event.containers)} containers make {size} bytes, over {budget}; "
                    f"{len(cut.containers)} kept",
                )
            )
    return fitted
