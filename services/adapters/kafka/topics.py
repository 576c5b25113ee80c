"""Create the topics if they are missing (aiokafka admin client).

- the device-health event topic and the dead-letter topic, ``settings.topic_partitions`` each;
- the governance topic (``settings.governance_topic``): the governor's log, ONE partition (a total
  order), kept forever like the event topic (``devicestate replay --governance`` folds it from
  offset 0);
- the decisions topic (``settings.decisions_topic``): ONE partition, in the governor's order.

Every topic is created with ``max.message.bytes`` = ``settings.max_message_bytes`` (1 MiB by
default), set on purpose rather than left to the broker's default (1 MiB + 12 bytes): it is the
figure the watcher's producer uses as its ``max_request_size`` and fits its events to
(:mod:`services.domain.record_size`), so a record the producer lets through fits the topic, and
one it refuses is dead-lettered instead of stopping the watcher.

The device-health topic is created with ``message.timestamp.type=LogAppendTime``: each record's
Kafka timestamp is the broker's clock at append, the independent clock that bounds event time
(:mod:`services.domain.event_time`, issue 10). A topic created before keeps its own type
(``CreateTime``: the producer's clock), which bounds event time less well; change it with
``kafka-configs.sh --alter --add-config message.timestamp.type=LogAppendTime``.

Replication: every topic gets ``settings.kafka_replication_factor`` replicas, or, when it is 0 (the
default), one per broker up to three (:func:`replication_factor`: 1 on the single-node dev stack,
3 on ``devicestate-dev stack up --brokers 3`` or a real cluster), and ``min.insync.replicas`` 2
from three replicas on, 1 below (:func:`replication_configs`): with the producers' ``acks=all``
a write counts once two brokers have it, and the topic stays writable with one broker down. The
worker gives its changelog topics the same (``streams/app.py``) and has its assignor topic
created here (``extra``).

Idempotent: an existing topic is left as it is. Its partition count is never changed, even when it
differs from the wanted count: adding partitions would move node keys to other partitions and
break the per-node order of the log (a warning is logged instead); one with fewer replicas than
wanted is logged too (``kafka-reassign-partitions.sh`` adds replicas). A governance topic with more
than one partition is refused (:class:`TopicCreationError`): the governor needs a total order.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Final

import structlog
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from services.adapters.kafka.clients import make_admin
from services.runtime.config import GovernanceTopicSettings, KafkaSettings

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


def _replication_factor(setting: int, broker_count: int) -> int:
    if setting > 0:
        return setting
    # One copy per broker up to three: 1 on the local single-node stack, 3 in a real cluster.
    return max(1, min(MAX_REPLICATION_FACTOR, broker_count))


def replication_configs(replication: int) -> dict[str, str]:
    """Topic configs that go with ``replication`` replicas: ``min.insync.replicas`` 2 from
    :data:`MAX_REPLICATION_FACTOR` replicas on, else 1 (two replicas must not stop every write
    when one broker is down)."""
    return {"min.insync.replicas": "2" if replication >= MAX_REPLICATION_FACTOR else "1"}


async def replication_factor(settings: KafkaSettings, *, request_timeout_ms: int = 15000) -> int:
    """The replicas of every topic the services create: ``settings.kafka_replication_factor``, or
    min(3, the brokers the cluster names now) when it is 0. Raises aiokafka's
    ``KafkaConnectionError`` when no broker answers within ``request_timeout_ms`` (ms)."""
    if settings.kafka_replication_factor > 0:
        return settings.kafka_replication_factor
    admin = make_admin(
        settings, client_id="devicestate-admin", request_timeout_ms=request_timeout_ms
    )
    await admin.start()
    try:
        cluster: dict[str, Any] = await admin.describe_cluster()
    finally:
        await admin.close()
    return _replication_factor(0, len(cluster.get("brokers") or []))


def wanted_topics(settings: GovernanceTopicSettings) -> dict[str, int]:
    """Every topic the services need, with its partition count when created."""
    return {
        settings.topic: settings.topic_partitions,
        settings.dead_letter_topic: settings.topic_partitions,
        settings.governance_topic: 1,
        settings.decisions_topic: 1,
    }


def _topic_configs(
    name: str, settings: GovernanceTopicSettings, replication: int
) -> dict[str, str]:
    kept_forever = name in (settings.topic, settings.governance_topic)
    configs = dict(EVENT_TOPIC_CONFIG) if kept_forever else {}
    # Equal to the producer's max_request_size (producer.py): the two limits are one setting.
    configs["max.message.bytes"] = str(settings.max_message_bytes)
    if name == settings.topic:
        # The broker's clock, not the producer's, stamps each record: the bound of event time.
        configs["message.timestamp.type"] = "LogAppendTime"
    # With acks=all, a write survives the loss of one broker only if two copies confirm it.
    configs.update(replication_configs(replication))
    return configs


async def ensure_topics(
    settings: GovernanceTopicSettings,
    *,
    extra: Mapping[str, int] | None = None,
    request_timeout_ms: int = 15000,
) -> dict[str, TopicState]:
    """Make sure the topics of :func:`wanted_topics` exist (``settings.topic`` and
    ``settings.dead_letter_topic`` with ``settings.topic_partitions`` partitions, the governance
    and decisions topics with one), and the ``extra`` ones (name -> partitions, created like the
    dead-letter topic), with the replication of the module docstring.

    Returns each topic's :class:`TopicState`. Raises :class:`TopicCreationError` when the broker
    refuses a creation or the governance topic has more than one partition, and aiokafka's ``KafkaConnectionError`` when no broker answers within
    ``request_timeout_ms`` (milliseconds); callers retry at start-up.
    """
    admin = make_admin(
        settings, client_id="devicestate-admin", request_timeout_ms=request_timeout_ms
    )
    await admin.start()
    try:
        counts = {**wanted_topics(settings), **(extra or {})}
        wanted = list(counts)
        existing = set(await admin.list_topics())
        states = {name: TopicState.EXISTED for name in wanted if name in existing}
        missing = [name for name in wanted if name not in existing]
        if missing:
            cluster: dict[str, Any] = await admin.describe_cluster()
            brokers = len(cluster.get("brokers") or [])
            replication = _replication_factor(settings.kafka_replication_factor, brokers)
            response = await admin.create_topics(
                [
                    NewTopic(
                        name,
                        counts[name],
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
                        partitions=counts[name],
                        replication_factor=replication,
                        min_insync_replicas=replication_configs(replication)["min.insync.replicas"],
                    )
                elif code == TOPIC_ALREADY_EXISTS:
                    states[name] = TopicState.EXISTED
                else:
                    raise TopicCreationError(
                        f"cannot create topic {name!r}: error {code} {error.get('error_message')}"
                    )
        await _check_partitions(admin, settings, counts)
        return states
    finally:
        await admin.close()


async def _check_partitions(
    admin: AIOKafkaAdminClient, settings: GovernanceTopicSettings, counts: dict[str, int]
) -> None:
    for described in await admin.describe_topics(list(counts)):
        name = described.get("topic")
        partitions = len(described.get("partitions") or [])
        wanted = counts.get(name, settings.topic_partitions)
        replicas = min(
            (len(p.get("replicas") or []) for p in described.get("partitions") or []), default=0
        )
        if 0 < replicas < settings.kafka_replication_factor:
            log.warning(
                "topic has fewer replicas than settings; left unchanged",
                topic=name,
                replicas=replicas,
                configured=settings.kafka_replication_factor,
            )
        if not partitions or partitions == wanted:
            continue
        if name == settings.governance_topic:
            raise TopicCreationError(
                f"governance topic {name!r} has {partitions} partitions; it must have exactly 1 "
                "(the governor folds one total order)"
            )
        log.warning(
            "topic partition count differs from settings; left unchanged",
            topic=name,
            partitions=partitions,
            configured=wanted,
        )
