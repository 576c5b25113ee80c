"""What each topic of the service must be, and the check of the topics a broker holds.

The service creates its topics on purpose (the local broker runs with
``auto.create.topics.enable=false``; a production broker should too): a topic made by a broker's
auto-creation has the broker's default partition count and none of the configs below, and a
governance topic with 6 partitions stops the worker for good. :func:`topic_specs` says what
every topic must be, :func:`inspect_topics` compares the broker's topics with it, and every
process runs :func:`~services.adapters.kafka.topics.prepare_topics` on start with the topics it
needs (:class:`TopicRole`).

A topic is right when it exists and has
- exactly its partition count (``settings.topic_partitions`` for the event and dead-letter
  topics, 1 for the governance and decisions topics);
- at least min(3, brokers) replicas per partition;
- its configs: ``retention.ms=-1`` (event and governance topics: replays fold them from offset
  0), ``message.timestamp.type=LogAppendTime`` (event topic: the broker's clock bounds event
  time), ``max.message.bytes`` at least ``settings.max_message_bytes`` (what the watcher's
  producer lets through), ``min.insync.replicas=2`` with 3 replicas or more.

Each mismatch is a :class:`TopicProblem` naming its fix: ``devicestate topics create`` for a
missing topic; for a wrong one, what to change (partitions are never changed by the service:
adding some would move node keys to other partitions and break the per-node order of the log).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from services.runtime.config import GovernanceTopicSettings

MAX_REPLICATION_FACTOR: Final = 3

UNKNOWN_TOPIC: Final = 3
"""Kafka error code ``UNKNOWN_TOPIC_OR_PARTITION`` in a metadata answer."""

CREATE_FIX: Final = (
    "run `devicestate topics create` (every process but replay creates the topics it needs on "
    "start unless DEVICESTATE_TOPICS_CREATE_MISSING=false)"
)
CHECK_HINT: Final = "`devicestate topics check` lists every topic's problems"


class TopicRole(StrEnum):
    """A topic of the service, by what it holds (its name comes from the settings)."""

    EVENTS = "events"
    DEAD_LETTER = "dead-letter"
    GOVERNANCE = "governance"
    DECISIONS = "decisions"


ALL_ROLES: Final = tuple(TopicRole)


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """What one topic must be: ``partitions`` exactly, ``configs`` exactly (created with them),
    ``max.message.bytes`` at least ``max_message_bytes``."""

    role: TopicRole
    name: str
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    max_message_bytes: int = 0

    def create_configs(self) -> dict[str, str]:
        """The topic configs the service creates the topic with."""
        return {**self.configs, "max.message.bytes": str(self.max_message_bytes)}


@dataclass(frozen=True, slots=True)
class TopicProblem:
    """One way a topic differs from its :class:`TopicSpec`, and what fixes it."""

    topic: str
    problem: str
    fix: str
    missing: bool = False

    def __str__(self) -> str:
        return f"topic {self.topic!r}: {self.problem}; fix: {self.fix}"


class TopicCheckError(RuntimeError):
    """The topics a process needs are missing or wrong; ``problems`` says which and how to fix
    each (the message lists them all)."""

    def __init__(self, problems: list[TopicProblem]) -> None:
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(
            f"the Kafka topics are not as the service needs them:\n{lines}\n({CHECK_HINT})"
        )


def replication_factor(broker_count: int, setting: int = 0) -> int:
    """Replicas per partition: ``setting`` (``DEVICESTATE_KAFKA_REPLICATION_FACTOR``) when above 0,
    else one copy per broker up to three (1 on the local stack)."""
    if setting > 0:
        return setting
    return max(1, min(MAX_REPLICATION_FACTOR, broker_count))


def topic_name(settings: GovernanceTopicSettings, role: TopicRole) -> str:
    """The name ``settings`` gives the topic of ``role``."""
    return {
        TopicRole.EVENTS: settings.topic,
        TopicRole.DEAD_LETTER: settings.dead_letter_topic,
        TopicRole.GOVERNANCE: settings.governance_topic,
        TopicRole.DECISIONS: settings.decisions_topic,
    }[role]


def topic_specs(
    settings: GovernanceTopicSettings, replication: int, roles: tuple[TopicRole, ...] = ALL_ROLES
) -> dict[str, TopicSpec]:
    """The :class:`TopicSpec` of each topic of ``roles``, by name, for ``replication`` replicas."""
    specs = {}
    for role in roles:
        configs: dict[str, str] = {}
        if role in (TopicRole.EVENTS, TopicRole.GOVERNANCE):
            # The system of record: replays fold these from offset 0.
            configs["retention.ms"] = "-1"
        if role is TopicRole.EVENTS:
            # The broker's clock, not the producer's, stamps each record: the bound of event time.
            configs["message.timestamp.type"] = "LogAppendTime"
        if replication >= MAX_REPLICATION_FACTOR:
            # With acks=all, a write survives the loss of one broker only if two copies confirm it.
            configs["min.insync.replicas"] = "2"
        one = role in (TopicRole.GOVERNANCE, TopicRole.DECISIONS)
        name = topic_name(settings, role)
        specs[name] = TopicSpec(
            role,
            name,
            1 if one else settings.topic_partitions,
            configs,
            settings.max_message_bytes,
        )
    return specs


async def broker_count(admin: AIOKafkaAdminClient) -> int:
    """How many brokers the cluster's metadata lists."""
    cluster: dict[str, Any] = await admin.describe_cluster()
    return len(cluster.get("brokers") or [])


async def inspect_topics(
    admin: AIOKafkaAdminClient, specs: dict[str, TopicSpec], replication: int
) -> list[TopicProblem]:
    """Every way the broker's topics differ from ``specs`` (empty: all as needed), in the order
    of ``specs``. Raises aiokafka's errors when no broker answers."""
    existing = set(await admin.list_topics())
    problems = [
        TopicProblem(name, "does not exist", CREATE_FIX, missing=True)
        for name in specs
        if name not in existing
    ]
    present = [name for name in specs if name in existing]
    if not present:
        return problems
    for described in await admin.describe_topics(present):
        problems += _layout_problems(specs[described["topic"]], described, replication)
    answers = await admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, name) for name in present]
    )
    for answer in answers:
        for resource in answer.to_object()["resources"]:
            values = {e["config_names"]: e["config_value"] for e in resource["config_entries"]}
            problems += _config_problems(specs[resource["resource_name"]], values)
    order = list(specs)
    return sorted(problems, key=lambda p: order.index(p.topic))


def _layout_problems(
    spec: TopicSpec, described: dict[str, Any], replication: int
) -> list[TopicProblem]:
    partitions = described.get("partitions") or []
    problems = []
    if len(partitions) != spec.partitions:
        why = (
            "the governor folds one total order"
            if spec.role in (TopicRole.GOVERNANCE, TopicRole.DECISIONS)
            else "DEVICESTATE_TOPIC_PARTITIONS must match the topic (partitions are never "
            "changed: node keys would move and lose their order)"
        )
        fix = (
            f"delete the topic and run `devicestate topics create` (it was probably made by a "
            f"broker's auto-creation: set auto.create.topics.enable=false); {why}"
            if spec.role in (TopicRole.GOVERNANCE, TopicRole.DECISIONS)
            else f"set DEVICESTATE_TOPIC_PARTITIONS={len(partitions)}, or delete the topic and "
            "run `devicestate topics create`; " + why
        )
        problems.append(
            TopicProblem(
                spec.name, f"has {len(partitions)} partitions, needs {spec.partitions}", fix
            )
        )
    fewest = min((len(p.get("replicas") or []) for p in partitions), default=replication)
    if fewest < replication:
        problems.append(
            TopicProblem(
                spec.name,
                f"has {fewest} replica(s) per partition, needs {replication}",
                "add replicas with kafka-reassign-partitions.sh",
            )
        )
    return problems


def _config_problems(spec: TopicSpec, values: dict[str, str]) -> list[TopicProblem]:
    wrong = {k: v for k, v in spec.configs.items() if values.get(k) != v}
    limit = values.get("max.message.bytes")
    if limit is not None and int(limit) < spec.max_message_bytes:
        wrong["max.message.bytes"] = str(spec.max_message_bytes)
    if not wrong:
        return []
    found = ", ".join(f"{k}={values.get(k)}" for k in wrong)
    needed = ",".join(f"{k}={v}" for k, v in wrong.items())
    return [
        TopicProblem(
            spec.name,
            f"has {found}, needs {needed.replace(',', ', ')}",
            f"kafka-configs.sh --alter --entity-type topics --entity-name {spec.name} "
            f"--add-config {needed}",
        )
    ]
