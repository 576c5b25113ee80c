"""End to end through the real parts: recorded watch stream -> watcher -> Kafka -> Faust worker ->
PostgreSQL -> directory API, compared with the shared examples' expected directories.

Governance states in the expected files (QUARANTINED, UNKNOWN_TOLERATED, ...) belong to a later
issue; here they are checked as the observed health they stand for (see tests/golden).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from devtools.demo.catchup import wait_caught_up
from services.processes.api.app import create_app
from services.processes.watcher.run import run_watch
from services.runtime.config import Settings

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DEMO_STREAM = REPO / "devtools" / "examples" / "demo-stream.jsonl"
SHARED = REPO.parent / "shared" / "examples"
HEALTH_OF_STATE = {"HEALTHY": "Healthy", "QUARANTINED": "Unhealthy", "UNKNOWN_TOLERATED": "Unknown"}
# The demo stream is stream-02, -07, -09 and -10 one after the other (devtools/examples/README).
CASES = [
    ("stream-02-eight-gpus-one-unhealthy", "expectedDirectory"),
    ("stream-07-pod-deletion", "expectedDirectory"),
    ("stream-09-duplicate-event", "expectedDirectory"),
    ("stream-10-malformed-partial", "expectedDirectoryAfterStream"),
]


async def all_devices(client: httpx.AsyncClient) -> dict[str, dict[str, Any]]:
    devices: dict[str, dict[str, Any]] = {}
    params: dict[str, Any] = {"limit": 7}  # small pages: pagination is part of the path
    while True:
        response = await client.get("/v1/devices", params=params)
        assert response.status_code == 200, response.text
        body = response.json()
        devices.update((f"{d['node']}/{d['resourceID']}", d) for d in body["items"])
        if not body.get("nextCursor"):
            return devices
        params["cursor"] = body["nextCursor"]


async def test_recorded_stream_reaches_the_directory_through_kafka_worker_and_postgres(
    stream_settings: Settings, kafka_bootstrap: str, worker_process: Any
) -> None:
    settings = stream_settings
    summary = await run_watch(settings, from_file=DEMO_STREAM)
    assert summary.dead_lettered >= 2  # the Pod without nodeName, the conflicting resourceID
    worker = worker_process(settings)
    await wait_caught_up(
        kafka_bootstrap,
        settings.topic,
        settings.consumer_group,
        120,
        still_alive=lambda: _alive(worker),
    )
    # Publishing the same stream again (a watcher restart re-emits everything) changes nothing.
    app = create_app(settings)
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api")
    async with app.router.lifespan_context(app), client:
        first = await all_devices(client)
        await run_watch(settings, from_file=DEMO_STREAM)
        await wait_caught_up(
            kafka_bootstrap,
            settings.topic,
            settings.consumer_group,
            120,
            still_alive=lambda: _alive(worker),
        )
        assert await all_devices(client) == first

        for stem, field in CASES:
            expected = orjson.loads((SHARED / f"{stem}.expected.json").read_bytes())
            for key, want in expected[field].items():
                assert key in first, f"{stem}: {key} missing from the directory"
                assert first[key]["health"] == HEALTH_OF_STATE[want["state"]], (stem, key)
                if "allocatedTo" in want:
                    pods = sorted(
                        f"{a['namespace']}/{a['podName']}" for a in first[key]["allocations"]
                    )
                    assert pods == sorted(want["allocatedTo"]), (stem, key)
            for absent in expected.get("mustNotExist", []):
                assert not any(k.endswith(absent) or k == absent for k in first), absent
        assert not any(k.startswith("/") for k in first)  # nothing keyed under an empty node

        unhealthy = await client.get(
            "/v1/devices", params={"health": "Unhealthy", "node": "gpu-node-b"}
        )
        assert [d["resourceID"] for d in unhealthy.json()["items"]] == [
            "GPU-a5ced723-33de-5eef-89d7-909771744097"
        ]
        device = await client.get(
            "/v1/nodes/gpu-node-b/devices/GPU-a5ced723-33de-5eef-89d7-909771744097"
        )
        assert device.status_code == 200 and device.json()["statusVersion"] == "70344"
        history = await client.get(
            "/v1/nodes/gpu-node-b/history/GPU-a5ced723-33de-5eef-89d7-909771744097"
        )
        assert [h["health"] for h in history.json()["items"]] == ["Unhealthy", "Healthy"]
        ready = await client.get("/readyz")
        assert ready.status_code == 200, ready.text


def _alive(worker: Any) -> None:
    if worker.process.poll() is not None:
        raise AssertionError(f"worker exited:\n{worker.log_text()[-4000:]}")
