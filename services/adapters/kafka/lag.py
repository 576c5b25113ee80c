"""A consumer group's true lag, from the broker: what ``/readyz`` and ``/metrics`` report.

The projection's own record of its progress says where the worker was when it last wrote; a dead
worker writes nothing, so that record looks caught up forever (issue 11: dead 62 s, 27 records
unconsumed, "ready, lag 0"). The broker knows better: for each partition, its end offset (the
next offset to be written) against the offset the group last committed.

Per partition, :class:`PartitionLag` holds
- ``records``: end offset minus the committed offset (minus the beginning offset when the group
  has committed nothing there, or something retention since deleted);
- ``oldest_waiting_at``: the Kafka timestamp (UTC) of the first record after the committed
  offset, the oldest one the group has not consumed; on the event topic it is the broker's
  append time (``LogAppendTime``), elsewhere the producer's. ``None`` when nothing waits.

Lag in seconds is then wall clock minus ``oldest_waiting_at`` (:meth:`PartitionLag.seconds`): how
long the oldest waiting record has waited. It grows with a backlog the worker is working through,
and it keeps growing while the worker is stopped with records waiting, however few (a lag in
records alone cannot tell 27 records a healthy worker will take in 3 s from 27 records nobody
will ever take). Committed offsets trail the projection by the worker's commit interval (about
3 s for faust), so a healthy worker under load shows a few seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from services.adapters.kafka.clients import KafkaTarget, make_admin, make_consumer

FETCH_TIMEOUT_SECONDS: Final = 5.0
"""Longest wait for the first waiting record of one partition."""


class LagUnknown(RuntimeError):
    """A topic could not be described (missing, or no partitions): the message says which."""


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """How far a consumer group is behind on one partition (offsets, records, UTC time)."""

    topic: str
    partition: int
    end: int
    committed: int | None
    records: int
    oldest_waiting_at: datetime | None

    def seconds(self, now: datetime) -> float:
        """How long (seconds) the oldest waiting record has waited at wall-clock ``now``: 0 when
        nothing waits or its timestamp is ahead of ``now``."""
        if not self.records or self.oldest_waiting_at is None:
            return 0.0
        return max((now - self.oldest_waiting_at).total_seconds(), 0.0)


class GroupLagProbe:
    """``await probe.measure()`` -> the :class:`PartitionLag` of every partition of ``topics``
    for consumer group ``group``; ``await probe.close()`` at the end.

    Its admin client and its consumer (no group: it commits nothing and joins nothing) connect on
    the first :meth:`measure` and are kept; after a failure they connect again on the next one.
    Measurements are serialised (one consumer seeks for them)."""

    def __init__(
        self,
        target: KafkaTarget,
        group: str,
        topics: Sequence[str],
        *,
        client_id: str,
        request_timeout_ms: int = 5000,
    ) -> None:
        self._target = target
        self.group = group
        self.topics = list(topics)
        self._client_id = client_id
        self._timeout_ms = request_timeout_ms
        self._clients: tuple[AIOKafkaAdminClient, AIOKafkaConsumer] | None = None
        self._lock = asyncio.Lock()

    async def _connect(self) -> tuple[AIOKafkaAdminClient, AIOKafkaConsumer]:
        if self._clients is None:
            admin = make_admin(
                self._target, client_id=self._client_id, request_timeout_ms=self._timeout_ms
            )
            consumer = make_consumer(
                self._target,
                client_id=self._client_id,
                auto_offset_reset="earliest",
                request_timeout_ms=self._timeout_ms,
            )
            try:
                await admin.start()
                await consumer.start()
            except BaseException:
                await admin.close()
                await consumer.stop()
                raise
            self._clients = (admin, consumer)
        return self._clients

    async def measure(self) -> list[PartitionLag]:
        """The lag of every partition of the topics, sorted by topic and partition. Raises
        :class:`LagUnknown` for a topic that cannot be described, aiokafka's errors (and
        ``TimeoutError``) when the broker does not answer."""
        async with self._lock:
            try:
                admin, consumer = await self._connect()
                return await self._measure(admin, consumer)
            except BaseException:
                await self.close()
                raise

    async def _measure(
        self, admin: AIOKafkaAdminClient, consumer: AIOKafkaConsumer
    ) -> list[PartitionLag]:
        tps = []
        for described in await admin.describe_topics(self.topics):
            if described.get("error_code") or not described.get("partitions"):
                raise LagUnknown(
                    f"topic {described.get('topic')!r} cannot be described "
                    f"(error {described.get('error_code')})"
                )
            tps += [
                TopicPartition(described["topic"], p["partition"]) for p in described["partitions"]
            ]
        tps.sort()
        begins = await consumer.beginning_offsets(tps)
        ends = await consumer.end_offsets(tps)
        committed = await admin.list_consumer_group_offsets(self.group, partitions=tps)
        done = {}
        for tp in tps:
            meta = committed.get(tp)
            done[tp] = meta.offset if meta is not None and meta.offset >= 0 else None
        waiting = [tp for tp in tps if ends[tp] > max(done[tp] or 0, begins[tp])]
        oldest = await _first_timestamps(consumer, waiting, done, begins)
        return [
            PartitionLag(
                tp.topic,
                tp.partition,
                ends[tp],
                done[tp],
                max(ends[tp] - max(done[tp] or 0, begins[tp]), 0),
                oldest.get(tp),
            )
            for tp in tps
        ]

    async def close(self) -> None:
        """Close the clients (a later :meth:`measure` connects again)."""
        clients, self._clients = self._clients, None
        if clients is not None:
            admin, consumer = clients
            await consumer.stop()
            await admin.close()


async def _first_timestamps(
    consumer: AIOKafkaConsumer,
    waiting: list[TopicPartition],
    done: dict[TopicPartition, int | None],
    begins: dict[TopicPartition, int],
) -> dict[TopicPartition, datetime]:
    if not waiting:
        consumer.assign([])
        return {}
    consumer.assign(waiting)
    for tp in waiting:
        consumer.seek(tp, max(done[tp] or 0, begins[tp]))
    found: dict[TopicPartition, datetime] = {}
    # Only control records (transaction markers) may follow a committed offset: such a partition
    # yields nothing, and its age stays unknown after the timeout.
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(FETCH_TIMEOUT_SECONDS):
            while len(found) < len(waiting):
                fetched = await consumer.getmany(timeout_ms=500, max_records=len(waiting) * 4)
                for tp, records in fetched.items():
                    if records and tp not in found:
                        found[tp] = datetime.fromtimestamp(records[0].timestamp / 1000, UTC)
                        consumer.pause(tp)
    consumer.assign([])
    return found
