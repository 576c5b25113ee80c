"""Kafka administration for a benchmark run: its topics, their offsets, its consumer group.

Topic creation goes through the product's own ``services.adapters.kafka.topics.ensure_topics``
(the partitions and configs the services would create); the rest (describe, offsets, delete) is
aiokafka's admin client, which the product's adapter does not offer because the services never
delete topics or groups. Every function opens its own short-lived client and closes it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from services.runtime.config import Settings


async def create_topic(settings: Settings) -> None:
    """Create the bench topic and its dead-letter topic (the project's own ``ensure_topics``)."""
    from services.adapters.kafka.topics import TopicState, ensure_topics

    states = await ensure_topics(settings)
    if states.get(settings.topic) is not TopicState.CREATED:
        raise RuntimeError(f"topic {settings.topic!r} already existed: refusing to reuse it")


async def topic_partitions(bootstrap: str, topic: str) -> list[int]:
    """Partition ids of ``topic`` (admin DescribeTopics). A fresh consumer knows no topic's
    partitions until it subscribes, and ``consumer.topics()`` does not fill its metadata."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        [described] = await admin.describe_topics([topic])
    finally:
        await admin.close()
    if described.get("error_code") or not described.get("partitions"):
        raise RuntimeError(f"topic {topic!r} not found (error {described.get('error_code')})")
    return sorted(p["partition"] for p in described["partitions"])


async def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """``{partition: end offset}`` of ``topic`` now (the offset the next record will get)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    tps = [TopicPartition(topic, p) for p in await topic_partitions(bootstrap, topic)]
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        ends = await consumer.end_offsets(tps)
        return {tp.partition: ends[tp] for tp in tps}
    finally:
        await consumer.stop()


@contextlib.asynccontextmanager
async def admin_client(bootstrap: str) -> AsyncIterator[Any]:
    """An aiokafka admin client, started, closed on exit."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        yield admin
    finally:
        await admin.close()


async def committed_offsets(admin: Any, group: str, topic: str) -> dict[int, int]:
    """``{partition: committed offset}`` of ``group`` on ``topic`` (partitions it never
    committed are absent)."""
    offsets = await admin.list_consumer_group_offsets(group)
    return {tp.partition: meta.offset for tp, meta in offsets.items() if tp.topic == topic}


async def delete_consumer_group(admin: Any, group: str) -> None:
    """DeleteGroups (aiokafka's admin client has no method for it)."""
    from aiokafka.protocol.admin import DeleteGroupsRequest

    coordinator = await admin.find_coordinator(group)
    await admin._send_request_to_node(coordinator, DeleteGroupsRequest([group]))


async def delete_topics(admin: Any, doomed: Callable[[str], bool]) -> list[str]:
    """Delete every topic whose name ``doomed`` accepts (an open aiokafka admin client); returns
    their names, sorted."""
    names = sorted(name for name in await admin.list_topics() if doomed(name))
    if names:
        await admin.delete_topics(names)
    return names
