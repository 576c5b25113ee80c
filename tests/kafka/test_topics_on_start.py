"""Every process checks the topics it needs on start (issue 11 item 6): with a decisions or
governance topic of 6 partitions (what a broker's auto-creation made of it), the worker, the
watcher, the API, the alert sender, the recovery executor, the enforcer and the replay stop at
once with the problem and its fix, instead of running on a wrong log."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from typer.testing import CliRunner

from services.adapters.kafka.topics import TopicCheckError, TopicRole, ensure_topics
from services.cli.main import app as cli
from services.processes.alerts.service import AlertOptions, run_alerts
from services.processes.api.app import create_app
from services.processes.enforcement.run import EnforceOptions, run_enforcer
from services.processes.recovery.run import RecoveryOptions, run_recovery
from services.processes.watcher.run import run_watch
from services.runtime.config import Settings
from streams.worker import prepare
from tests.fakes.quarantine_source import FakeSource
from tests.fakes.taint_rules import FakeTaintRules
from tests.kafka.test_topics import create_raw

pytestmark = pytest.mark.integration

DEMO_STREAM = Path(__file__).parents[2] / "devtools" / "examples" / "demo-stream.jsonl"
FIX = "delete the topic and run `devicestate topics create`"


@pytest.fixture
async def wrong(
    kafka_admin: Any, kafka_bootstrap: str, database_url: str, tmp_path: Path
) -> AsyncIterator[Settings]:
    """Right event and dead-letter topics; governance and decisions topics of 6 partitions."""
    tag = f"t{uuid4().hex[:12]}"
    settings = Settings(
        kafka_bootstrap_servers=kafka_bootstrap,
        database_url=database_url,
        topic=f"{tag}.events",
        dead_letter_topic=f"{tag}.dead-letter",
        governance_topic=f"{tag}.governance",
        decisions_topic=f"{tag}.decisions",
        topic_partitions=3,
        watcher_metrics_port=0,
        worker_data_dir=str(tmp_path / "worker"),
        alert_webhook_url="http://127.0.0.1:9",
        recovery_executor="inprocess",
        enforce_device_taint_rules=True,
    )
    await ensure_topics(settings, (TopicRole.EVENTS, TopicRole.DEAD_LETTER))
    await create_raw(kafka_admin, settings.governance_topic, 6)
    await create_raw(kafka_admin, settings.decisions_topic, 6)
    yield settings
    await kafka_admin.delete_topics([t for t in await kafka_admin.list_topics() if tag in t])


def assert_names_the_fix(raised: pytest.ExceptionInfo[TopicCheckError], topic: str) -> None:
    assert any(
        p.topic == topic and p.problem == "has 6 partitions, needs 1" and FIX in p.fix
        for p in raised.value.problems
    ), str(raised.value)


async def test_the_worker_and_the_watcher_stop(wrong: Settings) -> None:
    with pytest.raises(TopicCheckError) as raised:
        await asyncio.wait_for(prepare(wrong), 60)
    assert_names_the_fix(raised, wrong.governance_topic)
    # The watcher writes only the event and dead-letter topics: 3 partitions, it is told 2.
    told_two = wrong.model_copy(update={"topic_partitions": 2})
    with pytest.raises(TopicCheckError) as raised:
        await asyncio.wait_for(run_watch(told_two, from_file=DEMO_STREAM), 60)
    assert [p.problem for p in raised.value.problems] == ["has 3 partitions, needs 2"] * 2
    assert "set DEVICESTATE_TOPIC_PARTITIONS=3" in raised.value.problems[0].fix


async def test_the_api_does_not_start(wrong: Settings) -> None:
    api = create_app(wrong)
    with pytest.raises(TopicCheckError) as raised:
        async with asyncio.timeout(60), api.router.lifespan_context(api):
            pass
    assert_names_the_fix(raised, wrong.governance_topic)


async def test_the_decision_followers_stop(wrong: Settings) -> None:
    stop = asyncio.Event()
    with pytest.raises(TopicCheckError) as raised:
        await asyncio.wait_for(run_alerts(wrong, AlertOptions(metrics_port=0), stop=stop), 60)
    assert_names_the_fix(raised, wrong.decisions_topic)
    with pytest.raises(TopicCheckError) as raised:
        await asyncio.wait_for(run_recovery(wrong, RecoveryOptions(metrics_port=0), stop=stop), 60)
    assert_names_the_fix(raised, wrong.decisions_topic)
    with pytest.raises(TopicCheckError) as raised:
        await asyncio.wait_for(
            run_enforcer(
                wrong,
                EnforceOptions(metrics_port=0),
                rules=FakeTaintRules(),
                source=FakeSource([]),
                stop=stop,
            ),
            60,
        )
    assert_names_the_fix(raised, wrong.decisions_topic)


async def test_the_governance_replay_refuses(wrong: Settings) -> None:
    env = {
        "DEVICESTATE_KAFKA_BOOTSTRAP_SERVERS": wrong.kafka_bootstrap_servers,
        "DEVICESTATE_DATABASE_URL": wrong.database_url,
        "DEVICESTATE_GOVERNANCE_TOPIC": wrong.governance_topic,
    }
    result = await asyncio.to_thread(CliRunner().invoke, cli, ["replay", "--governance"], env=env)
    assert result.exit_code == 2, result.output
    assert "has 6 partitions, needs 1" in result.output and FIX in result.output
