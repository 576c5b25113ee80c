"""Topics created on purpose (issue 11 item 6), against the real broker: ``ensure_topics`` and
``devicestate topics create|check`` find a missing or wrong topic and name the fix; the local
broker auto-creates nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any
from uuid import uuid4

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import NewTopic
from aiokafka.errors import KafkaTimeoutError, UnknownTopicOrPartitionError
from typer.testing import CliRunner

from services.adapters.kafka.topics import (
    TopicCheckError,
    TopicRole,
    TopicState,
    check_topics,
    ensure_topics,
)
from services.cli.main import app
from services.runtime.config import Settings

pytestmark = pytest.mark.integration


@pytest.fixture
async def names(kafka_admin: Any, kafka_bootstrap: str) -> AsyncIterator[Settings]:
    """Settings naming four topics of a private tag (none created); deleted afterwards."""
    tag = f"t{uuid4().hex[:12]}"
    yield Settings(
        kafka_bootstrap_servers=kafka_bootstrap,
        topic=f"{tag}.events",
        dead_letter_topic=f"{tag}.dead-letter",
        governance_topic=f"{tag}.governance",
        decisions_topic=f"{tag}.decisions",
        topic_partitions=3,
    )
    leftovers = [t for t in await kafka_admin.list_topics() if tag in t]
    if leftovers:
        await kafka_admin.delete_topics(leftovers)


async def create_raw(admin: Any, name: str, partitions: int) -> None:
    """``name`` as a broker's auto-creation (or a hand) would make it: no configs; returns once
    the metadata lists it."""
    await admin.create_topics([NewTopic(name, partitions, 1)])
    async with asyncio.timeout(10):
        while True:
            if name in await admin.list_topics():
                return
            await asyncio.sleep(0.1)


def env_of(settings: Settings) -> dict[str, str]:
    return {
        "DEVICESTATE_KAFKA_BOOTSTRAP_SERVERS": settings.kafka_bootstrap_servers,
        "DEVICESTATE_TOPIC": settings.topic,
        "DEVICESTATE_DEAD_LETTER_TOPIC": settings.dead_letter_topic,
        "DEVICESTATE_GOVERNANCE_TOPIC": settings.governance_topic,
        "DEVICESTATE_DECISIONS_TOPIC": settings.decisions_topic,
        "DEVICESTATE_TOPIC_PARTITIONS": str(settings.topic_partitions),
    }


async def test_the_broker_does_not_auto_create_a_topic_a_producer_sends_to(
    names: Settings, kafka_admin: Any
) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=names.kafka_bootstrap_servers, request_timeout_ms=2000
    )
    await producer.start()
    try:
        with pytest.raises((KafkaTimeoutError, UnknownTopicOrPartitionError)):
            await producer.send_and_wait(names.governance_topic, b"command")
    finally:
        await producer.stop()
    assert names.governance_topic not in await kafka_admin.list_topics()


async def test_a_governance_topic_with_six_partitions_stops_every_start_naming_the_fix(
    names: Settings, kafka_admin: Any
) -> None:
    # What the broker's auto-creation used to make of a command POSTed before the worker's start.
    await create_raw(kafka_admin, names.governance_topic, 6)
    with pytest.raises(TopicCheckError) as raised:
        await ensure_topics(names)
    partitions, configs = raised.value.problems
    assert partitions.topic == configs.topic == names.governance_topic
    assert partitions.problem == "has 6 partitions, needs 1"
    assert configs.problem == "has retention.ms=604800000, needs retention.ms=-1"
    problem = partitions
    assert "devicestate topics create" in problem.fix and "delete the topic" in problem.fix
    assert "devicestate topics check" in str(raised.value)
    # The other three were created all the same (and are right).
    assert await check_topics(names, (TopicRole.EVENTS, TopicRole.DECISIONS)) == []


async def test_wrong_partitions_and_configs_of_the_event_topic_are_named_with_their_fix(
    names: Settings, kafka_admin: Any
) -> None:
    await create_raw(kafka_admin, names.topic, 2)
    problems = await check_topics(names, (TopicRole.EVENTS,))
    assert [str(p) for p in problems] == [
        f"topic {names.topic!r}: has 2 partitions, needs 3; fix: set "
        "DEVICESTATE_TOPIC_PARTITIONS=2, or delete the topic and run `devicestate topics "
        "create`; DEVICESTATE_TOPIC_PARTITIONS must match the topic (partitions are never "
        "changed: node keys would move and lose their order)",
        f"topic {names.topic!r}: has retention.ms=604800000, message.timestamp.type=CreateTime, "
        "needs retention.ms=-1, message.timestamp.type=LogAppendTime; fix: kafka-configs.sh "
        f"--alter --entity-type topics --entity-name {names.topic} --add-config "
        "retention.ms=-1,message.timestamp.type=LogAppendTime",
    ]


async def test_a_missing_topic_is_created_unless_told_not_to(names: Settings) -> None:
    with pytest.raises(TopicCheckError) as raised:
        await ensure_topics(names, (TopicRole.DECISIONS,), create=False)
    [problem] = raised.value.problems
    assert problem.missing and "`devicestate topics create`" in problem.fix
    states = await ensure_topics(names, (TopicRole.DECISIONS,))
    assert states == {names.decisions_topic: TopicState.CREATED}


async def test_topics_check_and_create_exit_codes(names: Settings, kafka_admin: Any) -> None:
    runner = CliRunner()
    env = env_of(names)

    def invoke(*args: str, **extra: str) -> Any:
        return runner.invoke(app, ["topics", *args], env={**env, **extra})

    missing = await asyncio.to_thread(invoke, "check")
    assert missing.exit_code == 1, missing.output
    assert missing.output.count("missing: ") == 4
    created = await asyncio.to_thread(invoke, "create")
    assert created.exit_code == 0, created.output
    assert f"created: {names.governance_topic}" in created.output
    ok = await asyncio.to_thread(invoke, "check")
    assert ok.exit_code == 0, ok.output
    assert ok.output.count("ok: ") == 4

    await kafka_admin.delete_topics([names.decisions_topic])
    await asyncio.sleep(1)  # the deletion reaches the metadata
    await create_raw(kafka_admin, names.decisions_topic, 6)
    wrong = await asyncio.to_thread(invoke, "check")
    assert wrong.exit_code == 1, wrong.output
    assert f"wrong: topic {names.decisions_topic!r}: has 6 partitions, needs 1" in wrong.output
    again = await asyncio.to_thread(invoke, "create")  # never changes an existing topic
    assert again.exit_code == 1 and "has 6 partitions" in again.output

    # Port 9 (discard): nothing answers.
    down = await asyncio.to_thread(
        invoke, "check", "--timeout", "2", DEVICESTATE_KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:9"
    )
    assert down.exit_code == 2, down.output
    assert "did not answer" in down.output
