"""``ProjectionStore.apply_batch``'s hook for the governance forwarding: it runs inside the
transaction with the batch's transitions, its failure rolls the batch back, and node events'
event times advance the partition progress."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from services.adapters.projection.reads_devices import DeviceReads
from services.adapters.projection.store import ProjectionStore
from services.domain.batch import LoggedBatch, PendingCommit
from services.domain.events import Health
from services.domain.log import LogPosition
from tests.conftest import T0, TOPIC, LogFactory, ObservationFactory

pytestmark = pytest.mark.integration


async def count_devices(engine: AsyncEngine, schema: str) -> int:
    async with engine.connect() as conn:
        result = await conn.execute(text(f'SELECT count(*) FROM "{schema}".devices'))
        return int(result.scalar_one())


async def test_hook_sees_the_transitions_before_the_commit(
    store: ProjectionStore,
    engine: AsyncEngine,
    observation: ObservationFactory,
    logged: LogFactory,
) -> None:
    log = logged(
        [
            observation(1, at=0),  # first seen: a transition
            observation(2, at=1),  # same health: no transition
            observation(3, Health.UNHEALTHY, at=2),  # a transition
            observation(3, Health.UNHEALTHY, at=2),  # duplicate
            observation(1, resource_id="GPU-1", at=3),  # first seen
        ]
    )
    seen: list[PendingCommit] = []
    visible: list[int] = []

    async def hook(commit: PendingCommit) -> None:
        seen.append(commit)
        visible.append(await count_devices(engine, store.schema))  # another connection

    stats = await store.apply_batch(LoggedBatch(log), hook)
    [commit] = seen
    assert [(t.position.offset, t.change.record.health) for t in commit.transitions] == [
        (0, Health.HEALTHY),
        (2, Health.UNHEALTHY),
        (4, Health.HEALTHY),
    ]
    assert all(t.change.transition for t in commit.transitions)
    assert commit.applied_through == {} and commit.last_event_at == {}
    assert visible == [0]  # not committed while the hook ran
    assert stats.transitions == 3
    assert await count_devices(engine, store.schema) == 2

    # Redelivered: skipped whole, no transitions; the recorded offset and event time are shown.
    await store.apply_batch(LoggedBatch(log), hook)
    assert seen[1].transitions == []
    assert seen[1].applied_through == {(TOPIC, 0): 4}
    assert seen[1].last_event_at == {(TOPIC, 0): T0 + timedelta(seconds=3)}


async def test_a_failing_hook_rolls_the_batch_back(
    store: ProjectionStore,
    reads: DeviceReads,
    engine: AsyncEngine,
    observation: ObservationFactory,
    logged: LogFactory,
) -> None:
    async def hook(commit: PendingCommit) -> None:
        raise ConnectionError("governance topic unreachable")

    with pytest.raises(ConnectionError):
        await store.apply_batch(LoggedBatch(logged([observation(1)])), hook)
    assert await count_devices(engine, store.schema) == 0
    assert await reads.partition_progress() == []
    retried = await store.apply_batch(LoggedBatch(logged([observation(1)])))
    assert retried.applied == 1  # retry works


async def test_event_times_advance_the_progress_unless_already_applied(
    store: ProjectionStore, reads: DeviceReads, observation: ObservationFactory, logged: LogFactory
) -> None:
    await store.apply_batch(LoggedBatch(logged([observation(1, at=5)])))
    ticks = [
        (LogPosition(TOPIC, 0, 0), T0 + timedelta(seconds=100)),  # at the recorded offset
        (LogPosition(TOPIC, 0, 3), T0 + timedelta(seconds=9)),
        (LogPosition(TOPIC, 1, 0), T0 + timedelta(seconds=7)),
    ]
    seen: list[PendingCommit] = []

    async def hook(commit: PendingCommit) -> None:
        seen.append(commit)

    await store.apply_batch(LoggedBatch([], event_times=ticks), hook)
    progress = {
        (p.topic, p.partition): (p.offset, p.last_event_at)
        for p in await reads.partition_progress()
    }
    assert progress == {
        (TOPIC, 0): (3, T0 + timedelta(seconds=9)),
        (TOPIC, 1): (0, T0 + timedelta(seconds=7)),
    }
    assert seen[0].applied_through == {(TOPIC, 0): 0}
    assert seen[0].fresh(LogPosition(TOPIC, 0, 3)) and not seen[0].fresh(LogPosition(TOPIC, 0, 0))


async def test_a_hook_with_a_cache_is_refused(
    store: ProjectionStore, observation: ObservationFactory, logged: LogFactory
) -> None:
    from services.adapters.projection.cache import DeviceCache

    async def hook(commit: PendingCommit) -> None:
        return None

    with pytest.raises(ValueError, match="before_commit"):
        await store.apply_batch(LoggedBatch(logged([observation(1)])), hook, cache=DeviceCache())
