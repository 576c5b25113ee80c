"""An in-memory batch sink (the worker's ``streams.dedup.BatchSink``, real:
``ProjectionStore.apply_batch``), held to the real one by ``tests/contracts/test_batch_sink.py``."""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from services.adapters.projection.store import BatchStats
from services.domain.adoption.failure_forward import forwarded_failures
from services.domain.adoption.ready_forward import ready_to_forward
from services.domain.batch import (
    CommitHook,
    LoggedBatch,
    Partition,
    PendingCommit,
    RecordsAfterGap,
    Transition,
    find_gaps,
)
from services.domain.device_ceiling import within_ceiling
from services.domain.directory import (
    DeviceKey,
    DeviceRecord,
    Outcome,
    apply_event,
    tombstones_of,
)
from services.domain.early_drops import EarlyDropsUnjustified, unjustified_drops
from services.domain.events import DeviceHealthObserved
from services.domain.log import LoggedEvent
from services.domain.tombstones import Tombstone, merged, retained
from services.domain.workloads.events import PodWorkloadObserved
from services.domain.workloads.fold import latest_per_pod, supersedes
from services.domain.workloads.on_device import facts_of, workloads_on_devices


@dataclass
class FakeProjection:
    """What the projection tables hold: the devices and, per partition, the recorded offset, the
    highwater and the newest event time. Shared by the sinks built on it (a restart)."""

    devices: dict[DeviceKey, DeviceRecord] = field(default_factory=dict)
    offsets: dict[Partition, int] = field(default_factory=dict)
    highwaters: dict[Partition, int] = field(default_factory=dict)
    last_event_at: dict[Partition, datetime] = field(default_factory=dict)
    tombstones: dict[str, Tombstone] = field(default_factory=dict)
    workloads: dict[str, PodWorkloadObserved] = field(default_factory=dict)
    """The ``pod_workloads`` rows: the kept record per Pod UID."""
    lifecycle_stages: dict[tuple[str, str, str, str, str], float] = field(default_factory=dict)
    """The ``pod_lifecycle_stages`` rows: (Pod UID, stage, class, path, claim UID) -> seconds."""
    failure_counts: dict[str, int] = field(default_factory=dict)
    """The ``dra_failures`` rows' ``occurrences`` per ``sourceUID`` (the largest seen)."""


class FakeSink:
    """Folds batches over a :class:`FakeProjection` as ``ProjectionStore.apply_batch`` does:
    records at or before their partition's recorded offset are skipped whole, the rest go
    through the pure directory fold, the recorded offsets and event times only move forward,
    ``before_commit`` is awaited with the batch's transitions before anything is kept (an
    exception from it leaves the projection as it was). Inventory is not folded.

    For the worker's tests it also records every call (``logged``, ``hooks``; ``batches``: the
    records of each committed batch), fails the first ``fail`` calls with ``error`` and keeps
    what the dedup ``table`` held at each call (it must not be raised before the commit).
    ``run_hooks=False``: keep ``before_commit`` without awaiting it (the worker's tests, whose
    forwarder hook would send to a broker; ``test_forward_unit`` drives hooks itself)."""

    def __init__(
        self,
        table: Any = None,
        fail: int = 0,
        error: Exception | None = None,
        projection: FakeProjection | None = None,
        run_hooks: bool = True,
    ) -> None:
        self.batches: list[list[LoggedEvent]] = []
        self.table = table
        self.fail = fail
        self.error = error or ConnectionResetError("db restarted")
        self.calls = 0
        self.table_at_write: list[dict[str, Any]] = []
        self.logged: list[LoggedBatch] = []
        self.hooks: list[CommitHook | None] = []
        self.projection = projection if projection is not None else FakeProjection()
        self.run_hooks = run_hooks

    async def apply_batch(
        self, batch: LoggedBatch, before_commit: CommitHook | None = None
    ) -> BatchStats:
        self.calls += 1
        self.logged.append(batch)
        self.hooks.append(before_commit)
        if self.table is not None:
            self.table_at_write.append(dict(self.table.items()))
        if self.calls <= self.fail:
            raise self.error
        if batch.empty:
            return BatchStats()
        stored = self.projection
        before = dict(stored.offsets)
        gaps = find_gaps(batch, before)
        if gaps:
            raise RecordsAfterGap(gaps)

        def fresh(position: Any) -> bool:
            return bool(position.offset > before.get((position.topic, position.partition), -1))

        records = [r for r in batch.records if fresh(r.position)]
        dropped = [r for r in batch.dropped_early if fresh(r.position)]
        if dropped:
            committed = {key: stored.devices[key].status_version for key in stored.devices}
            unexplained = unjustified_drops(dropped, records, committed)
            if unexplained:
                raise EarlyDropsUnjustified(unexplained)
        devices = dict(stored.devices)
        held = Counter(node for node, _ in devices)
        applied, refused = within_ceiling(
            records, devices.__contains__, held, batch.max_devices_per_node
        )
        counts: Counter[Outcome] = Counter()
        transitions: list[Transition] = []
        written: set[DeviceKey] = set()
        tombstones, left = dict(stored.tombstones), False
        tombstoned = 0
        start = dict(devices)
        history: list[Any] = []
        for logged in applied:
            changes = apply_event(devices, logged.event, tombstones)
            history.extend((logged.position, c, logged.event) for c in changes if c.changed)
            released = tombstones_of(logged.event, changes)
            merged(tombstones, released)
            left = left or bool(released)
            for change in changes:
                counts[change.outcome] += 1
                if not change.changed:
                    continue
                tombstoned += change.tombstoned
                devices[change.key] = change.record
                written.add(change.key)
                if change.transition and isinstance(logged.event, DeviceHealthObserved):
                    transitions.append(Transition(logged.position, change, logged.event))
        offsets, newest = dict(before), dict(stored.last_event_at)
        times = [(r.position, r.event.observed_at) for r in records]
        times += [(p, t) for p, t in batch.event_times if fresh(p)]
        for part, offset in batch.consumed_through.items():
            offsets[part] = max(offsets.get(part, -1), offset)
        for position, observed_at in times:
            part = (position.topic, position.partition)
            offsets[part] = max(offsets.get(part, -1), position.offset)
            if part not in newest or observed_at > newest[part]:
                newest[part] = observed_at
        fresh_failures = [(p, f) for p, f in batch.failures if fresh(p)]
        if before_commit is not None and self.run_hooks:
            # Before anything is kept: an exception leaves the projection as it was.
            await before_commit(
                PendingCommit(
                    transitions,
                    before,
                    copy.copy(stored.last_event_at),
                    over_ceiling=refused,
                    workloads_on_devices=workloads_on_devices(
                        start,
                        history,
                        [(p, w) for p, w in batch.workloads if fresh(p)],
                        {uid: facts_of(w) for uid, w in stored.workloads.items()},
                    ),
                    failures_on_nodes=forwarded_failures(fresh_failures, stored.failure_counts),
                    # The fake keeps no inventory: no plugin sample names a DeviceClass.
                    ready_on_nodes=ready_to_forward(
                        [(p, r) for p, r in batch.lifecycles if fresh(p)], None
                    ),
                )
            )
        for _, failure in fresh_failures:
            held = stored.failure_counts.get(failure.source_uid, 0)
            stored.failure_counts[failure.source_uid] = max(held, failure.occurrences)
        for record in latest_per_pod(r for p, r in batch.workloads if fresh(p)):
            kept = stored.workloads.get(record.pod_uid)
            if kept is None or supersedes(record.status_version, kept.status_version):
                stored.workloads[record.pod_uid] = record
        for _, lifecycle in (item for item in batch.lifecycles if fresh(item[0])):
            for s in lifecycle.stages:
                key = (lifecycle.pod_uid, s.stage.value, s.device_class, s.path.value, s.claim_uid)
                stored.lifecycle_stages.setdefault(key, s.seconds)  # first wins
        stored.devices, stored.offsets, stored.last_event_at = devices, offsets, newest
        stored.tombstones = retained(tombstones) if left else tombstones
        for part, highwater in batch.highwaters.items():
            stored.highwaters[part] = max(stored.highwaters.get(part, highwater), highwater)
        self.batches.append(list(batch.records))
        return BatchStats(
            applied=counts[Outcome.APPLIED],
            duplicates=counts[Outcome.DUPLICATE],
            stale=counts[Outcome.STALE],
            released=counts[Outcome.RELEASED],
            transitions=len(transitions),
            devices_written=len(written),
            redelivered=len(batch.records) - len(records),
            over_ceiling=len(refused),
            tombstoned=tombstoned,
        )
