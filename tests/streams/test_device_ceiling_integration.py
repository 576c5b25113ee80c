"""The device ceiling (issue 11, item 2) end to end, against the real broker and PostgreSQL: the
worker (``python -m streams.cli``) with ``DEVICESTATE_MAX_DEVICES_PER_NODE=4``, a hot node
reporting 10 devices beside a normal node, ``devicestate replay --verify`` and
``--governance --verify``.

Before the ceiling reached the directory, every device of the hot node was written to the
projection (the governor alone refused them), so the directory held all 10.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from uuid import uuid4

import orjson
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from services.domain.event_codec import encode_event
from services.domain.events import ContainerRef, DeviceHealthObserved, DeviceSource, Health
from services.runtime.config import Settings
from tests.streams.test_governor_integration import T0, Pipeline, Record, stop
from tests.streams.test_worker_integration import read_topic

pytestmark = pytest.mark.integration

HOT, CALM = "hot-node", "calm-node"
CEILING = 4


def observed(node: str, index: int, version: int, seconds: float, health: Health) -> Record:
    event = DeviceHealthObserved(
        node=node,
        namespace="ml",
        pod_name=f"job-{node}-{index}",
        pod_uid=f"uid-{node}-{index}",
        containers=(ContainerRef("main"),),
        resource_name="nvidia.com/gpu",
        resource_id=f"GPU-{index}",
        health=health,
        source=DeviceSource.DEVICE_PLUGIN,
        status_version=version,
        observed_at=T0 + timedelta(seconds=seconds),
        message="XID 79" if health is Health.UNHEALTHY else None,
    )
    return (node.encode(), encode_event(event), None)


def letter_sources(message: Any) -> list[str]:
    """The ``topic/partition/offset`` of each original a dead letter holds."""
    headers = dict(message.headers)
    if "devicestate-records" not in headers:
        return [headers["devicestate-source"].decode()]
    records = orjson.loads(message.value)["records"]
    assert len(records) == int(headers["devicestate-records"])
    return [r["source"] for r in records]


async def test_a_node_over_the_ceiling_is_cut_in_the_directory_flagged_and_replayed_alike(
    stream_settings: Settings, engine: AsyncEngine, worker_process: Any
) -> None:
    settings = stream_settings.model_copy(
        update={"max_devices_per_node": CEILING, "worker_batch_size": 3}
    )
    hot = [observed(HOT, i, 100 + i, 1 + i, Health.HEALTHY) for i in range(10)]
    calm = [observed(CALM, i, 200 + i, 1 + i, Health.HEALTHY) for i in range(CEILING - 1)]
    # Later: a device the directory holds goes Unhealthy (governed), one it refused too (not).
    later = [
        observed(HOT, 1, 300, 20, Health.UNHEALTHY),
        observed(HOT, 8, 301, 21, Health.UNHEALTHY),
        observed(CALM, 2, 302, 22, Health.UNHEALTHY),
    ]
    async with Pipeline(settings, engine, settings.kafka_bootstrap_servers) as pipe:
        pipe.worker = worker_process(settings)
        await pipe.wave([*hot, *calm])
        await pipe.wave(later)
        await stop(pipe.worker)

        devices = await pipe.rows("SELECT node, resource_id FROM {s}.devices ORDER BY 1, 2")
        assert [(r.node, r.resource_id) for r in devices] == [
            *((CALM, f"GPU-{i}") for i in range(CEILING - 1)),
            *((HOT, f"GPU-{i}") for i in range(CEILING)),  # the first four in log order
        ]
        letters = await read_topic(
            settings.kafka_bootstrap_servers, settings.dead_letter_topic, 100, seconds=8
        )
        stages = sorted(dict(m.headers)["devicestate-stage"].decode() for m in letters)
        # 7 refused (GPU-4..9 and GPU-8 again), each dead-lettered once: the governor got the
        # first one of each batch and refused it as well; the health agent's others of a batch
        # share one letter (streams.ceiling).
        sources = [s for m in letters for s in letter_sources(m)]
        assert len(sources) == 7 == len(set(sources)), (stages, sources)
        assert set(stages) == {"device-ceiling", "governor-device-ceiling"}
        assert all(m.key == HOT.encode() for m in letters)
        reasons = [dict(m.headers)["devicestate-reason"].decode() for m in letters]
        assert any("node 'hot-node' already holds 4 devices" in r for r in reasons), reasons

        flagged = [d for d in await pipe.decisions() if d["type"] == "DataQualityFlagged"]
        # One flag, dated at the node's first refused observation (GPU-4, at 5 s).
        assert [(d["node"], d["details"]["conflict"], d["at"]) for d in flagged] == [
            (HOT, "device-ceiling", "2026-12-01T09:00:05Z")
        ]
        quarantined = await pipe.rows(
            "SELECT node, resource_id FROM {s}.quarantines ORDER BY node, resource_id"
        )
        assert [(q.node, q.resource_id) for q in quarantined] == [(CALM, "GPU-2"), (HOT, "GPU-1")]

    from tests.replay.test_replay import drop, run_replay

    schema, governance = (f"replay_{uuid4().hex[:12]}" for _ in range(2))
    try:
        result = await run_replay(settings, "--schema", schema, "--verify")
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"verify: {schema} is identical to {settings.database_schema}" in result.stdout
        result = await run_replay(settings, "--governance", "--schema", governance, "--verify")
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"verify: {governance} is identical" in result.stdout
    finally:
        await drop(engine, schema, governance)
