"""True lag and readiness (issue 11 item 5), with a real worker process, broker and database:
once the worker is dead, the records published after it stay unconsumed, and ``/readyz`` says so
(503, naming the partition and the records) while the lag gauges show them; the projection's own
record of its progress, written before the worker died, still looks caught up."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import httpx
import pytest

from services.processes.api.app import create_app
from services.runtime.config import Settings
from tests.conftest import publish
from tests.streams.synthetic import synthetic_log

pytestmark = pytest.mark.integration

THRESHOLD_SECONDS = 5.0
"""Above the worker's commit interval (faust: 2.8 s), so a live worker is ready."""


async def poll(client: httpx.AsyncClient, status: int, seconds: float, worker: Any = None) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while (ready := await client.get("/readyz")).status_code != status:
        if worker is not None:
            assert worker.process.poll() is None, worker.log_text()[-4000:]
        assert loop.time() < deadline, f"/readyz never answered {status}: {ready.text}"
        await asyncio.sleep(0.5)
    return ready.json()


async def test_a_dead_worker_with_records_waiting_makes_readyz_503_and_the_metric_shows_them(
    stream_settings: Settings, kafka_bootstrap: str, worker_process: Any
) -> None:
    settings = stream_settings.model_copy(update={"ready_max_lag_seconds": THRESHOLD_SECONDS})
    await publish(kafka_bootstrap, settings.topic, synthetic_log(300, nodes=6, seed=5).records)
    worker = worker_process(settings)
    app = create_app(settings)
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api")
    async with app.router.lifespan_context(app), client:
        ready = await poll(client, 200, 120, worker)
        assert ready["status"] == "ready"
        await asyncio.sleep(3)  # the worker's last commits
        events = [
            lag for lag in (await poll(client, 200, 30))["lag"] if lag["topic"] == settings.topic
        ]
        assert [lag["records"] for lag in events] == [0, 0, 0]

        worker.signal(signal.SIGKILL)
        assert await worker.wait(30) == -signal.SIGKILL
        # 27 more records of one node: one partition, nobody left to consume them.
        more = synthetic_log(27, nodes=1, seed=9).records
        await publish(kafka_bootstrap, settings.topic, more)

        body = await poll(client, 503, 30)
        waiting = [lag for lag in body["lag"] if lag["topic"] == settings.topic and lag["records"]]
        [partition] = waiting
        assert partition["records"] == 27
        assert partition["seconds"] > THRESHOLD_SECONDS
        assert partition["endOffset"] - partition["committedOffset"] == 27
        assert f"{settings.topic}[{partition['partition']}]: 27 records" in body["reason"]
        assert "is the worker running?" in body["reason"]
        # What the worker recorded before it died: nothing waits, as far as it knew.
        assert all(p["lag"] == 0 for p in body["partitions"] if p["topic"] == settings.topic)

        text = (await client.get("/metrics")).text
        labels = f'partition="{partition["partition"]}",topic="{settings.topic}"'
        assert f"devicestate_consumer_lag{{{labels}}} 27.0" in text
        seconds = next(
            line
            for line in text.splitlines()
            if line.startswith(f"devicestate_consumer_lag_seconds{{{labels}}}")
        )
        assert float(seconds.split()[1]) > THRESHOLD_SECONDS
        assert "devicestate_api_lag_up 1.0" in text
