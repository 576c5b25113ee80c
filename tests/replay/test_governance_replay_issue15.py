"""``devicestate replay --governance --verify`` on the signals of issue 15, through the real
pipeline (health topic -> real worker: forwarding, event-time merge, governor -> PostgreSQL): all
eight GPUs of one node fault within 0.7 s (one node incident), and the watcher's ticks report a
watch that stays silent for three minutes (stale, then fresh). The replay folds the governance
topic again in one process and must find the same rows, decisions included."""

from __future__ import annotations

from typing import Any
from uuid import uuid4

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from services.domain.events import Health
from services.domain.node_events import WatcherTick, encode_node_event
from services.runtime.config import Settings
from tests.replay.test_replay import drop, run_replay
from tests.streams.test_governor_integration import Pipeline, Record, at, observation, stop

pytestmark = pytest.mark.integration

PARTITIONS = 3
NODE = "gpu-node-a"
GPUS = [f"GPU-{i}" for i in range(8)]


def ticks(seconds: float, seen: float) -> list[Record]:
    """A tick to every partition at ``seconds``, reporting a watch delivery at ``seen``."""
    out = []
    for p in range(PARTITIONS):
        event = WatcherTick(p, at(seconds), watch_seen_at=at(seen))
        out.append((event.node.encode(), encode_node_event(event), p))
    return out


async def test_a_node_incident_and_a_stale_watch_replay_identically(
    stream_settings: Settings, engine: AsyncEngine, kafka_bootstrap: str, worker_process: Any
) -> None:
    settings = stream_settings.model_copy(
        update={"breaker_min_devices": 1000, "breaker_min_nodes": 1000}
    )
    schema = f"replay_{uuid4().hex[:12]}"
    async with Pipeline(settings, engine, kafka_bootstrap) as pipe:
        pipe.worker = worker_process(settings)
        healthy = [observation(NODE, g, Health.HEALTHY, i + 1, 0) for i, g in enumerate(GPUS)]
        await pipe.wave([*ticks(0, 0), *healthy, *ticks(1, 1)])
        faults = [
            observation(NODE, g, Health.UNHEALTHY, 10 + i, 10 + i * 0.1) for i, g in enumerate(GPUS)
        ]
        await pipe.wave([*faults, *ticks(11, 11)])
        for t in range(30, 211, 30):  # the watch delivers nothing more after 11 s
            await pipe.wave(ticks(t, 11))
        await pipe.wave(ticks(240, 239))  # a BOOKMARK at 239 s: fresh again
        kinds = await pipe.kinds()
        await stop(pipe.worker)
    assert kinds.count("NodeFaultIncidentOpened") == 1
    assert kinds.count("NodeFaultIncidentUpdated") == 4
    assert kinds.count("DeviceQuarantined") == 8
    assert kinds.count("WatchStale") == 1 and kinds.count("WatchFresh") == 1
    assert "DeviceIncidentOpened" not in kinds  # no device read Unknown from the silence
    try:
        result = await run_replay(settings, "--governance", "--schema", schema, "--verify")
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"verify: {schema} is identical to {settings.database_schema}" in result.stdout
    finally:
        await drop(engine, schema)
