"""The worker's batch sink (``streams.dedup.BatchSink``): :class:`~tests.fakes.batch_sink.FakeSink`
and :class:`~services.adapters.projection.store.ProjectionStore` on a fresh schema pass the same
tests.

Each subclass reads back what the sink holds (devices and partition progress): the fake's
:class:`~tests.fakes.batch_sink.FakeProjection`, the tables through ``DeviceReads``; and builds a
second sink on the same state, as a restarted worker would. The inventory half of a batch
(``LoggedBatch.inventory``) is the real store's only: the fake does not fold it (the worker's unit
tests never send one), so it is not part of this contract.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import datetime

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from services.adapters.projection.reads_devices import DeviceReads
from services.adapters.projection.store import BatchStats, ProjectionStore
from services.domain.adoption.failure_classes import FailureClass
from services.domain.adoption.failure_events import DRAFailureObserved, FailureOrigin
from services.domain.batch import LoggedBatch, Partition, PendingCommit, RecordsAfterGap
from services.domain.device_ceiling import within_ceiling
from services.domain.directory import DeviceKey, DeviceRecord, fold
from services.domain.early_drops import EarlyDropsUnjustified
from services.domain.events import Health
from services.domain.lifecycle import DevicePath, Stage
from services.domain.lifecycle_events import PodLifecycleObserved, StageSample
from services.domain.log import LogPosition
from services.domain.workloads.events import PodWorkloadObserved
from services.domain.workloads.migration import MigrationClass
from streams.dedup import BatchSink
from tests.conftest import T0, TOPIC, LogFactory, ObservationFactory, ReleaseFactory
from tests.fakes.batch_sink import FakeProjection, FakeSink

KEY = ("gpu-node-a", "GPU-0")
P0: Partition = (TOPIC, 0)


@dataclass(frozen=True)
class Progress:
    offset: int | None
    highwater: int | None
    last_event_at: datetime | None


class Harness(ABC):
    sink: BatchSink

    @abstractmethod
    async def devices(self) -> dict[DeviceKey, DeviceRecord]: ...

    @abstractmethod
    async def progress(self) -> dict[Partition, Progress]: ...

    @abstractmethod
    def restarted(self) -> BatchSink:
        """A new sink on the same state (a worker restarted)."""

    @abstractmethod
    async def workloads(self) -> dict[str, tuple[int | None, str]]:
        """``pod_workloads``: Pod UID -> (statusVersion, migration class)."""

    @abstractmethod
    async def lifecycle_stages(self) -> dict[tuple[str, str, str, str, str], float]:
        """``pod_lifecycle_stages``: (Pod UID, stage, class, path, claim UID) -> seconds."""


class Hook:
    """A commit hook that keeps what it saw (and raises ``error`` when given)."""

    def __init__(self, error: Exception | None = None) -> None:
        self.seen: list[PendingCommit] = []
        self.error = error

    async def __call__(self, pending: PendingCommit) -> None:
        self.seen.append(pending)
        if self.error is not None:
            raise self.error


class BatchSinkContract:
    """What the worker relies on from the projection's writer. Subclasses provide ``harness``."""

    async def test_a_batch_records_the_devices_and_the_partition_progress(
        self, harness: Harness, observation: ObservationFactory, logged: LogFactory
    ) -> None:
        events = [
            observation(1, at=5),
            observation(2, Health.UNHEALTHY, at=7, resource_id="GPU-1"),
            observation(3, Health.UNHEALTHY, at=6),
        ]
        stats = await harness.sink.apply_batch(
            LoggedBatch(logged(events, start=10), highwaters={P0: 20, (TOPIC, 1): 4})
        )
        assert stats == BatchStats(applied=3, transitions=3, devices_written=2)
        assert await harness.devices() == fold(list(events))
        assert await harness.progress() == {
            P0: Progress(12, 20, T0.replace(second=7)),
            (TOPIC, 1): Progress(None, 4, None),
        }

    async def test_duplicates_and_older_versions_change_nothing(
        self, harness: Harness, observation: ObservationFactory, logged: LogFactory
    ) -> None:
        await harness.sink.apply_batch(LoggedBatch(logged([observation(5, Health.UNHEALTHY)])))
        before = await harness.devices()
        stats = await harness.sink.apply_batch(
            LoggedBatch(
                logged(
                    [observation(5, Health.HEALTHY, at=10), observation(3, Health.HEALTHY, at=20)],
                    start=1,
                )
            )
        )
        assert stats == BatchStats(duplicates=1, stale=1)
        assert await harness.devices() == before
        # Their positions count as consumed all the same.
        assert (await harness.progress())[P0].offset == 2

    async def test_a_release_removes_the_allocation_and_keeps_the_health(
        self,
        harness: Harness,
        observation: ObservationFactory,
        release: ReleaseFactory,
        logged: LogFactory,
    ) -> None:
        events = [observation(5, Health.UNHEALTHY), release(6, at=3)]
        stats = await harness.sink.apply_batch(LoggedBatch(logged(events)))
        assert (stats.applied, stats.released) == (1, 1)
        device = (await harness.devices())[KEY]
        assert device.allocations == () and device.health is Health.UNHEALTHY
        assert await harness.devices() == fold(list(events))

    async def test_a_batch_that_starts_after_a_gap_is_refused_whole(
        self, harness: Harness, observation: ObservationFactory, logged: LogFactory
    ) -> None:
        """Records handed out of order (a record prefetched before a rebalance) must not move the
        recorded offset past records the sink never got: they would be skipped as redeliveries."""
        await harness.sink.apply_batch(
            LoggedBatch(logged([observation(1), observation(2, at=1)]), consumed_from={P0: 0})
        )
        devices, progress = await harness.devices(), await harness.progress()
        hook = Hook()
        ahead = logged([observation(9, Health.UNHEALTHY, at=9)], start=595)
        with pytest.raises(RecordsAfterGap) as refused:
            await harness.sink.apply_batch(
                LoggedBatch(ahead, consumed_from={P0: 595, (TOPIC, 1): 0}), hook
            )
        assert refused.value.gaps == {P0: (1, 595)}
        assert await harness.devices() == devices and await harness.progress() == progress
        assert hook.seen == []  # nothing forwarded either
        # The next record in order is written; a partition without a recorded offset starts anywhere.
        stats = await harness.sink.apply_batch(
            LoggedBatch(
                logged([observation(3, at=3)], start=2), consumed_from={P0: 2, (TOPIC, 1): 40}
            )
        )
        assert stats.applied == 1

    async def test_a_batch_that_skips_a_record_is_refused_whole(
        self, harness: Harness, observation: ObservationFactory, logged: LogFactory
    ) -> None:
        """A record handed out of order inside a batch (offsets 2 and 4, not 3; seen after a
        worker kill on three brokers) must not be written past: the missing record would never
        be read again (the fault campaign lost one observation this way)."""
        await harness.sink.apply_batch(
            LoggedBatch(logged([observation(1), observation(2, at=1)]), consumed_from={P0: 0})
        )
        devices, progress = await harness.devices(), await harness.progress()
        skipping = LoggedBatch(
            [*logged([observation(3, at=3)], start=2), *logged([observation(5, at=5)], start=4)],
            consumed_from={P0: 2},
            consumed_holes={P0: 3},
        )
        with pytest.raises(RecordsAfterGap) as refused:
            await harness.sink.apply_batch(skipping)
        assert refused.value.gaps == {P0: (1, 3)}
        assert await harness.devices() == devices and await harness.progress() == progress
        # A hole at or before the recorded offset (a redelivered part) is harmless.
        redelivered = LoggedBatch(
            logged([observation(3, at=3)], start=2), consumed_from={P0: 0}, consumed_holes={P0: 1}
        )
        assert (await harness.sink.apply_batch(redelivered)).applied == 1

    async def test_observations_dropped_early_must_be_in_the_projection(
        self, harness: Harness, observation: ObservationFactory, logged: LogFactory
    ) -> None:
        """The worker's dedup table drops observations it says the projection has; one it does
        not have (the table ahead of the projection) would be lost behind the recorded offset,
        so the batch is refused whole (the fault campaign once lost 74 observations after a
        worker kill, the cause not found)."""
        await harness.sink.apply_batch(LoggedBatch(logged([observation(5)])))
        devices, progress = await harness.devices(), await harness.progress()
        resent, newer = logged([observation(5, at=1), observation(7, at=2)], start=1)
        with pytest.raises(EarlyDropsUnjustified) as refused:
            await harness.sink.apply_batch(
                LoggedBatch([], consumed_through={P0: 2}, dropped_early=[resent, newer])
            )
        assert refused.value.positions == [newer.position]
        assert (await harness.devices(), await harness.progress()) == (devices, progress)
        # Explained drops: a re-send of the committed version, and one of an earlier record of
        # the same batch; drops at or before the recorded offset are not checked.
        stale = logged([observation(4, at=1)], start=1)[0]
        second, again = logged([observation(8, at=3), observation(8, at=4)], start=2)
        stats = await harness.sink.apply_batch(
            LoggedBatch([second], consumed_through={P0: 3}, dropped_early=[stale, again])
        )
        assert stats.applied == 1
        assert (await harness.progress())[P0].offset == 3
        old = logged([observation(9, at=9)], start=0)[0]  # at the recorded offset: not checked
        assert (
            await harness.sink.apply_batch(
                LoggedBatch([], consumed_through={P0: 3}, dropped_early=[old])
            )
        ).redelivered == 0

    async def test_a_partition_with_nothing_recorded_must_start_at_its_first_offset(
        self, harness: Harness, observation: ObservationFactory, logged: LogFactory
    ) -> None:
        ahead = LoggedBatch(
            logged([observation(9)], start=511), consumed_from={P0: 511}, log_start={P0: 0}
        )
        with pytest.raises(RecordsAfterGap) as refused:
            await harness.sink.apply_batch(ahead)
        assert refused.value.gaps == {P0: (-1, 511)}
        assert await harness.progress() == {}
        from_start = LoggedBatch(
            logged([observation(1)], start=0), consumed_from={P0: 0}, log_start={P0: 0}
        )
        assert (await harness.sink.apply_batch(from_start)).applied == 1

    async def test_positions_already_recorded_are_skipped_whole(
        self, harness: Harness, observation: ObservationFactory, logged: LogFactory
    ) -> None:
        batch = LoggedBatch(logged([observation(1), observation(2, at=1)]))
        await harness.sink.apply_batch(batch)
        devices, progress = await harness.devices(), await harness.progress()
        hook = Hook()
        # The same positions with other events (a redelivery after a crash): nothing changes.
        again = LoggedBatch(logged([observation(9, Health.UNHEALTHY), observation(10, at=9)]))
        stats = await harness.sink.apply_batch(again, hook)
        assert stats == BatchStats(redelivered=2)
        assert (await harness.devices(), await harness.progress()) == (devices, progress)
        assert [p.transitions for p in hook.seen] == [[]]

    async def test_a_restarted_sink_resumes_after_the_last_committed_position(
        self, harness: Harness, observation: ObservationFactory, logged: LogFactory
    ) -> None:
        await harness.sink.apply_batch(LoggedBatch(logged([observation(1), observation(2, at=1)])))
        progress = await harness.progress()
        restarted = harness.restarted()
        stats = await restarted.apply_batch(
            LoggedBatch(logged([observation(1), observation(2, at=1), observation(3, at=2)]))
        )
        assert (stats.redelivered, stats.duplicates, stats.applied) == (2, 0, 1)
        assert progress[P0].offset == 1 and (await harness.progress())[P0].offset == 2

    async def test_the_hook_sees_the_transitions_and_the_progress_before_the_batch(
        self, harness: Harness, observation: ObservationFactory, logged: LogFactory
    ) -> None:
        await harness.sink.apply_batch(LoggedBatch(logged([observation(1, at=4)])))
        hook = Hook()
        events = [
            observation(2, at=5),  # same health: not a transition
            observation(3, Health.UNHEALTHY, at=6),
            observation(1, Health.UNHEALTHY, at=7, resource_id="GPU-1"),
        ]
        await harness.sink.apply_batch(LoggedBatch(logged(events, start=1)), hook)
        (pending,) = hook.seen
        assert [
            (t.position.offset, t.change.key, t.change.record.health) for t in pending.transitions
        ] == [
            (2, KEY, Health.UNHEALTHY),
            (3, ("gpu-node-a", "GPU-1"), Health.UNHEALTHY),
        ]
        assert [t.event for t in pending.transitions] == [events[1], events[2]]
        assert pending.applied_through == {P0: 0}
        assert pending.last_event_at == {P0: T0.replace(second=4)}
        assert pending.fresh(LogPosition(TOPIC, 0, 1)) and not pending.fresh(
            LogPosition(TOPIC, 0, 0)
        )

    async def test_the_hook_sees_the_workloads_on_devices_the_batch_made(
        self,
        harness: Harness,
        observation: ObservationFactory,
        release: ReleaseFactory,
        logged: LogFactory,
    ) -> None:
        """Issue 13: a Pod's workload record joins the devices it holds already (rows the batch
        does not touch otherwise), a new allocation joins the stored record, a release ends
        both."""
        await harness.sink.apply_batch(LoggedBatch(logged([observation(1)])))
        record = PodWorkloadObserved(
            "gpu-node-a", "ml", "train-0", "uid-1", 2, T0, migration_class=MigrationClass.SHARDED
        )
        hooks = [Hook(), Hook()]
        await harness.sink.apply_batch(
            LoggedBatch(
                event_times=[(LogPosition(TOPIC, 0, 1), T0)],
                workloads=[(LogPosition(TOPIC, 0, 1), record)],
            ),
            hooks[0],
        )
        events = [observation(3, at=2, resource_id="GPU-1"), release(4, at=3)]
        await harness.sink.apply_batch(LoggedBatch(logged(events, start=2)), hooks[1])
        seen = [
            (p.offset, f.resource_id, f.present, f.status_version, f.pod_uid)
            for hook in hooks
            for pending in hook.seen
            for p, f in pending.workloads_on_devices
        ]
        assert seen == [
            (1, "GPU-0", True, 2, "uid-1"),
            (2, "GPU-1", True, 3, "uid-1"),
            (3, "GPU-0", False, 4, "uid-1"),
            (3, "GPU-1", False, 4, "uid-1"),
        ]

    async def test_the_hook_sees_each_failures_increase_on_its_node_once(
        self, harness: Harness
    ) -> None:
        """Issue 16: a ``DRAFailureObserved`` with a node that raises its source's projected
        count reaches the hook as a ``NodeFailureObserved`` with the increase; the same count
        again (a re-publish, in the batch or a later one), or one without a node, does not."""

        def failure(uid: str, count: int, node: str | None = "gpu-node-a") -> DRAFailureObserved:
            return DRAFailureObserved(
                uid,
                count,
                FailureOrigin.EVENT,
                "ml",
                "p",
                "uid-p",
                node,
                "FailedPrepareDynamicResources",
                "m",
                FailureClass.RETRYABLE,
                "w",
                T0,
            )

        def batch(start: int, *records: DRAFailureObserved) -> LoggedBatch:
            items = [(LogPosition(TOPIC, 0, start + i), r) for i, r in enumerate(records)]
            return LoggedBatch(event_times=[(p, T0) for p, _ in items], failures=items)

        hooks = [Hook(), Hook()]
        await harness.sink.apply_batch(
            batch(0, failure("e1", 2), failure("e1", 2), failure("e2", 1, node=None)), hooks[0]
        )
        await harness.sink.apply_batch(
            batch(3, failure("e1", 2), failure("e1", 5), failure("e2", 4)), hooks[1]
        )
        seen = [
            [
                (p.offset, f.source_uid, f.occurrences, f.increase)
                for p, f in pending.failures_on_nodes
            ]
            for hook in hooks
            for pending in hook.seen
        ]
        assert seen == [[(0, "e1", 2, 2)], [(4, "e1", 5, 3), (5, "e2", 4, 3)]]

    async def test_the_hook_sees_each_pods_bound_to_ready_stages_once(
        self, harness: Harness
    ) -> None:
        """Issue 16: a ``PodLifecycleObserved`` with ``pod_ready`` stages reaches the hook as one
        ``NodeReadyObserved`` with them (its other stages left out); a record without one, or
        a redelivered batch (offsets already recorded), does not."""
        from services.domain.lifecycle import DevicePath, Stage
        from services.domain.lifecycle_events import PodLifecycleObserved, StageSample

        def pod(uid: str, *stages: Stage) -> PodLifecycleObserved:
            samples = tuple(StageSample(s, "gpu.example.com", DevicePath.DRA, 4.0) for s in stages)
            return PodLifecycleObserved("gpu-node-a", "ml", uid, uid, T0, samples)

        def batch(*records: PodLifecycleObserved) -> LoggedBatch:
            items = [(LogPosition(TOPIC, 0, i), r) for i, r in enumerate(records)]
            return LoggedBatch(event_times=[(p, T0) for p, _ in items], lifecycles=items)

        hooks = [Hook(), Hook()]
        records = (pod("a", Stage.POD_BOUND, Stage.POD_READY), pod("b", Stage.POD_BOUND))
        await harness.sink.apply_batch(batch(*records), hooks[0])
        await harness.sink.apply_batch(batch(*records), hooks[1])  # redelivered
        seen = [
            [
                (p.offset, r.pod_uid, [(s.device_class, s.path, s.seconds) for s in r.samples])
                for p, r in pending.ready_on_nodes
            ]
            for hook in hooks
            for pending in hook.seen
        ]
        assert seen == [[(0, "a", [("gpu.example.com", "dra", 4.0)])], []]

    async def test_a_failing_hook_rolls_the_batch_back(
        self, harness: Harness, observation: ObservationFactory, logged: LogFactory
    ) -> None:
        await harness.sink.apply_batch(LoggedBatch(logged([observation(1)])))
        devices, progress = await harness.devices(), await harness.progress()
        batch = LoggedBatch(
            logged([observation(2, Health.UNHEALTHY, at=3)], start=1), highwaters={P0: 9}
        )
        with pytest.raises(ConnectionResetError):
            await harness.sink.apply_batch(batch, Hook(ConnectionResetError("send failed")))
        assert (await harness.devices(), await harness.progress()) == (devices, progress)
        # Not recorded: the same batch applies in full when retried.
        stats = await harness.sink.apply_batch(batch, Hook())
        assert (stats.applied, stats.redelivered) == (1, 0)

    async def test_an_empty_batch_does_nothing_and_calls_no_hook(self, harness: Harness) -> None:
        hook = Hook()
        assert await harness.sink.apply_batch(LoggedBatch([]), hook) == BatchStats()
        assert hook.seen == [] and await harness.progress() == {}

    async def test_consumed_and_timed_positions_advance_the_progress_without_records(
        self, harness: Harness, observation: ObservationFactory, logged: LogFactory
    ) -> None:
        await harness.sink.apply_batch(LoggedBatch(logged([observation(1, at=2)])))
        batch = LoggedBatch(
            consumed_through={P0: 5},
            event_times=[(LogPosition(TOPIC, 0, 7), T0.replace(second=30))],
        )
        await harness.sink.apply_batch(batch)
        assert (await harness.progress())[P0] == Progress(7, None, T0.replace(second=30))
        # Older ones move nothing back.
        await harness.sink.apply_batch(
            LoggedBatch(event_times=[(LogPosition(TOPIC, 0, 3), T0.replace(second=50))])
        )
        assert (await harness.progress())[P0] == Progress(7, None, T0.replace(second=30))

    async def test_new_devices_of_a_node_at_the_ceiling_are_not_applied(
        self, harness: Harness, observation: ObservationFactory, logged: LogFactory
    ) -> None:
        """``max_devices_per_node``: the third new device of a node at a ceiling of 2 is refused
        (in the hook's ``over_ceiling``, with the reason), a known device and another node are
        not, and a refused record still counts as consumed."""
        first = [
            observation(1, resource_id="GPU-0"),
            observation(2, resource_id="GPU-1"),
            observation(3, Health.UNHEALTHY, resource_id="GPU-2"),
            observation(4, Health.UNHEALTHY, resource_id="GPU-0", at=1),
            observation(5, node="gpu-node-b", resource_id="GPU-9"),
        ]
        hook = Hook()
        stats = await harness.sink.apply_batch(
            LoggedBatch(logged(first), max_devices_per_node=2), hook
        )
        assert stats.over_ceiling == 1 and stats.applied == 4
        [refused] = hook.seen[0].over_ceiling
        assert refused.record.event == first[2] and refused.record.position.offset == 2
        assert "device ceiling: node 'gpu-node-a' already holds 2 devices" in refused.reason
        assert "GPU-2" in refused.reason
        devices = await harness.devices()
        assert set(devices) == {
            ("gpu-node-a", "GPU-0"),
            ("gpu-node-a", "GPU-1"),
            ("gpu-node-b", "GPU-9"),
        }
        assert devices[("gpu-node-a", "GPU-0")].health is Health.UNHEALTHY
        # The next batch: the node still holds 2 (counted from the tables), a known one updates.
        second = [
            observation(6, resource_id="GPU-3", at=2),
            observation(7, Health.UNHEALTHY, resource_id="GPU-1", at=2),
        ]
        hook = Hook()
        stats = await harness.restarted().apply_batch(
            LoggedBatch(logged(second, start=5), max_devices_per_node=2), hook
        )
        assert (stats.over_ceiling, stats.applied) == (1, 1)
        assert [o.record.event for o in hook.seen[0].over_ceiling] == [second[0]]
        assert (await harness.progress())[P0].offset == 6
        # Without a ceiling the same observation is applied.
        await harness.sink.apply_batch(LoggedBatch(logged([second[0]], start=7)))
        assert ("gpu-node-a", "GPU-3") in await harness.devices()

    async def test_the_ceiling_refuses_the_same_observations_whatever_the_batch_split(
        self, harness: Harness, observation: ObservationFactory, logged: LogFactory
    ) -> None:
        events = [
            observation(v, resource_id=f"GPU-{v % 5}", at=v, health=Health(h))
            for v, h in zip(range(1, 13), ["Healthy", "Unhealthy", "Unknown"] * 4, strict=True)
        ]
        log = logged(events)
        refused: list[int] = []
        for record in log:  # one record per batch
            hook = Hook()
            await harness.sink.apply_batch(LoggedBatch([record], max_devices_per_node=3), hook)
            refused += [o.record.position.offset for o in hook.seen[0].over_ceiling]
        whole = [
            o.record.position.offset for o in within_ceiling(log, set().__contains__, {}, 3)[1]
        ]
        assert refused == whole == [3, 4, 8, 9]
        kept = within_ceiling(log, set().__contains__, {}, 3)[0]
        assert await harness.devices() == fold([r.event for r in kept])

    async def test_workload_records_keep_the_newest_per_pod_and_skip_redeliveries(
        self, harness: Harness, observation: ObservationFactory, logged: LogFactory
    ) -> None:
        def record(uid: str, version: int | None, klass: MigrationClass) -> PodWorkloadObserved:
            return PodWorkloadObserved(
                "gpu-node-a", "ml", uid, uid, version, T0, migration_class=klass
            )

        cp, sh, nr = (
            MigrationClass.CHECKPOINTED,
            MigrationClass.SHARDED,
            MigrationClass.NON_RECOVERABLE,
        )
        first = [record("a", None, cp), record("a", 5, sh), record("b", 7, cp), record("a", 4, nr)]
        positions = [LogPosition(TOPIC, 0, i) for i in range(len(first))]
        await harness.sink.apply_batch(
            LoggedBatch(
                event_times=[(p, T0) for p in positions],
                workloads=list(zip(positions, first, strict=True)),
            )
        )
        assert await harness.workloads() == {"a": (5, "sharded"), "b": (7, "checkpointed")}
        # A redelivery with other records changes nothing; newer records win, unordered do not.
        later = [record("b", 99, nr), record("a", None, nr), record("b", 8, nr)]
        at = [LogPosition(TOPIC, 0, i) for i in range(3, 6)]
        await harness.sink.apply_batch(
            LoggedBatch(
                event_times=[(p, T0) for p in at], workloads=list(zip(at, later, strict=True))
            )
        )
        assert await harness.workloads() == {"a": (5, "sharded"), "b": (8, "non-recoverable")}
        assert (await harness.progress())[P0].offset == 5

    async def test_lifecycle_records_keep_the_first_per_pod_and_skip_redeliveries(
        self, harness: Harness
    ) -> None:
        def record(uid: str, seconds: float) -> PodLifecycleObserved:
            stages = (
                StageSample(Stage.POD_READY, "gpu.example.com", DevicePath.DRA, seconds),
                StageSample(Stage.CLAIM_ALLOCATED, "gpu.example.com", DevicePath.DRA, 1.0, "c"),
            )
            return PodLifecycleObserved("gpu-node-a", "ml", uid, uid, T0, stages)

        def ready(uid: str) -> tuple[str, str, str, str, str]:
            return (uid, "pod_ready", "gpu.example.com", "dra", "")

        first = [record("a", 5.0), record("a", 6.0), record("b", 7.0)]
        positions = [LogPosition(TOPIC, 0, i) for i in range(3)]
        await harness.sink.apply_batch(
            LoggedBatch(
                event_times=[(p, T0) for p in positions],
                lifecycles=list(zip(positions, first, strict=True)),
            )
        )
        stored = await harness.lifecycle_stages()
        assert (stored[ready("a")], stored[ready("b")]) == (5.0, 7.0)
        assert stored[("a", "claim_allocated", "gpu.example.com", "dra", "c")] == 1.0
        assert len(stored) == 4
        # A redelivery (offset 2) and a re-publish (offset 3) change nothing.
        at = [LogPosition(TOPIC, 0, i) for i in (2, 3)]
        again = [record("b", 70.0), record("a", 50.0)]
        await harness.sink.apply_batch(
            LoggedBatch(
                event_times=[(p, T0) for p in at], lifecycles=list(zip(at, again, strict=True))
            )
        )
        assert await harness.lifecycle_stages() == stored
        assert (await harness.progress())[P0].offset == 3


class FakeHarness(Harness):
    def __init__(self) -> None:
        self.projection = FakeProjection()
        self.sink = FakeSink(projection=self.projection)

    async def devices(self) -> dict[DeviceKey, DeviceRecord]:
        return dict(self.projection.devices)

    async def progress(self) -> dict[Partition, Progress]:
        p = self.projection
        return {
            part: Progress(p.offsets.get(part), p.highwaters.get(part), p.last_event_at.get(part))
            for part in sorted(p.offsets.keys() | p.highwaters.keys())
        }

    def restarted(self) -> BatchSink:
        return FakeSink(projection=self.projection)

    async def workloads(self) -> dict[str, tuple[int | None, str]]:
        return {
            uid: (r.status_version, r.migration_class.value)
            for uid, r in self.projection.workloads.items()
        }

    async def lifecycle_stages(self) -> dict[tuple[str, str, str, str, str], float]:
        return dict(self.projection.lifecycle_stages)


class StoreHarness(Harness):
    def __init__(self, engine: AsyncEngine, schema: str) -> None:
        self.engine, self.schema = engine, schema
        self.sink = ProjectionStore(engine, schema)
        self.reads = DeviceReads(engine, schema)

    async def devices(self) -> dict[DeviceKey, DeviceRecord]:
        page = await self.reads.list_devices(limit=10_000)
        return {d.key: d for d in page.items}

    async def progress(self) -> dict[Partition, Progress]:
        return {
            (p.topic, p.partition): Progress(p.offset, p.highwater, p.last_event_at)
            for p in await self.reads.partition_progress()
        }

    def restarted(self) -> BatchSink:
        return ProjectionStore(self.engine, self.schema)

    async def workloads(self) -> dict[str, tuple[int | None, str]]:
        async with self.engine.connect() as conn:
            result = await conn.execute(
                text(
                    "SELECT pod_uid, status_version, migration_class "
                    f'FROM "{self.schema}".pod_workloads'
                )
            )
            return {
                uid: (None if version is None else int(version), klass)
                for uid, version, klass in result
            }

    async def lifecycle_stages(self) -> dict[tuple[str, str, str, str, str], float]:
        async with self.engine.connect() as conn:
            result = await conn.execute(
                text(
                    "SELECT pod_uid, stage, device_class, path, claim_uid, seconds "
                    f'FROM "{self.schema}".pod_lifecycle_stages'
                )
            )
            return {(u, st, c, p, cl): sec for u, st, c, p, cl, sec in result}


class TestFakeSink(BatchSinkContract):
    @pytest.fixture
    def harness(self) -> Harness:
        return FakeHarness()


@pytest.mark.integration
class TestProjectionStore(BatchSinkContract):
    @pytest.fixture
    def harness(self, engine: AsyncEngine, fresh_schema: str) -> Harness:
        return StoreHarness(engine, fresh_schema)
