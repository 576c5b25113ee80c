"""``dra_failures`` written by the worker's path and rebuilt by the replay (issue 16 item 3): one
row per failure source with its largest count, whatever the order, the batch split and the
copies (a re-LIST, a restarted watcher); ``--verify`` reports a row that differs; the counts
``/metrics`` reads sum them."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from services.adapters.projection.compare import diff_projections
from services.adapters.projection.failure_sql import FailureCount, FailureReads
from services.adapters.projection.schema_admin import drop_schema
from services.adapters.projection.store import ProjectionStore
from services.domain.adoption.failure_classes import FailureClass
from services.domain.adoption.failure_events import DRAFailureObserved, FailureOrigin
from services.domain.batch import LoggedBatch
from services.domain.records import encode_record
from services.processes.replay.run import read_log, replay
from services.runtime.config import Settings
from tests.conftest import T0, SchemaFactory, publish

pytestmark = pytest.mark.integration

CLASSES = (
    ("FailedPrepareDynamicResources", FailureClass.RETRYABLE),
    ("FailedScheduling", FailureClass.NON_RETRYABLE),
    ("FailedUnprepareDynamicResources", FailureClass.NEEDS_CLEANUP),
)


def failure_log(seed: int = 5, count: int = 90) -> tuple[list[tuple[bytes, bytes]], dict[int, int]]:
    """Records of 9 Events, each published several times with growing and repeated counts in a
    shuffled order; and each Event's largest count."""
    rng = random.Random(seed)
    out, largest = [], {}
    for i in range(count):
        source = rng.randrange(9)
        reason, failure_class = CLASSES[source % 3]
        occurrences = rng.randrange(1, 6)
        largest[source] = max(largest.get(source, 0), occurrences)
        node = None if reason == "FailedScheduling" else f"gpu-{source % 2}"
        record = DRAFailureObserved(
            source_uid=f"event-{source}",
            occurrences=occurrences,
            origin=FailureOrigin.EVENT,
            namespace=f"team-{source % 2}",
            pod_name=f"pod-{source}",
            pod_uid=f"uid-{source}",
            node_name=node,
            reason=reason,
            message=f"message {i}",
            failure_class=failure_class,
            why="w",
            observed_at=T0 + timedelta(seconds=i),
        )
        out.append((record.node.encode(), encode_record(record)))
    return out, largest


@pytest.fixture
async def topic(stream_settings: Settings, kafka_bootstrap: str) -> tuple[Settings, dict[int, int]]:
    records, largest = failure_log()
    await publish(kafka_bootstrap, stream_settings.topic, records)
    return stream_settings, largest


async def reference(engine: AsyncEngine, settings: Settings, schema: str, size: int) -> None:
    """The records through ``apply_batch`` without a cache (the worker's path), twice: the
    second pass is a redelivery of every batch."""
    store = ProjectionStore(engine, schema)
    end_offsets: dict[tuple[str, int], int] = {}
    for _ in range(2):
        async for batch in read_log(
            settings.kafka_bootstrap_servers,
            settings.topic,
            batch_size=size,
            end_offsets=end_offsets,
        ):
            await store.apply_batch(
                LoggedBatch(
                    batch.records,
                    end_offsets,
                    event_times=batch.event_times,
                    failures=batch.failures,
                )
            )


async def failure_rows(engine: AsyncEngine, schema: str) -> list[Any]:
    async with engine.connect() as conn:
        result = await conn.execute(
            text(f'SELECT * FROM "{schema}".dra_failures ORDER BY source_uid')
        )
        return [tuple(r) for r in result]


@pytest.mark.parametrize("size", [5000, 7])
async def test_replay_rebuilds_dra_failures_and_verify_compares_them(
    topic: tuple[Settings, dict[int, int]],
    engine: AsyncEngine,
    new_schema: SchemaFactory,
    size: int,
) -> None:
    settings, largest = topic
    expected = await new_schema()
    await reference(engine, settings, expected, size)
    stored = await failure_rows(engine, expected)
    assert [(r[0], r[1]) for r in stored] == [(f"event-{s}", largest[s]) for s in sorted(largest)]
    counts = await FailureReads(engine, expected).counts()
    by_class: dict[str, int] = {}
    for c in counts:
        by_class[c.failure_class] = by_class.get(c.failure_class, 0) + c.total
    assert by_class == {
        cls.value: sum(n for s, n in largest.items() if s % 3 == i)
        for i, (_, cls) in enumerate(CLASSES)
    }
    assert all(isinstance(c, FailureCount) and c.namespace.startswith("team-") for c in counts)
    replayed = f"{expected}_r"
    try:
        summary = await replay(
            settings,
            engine=engine,
            database_url=settings.database_url,
            schema=replayed,
            batch_size=13,
        )
        assert summary.read == 90 and summary.undecodable == 0
        assert await failure_rows(engine, replayed) == stored
        assert await diff_projections(engine, expected, replayed) == []
        async with engine.begin() as conn:
            await conn.execute(
                text(
                    f'UPDATE "{replayed}".dra_failures SET occurrences = occurrences + 1 '
                    "WHERE source_uid = 'event-3'"
                )
            )
        differences = await diff_projections(engine, expected, replayed)
        assert len(differences) == 1
        assert differences[0].startswith("dra_failures source_uid='event-3': ")
    finally:
        await drop_schema(engine, replayed)
