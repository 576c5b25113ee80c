"""``pod_lifecycle_stages`` (issue 16 item 5) from ``PodLifecycleObserved`` records on the real
broker and PostgreSQL: the real worker writes them (first record of a Pod wins, a re-publish
writes nothing, a device event beside them flows as before); the replay rebuilds the same rows
whatever the batch split, and ``--verify`` reports a row that differs."""

from __future__ import annotations

import random
import signal
from datetime import timedelta
from typing import Any

import orjson
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from services.adapters.projection.compare import diff_projections
from services.adapters.projection.schema_admin import drop_schema
from services.domain.lifecycle import DevicePath, Stage
from services.domain.lifecycle_events import PodLifecycleObserved, StageSample
from services.domain.records import encode_record
from services.processes.replay.run import replay
from services.runtime.config import Settings
from tests.conftest import T0, publish
from tests.streams.test_worker_integration import WORKER_ARGS, wait_until

pytestmark = pytest.mark.integration

NODES = ("gpu-a", "gpu-b", "gpu-c")


def lifecycle_log(seed: int = 5, count: int = 60) -> list[tuple[bytes, bytes]]:
    """Records of 20 Pods, some published two or three times with other seconds (first wins)."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        pod = rng.randrange(20)
        node = NODES[pod % len(NODES)]
        path = DevicePath.DRA if pod % 2 else DevicePath.DEVICE_PLUGIN
        cls = "gpu.example.com" if pod % 2 else "example.com/gpu"
        stages = [
            StageSample(Stage.POD_BOUND, cls, path, float(i)),
            StageSample(Stage.POD_READY, cls, path, i / 2),
        ]
        if path is DevicePath.DRA:
            stages.append(StageSample(Stage.CLAIM_ALLOCATED, cls, path, 1.0, f"claim-{pod}"))
        record = PodLifecycleObserved(
            node, "ml", f"pod-{pod}", f"uid-{pod:02d}", T0 + timedelta(seconds=i), tuple(stages)
        )
        out.append((node.encode(), encode_record(record)))
    return out


async def stage_rows(engine: AsyncEngine, schema: str) -> list[Any]:
    async with engine.connect() as conn:
        result = await conn.execute(
            text(
                f'SELECT * FROM "{schema}".pod_lifecycle_stages '
                "ORDER BY pod_uid, stage, device_class, path, claim_uid"
            )
        )
        return [tuple(r) for r in result]


async def test_the_worker_writes_them_and_the_replay_verifies_them(
    stream_settings: Settings, engine: AsyncEngine, kafka_bootstrap: str, worker_process: Any
) -> None:
    log = lifecycle_log()
    await publish(kafka_bootstrap, stream_settings.topic, log)
    first: dict[str, Any] = {}  # the first record of each Pod gives its rows
    for _, value in log:
        body = orjson.loads(value)
        first.setdefault(body["podUID"], body)
    schema = stream_settings.database_schema
    worker = worker_process(stream_settings, *WORKER_ARGS)

    async def caught_up() -> bool:
        try:
            return len({r[0] for r in await stage_rows(engine, schema)}) == len(first)
        except Exception:  # the worker has not migrated the schema yet
            return False

    await wait_until(caught_up, 90, "the lifecycle rows", worker)
    stored = await stage_rows(engine, schema)
    assert len(first) < len(log)  # some Pods were published again
    pod_bound = {r[0]: r[9] for r in stored if r[1] == "pod_bound"}
    assert pod_bound == {
        uid: next(s["seconds"] for s in body["stages"] if s["stage"] == "pod_bound")
        for uid, body in first.items()
    }
    worker.signal(signal.SIGTERM)
    worker.process.wait(30)
    tampered = sorted(first)[0]

    for size in (5000, 7):
        replayed = f"{schema}_r{size}"
        try:
            summary = await replay(
                stream_settings,
                engine=engine,
                database_url=stream_settings.database_url,
                schema=replayed,
                batch_size=size,
            )
            assert summary.read == len(log) and summary.undecodable == 0
            assert await stage_rows(engine, replayed) == stored
            assert await diff_projections(engine, schema, replayed) == []
            async with engine.begin() as conn:
                await conn.execute(
                    text(
                        f'UPDATE "{replayed}".pod_lifecycle_stages SET seconds = 99 '
                        "WHERE pod_uid = :uid AND stage = 'pod_ready'"
                    ),
                    {"uid": tampered},
                )
            [difference] = await diff_projections(engine, schema, replayed)
            assert difference.startswith(f"pod_lifecycle_stages pod_uid='{tampered}'")
        finally:
            await drop_schema(engine, replayed)
