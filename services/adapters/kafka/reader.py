"""Read a topic as it stands: from the beginning up to the end offsets captured at the start.

The replays (``devicestate replay``, ``--governance``) and the dev tools' lag check read topics
without a consumer group and commit nothing. :class:`TopicSnapshot` assigns the partitions it is
given, captures their beginning and end offsets, seeks to the beginning and hands out fetched
records below the captured ends (:meth:`TopicSnapshot.fetch`) until every partition reached its
end; a partition that did is paused, so the fetcher stops reading it.

The admin helpers answer one question each: :func:`topic_partitions` (a topic's partition
numbers, without creating it on a broker that auto-creates topics), :func:`group_member_ids`
(who consumes in a group) and :func:`group_lag` (how far a group is behind the end).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aiokafka import ConsumerRecord, TopicPartition

from services.adapters.kafka.clients import KafkaTarget, make_admin, make_consumer
from services.adapters.kafka.lag import GroupLagProbe


class TopicMissing(LookupError):
    """The topic does not exist, or has no readable partitions (the message says which)."""


async def topic_partitions(target: KafkaTarget, topic: str, *, client_id: str) -> list[int]:
    """The partition numbers of ``topic``, sorted; raises :class:`TopicMissing` when it does not
    exist or has none (it is listed first: describing a missing topic would create it on a
    broker that auto-creates topics)."""
    admin = make_admin(target, client_id=client_id)
    await admin.start()
    try:
        if topic not in await admin.list_topics():
            raise TopicMissing(f"topic {topic!r} does not exist")
        [description] = await admin.describe_topics([topic])
    finally:
        await admin.close()
    partitions = sorted(p["partition"] for p in description["partitions"])
    if description["error_code"] or not partitions:
        raise TopicMissing(f"topic {topic!r} has no readable partitions")
    return partitions


async def group_member_ids(target: KafkaTarget, group: str, *, client_id: str) -> list[str]:
    """Member IDs of consumer group ``group`` (empty: nobody consumes). Raises aiokafka's
    connection errors when no broker answers."""
    admin = make_admin(target, client_id=client_id)
    await admin.start()
    try:
        [response] = await admin.describe_consumer_groups([group])
        groups: list[dict[str, Any]] = response.to_object()["groups"]
        return [
            str(member["member_id"])
            for described in groups
            if described["group"] == group
            for member in described["members"]
        ]
    finally:
        await admin.close()


async def group_lag(
    target: KafkaTarget, topic: str, group: str, *, client_id: str
) -> dict[int, int]:
    """Per partition of ``topic``: records after ``group``'s committed offset (0: caught up; a
    partition without a committed offset counts all it holds), from
    :class:`~services.adapters.kafka.lag.GroupLagProbe`. Raises ``RuntimeError`` when the topic
    cannot be described, aiokafka's errors when no broker answers."""
    probe = GroupLagProbe(target, group, [topic], client_id=client_id)
    try:
        return {lag.partition: lag.records for lag in await probe.measure()}
    finally:
        await probe.close()


class TopicSnapshot:
    """``async with TopicSnapshot(target, topic, partitions, client_id=...) as snapshot:`` then
    :meth:`fetch` until :attr:`done`. ``consumer_options``: further ``AIOKafkaConsumer``
    arguments (``max_poll_records``, fetch sizes)."""

    def __init__(
        self,
        target: KafkaTarget,
        topic: str,
        partitions: Sequence[int],
        *,
        client_id: str,
        **consumer_options: Any,
    ) -> None:
        self.partitions = [TopicPartition(topic, p) for p in sorted(partitions)]
        self._consumer = make_consumer(
            target, client_id=client_id, auto_offset_reset="earliest", **consumer_options
        )
        self.begin: dict[TopicPartition, int] = {}
        """Each partition's first offset, captured at the start."""
        self.end: dict[TopicPartition, int] = {}
        """Each partition's end offset (the next offset to be written), captured at the start."""
        self._remaining: set[TopicPartition] = set()

    async def __aenter__(self) -> TopicSnapshot:
        await self._consumer.start()
        try:
            tps = self.partitions
            self._consumer.assign(tps)
            self.begin = dict(await self._consumer.beginning_offsets(tps))
            self.end = dict(await self._consumer.end_offsets(tps))
            self._remaining = {tp for tp in tps if self.end[tp] > self.begin[tp]}
            await self._consumer.seek_to_beginning(*tps)
            done = [tp for tp in tps if tp not in self._remaining]
            if done:
                self._consumer.pause(*done)
        except BaseException:
            await self._consumer.stop()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._consumer.stop()

    @property
    def total(self) -> int:
        """Records between the beginning and the end offsets."""
        return sum(self.end[tp] - self.begin[tp] for tp in self.partitions)

    @property
    def done(self) -> bool:
        """Every partition was read up to its end offset."""
        return not self._remaining

    async def fetch(
        self, max_records: int, timeout_ms: int
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """The next records below the end offsets (at most ``max_records``, waiting at most
        ``timeout_ms`` milliseconds for any), by partition in offset order; empty when nothing
        was fetched in time. A partition whose position reached its end is done and paused."""
        fetched = await self._consumer.getmany(timeout_ms=timeout_ms, max_records=max_records)
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        for tp, messages in fetched.items():
            stop = self.end[tp]
            if messages and messages[-1].offset >= stop:
                messages = [m for m in messages if m.offset < stop]
            if messages:
                out[tp] = messages
        # The fetched partitions, or all that remain when nothing came (their position may reach
        # the end without a record: the offsets after the last one can be control records).
        for tp in list(fetched or self._remaining):
            if tp in self._remaining and await self._consumer.position(tp) >= self.end[tp]:
                self._remaining.discard(tp)
                self._consumer.pause(tp)
        return out
