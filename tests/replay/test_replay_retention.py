"""Retention end to end (issue 11 item 9): the real worker, with a history retention of a day,
prunes ``device_history`` and forgets pod-04's claim aliases once the Pod is gone and eight days
of its partition's event time have passed; ``devicestate replay --verify`` with the same setting
rebuilds identical tables from the log, which still holds everything."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import uuid4

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from services.domain.event_codec import encode_event
from services.domain.events import PodDevicesReleased, ReleaseReason
from services.runtime.config import Settings
from tests.projection.inventory_examples import (
    CDI_GPU_2,
    CDI_GPU_3,
    NODE,
    UUID_GPU_2,
    at,
    inventory_events,
    plugin_gpu,
    pod_04,
)
from tests.replay.test_replay import drop, run_replay
from tests.streams.test_governor_integration import PARTITIONS, T0, Pipeline, Record, stop, tick
from tests.streams.test_inventory_integration import inventory, observed

pytestmark = pytest.mark.integration

DAY = 86400.0
BASE = -20 * DAY
"""Three weeks in the past: the records' observedAt stay behind the broker's clock (a record
ahead of it counts at its append time, which would squeeze the eight days of this log)."""


def ticks(when: datetime) -> list[Record]:
    return [tick(p, (when - T0).total_seconds()) for p in range(PARTITIONS)]


def released(seconds: float) -> Record:
    o = pod_04()[0]
    event = PodDevicesReleased(
        NODE, o.namespace, o.pod_name, o.pod_uid, ReleaseReason.DELETED, None, at(seconds)
    )
    return (NODE.encode(), encode_event(event), None)


async def test_the_worker_prunes_and_the_replay_rebuilds_the_same_tables(
    stream_settings: Settings, engine: AsyncEngine, kafka_bootstrap: str, worker_process: Any
) -> None:
    settings = stream_settings.model_copy(update={"device_history_retention_seconds": DAY})
    async with Pipeline(settings, engine, kafka_bootstrap) as pipe:
        pipe.worker = worker_process(settings)
        await pipe.wave([*map(inventory, inventory_events(BASE)), *ticks(at(BASE + 1))])
        await pipe.wave([*map(observed, pod_04(BASE + 10)), *ticks(at(BASE + 11))])
        ids = {
            r.resource_id for r in await pipe.rows("SELECT resource_id FROM {s}.device_identities")
        }
        assert {CDI_GPU_2, CDI_GPU_3} <= ids
        await pipe.wave([released(BASE + 100), *ticks(at(BASE + 101))])
        later = BASE + 8 * DAY
        await pipe.wave([observed(plugin_gpu(later)), *ticks(at(later + 1))])

        ids = {
            r.resource_id for r in await pipe.rows("SELECT resource_id FROM {s}.device_identities")
        }
        assert CDI_GPU_2 not in ids and CDI_GPU_3 not in ids
        assert UUID_GPU_2 in ids
        history = await pipe.rows("SELECT resource_id, observed_at FROM {s}.device_history")
        assert [(r.resource_id, r.observed_at) for r in history] == [(UUID_GPU_2, at(later))]
        await stop(pipe.worker)

    schema = f"replay_{uuid4().hex[:12]}"
    try:
        result = await run_replay(settings, "--schema", schema, "--verify")
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"verify: {schema} is identical to {settings.database_schema}" in result.stdout
        replayed = await pipe.rows(f'SELECT count(*) AS n FROM "{schema}".device_history')
        assert replayed[0].n == 1
    finally:
        await drop(engine, schema)
