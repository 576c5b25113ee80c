"""The migration metrics after a real worker and governor run (issue 13 item 5): the scenario of
``test_workload_forwarding_integration`` (a checkpointed Job's GPU and a bare non-recoverable
Pod's GPU turn Unhealthy) on the real Kafka and PostgreSQL, then the API's real ``/metrics`` on
the schema the worker wrote and on the one ``replay --governance`` rebuilt: the same values."""

from __future__ import annotations

from typing import Any
from uuid import uuid4

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.ext.asyncio import AsyncEngine

from services.processes.api.app import create_app
from services.runtime.config import Settings
from tests.api.conftest import tokens_json
from tests.replay.test_replay import drop, run_replay
from tests.streams.conftest import TopicSets
from tests.streams.test_workload_forwarding_integration import POLICY, govern

pytestmark = pytest.mark.integration

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def scrape(settings: Settings) -> Samples:
    """The migration samples of ``/metrics`` of an API process on ``settings``' schema."""
    app = create_app(settings.model_copy(update={"api_tokens": tokens_json()}))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as client,
    ):
        body = (await client.get("/metrics")).text
    assert "devicestate_api_migrations_up 1.0" in body
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body)
        if "migration" in family.name or "idle_gpu" in family.name
        for s in family.samples
    }


async def test_metrics_after_a_real_worker_run_are_the_same_after_replay(
    topic_sets: TopicSets, engine: AsyncEngine, kafka_bootstrap: str, worker_process: Any
) -> None:
    settings = await topic_sets(**POLICY)
    run = await govern(settings, engine, kafka_bootstrap, worker_process)
    kinds = [row[2] for row in run["decisions"]]
    assert "MigrationPlanned" in kinds and "MigrationEvidenceKept" in kinds

    live = await scrape(settings)
    outcome = ("namespace", "ml"), ("outcome", "evidence-kept"), ("reason", "")
    assert live[("devicestate_migrations_total", outcome)] == 1  # the bare Pod: the tenant's alert
    assert live[("devicestate_migrations_deferred_total", (("waiting_for", "rate-limited"),))] == 0
    # Both GPUs quarantined at 3 s, the governor's watermark at 5 s (the releases); the
    # checkpointed one's migration is under way, the non-recoverable one's GPU is idle: 2 s (the
    # worker keeps event time monotone per partition, so the two releases' watermark is 5.001 s).
    idle = live[("devicestate_quarantined_idle_gpu_seconds_total", ())]
    assert idle == pytest.approx(2.0, abs=0.01)

    schema = f"replay_{uuid4().hex[:12]}"
    try:
        result = await run_replay(settings, "--governance", "--schema", schema)
        assert result.returncode == 0, result.stdout + result.stderr
        assert await scrape(settings.model_copy(update={"database_schema": schema})) == live
    finally:
        await drop(engine, schema)
