"""The log's own fault tolerance: the worker on three brokers, one of them killed mid-stream.

A private cluster of three KRaft nodes (``three_brokers``, the stack's ``--brokers 3`` code). The
service creates its topics (``ensure_topics``, the worker its changelog and assignor topics) with
three replicas and ``min.insync.replicas=2`` set on each topic. Events are published while the
worker runs; one broker (the leader of the event topic's partition 0) is SIGKILLed mid-stream,
more events go in while it is down, then it is started again (and catches up: every replica back
in sync). Afterwards the log holds every record once, the projection equals the fold of the log (history rows: none lost, none doubled),
and ``replay --verify`` finds the rebuilt projection identical.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from typing import Any
from uuid import uuid4

import pytest
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from sqlalchemy.ext.asyncio import AsyncEngine

from devtools.stack import brokers
from devtools.stack.supervisor import StackLayout
from services.adapters.kafka.topics import ensure_topics
from services.runtime.config import Settings
from tests.conftest import SchemaFactory, publish
from tests.replay.test_replay import run_replay
from tests.streams.synthetic import synthetic_log
from tests.streams.test_worker_integration import history_rows, projection_devices, wait_until

pytestmark = pytest.mark.integration

TOPIC_CONFIG_SOURCE = 1  # DescribeConfigs: set on the topic itself, not a broker default


async def replication_of(admin: Any, topics: list[str]) -> dict[str, tuple[set[int], str, int]]:
    """Per topic: the replica counts of its partitions, its min.insync.replicas and where that
    value comes from."""
    found: dict[str, tuple[set[int], str, int]] = {}
    described = await admin.describe_topics(topics)
    replicas = {t["topic"]: {len(p["replicas"]) for p in t["partitions"]} for t in described}
    wanted = {"min.insync.replicas": None}
    responses = await admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, name, wanted) for name in topics]
    )
    for response in responses:
        for resource in response.to_object()["resources"]:
            (entry,) = resource["config_entries"]
            name = resource["resource_name"]
            found[name] = (replicas[name], entry["config_value"], entry["config_source"])
    return found


async def records_in(bootstrap: str, topic: str, partitions: int) -> int:
    """The records of ``topic``: the sum of its partitions' end offsets."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    try:
        ends = await consumer.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
        return sum(ends.values())
    finally:
        await consumer.stop()


async def test_one_broker_of_three_killed_mid_stream_loses_and_doubles_nothing(
    three_brokers: StackLayout,
    engine: AsyncEngine,
    new_schema: SchemaFactory,
    tmp_path: Any,
    worker_process: Callable[..., Any],
) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    bootstrap = three_brokers.kafka_bootstrap_servers
    tag = f"t{uuid4().hex[:12]}"
    settings = Settings(
        kafka_bootstrap_servers=bootstrap,
        topic=f"{tag}.events",
        dead_letter_topic=f"{tag}.dead-letter",
        governance_topic=f"{tag}.governance",
        decisions_topic=f"{tag}.decisions",
        topic_partitions=3,
        consumer_group=f"{tag}.worker",
        database_schema=await new_schema(),
        worker_data_dir=str(tmp_path / "worker"),
        worker_metrics_port=0,
        worker_batch_size=300,
        worker_batch_within_seconds=0.2,
    )
    await ensure_topics(settings)  # as the watcher does before it publishes
    log = synthetic_log(9000, nodes=40, seed=47)
    records = log.records
    expected_rows = log.expected_history_rows()
    schema = settings.database_schema

    def rows_over(count: int) -> Callable[[], Any]:
        async def check() -> bool:
            return await history_rows(engine, schema) > count

        return check

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    await admin.start()
    try:
        (events,) = await admin.describe_topics([settings.topic])
        victim = next(p["leader"] for p in events["partitions"] if p["partition"] == 0)

        # 1. The worker reads the first third.
        await publish(bootstrap, settings.topic, records[:3000])
        worker = worker_process(settings)
        await wait_until(rows_over(0), 120, "the first batches", worker)

        # 2. Broker `victim` crashes mid-stream; the second third goes in while it is down.
        pid = await asyncio.to_thread(brokers.stop_broker, three_brokers, victim, kill=True)
        assert pid is not None
        at_kill = await history_rows(engine, schema)
        assert at_kill < expected_rows, "the worker finished before the broker was killed"
        await publish(bootstrap, settings.topic, records[3000:6000])
        await wait_until(rows_over(at_kill), 120, "progress with a broker down", worker)

        # 3. It comes back on its storage; the last third goes in.
        restart = asyncio.ensure_future(
            asyncio.to_thread(brokers.start_broker, three_brokers, victim, timeout=180)
        )
        await publish(bootstrap, settings.topic, records[6000:])

        async def caught_up() -> bool:
            return await history_rows(engine, schema) >= expected_rows

        await wait_until(caught_up, 120, "the worker to catch up", worker)
        await restart  # back, and named by the metadata again
        await asyncio.sleep(1.5)  # anything doubled would show up now
        assert await history_rows(engine, schema) == expected_rows
        assert await projection_devices(engine, schema) == log.expected_devices()
        logged = await records_in(bootstrap, settings.topic, settings.topic_partitions)
        assert logged == len(records)  # the log holds each record once
        worker.signal(signal.SIGTERM)
        assert await worker.wait(60) == 0, worker.log_text()[-4000:]

        # Every topic of the run, the changelog and the assignor topic included: 3 replicas and
        # min.insync.replicas=2 on the topic itself.
        topics = sorted(t for t in await admin.list_topics() if tag in t)
        assert any(t.endswith("-changelog") for t in topics), topics
        assert any(t.endswith("-__assignor-__leader") for t in topics), topics
        assert len(topics) >= 6, topics
        # The restarted broker caught up: every replica is in sync again.
        await asyncio.to_thread(brokers.wait_in_sync, three_brokers, topics, timeout=120)
        replication = await replication_of(admin, topics)
        assert replication == dict.fromkeys(topics, ({3}, "2", TOPIC_CONFIG_SOURCE))
    finally:
        await admin.close()

    # 4. The projection rebuilt from the log is the live one.
    result = await run_replay(settings, "--schema", f"{schema}_replay", "--verify", "--drop")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"verify: {schema}_replay is identical to {schema}" in result.stdout
