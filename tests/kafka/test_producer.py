"""EventPublisher and ensure_topics against the real Kafka broker (``devicestate-dev stack up``)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from uuid import uuid4

import pytest
from aiokafka import AIOKafkaConsumer, ConsumerRecord
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from services.adapters.kafka.producer import EventPublisher
from services.adapters.kafka.topics import TopicState, ensure_topics
from services.domain.event_codec import decode_event
from services.domain.events import (
    ContainerRef,
    DeviceHealthObserved,
    DeviceSource,
    Event,
    Health,
    PodDevicesReleased,
    ReleaseReason,
)
from services.domain.node_events import NodeHeartbeat, NodeResourcesChanged, WatcherTick
from services.domain.records import decode_record
from services.runtime.config import Settings

pytestmark = pytest.mark.integration

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


@pytest.fixture
async def settings() -> AsyncIterator[Settings]:
    """Settings with a unique event and dead-letter topic, deleted afterwards."""
    suffix = uuid4().hex[:12]
    base = Settings()
    settings = base.model_copy(
        update={
            "topic": f"test-producer-{suffix}.events",
            "dead_letter_topic": f"test-producer-{suffix}.dead-letter",
            "topic_partitions": 3,
        }
    )
    try:
        await asyncio.wait_for(ensure_topics(settings), 30)
    except Exception as exc:  # any failure here means no usable broker
        pytest.fail(
            f"Kafka is not reachable at {settings.kafka_bootstrap_servers}; start it with "
            f"`devicestate-dev stack up` ({exc!r})"
        )
    yield settings
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap_servers)
    await admin.start()
    try:
        await admin.delete_topics([settings.topic, settings.dead_letter_topic])
    finally:
        await admin.close()


def observation(node: str, version: int, health: Health = Health.HEALTHY) -> DeviceHealthObserved:
    return DeviceHealthObserved(
        node=node,
        namespace="ml",
        pod_name="train-0",
        pod_uid=f"uid-{node}",
        containers=(ContainerRef("main"),),
        resource_name="nvidia.com/gpu",
        resource_id="GPU-0",
        health=health,
        source=DeviceSource.DEVICE_PLUGIN,
        status_version=version,
        observed_at=T0 + timedelta(seconds=version),
    )


async def read_all(
    settings: Settings, topic: str, count: int
) -> list[ConsumerRecord[bytes, bytes]]:
    """The first ``count`` records of ``topic`` (waits up to 30 s)."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=settings.kafka_bootstrap_servers,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        group_id=None,
    )
    await consumer.start()
    records: list[ConsumerRecord[bytes, bytes]] = []
    try:
        async with asyncio.timeout(30):
            while len(records) < count:
                batch = await consumer.getmany(timeout_ms=500)
                for partition_records in batch.values():
                    records.extend(partition_records)
    finally:
        await consumer.stop()
    return records


async def test_ensure_topics_is_idempotent(settings: Settings) -> None:
    states = await ensure_topics(settings)
    # Other topics (governance...) may be ensured too; these two exist already.
    assert states[settings.topic] == states[settings.dead_letter_topic] == TopicState.EXISTED
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap_servers)
    await admin.start()
    try:
        described = await admin.describe_topics([settings.topic, settings.dead_letter_topic])
        assert [len(t["partitions"]) for t in described] == [3, 3]
        wanted = {"retention.ms": None, "message.timestamp.type": None}
        (config,) = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, settings.topic, wanted)]
        )
        entries = config.to_object()["resources"][0]["config_entries"]
        values = {e["config_names"]: e["config_value"] for e in entries}
        assert values["retention.ms"] == "-1"
        # The broker stamps each record: the independent clock event time is bounded by.
        assert values["message.timestamp.type"] == "LogAppendTime"
    finally:
        await admin.close()


async def test_events_keyed_by_node_in_order_and_dead_letters_with_headers(
    settings: Settings,
) -> None:
    nodes = ["gpu-node-a", "gpu-node-b", "gpu-node-c", "gpu-node-d.rack-7"]  # DNS-1123 subdomains
    events: list[Event] = []
    for version in range(1, 31):
        node = nodes[version % len(nodes)]
        health = Health.UNHEALTHY if version % 3 == 0 else Health.HEALTHY
        events.append(observation(node, version, health))
    events.append(
        PodDevicesReleased(
            node="gpu-node-a",
            namespace="ml",
            pod_name="train-0",
            pod_uid="uid-gpu-node-a",
            reason=ReleaseReason.DELETED,
            status_version=99,
            observed_at=T0,
            resource_ids=("GPU-0",),
        )
    )
    original = b'{"type":"MODIFIED","object":{"kind":"Pod"' + bytes([0xFF])  # cut, not UTF-8
    retries: list[int] = []
    async with EventPublisher(
        settings, max_in_flight=4, on_retry=lambda: retries.append(1)
    ) as publisher:
        for event in events:
            await publisher.publish(event)
            assert publisher.in_flight <= 4
        await publisher.dead_letter(
            original, "not JSON: unexpected end of data", "watch-line", "file:stream.jsonl:3"
        )
        await publisher.flush()
        assert publisher.in_flight == 0

    records = await read_all(settings, settings.topic, len(events))
    assert len(records) == len(events)
    partition_of: dict[bytes, set[int]] = {}
    by_node: dict[str, list[Event]] = {}
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        assert record.key is not None and record.value is not None
        event = decode_event(record.value)
        assert record.key == event.node.encode("utf-8")
        assert list(record.headers) == [("devicestate-type", event.type.encode())]
        partition_of.setdefault(record.key, set()).add(record.partition)
        by_node.setdefault(event.node, []).append(event)
    assert all(len(partitions) == 1 for partitions in partition_of.values())
    for node in nodes:
        assert by_node[node] == [e for e in events if e.node == node]  # order within a node
    assert retries == []  # the broker was up: nothing retried

    (letter,) = await read_all(settings, settings.dead_letter_topic, 1)
    assert letter.value == original
    assert letter.key is None
    assert dict(letter.headers) == {
        "devicestate-reason": b"not JSON: unexpected end of data",
        "devicestate-stage": b"watch-line",
        "devicestate-source": b"file:stream.jsonl:3",
    }


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_start_waits_for_a_broker_and_counts_retries() -> None:
    settings = Settings(kafka_bootstrap_servers=f"127.0.0.1:{_closed_port()}")
    retries: list[int] = []
    three_retries = asyncio.Event()

    def count_retry() -> None:
        retries.append(1)
        if len(retries) >= 3:
            three_retries.set()

    publisher = EventPublisher(settings, max_retry_wait_seconds=0.05, on_retry=count_retry)
    task = asyncio.create_task(publisher.start())
    async with asyncio.timeout(20):
        await three_retries.wait()
    assert not task.done()  # still waiting, never gave up
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_publish_before_start_is_an_error(settings: Settings) -> None:
    with pytest.raises(RuntimeError, match="start"):
        await EventPublisher(settings).publish(observation("gpu-node-a", 1))


async def test_tick_lands_on_every_partition_keyed_by_it(settings: Settings) -> None:
    tick_time = T0 + timedelta(seconds=15)
    beat = NodeHeartbeat("gpu-node-a", T0, T0 + timedelta(seconds=1), lease_version=7)
    change = NodeResourcesChanged(
        "gpu-node-a", (("nvidia.com/gpu", 8),), (("nvidia.com/gpu", 0),), 9, T0
    )
    async with EventPublisher(settings) as publisher:
        assert await publisher.partitions() == [0, 1, 2]
        await publisher.publish(beat)
        assert await publisher.publish_tick(tick_time) == 3
        await publisher.publish(change)
        await publisher.flush()

    records = await read_all(settings, settings.topic, 5)
    assert len(records) == 5
    ticks = {}
    for record in records:
        assert record.value is not None
        value = decode_record(record.value)
        if isinstance(value, WatcherTick):
            assert record.key == f"~tick/{record.partition}".encode()
            ticks[record.partition] = value
        else:
            assert record.key == b"gpu-node-a"
    assert ticks == {p: WatcherTick(partition=p, observed_at=tick_time) for p in range(3)}
    node_records = sorted((r for r in records if r.key == b"gpu-node-a"), key=lambda r: r.offset)
    assert len({r.partition for r in node_records}) == 1  # one node, one partition, in order
    assert [decode_record(r.value) for r in node_records if r.value] == [beat, change]
