"""Create the event topic and the dead-letter topic if they are missing (aiokafka admin client).

Idempotent: an existing topic is left as it is. Its partition count is never changed, even when it
differs from ``settings.topic_partitions``: adding partitions would move node keys to other
partitions and break the per-node order of the log (a warning is logged instead).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Final

import structlog
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from services.config import Settings

log = structlog.get_logger(__name__)

TOPIC_ALREADY_EXISTS: Final = 36
"""Kafka error code ``TOPIC_ALREADY_EXISTS`` (another process created it between list and create)."""

MAX_REPLICATION_FACTOR: Final = 3

EVENT_TOPIC_CONFIG: Final = {"retention.ms": "-1"}
"""The event topic is the system of record: ``devicestate replay`` rebuilds from offset 0, so its
records are kept forever (the volume is one record per health change, not per watch event)."""


class TopicState(StrEnum):
    """What :func:`ensure_topics` found or did for one topic."""

    CREATED = "created"
    EXISTED = "existed"


class TopicCreationError(RuntimeError):
    """The broker refused to create a topic for a reason other than "already exists"."""


def _replication_factor(broker_count: int) -> int:
    # One copy per broker up to three: 1 on the local single-node stack, 3 in a real cluster.
    return max(1, min(MAX_REPLICATION_FACTOR, broker_count))


def _topic_configs(name: str, settings: Settings, replication: int) -> dict[str, str]:
    configs = dict(EVENT_TOPIC_CONFIG) if name == settings.topic else {}
    if replication >= MAX_REPLICATION_FACTOR:
        # With acks=all, a write survives the loss of one broker only if two copies confirm it.
        configs["min.insync.replicas"] = "2"
    return configs


async def ensure_topics(
    settings: Settings, *, request_timeout_ms: int = 15000
) -> dict[str, TopicState]:
    """Make sure ``settings.topic`` and ``settings.dead_letter_topic`` exist, each with
    ``settings.topic_partitions`` partitions and a replication factor of min(3, brokers).

    Returns each topic's :class:`TopicState`. Raises :class:`TopicCreationError` when the broker
    refuses a creation, and aiokafka's ``KafkaConnectionError`` when no broker answers within
    ``request_timeout_ms`` (milliseconds); callers retry at start-up.
    """
    admin = AIOKafkaAdminClient(
        bootstrap_servers=settings.kafka_bootstrap_servers,
        client_id="devicestate-admin",
        request_timeout_ms=request_timeout_ms,
    )
    await admin.start()
    try:
        wanted = [settings.topic, settings.dead_letter_topic]
        existing = set(await admin.list_topics())
        states = {name: TopicState.EXISTED for name in wanted if name in existing}
        missing = [name for name in wanted if name not in existing]
        if missing:
            cluster: dict[str, Any] = await admin.describe_cluster()
            replication = _replication_factor(len(cluster.get("brokers") or []))
            response = await admin.create_topics(
                [
                    NewTopic(
                        name,
                        settings.topic_partitions,
                        replication,
                        topic_configs=_topic_configs(name, settings, replication),
                    )
                    for name in missing
                ]
            )
            for error in response.to_object()["topic_errors"]:
                name, code = error["topic"], error["error_code"]
                if code == 0:
                    states[name] = TopicState.CREATED
                    log.info(
                        "topic created",
                        topic=name,
                        partitions=settings.topic_partitions,
                        replication_factor=replication,
                    )
                elif code == TOPIC_ALREADY_EXISTS:
                    states[name] = TopicState.EXISTED
                else:
                    raise TopicCreationError(
                        f"cannot create topic {name!r}: error {code} {error.get('error_message')}"
                    )
        await _warn_on_partition_mismatch(admin, settings, wanted)
        return states
    finally:
        await admin.close()


async def _warn_on_partition_mismatch(
    admin: AIOKafkaAdminClient, settings: Settings, topics: list[str]
) -> None:
    for described in await admin.describe_topics(topics):
        partitions = len(described.get("partitions") or [])
        if partitions and partitions != settings.topic_partitions:
            log.warning(
                "topic partition count differs from settings; left unchanged",
                topic=described.get("topic"),
                partitions=partitions,
                configured=settings.topic_partitions,
            )
