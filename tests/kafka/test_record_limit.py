"""EventPublisher and a record too large for its topic, against the real Kafka broker: the record
is dead-lettered (reason, size, first bytes) and the records after it are published (issue 11).

Here the topics were created (elsewhere) with a smaller ``max.message.bytes`` than the
producer's, so the broker, not the client, refuses the record, and then its dead letter too."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from aiokafka.admin import AIOKafkaAdminClient

from services.adapters.kafka.headers import (
    HEADER_ORIGINAL_SIZE,
    HEADER_REASON,
    HEADER_SOURCE,
    HEADER_STAGE,
)
from services.adapters.kafka.producer import FALLBACK_BODY_BYTES, STAGE_PUBLISH, EventPublisher
from services.adapters.kafka.topics import ensure_topics
from services.domain.event_codec import decode_event, encode_event
from services.domain.events import ContainerRef
from services.runtime.config import Settings
from tests.kafka.test_producer import observation, read_all, settings

__all__ = ["settings"]  # the fixture, from the producer tests


async def test_a_record_the_broker_refuses_is_dead_lettered_and_the_stream_goes_on(
    settings: Settings,
) -> None:
    small_topics = settings.model_copy(
        update={
            "topic": f"{settings.topic}-small",
            "dead_letter_topic": f"{settings.dead_letter_topic}-small",
            "max_message_bytes": 65_536,
        }
    )
    await asyncio.wait_for(ensure_topics(small_topics), 30)
    try:
        await _refused_and_published(small_topics)
    finally:
        admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap_servers)
        await admin.start()
        try:
            await admin.delete_topics([small_topics.topic, small_topics.dead_letter_topic])
        finally:
            await admin.close()


async def _refused_and_published(small_topics: Settings) -> None:
    refused: list[tuple[str, str]] = []
    large = replace(
        observation("gpu-node-a", 1),
        containers=tuple(ContainerRef(f"container-{i:05d}") for i in range(4000)),
    )
    size = len(encode_event(large))
    assert size > 65_536
    # The producer's limit (1 MiB) is the settings' default, larger than the topics'.
    producer_settings = small_topics.model_copy(update={"max_message_bytes": 1_048_576})
    async with EventPublisher(
        producer_settings, on_dead_letter=lambda *a: refused.append(a)
    ) as publisher:
        await publisher.publish(large)
        await publisher.publish(observation("gpu-node-a", 2))
        await publisher.flush()
    assert refused == [(STAGE_PUBLISH, "DeviceHealthObserved")]

    [after] = await read_all(small_topics, small_topics.topic, 1)
    assert after.value is not None and decode_event(after.value).status_version == 2
    [letter] = await read_all(small_topics, small_topics.dead_letter_topic, 1)
    headers = dict(letter.headers)
    assert headers[HEADER_STAGE] == STAGE_PUBLISH.encode()
    reason = headers[HEADER_REASON].decode()
    assert reason.startswith(f"record-too-large: DeviceHealthObserved of {size} bytes")
    assert "refused by the broker" in reason
    assert headers[HEADER_SOURCE] == f"{small_topics.topic} key=gpu-node-a".encode()
    assert int(headers[HEADER_ORIGINAL_SIZE]) == size
    assert letter.value == encode_event(large)[:FALLBACK_BODY_BYTES]
