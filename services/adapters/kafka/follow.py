"""Follow topics with one consumer: the loop the alert sender, the recovery executor and the
enforcer share.

A :class:`TopicFollower` starts its consumer (retrying while no broker answers, until ``stop``),
subscribes to its topics, and then hands out one poll at a time (:meth:`TopicFollower.batches`):
a dict from partition to the records fetched, in offset order, each decoded once by the caller's
``decode`` callback. A record that does not decode (``decode`` raised one of ``decode_errors``,
:class:`~services.domain.codec.EventDecodeError` by default) is handed out with ``value=None``
after ``on_undecodable(offset, error)`` was called: the caller skips it (and still commits past
it) as each one does today. Empty polls are handed out too, so the caller's timers run.

Where it starts: a consumer group's committed offset, else ``start`` (:class:`Start`: the
topic's beginning or its end); no group (``group_id=None``): ``start`` always, nothing committed.
Commits are the caller's (:meth:`TopicFollower.commit` after it handled a batch) unless
``auto_commit=True``. Records are read ``read_committed`` unless told otherwise.

``async with TopicFollower(...) as follower:`` closes the consumer on the way out (also after a
failed start); :meth:`TopicFollower.start` returns ``False`` when ``stop`` was set before a broker
answered.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, TypeVar

from aiokafka import ConsumerRebalanceListener, TopicPartition

from services.adapters.kafka.clients import KafkaTarget, make_consumer, start_until_stopped
from services.domain.codec import EventDecodeError

T = TypeVar("T")

PartitionsCallback = Callable[[set[TopicPartition]], Awaitable[None]]
"""``await on_assigned(partitions)`` / ``await on_revoked(partitions)`` during a rebalance."""


class Start(StrEnum):
    """Where a consumer without a committed offset starts (aiokafka's ``auto_offset_reset``)."""

    EARLIEST = "earliest"
    """The beginning of each partition (what retention kept)."""
    LATEST = "latest"
    """The end of each partition: records appended from now on."""


@dataclass(frozen=True, slots=True)
class Received(Generic[T]):
    """One record of a poll: its offset and its decoded value (``None``: it did not decode)."""

    offset: int
    value: T | None


Poll = dict[TopicPartition, list[Received[T]]]
"""One poll: partition -> records in offset order (partitions without records are absent)."""


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, assigned: PartitionsCallback | None, revoked: PartitionsCallback | None):
        self._assigned = assigned
        self._revoked = revoked

    async def on_partitions_revoked(self, revoked: Any) -> None:
        if self._revoked is not None:
            await self._revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: Any) -> None:
        if self._assigned is not None:
            await self._assigned(set(assigned))


class TopicFollower(Generic[T]):
    """One consumer following ``topics``, records decoded by ``decode(value)``.

    ``client_id``: the process (``devicestate-<process>``); ``poll_timeout_ms``: longest wait of
    one poll (milliseconds); ``max_records``: most records per poll; ``on_assigned`` /
    ``on_revoked``: rebalance callbacks (groups only); ``consumer_options``: further
    ``AIOKafkaConsumer`` arguments.
    """

    def __init__(
        self,
        target: KafkaTarget,
        topics: Sequence[str],
        decode: Callable[[bytes], T],
        *,
        client_id: str,
        group_id: str | None = None,
        start: Start = Start.EARLIEST,
        auto_commit: bool = False,
        isolation_level: str = "read_committed",
        poll_timeout_ms: int = 500,
        max_records: int = 500,
        on_undecodable: Callable[[int, Exception], None] | None = None,
        decode_errors: tuple[type[Exception], ...] = (EventDecodeError,),
        on_assigned: PartitionsCallback | None = None,
        on_revoked: PartitionsCallback | None = None,
        **consumer_options: Any,
    ) -> None:
        self.topics = tuple(topics)
        self.client_id = client_id
        self.group_id = group_id
        self._decode = decode
        self._decode_errors = decode_errors
        self._on_undecodable = on_undecodable
        self._poll_timeout_ms = poll_timeout_ms
        self._max_records = max_records
        self._listener = _Listener(on_assigned, on_revoked) if on_assigned or on_revoked else None
        self._consumer = make_consumer(
            target,
            client_id=client_id,
            group_id=group_id,
            auto_offset_reset=start.value,
            enable_auto_commit=auto_commit,
            isolation_level=isolation_level,
            **consumer_options,
        )

    async def __aenter__(self) -> TopicFollower[T]:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start(self, stop: asyncio.Event) -> bool:
        """Start (retrying while Kafka is unreachable) and subscribe; ``False``: stopped first."""
        if not await start_until_stopped(self._consumer, stop, what=self.client_id):
            return False
        if self._listener is not None:
            self._consumer.subscribe(list(self.topics), listener=self._listener)
        else:
            self._consumer.subscribe(list(self.topics))
        return True

    async def poll(self) -> Poll[T]:
        """Fetch what is there (waiting at most ``poll_timeout_ms``), decoded."""
        fetched = await self._consumer.getmany(
            timeout_ms=self._poll_timeout_ms, max_records=self._max_records
        )
        decode, errors, told = self._decode, self._decode_errors, self._on_undecodable
        out: Poll[T] = {}
        for tp, records in fetched.items():
            received: list[Received[T]] = []
            for record in records:
                value: T | None
                try:
                    value = decode(record.value or b"")
                except errors as exc:
                    if told is not None:
                        told(record.offset, exc)
                    value = None
                received.append(Received(record.offset, value))
            out[tp] = received
        return out

    async def batches(self, stop: asyncio.Event) -> AsyncIterator[Poll[T]]:
        """One :meth:`poll` after the other until ``stop`` is set (checked before each poll, so
        the batch in hand is handled first)."""
        while not stop.is_set():
            yield await self.poll()

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        """Commit ``offsets`` (the next offset to read, per partition) for the group."""
        await self._consumer.commit(offsets)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Read ``tp`` again from ``offset`` on the next poll."""
        self._consumer.seek(tp, offset)

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        await self._consumer.seek_to_beginning(*partitions)

    async def committed(self, tp: TopicPartition) -> int | None:
        """The group's committed offset of ``tp`` (``None``: none)."""
        offset: int | None = await self._consumer.committed(tp)
        return offset

    async def position(self, tp: TopicPartition) -> int:
        """The offset of the next record the consumer reads from ``tp``."""
        offset: int = await self._consumer.position(tp)
        return offset

    def assignment(self) -> set[TopicPartition]:
        """The partitions assigned now (empty before the first rebalance)."""
        return set(self._consumer.assignment())

    async def end_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """The offset after the last record of each partition (read_committed: the last stable)."""
        ends: dict[TopicPartition, int] = await self._consumer.end_offsets(list(partitions))
        return dict(ends)

    async def close(self) -> None:
        """Stop the consumer (leaves the group; safe to call twice or before a start)."""
        await self._consumer.stop()
