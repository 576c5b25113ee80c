"""``pod_workloads`` rebuilt by the replay (issue 13 item 1): the same rows as the worker's path
(``apply_batch`` without a cache) writes from the same log, whatever the batch split, and
``--verify`` (:func:`~services.adapters.projection.compare.diff_projections`) reports a row that
differs."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from services.adapters.projection.compare import diff_projections
from services.adapters.projection.schema_admin import drop_schema
from services.adapters.projection.store import ProjectionStore
from services.domain.batch import LoggedBatch
from services.domain.records import encode_record
from services.domain.workloads.events import PodWorkloadObserved
from services.domain.workloads.migration import MigrationClass
from services.domain.workloads.owners import OwnerLink
from services.processes.replay.run import read_log, replay
from services.runtime.config import Settings
from tests.conftest import T0, SchemaFactory, publish

pytestmark = pytest.mark.integration

NODES = ("gpu-a", "gpu-b", "gpu-c")


def workload_log(seed: int = 3, count: int = 120) -> list[tuple[bytes, bytes]]:
    """Records of 12 Pods in a shuffled order of versions (stale and unordered ones too)."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        pod = rng.randrange(12)
        node = NODES[pod % len(NODES)]
        version = None if rng.random() < 0.15 else rng.randrange(1, 60)
        chain = (OwnerLink("Job", f"job-{i}", f"job-uid-{i}", "batch/v1"),) if i % 2 else ()
        record = PodWorkloadObserved(
            node=node,
            namespace="ml",
            pod_name=f"pod-{pod}",
            pod_uid=f"uid-{pod:02d}",
            status_version=version,
            observed_at=T0 + timedelta(seconds=i),
            chain=chain,
            migration_class=list(MigrationClass)[i % 3],
            migration_reasons=(f"reason {i}",) if i % 5 == 0 else (),
        )
        out.append((node.encode(), encode_record(record)))
    return out


@pytest.fixture
async def topic(stream_settings: Settings, kafka_bootstrap: str) -> Settings:
    await publish(kafka_bootstrap, stream_settings.topic, workload_log())
    return stream_settings


async def reference(engine: AsyncEngine, settings: Settings, schema: str, size: int) -> None:
    """The records through ``apply_batch`` without a cache (the worker's path)."""
    store = ProjectionStore(engine, schema)
    end_offsets: dict[tuple[str, int], int] = {}
    async for batch in read_log(
        settings.kafka_bootstrap_servers, settings.topic, batch_size=size, end_offsets=end_offsets
    ):
        await store.apply_batch(
            LoggedBatch(
                batch.records,
                end_offsets,
                event_times=batch.event_times,
                workloads=batch.workloads,
            )
        )


async def workload_rows(engine: AsyncEngine, schema: str) -> list[Any]:
    async with engine.connect() as conn:
        result = await conn.execute(
            text(f'SELECT * FROM "{schema}".pod_workloads ORDER BY pod_uid')
        )
        return [tuple(r) for r in result]


@pytest.mark.parametrize("size", [5000, 7])
async def test_replay_rebuilds_pod_workloads_and_verify_compares_them(
    topic: Settings, engine: AsyncEngine, new_schema: SchemaFactory, size: int
) -> None:
    expected = await new_schema()
    await reference(engine, topic, expected, size)
    stored = await workload_rows(engine, expected)
    assert len(stored) == 12
    replayed = f"{expected}_r"
    try:
        summary = await replay(
            topic, engine=engine, database_url=topic.database_url, schema=replayed, batch_size=13
        )
        assert summary.read == 120 and summary.undecodable == 0
        assert await workload_rows(engine, replayed) == stored
        assert await diff_projections(engine, expected, replayed) == []
        async with engine.begin() as conn:
            await conn.execute(
                text(
                    f'UPDATE "{replayed}".pod_workloads SET migration_class = '
                    "'sharded', chain_complete = false WHERE pod_uid = 'uid-03'"
                )
            )
        differences = await diff_projections(engine, expected, replayed)
        assert len(differences) == 1 and differences[0].startswith(
            "pod_workloads pod_uid='uid-03': "
        )
        assert "chain_complete: True != False" in differences[0]
    finally:
        await drop_schema(engine, replayed)
