"""The in-memory half of a batch write: the pure directory fold over the locked (or cached) rows,
and what the batch records in ``partition_progress``.

:func:`plan_batch` runs :func:`services.domain.directory.apply_event` over a batch in log order, so
any batch split gives the same rows as one-by-one processing. CPU only, no I/O;
:class:`~services.adapters.projection.store.ProjectionStore` writes the result.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from services.adapters.projection.cache import same_pods
from services.domain.batch import Partition, Transition
from services.domain.directory import (
    Allocation,
    Change,
    DeviceKey,
    DeviceRecord,
    Outcome,
    allocation_of,
    apply_event,
    apply_observation,
    same_allocation,
    tombstones_of,
)
from services.domain.events import DeviceHealthObserved, Event, PodsListed
from services.domain.log import LoggedEvent, LogPosition
from services.domain.tombstones import Tombstone, merged

_NO_TOMBSTONES: Mapping[str, Tombstone] = {}


@dataclass(slots=True)
class BatchPlan:
    """The fold of one batch over the locked rows: what to write (see :func:`plan_batch`)."""

    written: dict[DeviceKey, DeviceRecord] = field(default_factory=dict)
    observed: set[DeviceKey] = field(default_factory=set)  # keys with an APPLIED change
    history: list[tuple[LogPosition, Change, Event]] = field(default_factory=list)
    counts: dict[Outcome, int] = field(default_factory=lambda: dict.fromkeys(Outcome, 0))
    transitions: int = 0
    tombstones: dict[str, Tombstone] = field(default_factory=dict)
    """The tombstones the batch's releases and snapshots leave, by Pod UID (merged)."""
    tombstoned: int = 0
    """Applied observations of released Pods whose allocation was not added back."""


def plan_batch(
    current: Mapping[DeviceKey, DeviceRecord],
    records: Sequence[LoggedEvent],
    tombstones: Mapping[str, Tombstone] = _NO_TOMBSTONES,
) -> BatchPlan:
    """Fold ``records`` in order over ``current`` (the locked rows) and ``tombstones`` (those of
    the batch's observed Pods, by UID) with the pure :func:`apply_event`. Releases see only the
    devices their Pod holds on their node, snapshots the devices any Pod holds on theirs (both
    kept in indexes), which is what :func:`apply_event` asks for, without scanning the whole batch
    state. The tombstones the batch leaves count for its later observations."""
    state = dict(current)
    holders: dict[tuple[str, str], set[DeviceKey]] = defaultdict(set)
    held_on: dict[str, set[DeviceKey]] = defaultdict(set)
    for record in state.values():
        for allocation in record.allocations:
            holders[(record.node, allocation.pod_uid)].add(record.key)
        if record.allocations:
            held_on[record.node].add(record.key)
    released = dict(tombstones)
    plan = BatchPlan()
    counts, written, observed, history = plan.counts, plan.written, plan.observed, plan.history
    applied, released_outcome, frozen = Outcome.APPLIED, Outcome.RELEASED, Outcome.FROZEN
    transitions = 0
    # The devices of one Pod change (consecutive observations of one record) share one
    # Allocation object: made once per change, and told by identity when the rows are encoded.
    last: DeviceHealthObserved | None = None
    shared: Allocation | None = None
    for logged in records:
        event = logged.event
        view: Mapping[DeviceKey, DeviceRecord]
        if isinstance(event, DeviceHealthObserved):
            if not event.pod_terminated and (last is None or not same_allocation(event, last)):
                shared, last = allocation_of(event), event
            changes = [
                apply_observation(
                    state.get(event.device_key),
                    event,
                    released.get(event.pod_uid),
                    None if event.pod_terminated else shared,
                )
            ]
        else:
            if isinstance(event, PodsListed):
                view = {k: state[k] for k in held_on.get(event.node, ())}
            else:
                view = {k: state[k] for k in holders.get((event.node, event.pod_uid), ())}
            changes = apply_event(view, event, released)
        for change in changes:
            outcome = change.outcome
            counts[outcome] += 1
            if outcome is frozen:  # history only: the device's state is unchanged
                history.append((logged.position, change, event))
                continue
            if outcome is not applied and outcome is not released_outcome:  # not change.changed
                continue
            key, new = change.key, change.record
            old = state.get(key)
            if old is None or not same_pods(old.allocations, new.allocations):
                node = key[0]  # the indexes only change when the device's Pods do
                if old is not None:
                    for allocation in old.allocations:
                        holders[(node, allocation.pod_uid)].discard(key)
                for allocation in new.allocations:
                    holders[(node, allocation.pod_uid)].add(key)
                if new.allocations:
                    held_on[node].add(key)
                else:
                    held_on[node].discard(key)
            state[key] = new
            written[key] = new
            if outcome is applied:
                observed.add(key)
                transitions += change.transition
                plan.tombstoned += change.tombstoned
            history.append((logged.position, change, event))
        left = tombstones_of(event, changes)
        if left:
            merged(released, left)
            merged(plan.tombstones, left)
    plan.transitions = transitions
    return plan


def applied_positions(plan: BatchPlan) -> set[LogPosition]:
    """Positions of the observations the fold applied (the inventory resolves their identity)."""
    applied = Outcome.APPLIED
    return {
        position
        for position, change, event in plan.history
        if change.outcome is applied and isinstance(event, DeviceHealthObserved)
    }


def recorded_offsets(
    progress: Mapping[str, list[Any]], before: Mapping[Partition, int]
) -> dict[Partition, int]:
    """The offsets ``partition_progress`` holds once ``progress`` is written over ``before``."""
    out = dict(before)
    for topic, partition, offset in zip(
        progress["topic"], progress["partition"], progress["offset"], strict=True
    ):
        if offset is not None and offset > out.get((topic, partition), -1):
            out[(topic, partition)] = offset
    return out


def health_transitions(plan: BatchPlan) -> list[Transition]:
    """The batch's health transitions (applied observations that changed a device's health), in
    log order."""
    return [
        Transition(position, change, event)
        for position, change, event in plan.history
        if change.transition and isinstance(event, DeviceHealthObserved)
    ]


def progress_params(
    records: Sequence[LoggedEvent],
    highwaters: Mapping[Partition, int],
    consumed_through: Mapping[Partition, int],
    event_times: Iterable[tuple[LogPosition, datetime]] = (),
) -> dict[str, list[Any]]:
    """The ``partition_progress`` parameters of a batch (columns as parallel lists, partitions
    sorted): per partition the highest offset of ``records``, ``consumed_through`` and
    ``event_times``, the highwater, and the newest event time of ``records`` and ``event_times``.
    A record also in ``event_times`` counts at the time given there (its ``observedAt`` bounded
    by the broker's clock, :mod:`services.domain.event_time`)."""
    offsets: dict[Partition, int] = dict(consumed_through)
    newest: dict[Partition, datetime] = {}
    times = list(event_times)
    given = {position for position, _ in times}
    for logged in records:
        part = (logged.position.topic, logged.position.partition)
        offsets[part] = max(offsets.get(part, -1), logged.position.offset)
        if logged.position in given:
            continue
        observed_at = logged.event.observed_at
        if part not in newest or observed_at > newest[part]:
            newest[part] = observed_at
    for position, observed_at in times:
        part = (position.topic, position.partition)
        offsets[part] = max(offsets.get(part, -1), position.offset)
        if part not in newest or observed_at > newest[part]:
            newest[part] = observed_at
    parts = sorted(offsets.keys() | highwaters.keys())
    return {
        "topic": [t for t, _ in parts],
        "partition": [p for _, p in parts],
        "offset": [offsets.get(part) for part in parts],
        "highwater": [highwaters.get(part) for part in parts],
        "last_event_at": [newest.get(part) for part in parts],
    }
