"""The watcher's publisher port (``watcher.session.Publisher``):
:class:`~tests.fakes.event_publisher.FakePublisher` and the Kafka
:class:`~services.adapters.kafka.producer.EventPublisher` on the local broker (a fresh topic of
3 partitions, read back with a consumer) pass the same tests.

Each subclass reads back what was published: the fake's lists, or the topics through a consumer
(values decoded by their type header with ``decode_typed_record``, so the encoding round trip
and the header are covered too).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from uuid import uuid4

import pytest
from aiokafka import AIOKafkaConsumer, ConsumerRecord
from aiokafka.admin import AIOKafkaAdminClient

from services.adapters.kafka.headers import (
    HEADER_REASON,
    HEADER_SOURCE,
    HEADER_STAGE,
    HEADER_TYPE,
    record_type,
)
from services.adapters.kafka.producer import EventPublisher
from services.adapters.kafka.topics import ensure_topics
from services.domain.node_events import NodeHeartbeat, WatcherTick
from services.domain.records import TopicRecord, decode_typed_record
from services.processes.watcher.session import Publisher
from services.runtime.config import Settings
from tests.fakes.event_publisher import FakePublisher
from tests.kafka.test_producer import T0, observation

PARTITIONS = 3


@dataclass(frozen=True)
class Delivered:
    """One record as a consumer of the topic sees it (``partition``: ``None`` where the fake
    has no partitions, i.e. for keyed records)."""

    key: str
    record: TopicRecord
    partition: int | None


@dataclass(frozen=True)
class DeadLetter:
    original: bytes
    reason: str
    stage: str
    source: str


class Harness(ABC):
    publisher: Publisher

    @abstractmethod
    async def delivered(self, count: int) -> list[Delivered]:
        """The first ``count`` records of the topic (in order within a partition)."""

    @abstractmethod
    async def dead_letters(self, count: int) -> list[DeadLetter]: ...


def heartbeat(node: str, seconds: int) -> NodeHeartbeat:
    at = T0 + timedelta(seconds=seconds)
    return NodeHeartbeat(node=node, renewed_at=at, observed_at=at, lease_version=seconds)


def mixed_records() -> list[TopicRecord]:
    """Device and node records of three nodes, interleaved."""
    out: list[TopicRecord] = []
    for version in range(1, 6):
        for node in ("gpu-node-a", "gpu-node-b", "gpu-node-c"):
            out.append(observation(node, version))
            out.append(heartbeat(node, version))
    return out


class PublisherContract:
    """What the watcher relies on from its publisher. Subclasses provide ``harness``."""

    async def test_records_arrive_keyed_by_node_in_order_per_key(self, harness: Harness) -> None:
        published = mixed_records()
        for record in published:
            await harness.publisher.publish(record)
        got = await harness.delivered(len(published))
        assert sorted(d.key for d in got) == sorted(r.node for r in published)
        for node in ("gpu-node-a", "gpu-node-b", "gpu-node-c"):
            assert [d.record for d in got if d.key == node] == [
                r for r in published if r.node == node
            ]

    async def test_a_tick_goes_to_every_partition(self, harness: Harness) -> None:
        assert await harness.publisher.publish_tick(T0) == PARTITIONS
        got = await harness.delivered(PARTITIONS)
        assert sorted((d.partition, d.key, d.record) for d in got) == [
            (p, f"~tick/{p}", WatcherTick(partition=p, observed_at=T0)) for p in range(PARTITIONS)
        ]

    async def test_a_tick_carries_when_the_watch_last_delivered(self, harness: Harness) -> None:
        seen = T0 - timedelta(seconds=30)
        assert await harness.publisher.publish_tick(T0, seen) == PARTITIONS
        got = await harness.delivered(PARTITIONS)
        assert {d.record for d in got} == {
            WatcherTick(p, T0, watch_seen_at=seen) for p in range(PARTITIONS)
        }

    async def test_a_dead_letter_keeps_the_original_bytes_and_says_why(
        self, harness: Harness
    ) -> None:
        original = b'{"type":"ADDED","object":{"kind":"Pod"}} \xff not json'
        await harness.publisher.dead_letter(original, "undecodable", "pod-watch", "watch")
        await harness.publisher.publish(heartbeat("gpu-node-a", 1))
        assert await harness.dead_letters(1) == [
            DeadLetter(original, "undecodable", "pod-watch", "watch")
        ]
        # Not on the event topic: the one record there is the heartbeat.
        assert [d.record for d in await harness.delivered(1)] == [heartbeat("gpu-node-a", 1)]


class FakeHarness(Harness):
    def __init__(self) -> None:
        self.fake = FakePublisher(partition_count=PARTITIONS)
        self.publisher = self.fake

    async def delivered(self, count: int) -> list[Delivered]:
        return [
            Delivered(r.node, r, r.partition if isinstance(r, WatcherTick) else None)
            for r in self.fake.records[:count]
        ]

    async def dead_letters(self, count: int) -> list[DeadLetter]:
        return [DeadLetter(*letter) for letter in self.fake.dead_letters[:count]]


class KafkaHarness(Harness):
    def __init__(self, settings: Settings, publisher: EventPublisher) -> None:
        self.settings = settings
        self.kafka = publisher
        self.publisher = publisher

    async def _read(self, topic: str, count: int) -> list[ConsumerRecord[bytes, bytes]]:
        await self.kafka.flush()
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=self.settings.kafka_bootstrap_servers,
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
            # Anything beyond ``count`` would be a record too many: give it a moment to show.
            extra = await consumer.getmany(timeout_ms=500)
            records.extend(r for rs in extra.values() for r in rs)
        finally:
            await consumer.stop()
        return records

    async def delivered(self, count: int) -> list[Delivered]:
        delivered = []
        for r in await self._read(self.settings.topic, count):
            # Every record carries its type in a header, the one its body says.
            header = record_type(r.headers)
            decoded = decode_typed_record(r.value or b"", header)
            assert header == decoded.type
            delivered.append(Delivered((r.key or b"").decode(), decoded, r.partition))
        return delivered

    async def dead_letters(self, count: int) -> list[DeadLetter]:
        letters = []
        for r in await self._read(self.settings.dead_letter_topic, count):
            assert r.key is None  # no order to keep
            headers = {name: value.decode() for name, value in r.headers}
            assert HEADER_TYPE not in headers  # the original bytes, of whatever type
            letters.append(
                DeadLetter(
                    r.value or b"",
                    headers[HEADER_REASON],
                    headers[HEADER_STAGE],
                    headers[HEADER_SOURCE],
                )
            )
        return letters


class TestFakePublisher(PublisherContract):
    @pytest.fixture
    def harness(self) -> Harness:
        return FakeHarness()


@pytest.fixture
async def kafka_settings() -> AsyncIterator[Settings]:
    """Settings with a unique event topic (3 partitions) and dead-letter topic, deleted after."""
    suffix = uuid4().hex[:12]
    settings = Settings().model_copy(
        update={
            "topic": f"test-contract-{suffix}.events",
            "dead_letter_topic": f"test-contract-{suffix}.dead-letter",
            "topic_partitions": PARTITIONS,
        }
    )
    try:
        await asyncio.wait_for(ensure_topics(settings), 30)
    except Exception as exc:  # any failure here means no usable broker
        pytest.fail(f"Kafka is not reachable at {settings.kafka_bootstrap_servers} ({exc!r})")
    yield settings
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap_servers)
    await admin.start()
    try:
        await admin.delete_topics([settings.topic, settings.dead_letter_topic])
    finally:
        await admin.close()


@pytest.mark.integration
class TestEventPublisher(PublisherContract):
    @pytest.fixture
    async def harness(self, kafka_settings: Settings) -> AsyncIterator[Harness]:
        async with EventPublisher(kafka_settings) as publisher:
            yield KafkaHarness(kafka_settings, publisher)

    # The fake has no partitions for keyed records and no connection to close (neither is in the
    # port): these two hold for the real one only.
    async def test_one_key_is_one_partition(self, harness: Harness) -> None:
        published = mixed_records()
        for record in published:
            await harness.publisher.publish(record)
        got = await harness.delivered(len(published))
        by_key: dict[str, set[int | None]] = {}
        for d in got:
            by_key.setdefault(d.key, set()).add(d.partition)
        assert all(len(partitions) == 1 for partitions in by_key.values())

    async def test_close_flushes_what_was_queued(self, kafka_settings: Settings) -> None:
        publisher = EventPublisher(kafka_settings, linger_ms=1000)
        await publisher.start()
        published = mixed_records()
        for record in published:
            await publisher.publish(record)
        await publisher.close()
        with pytest.raises(RuntimeError):
            await publisher.publish(heartbeat("gpu-node-a", 99))
        async with EventPublisher(kafka_settings) as reader_side:
            got = await KafkaHarness(kafka_settings, reader_side).delivered(len(published))
        assert sorted(d.record.node for d in got) == sorted(r.node for r in published)
