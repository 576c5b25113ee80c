"""DRA identities read before their claim, end to end (issue 10, part 2), against the real broker
and PostgreSQL: the worker (``python -m streams.cli``), the governor, ``devicestate replay
--verify`` and ``--governance --verify``, and ``GET /v1/devices``.

The shared examples on three partitions, as a cluster writes them: gpu-node-a's ResourceSlice and
pod-04's observations on the node's partition, the ResourceClaim on another (``claim:<ns>/<name>``:
no single node holds it), the DeviceClass on a third. The worker reads pod-04 first (gpu-2
Unhealthy: quarantined under its CDI-form resourceID), then the claim. Before the fix the
identities stayed unresolved for good, the governor held gpu-2 twice, and the directory showed
the CDI-form device without its quarantine.
"""

from __future__ import annotations

import dataclasses
from typing import Any
from uuid import uuid4

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from services.domain.event_codec import encode_event
from services.domain.events import DeviceHealthObserved, Health
from services.domain.inventory.events import InventoryObserved, record_key
from services.domain.inventory.objects import ResourceClaimInfo
from services.domain.records import encode_record
from services.processes.api.app import create_app
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
    claim_event,
    class_event,
    pod_04,
    slice_event,
)
from tests.streams.test_governor_integration import PARTITIONS, Pipeline, Record, stop, tick

pytestmark = pytest.mark.integration

NODE_P, CLAIM_P, CLASS_P = 0, 1, 2
ACCEL = "accel.example.org/gpu-node-a/accel-1"


def on(partition: int, record: Any) -> Record:
    if isinstance(record, DeviceHealthObserved):
        return (record.node.encode(), encode_event(record), partition)
    return (record.key.encode(), encode_record(record), partition)


def claim(seconds: float, allocated: bool) -> InventoryObserved:
    """pod-04's ResourceClaim, keyed ``claim:<ns>/<name>`` (no node), unallocated or not."""
    obj = claim_event().obj
    assert isinstance(obj, ResourceClaimInfo)
    obj = dataclasses.replace(obj, node=None)
    if not allocated:
        obj = dataclasses.replace(obj, results=(), resource_version=51800)
    return InventoryObserved(record_key(obj), obj, False, at(seconds))


def ticks(seconds: float) -> list[Record]:
    return [tick(p, seconds) for p in range(PARTITIONS)]


async def directory_states(settings: Settings) -> dict[str, Any]:
    """``GET /v1/devices?node=gpu-node-a``: the governance state of each directory device."""
    app = create_app(settings)
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://api") as client,
    ):
        response = await client.get("/v1/devices", params={"node": NODE})
        assert response.status_code == 200, response.text
        return {
            d["resourceID"]: (d["governance"] or {}).get("state") for d in response.json()["items"]
        }


async def test_a_claim_read_after_its_pod_resolves_live_and_in_replay(
    stream_settings: Settings, engine: AsyncEngine, worker_process: Any
) -> None:
    settings = stream_settings
    async with Pipeline(settings, engine, settings.kafka_bootstrap_servers) as pipe:
        pipe.worker = worker_process(settings)
        await pipe.wave([on(NODE_P, slice_event(0)), on(CLASS_P, class_event(0)), *ticks(1)])
        # pod-04 before its claim: gpu-2 reads Unhealthy.
        observed = [
            dataclasses.replace(o, health=Health.UNHEALTHY) if o.resource_id == CDI_GPU_2 else o
            for o in pod_04(10)
        ]
        await pipe.wave([*(on(NODE_P, o) for o in observed), *ticks(11)])
        # The claim, on its own partition: first unallocated, then allocated.
        await pipe.wave([on(CLAIM_P, claim(2, False)), on(CLAIM_P, claim(3, True)), *ticks(20)])
        # The claim alone resolves the identities and merges the ghosts (no new observation).
        resolved = await pipe.rows(
            "SELECT resource_id, device_id, status FROM {s}.device_identities "
            "WHERE resource_id LIKE 'k8s.gpu.example.com/%' ORDER BY resource_id"
        )
        assert [tuple(r) for r in resolved] == [
            (CDI_GPU_2, GPU_2, "resolved"),
            (CDI_GPU_3, GPU_3, "resolved"),
        ]
        merged = await pipe.rows("SELECT resource_id FROM {s}.device_governance ORDER BY 1")
        assert [r.resource_id for r in merged] == [ACCEL, GPU_2, GPU_3]
        assert (await directory_states(settings))[CDI_GPU_2] == "Quarantined"
        # pod-04 again, gpu-2 Healthy: the physical record starts recovery.
        healthy = [dataclasses.replace(o, status_version=51990) for o in pod_04(30)]
        await pipe.wave([*(on(NODE_P, o) for o in healthy), *ticks(31)])
        await stop(pipe.worker)

        rows = await pipe.rows(
            "SELECT resource_id, device_id, status, uuid FROM {s}.device_identities "
            "ORDER BY resource_id"
        )
        assert [tuple(r) for r in rows] == [
            (ACCEL, ACCEL, "as-reported", None),
            (CDI_GPU_2, GPU_2, "resolved", UUID_GPU_2),
            (CDI_GPU_3, GPU_3, "resolved", UUID_GPU_3),
        ]
        governed = await pipe.rows(
            "SELECT resource_id, state FROM {s}.device_governance ORDER BY resource_id"
        )
        # One governance record per GPU, under its physical identity.
        assert [r.resource_id for r in governed] == [ACCEL, GPU_2, GPU_3]
        assert dict((r.resource_id, r.state) for r in governed)[GPU_2] == "Recovering"
        quarantines = await pipe.rows(
            "SELECT resource_id, status FROM {s}.quarantines ORDER BY quarantine_id"
        )
        assert [(q.resource_id, q.status) for q in quarantines] == [(GPU_2, "recovering")]
        assert "DeviceIdentityMerged" in await pipe.kinds()

    states = await directory_states(settings)
    assert states[CDI_GPU_2] == "Recovering"
    assert states[CDI_GPU_3] == "Available"

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
