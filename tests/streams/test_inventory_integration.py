"""The DRA inventory end to end against the real broker and PostgreSQL (issue 4): the worker
(``python -m streams.cli``) folds the shared examples' ResourceSlice, ResourceClaim and
DeviceClass and pod-04's observations into the inventory tables, forwards HealthTransitions keyed
on the physical device and InventoryConflicts the governor turns into DataQualityFlagged alerts,
resolves the same way after a restart, and ``devicestate replay --verify`` finds the replayed
inventory identical.

Records are published in waves, each waited for until the worker committed it and the governor
folded what it forwarded (:class:`tests.streams.test_governor_integration.Pipeline`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any
from uuid import uuid4

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from services.domain.event_codec import encode_event
from services.domain.events import DeviceHealthObserved, Health
from services.domain.governance.input_batch import decode_records
from services.domain.governance.inputs import GovernanceInput, HealthTransition, InventoryConflict
from services.domain.inventory.events import InventoryObserved
from services.domain.records import encode_record
from services.runtime.config import Settings
from tests.projection.inventory_examples import (
    CDI_GPU_2,
    CDI_GPU_3,
    GPU_2,
    GPU_3,
    NODE,
    UUID_GPU_2,
    UUID_GPU_3,
    at,
    inventory_events,
    plugin_gpu,
    pod_04,
    slice_event,
)
from tests.streams.test_governor_integration import PARTITIONS, Pipeline, Record, stop, tick
from tests.streams.test_worker_integration import read_topic

pytestmark = pytest.mark.integration


def inventory(event: InventoryObserved) -> Record:
    return (event.key.encode(), encode_record(event), None)


def observed(event: DeviceHealthObserved) -> Record:
    return (event.node.encode(), encode_event(event), None)


def ticks(seconds: float) -> list[Record]:
    return [tick(p, seconds) for p in range(PARTITIONS)]


async def governance_records(pipe: Pipeline) -> list[GovernanceInput]:
    end = await pipe.governance_end()
    messages = await read_topic(pipe.bootstrap, pipe.settings.governance_topic, end, 30)
    return [r for m in messages for r, _ in decode_records(m.value)]


def of_type(records: Sequence[GovernanceInput], kind: type[Any]) -> list[Any]:
    return [r for r in records if isinstance(r, kind)]


async def test_inventory_identities_conflicts_restart_and_replay(
    stream_settings: Settings, engine: AsyncEngine, kafka_bootstrap: str, worker_process: Any
) -> None:
    settings = stream_settings
    async with Pipeline(settings, engine, kafka_bootstrap) as pipe:
        pipe.worker = worker_process(settings)
        # 1. The DRA objects, then pod-04: its CDI-form IDs resolve through the claim.
        await pipe.wave([*map(inventory, inventory_events(0)), *ticks(1)])
        await pipe.wave([*map(observed, pod_04(10)), *ticks(11)])
        rows = await pipe.rows(
            "SELECT resource_id, device_id, owner, status, uuid FROM {s}.device_identities "
            "ORDER BY resource_id"
        )
        assert [tuple(r) for r in rows] == [
            (
                "accel.example.org/gpu-node-a/accel-1",
                "accel.example.org/gpu-node-a/accel-1",
                "dra",
                "as-reported",
                None,
            ),
            (CDI_GPU_2, GPU_2, "dra", "resolved", UUID_GPU_2),
            (CDI_GPU_3, GPU_3, "dra", "resolved", UUID_GPU_3),
        ]
        objects = await pipe.rows(
            "SELECT kind, object_key, deleted FROM {s}.inventory_objects ORDER BY kind"
        )
        assert [(r.kind, r.deleted) for r in objects] == [
            ("DeviceClass", False),
            ("ResourceClaim", False),
            ("ResourceSlice", False),
        ]
        transitions = of_type(await governance_records(pipe), HealthTransition)
        by_id = {t.resource_id: t for t in transitions}
        assert (by_id[CDI_GPU_2].device_id, by_id[CDI_GPU_2].identity, by_id[CDI_GPU_2].uuid) == (
            GPU_2,
            "resolved",
            UUID_GPU_2,
        )
        assert (by_id[CDI_GPU_3].device_id, by_id[CDI_GPU_3].uuid) == (GPU_3, UUID_GPU_3)
        governed = await pipe.rows(
            "SELECT resource_id FROM {s}.device_governance WHERE node = 'gpu-node-a' "
            "ORDER BY resource_id"
        )
        assert [r.resource_id for r in governed] == [
            "accel.example.org/gpu-node-a/accel-1",
            GPU_2,
            GPU_3,
        ]

        # 2. A device plugin reports the GPU the slice publishes as gpu-2 (stream-09's UUID).
        await pipe.wave([observed(plugin_gpu(20)), *ticks(21)])
        conflicts = await pipe.rows(
            "SELECT kind, node, subject, active, first_seen FROM {s}.inventory_conflicts"
        )
        assert [tuple(r) for r in conflicts] == [("plugin-and-dra", NODE, UUID_GPU_2, True, at(20))]
        [raised] = of_type(await governance_records(pipe), InventoryConflict)
        assert (raised.kind, raised.subject, raised.active) == ("plugin-and-dra", UUID_GPU_2, True)
        flagged = [d for d in await pipe.decisions() if d["type"] == "DataQualityFlagged"]
        assert len(flagged) == 1
        assert flagged[0]["incident"] == f"data-quality/plugin-and-dra/{NODE}/{UUID_GPU_2}"

        # 3. The slice loses gpu-3 (allocated to pod-04's claim).
        await pipe.wave([inventory(slice_event(30, without=("gpu-3",))), *ticks(31)])
        vanished = await pipe.rows(
            "SELECT subject, detail, active FROM {s}.inventory_conflicts "
            "WHERE kind = 'vanished-from-slice'"
        )
        assert [(r.subject, r.active) for r in vanished] == [(GPU_3, True)]
        assert "while allocated" in vanished[0].detail
        raised_now = of_type(await governance_records(pipe), InventoryConflict)
        assert [(c.kind, c.active) for c in raised_now] == [
            ("plugin-and-dra", True),
            ("vanished-from-slice", True),
        ]

        # 4. A restarted worker loads the inventory from PostgreSQL and resolves the same way;
        #    the active conflict is not raised again.
        await stop(pipe.worker)
        pipe.worker = worker_process(settings)
        gpu_2 = pod_04(40)[1]
        assert gpu_2.resource_id == CDI_GPU_2
        unhealthy = dataclasses.replace(gpu_2, health=Health.UNHEALTHY, status_version=52000)
        await pipe.wave([observed(unhealthy), observed(plugin_gpu(41, version=73310)), *ticks(42)])
        records = await governance_records(pipe)
        [after] = [
            t
            for t in of_type(records, HealthTransition)
            if t.resource_id == CDI_GPU_2 and t.health is Health.UNHEALTHY
        ]
        assert (after.device_id, after.identity, after.uuid) == (GPU_2, "resolved", UUID_GPU_2)
        assert len(of_type(records, InventoryConflict)) == 2
        [quarantine] = await pipe.rows(
            "SELECT node, resource_id, status FROM {s}.quarantines WHERE status = 'active'"
        )
        assert (quarantine.node, quarantine.resource_id) == (NODE, GPU_2)
        assert len([d for d in await pipe.decisions() if d["type"] == "DataQualityFlagged"]) == 2
        await stop(pipe.worker)

    # 5. The replay rebuilds the same inventory (and directory) from the health topic.
    from tests.replay.test_replay import drop, run_replay

    schema = f"replay_{uuid4().hex[:12]}"
    try:
        result = await run_replay(settings, "--schema", schema, "--verify")
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"verify: {schema} is identical to {settings.database_schema}" in result.stdout
        replayed = await pipe.rows(f'SELECT count(*) AS n FROM "{schema}".device_identities')
        assert replayed[0].n == 4
    finally:
        await drop(engine, schema)
