"""One batch of the device-health log on its way into the projection, and what the projection's
writer reports back before the commit: the typed seam between the worker (``streams/``), the
replay and :meth:`ProjectionStore.apply_batch
<services.adapters.projection.store.ProjectionStore.apply_batch>`.

Positions are Kafka ``(topic, partition, offset)`` (:class:`~services.domain.log.LogPosition`);
partitions are ``(topic, partition)`` pairs; times are aware ``datetime`` objects in UTC, event
time (the records' ``observedAt``), never the wall clock.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeAlias

from services.domain.adoption.failure_events import DRAFailureObserved
from services.domain.device_ceiling import OverCeiling
from services.domain.directory import Change
from services.domain.events import DeviceHealthObserved
from services.domain.governance.inputs_failures import NodeFailureObserved
from services.domain.governance.inputs_ready import NodeReadyObserved
from services.domain.inventory.events import InventoryObserved
from services.domain.inventory.fold import InventoryPlan
from services.domain.lifecycle_events import PodLifecycleObserved
from services.domain.log import LoggedEvent, LogPosition
from services.domain.migration.records import WorkloadOnDevice
from services.domain.node_events import NodeResourcesChanged
from services.domain.node_labels import NodeLabelsChanged
from services.domain.workloads.events import PodWorkloadObserved

Partition: TypeAlias = tuple[str, int]
"""``(topic, partition)``."""

InventoryRecord: TypeAlias = (
    DeviceHealthObserved | InventoryObserved | NodeResourcesChanged | NodeLabelsChanged
)
"""A record the inventory fold (:mod:`services.domain.inventory.fold`) reads."""


class RecordsAfterGap(Exception):
    """A batch starts, on some partitions, after records the projection never got.

    ``gaps`` maps each such ``(topic, partition)`` to ``(recorded offset, first offset of the
    batch)``. Every record of a partition is consumed in offset order and the recorded offset is
    written with the rows, so the next batch of a partition starts at most one past it; one that
    starts later was handed records out of order (a record prefetched before a rebalance, seen
    with faust after a consumer-group rebalance: faust-streaming/faust#221). Writing it would move
    the recorded offset past the missing records, which would then be skipped as redeliveries: lost.
    Nothing of the batch is written; the caller writes the other partitions' records and leaves
    these unacknowledged, to be read again in order.
    """

    def __init__(self, gaps: Mapping[tuple[str, int], tuple[int, int]]) -> None:
        self.gaps = dict(gaps)
        where = ", ".join(
            f"{topic}/{partition}: recorded {recorded}, batch starts at {first}"
            for (topic, partition), (recorded, first) in sorted(self.gaps.items())
        )
        super().__init__(f"records after a gap, not written ({where})")


@dataclass(frozen=True, slots=True)
class LoggedBatch:
    """What one :meth:`ProjectionStore.apply_batch` writes, in one transaction.

    ``records`` are the device events the directory folds, in log order. The other fields feed
    ``partition_progress`` and the inventory; records at or before a partition's recorded offset
    (a redelivery) are skipped in all of them.

    - ``highwaters``: per partition, the end offset the consumer saw (the next record's offset),
      stored for the lag metric; partitions without records may be given too.
    - ``consumed_through``: per partition, the last offset the caller consumed, including records
      it did not pass (dropped early as duplicates, dead-lettered), so the recorded progress
      covers them.
    - ``event_times``: position and event time of the batch's decoded records that are not in
      ``records`` (node events, observations dropped early); like the records they advance their
      partition's offset and newest event time.
    - ``inventory``: when given, every record the inventory folds, with its position, in batch
      order (observations, DRA inventory records, resource counts): the batch then maintains the
      inventory tables too. Observations appear here as well as in ``records`` because the
      inventory's order interleaves them with the DRA records, and it also sees the observations
      the caller dropped early (the fold uses only those the directory applied).
    """

    records: Sequence[LoggedEvent] = ()
    highwaters: Mapping[Partition, int] = field(default_factory=dict)
    consumed_through: Mapping[Partition, int] = field(default_factory=dict)
    event_times: Sequence[tuple[LogPosition, datetime]] = ()
    inventory: Sequence[tuple[LogPosition, InventoryRecord]] | None = None
    consumed_from: Mapping[Partition, int] = field(default_factory=dict)
    """Per partition, the first offset the caller consumed in this batch: the store refuses a
    partition whose batch starts after a gap (:class:`RecordsAfterGap`): past its recorded offset
    plus one, or, for a partition with nothing recorded yet, past its ``log_start``."""
    log_start: Mapping[Partition, int] = field(default_factory=dict)
    """Per partition, the first offset the topic holds (the consumer's earliest offset)."""
    consumed_holes: Mapping[Partition, int] = field(default_factory=dict)
    """Per partition, the first offset missing between the first and the last record the
    caller consumed of it in this batch (:func:`first_holes`): the topics' offsets are
    contiguous (no transactions, no compaction), so a hole is a record handed out of order, and
    the store refuses the partition as after a gap when the hole is past its recorded offset."""
    max_devices_per_node: int | None = None
    """The device ceiling (:mod:`services.domain.device_ceiling`): an observation of a new device
    of a node that holds this many already is not applied (``None``: no ceiling)."""
    history_retention_seconds: float = 0.0
    """``device_history`` rows older than this before their partition's watermark are deleted
    (:mod:`services.domain.retention`; 0: kept)."""
    workloads: Sequence[tuple[LogPosition, PodWorkloadObserved]] = ()
    """The batch's ``PodWorkloadObserved`` records with their positions, in log order (issue
    13): written to ``pod_workloads`` in the same transaction; their event times are in
    ``event_times`` like the node events'."""
    failures: Sequence[tuple[LogPosition, DRAFailureObserved]] = ()
    """The batch's ``DRAFailureObserved`` records with their positions, in log order (issue 16
    item 3): written to ``dra_failures`` in the same transaction; their event times are in
    ``event_times`` like the node events'."""
    lifecycles: Sequence[tuple[LogPosition, PodLifecycleObserved]] = ()
    """The batch's ``PodLifecycleObserved`` records with their positions, in log order (issue
    16 item 5): written to ``pod_lifecycle_stages`` in the same transaction (first wins); their
    event times are in ``event_times`` like the workload records'."""
    dropped_early: Sequence[LoggedEvent] = ()
    """Observations the caller dropped before the store (its dedup table said the projection has
    them), in log order: the store checks those after the recorded offsets against the
    projection and refuses the batch when one is not there
    (:class:`~services.domain.early_drops.EarlyDropsUnjustified`)."""

    @property
    def empty(self) -> bool:
        """Nothing to write: no records, no progress, no inventory."""
        return not (
            self.records
            or self.highwaters
            or self.consumed_through
            or self.event_times
            or self.inventory
        )

    def partitions(self) -> set[Partition]:
        """Every partition the batch records progress for (not counting ``highwaters``)."""
        parts = {(r.position.topic, r.position.partition) for r in self.records}
        parts.update(self.consumed_through)
        parts.update((p.topic, p.partition) for p, _ in self.event_times)
        parts.update((p.topic, p.partition) for p, _ in self.inventory or ())
        return parts


@dataclass(frozen=True, slots=True)
class Transition:
    """An applied observation that changed (or first set) a device's health, in a batch being
    written: the :class:`Change` (``transition`` set; ``change.record`` is the device after it),
    the observation and its log position."""

    position: LogPosition
    change: Change
    event: DeviceHealthObserved


def find_gaps(
    batch: LoggedBatch, recorded: Mapping[Partition, int]
) -> dict[Partition, tuple[int, int]]:
    """The partitions where ``batch`` starts after records the sink never got, or skips one of
    them (:attr:`LoggedBatch.consumed_holes`): ``(offset the sink has through, first offset of
    the batch, or the hole)`` each (see :class:`RecordsAfterGap`). ``recorded`` is each partition's recorded offset; a partition with
    none must start at its ``log_start``, when the batch gives it."""
    gaps = {}
    for part, first in batch.consumed_from.items():
        if part in recorded:
            through = recorded[part]
        elif part in batch.log_start:
            through = batch.log_start[part] - 1
        else:
            continue
        if first > through + 1:
            gaps[part] = (through, first)
        elif batch.consumed_holes.get(part, -1) > through:
            gaps[part] = (through, batch.consumed_holes[part])
    return gaps


def first_holes(offsets: Mapping[Partition, Sequence[int]]) -> dict[Partition, int]:
    """Per partition, the first offset missing between the smallest and the largest of its
    ``offsets`` (any order, repeats allowed); partitions without a hole are absent."""
    holes = {}
    for part, seen in offsets.items():
        expected = min(seen, default=0)
        for offset in sorted(set(seen)):
            if offset != expected:
                holes[part] = expected
                break
            expected += 1
    return holes


@dataclass(frozen=True, slots=True)
class PendingCommit:
    """What a :data:`CommitHook` sees: the batch is written but not committed yet.

    ``transitions`` are the batch's health transitions in log order (only records after the
    recorded offsets: a redelivered record is skipped whole and makes none). ``applied_through``
    and ``last_event_at`` are each partition's recorded offset and newest event time *before* this
    batch (read with the rows locked until commit; partitions without a row are absent).
    ``inventory`` is what the batch did to the inventory (identities resolved, conflicts raised
    or cleared), when the batch maintained it (:attr:`LoggedBatch.inventory`). ``over_ceiling``:
    the observations the batch did not apply (:attr:`LoggedBatch.max_devices_per_node`).
    """

    transitions: list[Transition]
    applied_through: dict[Partition, int]
    last_event_at: dict[Partition, datetime]
    inventory: InventoryPlan | None = None
    over_ceiling: Sequence[OverCeiling] = ()
    """The batch's observations over the device ceiling, in log order: not applied, to be
    dead-lettered before the commit."""
    workloads_on_devices: Sequence[tuple[LogPosition, WorkloadOnDevice]] = ()
    """The ``WorkloadOnDevice`` facts the batch's records made, with the position of each
    record, in log order (:func:`services.domain.workloads.on_device.workloads_on_devices`);
    empty unless the writer was given a hook."""
    failures_on_nodes: Sequence[tuple[LogPosition, NodeFailureObserved]] = ()
    """The driver and claim failures the batch's ``DRAFailureObserved`` records added on a node,
    by how much each raised its source's projected count, with the record's position, in log
    order (:func:`services.domain.adoption.failure_forward.forwarded_failures`); empty unless
    the writer was given a hook."""
    ready_on_nodes: Sequence[tuple[LogPosition, NodeReadyObserved]] = ()
    """The bound-to-Ready stages of the batch's ``PodLifecycleObserved`` records, one record per
    Pod with the record's position, in log order
    (:func:`services.domain.adoption.ready_forward.forwarded_ready`); empty unless the writer
    was given a hook."""

    def fresh(self, position: LogPosition) -> bool:
        """Whether a record at ``position`` is after its partition's recorded offset."""
        return position.offset > self.applied_through.get((position.topic, position.partition), -1)


CommitHook = Callable[[PendingCommit], Awaitable[None]]
"""Called by :meth:`ProjectionStore.apply_batch
<services.adapters.projection.store.ProjectionStore.apply_batch>` inside the transaction, after the
writes and just before the commit; an exception rolls the batch back (and is raised by
``apply_batch``)."""
