"""Start orders on a fresh stack (issue 11 item 6): the API first, an operator command POSTed,
then the worker. The API creates the topics it needs as the service needs them (the broker
auto-creates nothing), so the command lands on a one-partition governance topic and the worker
starts and decides it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any
from uuid import uuid4

import httpx
import pytest

from services.processes.api.app import create_app
from services.runtime.config import Settings
from tests.api.conftest import bearer, tokens_json
from tests.conftest import SchemaFactory

pytestmark = pytest.mark.integration


@pytest.fixture
async def untouched(
    kafka_admin: Any, new_schema: SchemaFactory, tmp_path: Any
) -> AsyncIterator[Settings]:
    """Settings of a private run whose topics do not exist yet; deleted afterwards."""
    tag = f"t{uuid4().hex[:12]}"
    yield Settings(
        topic=f"{tag}.events",
        dead_letter_topic=f"{tag}.dead-letter",
        governance_topic=f"{tag}.governance",
        decisions_topic=f"{tag}.decisions",
        topic_partitions=3,
        consumer_group=f"{tag}.worker",
        database_schema=await new_schema(),
        worker_data_dir=str(tmp_path / "worker"),
        worker_metrics_port=0,
        worker_batch_within_seconds=0.2,
        api_tokens=tokens_json(),
    )
    names = [t for t in await kafka_admin.list_topics() if tag in t]
    if names:
        await kafka_admin.delete_topics(names)


async def test_api_first_then_a_command_then_the_worker(
    untouched: Settings, kafka_admin: Any, worker_process: Any
) -> None:
    settings = untouched
    app = create_app(settings)
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api")
    async with app.router.lifespan_context(app), client:
        posted = await client.post(
            "/v1/automation/pause", json={"reason": "before the worker"}, headers=bearer("operator")
        )
        assert posted.status_code == 202, posted.text
        command_id = posted.json()["commandID"]
        [governance] = await kafka_admin.describe_topics([settings.governance_topic])
        assert len(governance["partitions"]) == 1

        worker = worker_process(settings)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 120
        while (outcome := await client.get(f"/v1/commands/{command_id}")).status_code != 200:
            assert worker.process.poll() is None, worker.log_text()[-4000:]
            assert loop.time() < deadline, f"not decided: {outcome.text}"
            await asyncio.sleep(0.5)
        assert outcome.json()["status"] == "accepted", outcome.text
