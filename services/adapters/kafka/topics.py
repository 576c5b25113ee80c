"""Create the service's topics on purpose, and check them on every process's start.

- the device-health event topic and the dead-letter topic, ``settings.topic_partitions`` each;
- the governance topic (``settings.governance_topic``): the governor's log, ONE partition (a total
  order), kept forever like the event topic (``devicestate replay --governance`` folds it from
  offset 0);
- the decisions topic (``settings.decisions_topic``): ONE partition, in the governor's order.

What each must be (partitions, replicas, configs) is :mod:`.topic_check`'s :func:`topic_specs`.
Every topic is created with ``max.message.bytes`` = ``settings.max_message_bytes`` (1 MiB by
default), set on purpose rather than left to the broker's default (1 MiB + 12 bytes): it is the
figure the watcher's producer uses as its ``max_request_size`` and fits its events to
(:mod:`services.domain.record_size`), so a record the producer lets through fits the topic, and
one it refuses is dead-lettered instead of stopping the watcher. The device-health topic is
created with ``message.timestamp.type=LogAppendTime``: each record's Kafka timestamp is the
broker's clock at append, the independent clock that bounds event time
(:mod:`services.domain.event_time`, issue 10).

:func:`ensure_topics` creates the missing topics (unless told not to) and then checks them all:
an existing topic is never changed (its partition count least of all: adding partitions would
move node keys to other partitions and break the per-node order of the log), so a topic that
differs raises :class:`~.topic_check.TopicCheckError` naming the fix. :func:`prepare_topics` is
the same, retried while no broker answers: what the processes run on start (issue 11: a command
POSTed before the worker's first start used to auto-create a 6-partition governance topic).

Replication: every topic gets ``settings.kafka_replication_factor`` replicas, or, when it is 0 (the
default), one per broker up to three (1 on the single-node dev stack, 3 on ``devicestate-dev stack
up --brokers 3`` or a real cluster), and ``min.insync.replicas=2`` from three replicas on
(:func:`replication_configs`): with the producers' ``acks=all`` a write counts once two brokers
have it, and the topic stays writable with one broker down. The worker gives its changelog topics
the same (``streams/app.py``, :func:`cluster_replication_factor`) and has its assignor topic
created here (:func:`ensure_internal_topics`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from enum import StrEnum
from typing import Final

import structlog
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from services.adapters.kafka.clients import START_MAX_DELAY_SECONDS, is_retriable, make_admin
from services.adapters.kafka.topic_check import (
    ALL_ROLES,
    MAX_REPLICATION_FACTOR,
    TopicCheckError,
    TopicProblem,
    TopicRole,
    TopicSpec,
    broker_count,
    inspect_topics,
    replication_factor,
    topic_specs,
)
from services.runtime.config import GovernanceTopicSettings, KafkaSettings

log = structlog.get_logger(__name__)

__all__ = [
    "TopicCheckError",
    "TopicCreationError",
    "TopicProblem",
    "TopicRole",
    "TopicState",
    "check_topics",
    "ensure_topics",
    "prepare_topics",
    "wanted_topics",
]

TOPIC_ALREADY_EXISTS: Final = 36
"""Kafka error code ``TOPIC_ALREADY_EXISTS`` (another process created it between list and create)."""


METADATA_WAIT_SECONDS: Final = 30.0
"""Longest wait (seconds) for created topics to show in the metadata before they are checked."""

LISTED_IN_A_ROW: Final = 3
"""Metadata answers in a row (each from a random broker) that must list a created framework
topic before it is used."""


class TopicState(StrEnum):
    """What :func:`ensure_topics` found or did for one topic."""

    CREATED = "created"
    EXISTED = "existed"


class TopicCreationError(RuntimeError):
    """The broker refused to create a topic for a reason other than "already exists"."""


def replication_configs(replication: int) -> dict[str, str]:
    """Topic configs that go with ``replication`` replicas: ``min.insync.replicas`` 2 from
    :data:`~.topic_check.MAX_REPLICATION_FACTOR` replicas on, else 1 (two replicas must not stop
    every write when one broker is down)."""
    return {"min.insync.replicas": "2" if replication >= MAX_REPLICATION_FACTOR else "1"}


async def cluster_replication_factor(
    settings: KafkaSettings, *, request_timeout_ms: int = 15000
) -> int:
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
        return replication_factor(await broker_count(admin))
    finally:
        await admin.close()


async def ensure_internal_topics(
    settings: GovernanceTopicSettings, topics: Mapping[str, int], *, request_timeout_ms: int = 15000
) -> dict[str, TopicState]:
    """Create the missing ones of ``topics`` (name -> partitions; a framework's own topics, such
    as faust's assignor topic) with the replication of the service's topics and its
    ``max.message.bytes``; existing ones are left as they are. Raises
    :class:`TopicCreationError` and aiokafka's ``KafkaConnectionError`` as :func:`ensure_topics`."""
    admin = make_admin(
        settings, client_id="devicestate-admin", request_timeout_ms=request_timeout_ms
    )
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        states = {name: TopicState.EXISTED for name in topics if name in existing}
        missing = [name for name in topics if name not in existing]
        if missing:
            replication = replication_factor(
                await broker_count(admin), settings.kafka_replication_factor
            )
            configs = {
                **replication_configs(replication),
                "max.message.bytes": str(settings.max_message_bytes),
            }
            specs = [
                TopicSpec(TopicRole.DEAD_LETTER, name, topics[name], configs, 0) for name in missing
            ]
            states |= await _create(admin, specs, replication, configs)
            await _until_listed(admin, missing)
        return states
    finally:
        await admin.close()


def wanted_topics(settings: GovernanceTopicSettings) -> dict[str, int]:
    """Every topic the services need, with its partition count."""
    return {name: spec.partitions for name, spec in topic_specs(settings, 1).items()}


async def check_topics(
    settings: GovernanceTopicSettings,
    roles: tuple[TopicRole, ...] = ALL_ROLES,
    *,
    request_timeout_ms: int = 15000,
) -> list[TopicProblem]:
    """Every way the topics of ``roles`` differ from what the service needs (empty: all right);
    creates nothing. Raises aiokafka's ``KafkaConnectionError`` when no broker answers within
    ``request_timeout_ms`` (milliseconds)."""
    admin = make_admin(
        settings, client_id="devicestate-admin", request_timeout_ms=request_timeout_ms
    )
    await admin.start()
    try:
        replication = replication_factor(
            await broker_count(admin), settings.kafka_replication_factor
        )
        return await inspect_topics(admin, topic_specs(settings, replication, roles), replication)
    finally:
        await admin.close()


async def ensure_topics(
    settings: GovernanceTopicSettings,
    roles: tuple[TopicRole, ...] = ALL_ROLES,
    *,
    create: bool = True,
    request_timeout_ms: int = 15000,
) -> dict[str, TopicState]:
    """Create the missing topics of ``roles`` (all four by default; none when ``create`` is
    false) with a replication factor of min(3, brokers), then check every one of them.

    Returns each topic's :class:`TopicState`. Raises :class:`TopicCheckError` when a topic is
    missing (``create`` false) or differs from what the service needs (partitions, replicas,
    configs: each problem names its fix), :class:`TopicCreationError` when the broker refuses a
    creation, and aiokafka's ``KafkaConnectionError`` when no broker answers within
    ``request_timeout_ms`` (milliseconds); callers retry that at start-up.
    """
    admin = make_admin(
        settings, client_id="devicestate-admin", request_timeout_ms=request_timeout_ms
    )
    await admin.start()
    try:
        replication = replication_factor(
            await broker_count(admin), settings.kafka_replication_factor
        )
        specs = topic_specs(settings, replication, roles)
        existing = set(await admin.list_topics())
        states = {name: TopicState.EXISTED for name in specs if name in existing}
        missing = [specs[name] for name in specs if name not in existing]
        created: set[str] = set()
        if missing and create:
            states |= await _create(admin, missing, replication)
            created = {spec.name for spec in missing}
        problems = await _inspect_once_listed(admin, specs, replication, created)
        if problems:
            raise TopicCheckError(problems)
        return states
    finally:
        await admin.close()


async def _inspect_once_listed(
    admin: AIOKafkaAdminClient,
    specs: dict[str, TopicSpec],
    replication: int,
    created: set[str],
) -> list[TopicProblem]:
    # A created topic reaches each broker's metadata a moment after the controller answered,
    # and every metadata request goes to a random broker: inspect again (each time perhaps on
    # another broker) while a topic just created is not listed yet, or is listed without its
    # partitions (seen on three brokers: "has 0 partitions"). We created it as specified, so
    # its problems are the metadata's lag until the deadline.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + METADATA_WAIT_SECONDS
    while True:
        problems = await inspect_topics(admin, specs, replication)
        unlisted = sorted({p.topic for p in problems if p.topic in created})
        if not unlisted:
            return problems
        if loop.time() >= deadline:
            log.warning(
                "created topics not in the metadata as created yet",
                topics=unlisted,
                waited_seconds=METADATA_WAIT_SECONDS,
            )
            return problems
        await asyncio.sleep(0.2)


async def _until_listed(admin: AIOKafkaAdminClient, names: list[str]) -> None:
    # As above: each listing asks a random broker, so a few answers in a row must list them.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + METADATA_WAIT_SECONDS
    in_a_row = 0
    while loop.time() < deadline and in_a_row < LISTED_IN_A_ROW:
        in_a_row = in_a_row + 1 if set(names) <= set(await admin.list_topics()) else 0
        await asyncio.sleep(0.1)


async def _create(
    admin: AIOKafkaAdminClient,
    missing: list[TopicSpec],
    replication: int,
    configs: dict[str, str] | None = None,
) -> dict[str, TopicState]:
    # ``configs`` replaces the specs' own (internal topics: no max.message.bytes floor to check).
    response = await admin.create_topics(
        [
            NewTopic(
                spec.name,
                spec.partitions,
                replication,
                topic_configs=configs if configs is not None else spec.create_configs(),
            )
            for spec in missing
        ]
    )
    states = {}
    partitions = {spec.name: spec.partitions for spec in missing}
    for error in response.to_object()["topic_errors"]:
        name, code = error["topic"], error["error_code"]
        if code == 0:
            states[name] = TopicState.CREATED
            log.info(
                "topic created",
                topic=name,
                partitions=partitions[name],
                replication_factor=replication,
            )
        elif code == TOPIC_ALREADY_EXISTS:
            states[name] = TopicState.EXISTED
        else:
            raise TopicCreationError(
                f"cannot create topic {name!r}: error {code} {error.get('error_message')}"
            )
    return states


async def prepare_topics(
    settings: GovernanceTopicSettings,
    roles: tuple[TopicRole, ...],
    *,
    create: bool | None = None,
    stop: asyncio.Event | None = None,
    what: str = "topics",
) -> bool:
    """:func:`ensure_topics` for a process's start: the topics of ``roles``, created when missing
    if ``create`` (default: ``settings.topics_create_missing``), retried with a doubling delay (at
    most 15 s) while no broker answers, until ``stop`` is set.

    Returns ``True`` once the topics are right, ``False`` when ``stop`` was set first. Raises
    :class:`TopicCheckError` (missing or wrong topics, each named with its fix) and
    :class:`TopicCreationError` at once: retrying would not fix them."""
    create = settings.topics_create_missing if create is None else create
    delay = 0.5
    while stop is None or not stop.is_set():
        try:
            await ensure_topics(settings, roles, create=create)
            return True
        except Exception as exc:
            if not is_retriable(exc):
                raise
            log.warning("kafka unavailable, retrying", what=what, error=repr(exc), retry_in=delay)
        if stop is None:
            await asyncio.sleep(delay)
        else:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
        delay = min(delay * 2, START_MAX_DELAY_SECONDS)
    return False
