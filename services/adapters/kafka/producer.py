"""Publish device-health topic records and dead letters to Kafka (aiokafka, idempotent producer).

Records (device events and node events, :data:`~services.domain.records.TopicRecord`) are keyed
by node name (UTF-8), so one node's records share a partition and keep their order. A
``WatcherTick`` goes to one partition named by itself, keyed ``~tick/<partition>``:
:meth:`EventPublisher.publish_tick` sends one to every partition of the topic (the partition
count comes from the producer's metadata). Every record carries its type in the
``devicestate-type`` header (:mod:`services.adapters.kafka.headers`). Dead letters carry the original bytes as the value and
say why in headers (``devicestate-reason``, ``-stage``, ``-source``).

Delivery: at least once, never dropped. ``publish`` returns once the record is queued; at most
``max_in_flight`` records wait for their acknowledgement, and the caller awaits (back-pressure)
while that many are pending. A retriable failure (broker down, leader moving, request timed out)
is retried with exponential backoff and jitter for as long as it takes, each retry counted through
``on_retry``. A retried record can land after records queued behind it; the consumer does not
depend on log order for correctness (its version guard orders by ``statusVersion``).

Size: no record can stop the watcher (issue 11). The producer's ``max_request_size`` is
``settings.max_message_bytes``, the same figure :func:`~services.adapters.kafka.topics.ensure_topics`
sets as the topics' ``max.message.bytes``. A record over it (refused by the client, or by a broker
whose topic takes less) is dead-lettered instead, stage :data:`STAGE_PUBLISH`, its reason naming
its type and size, and the stream goes on. A dead letter's value is cut to fit the dead-letter
topic; the ``devicestate-original-size`` header then says how large the original was.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Final

import structlog
from aiokafka.errors import KafkaTimeoutError, MessageSizeTooLargeError, RecordListTooLargeError
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_never,
    wait_random_exponential,
)

from services.adapters.kafka.clients import Producer, is_retriable, make_producer
from services.adapters.kafka.headers import (
    HEADER_ORIGINAL_SIZE,
    HEADER_REASON,
    HEADER_SOURCE,
    HEADER_STAGE,
    HEADER_TYPE,
)
from services.domain.node_events import WatcherTick
from services.domain.records import TopicRecord, encode_record
from services.runtime.config import KafkaSettings

log = structlog.get_logger(__name__)

STAGE_PUBLISH: Final = "publish"
"""Dead-letter stage of a record too large for the topic (``max.message.bytes``)."""

REASON_MAX_CHARS: Final = 4096
"""Longest dead-letter reason kept (characters): a header is part of the record's size."""

FALLBACK_BODY_BYTES: Final = 1024
"""Bytes of the original kept when the broker refuses even the cut dead letter (a dead-letter
topic created elsewhere with a smaller ``max.message.bytes``)."""

_LENGTH_VARINTS: Final = 8

_TOO_LARGE: Final = (MessageSizeTooLargeError, RecordListTooLargeError)


@dataclass(frozen=True, slots=True)
class _Record:
    topic: str
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()
    partition: int | None = None


class EventPublisher:
    """The watcher's Kafka producer: ``await start()``, then ``publish``/``dead_letter``, then
    ``flush()`` and ``close()`` (or use it as an async context manager).

    ``linger_ms`` (milliseconds) batches records sent close together; ``max_in_flight`` bounds the
    records awaiting acknowledgement; ``max_retry_wait_seconds`` caps the backoff between retries;
    ``on_retry`` is called once per retry (e.g. a Prometheus counter's ``inc``);
    ``on_dead_letter`` with the stage and the record's type of each record the publisher
    dead-letters itself (one too large for the topic). Records are at most ``settings.max_message_bytes`` bytes.
    """

    def __init__(
        self,
        settings: KafkaSettings,
        *,
        client_id: str = "devicestate-watcher",
        linger_ms: int = 20,
        max_batch_size: int = 256 * 1024,
        request_timeout_ms: int = 30000,
        max_in_flight: int = 2000,
        max_retry_wait_seconds: float = 30.0,
        on_retry: Callable[[], None] | None = None,
        on_dead_letter: Callable[[str, str], None] | None = None,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        self._settings = settings
        self._options: dict[str, Any] = dict(
            client_id=client_id,
            linger_ms=linger_ms,
            max_batch_size=min(max_batch_size, settings.max_message_bytes),
            request_timeout_ms=request_timeout_ms,
            # Equal to the topics' max.message.bytes (topics.py): a record the client lets
            # through fits the topic, a batch of one record being no larger than its estimate.
            max_request_size=settings.max_message_bytes,
        )
        self._max_message_bytes = settings.max_message_bytes
        self._on_dead_letter = on_dead_letter
        self._max_in_flight = max_in_flight
        self._max_retry_wait = max_retry_wait_seconds
        self._on_retry = on_retry
        self._producer: Producer | None = None
        self._pending: deque[tuple[_Record, asyncio.Future[Any]]] = deque()

    async def __aenter__(self) -> EventPublisher:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def in_flight(self) -> int:
        """Records queued but not yet acknowledged."""
        return len(self._pending)

    def _retrying(self, what: str) -> AsyncRetrying:
        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome is not None else None
            if self._on_retry is not None:
                self._on_retry()
            log.warning(
                "kafka unavailable, retrying",
                what=what,
                attempt=state.attempt_number,
                error=repr(exc),
            )

        return AsyncRetrying(
            retry=retry_if_exception(is_retriable),
            wait=wait_random_exponential(multiplier=0.2, max=self._max_retry_wait),
            stop=stop_never,
            before_sleep=before_sleep,
            reraise=True,
        )

    async def start(self) -> None:
        """Connect, waiting (with backoff, counting retries) until a broker answers."""
        async for attempt in self._retrying("start"):
            with attempt:
                producer = make_producer(self._settings, **self._options)
                try:
                    await producer.start()
                except BaseException:
                    await producer.stop()
                    raise
                self._producer = producer

    def _started(self) -> Producer:
        if self._producer is None:
            raise RuntimeError("EventPublisher.start() was not called (or close() was)")
        return self._producer

    async def publish(self, record: TopicRecord) -> None:
        """Queue one record on ``settings.topic``, keyed by its node (UTF-8). A ``WatcherTick``
        goes to its own partition (its key is ``~tick/<partition>``)."""
        partition = record.partition if isinstance(record, WatcherTick) else None
        await self._send(
            _Record(
                self._settings.topic,
                record.node.encode("utf-8"),
                encode_record(record),
                ((HEADER_TYPE, record.type.encode()),),
                partition=partition,
            )
        )

    async def partitions(self) -> list[int]:
        """The partitions of ``settings.topic`` as the producer's metadata knows them (waits,
        with backoff, until the broker answers and the topic exists)."""
        found: set[int] | None = None
        async for attempt in self._retrying("metadata"):
            with attempt:
                found = await self._started().partitions_for(self._settings.topic)
                if not found:
                    raise KafkaTimeoutError(f"no partitions known for {self._settings.topic}")
        assert found is not None
        return sorted(found)

    async def publish_tick(
        self, observed_at: datetime, watch_seen_at: datetime | None = None
    ) -> int:
        """Queue one ``WatcherTick(partition, observed_at, watch_seen_at)`` on every partition of
        ``settings.topic``; returns how many (the partition count)."""
        partitions = await self.partitions()
        for partition in partitions:
            tick = WatcherTick(partition, observed_at, watch_seen_at=watch_seen_at)
            await self.publish(tick)
        return len(partitions)

    async def dead_letter(self, original: bytes, reason: str, stage: str, source: str) -> None:
        """Queue ``original`` (unchanged bytes) on ``settings.dead_letter_topic`` with the
        ``devicestate-reason``/``-stage``/``-source`` headers (UTF-8). No key: dead letters
        have no order to keep. An original too large for one record keeps its first bytes, and
        the ``devicestate-original-size`` header its size; a reason is cut to
        :data:`REASON_MAX_CHARS` characters."""
        await self._send(self._dead_letter_record(original, reason, stage, source))

    def _dead_letter_record(
        self, original: bytes, reason: str, stage: str, source: str, limit: int | None = None
    ) -> _Record:
        headers: list[tuple[str, bytes]] = [
            (HEADER_REASON, reason[:REASON_MAX_CHARS].encode("utf-8")),
            (HEADER_STAGE, stage.encode("utf-8")),
            (HEADER_SOURCE, source[:REASON_MAX_CHARS].encode("utf-8")),
        ]
        room = self._room(headers) if limit is None else limit
        if len(original) > room:
            headers.append((HEADER_ORIGINAL_SIZE, str(len(original)).encode()))
            room = min(room, self._room(headers))
            original = original[:room]
        return _Record(self._settings.dead_letter_topic, None, original, tuple(headers))

    def _room(self, headers: list[tuple[str, bytes]]) -> int:
        """Value bytes a keyless record with ``headers`` may have (the client's own estimate)."""
        framing: int = DefaultRecordBatchBuilder.estimate_size_in_bytes(None, b"", headers)
        # The estimate of an empty value counts 1-byte varints for the value's and the record's
        # lengths; a value of up to 16 MiB needs 4 bytes for each.
        return self._max_message_bytes - framing - _LENGTH_VARINTS

    @staticmethod
    def _cut(record: _Record) -> _Record:
        """``record`` (a dead letter) with only its first :data:`FALLBACK_BODY_BYTES` bytes."""
        headers = record.headers
        if not any(name == HEADER_ORIGINAL_SIZE for name, _ in headers):
            headers = (*headers, (HEADER_ORIGINAL_SIZE, str(len(record.value)).encode()))
        return replace(record, value=record.value[:FALLBACK_BODY_BYTES], headers=headers)

    async def _refuse(self, record: _Record, why: str) -> None:
        """Dead-letter a record too large for its topic (its value cut to fit)."""
        record_type = dict(record.headers).get(HEADER_TYPE, b"record").decode(errors="replace")
        reason = (
            f"record-too-large: {record_type} of {len(record.value)} bytes, over the topic's "
            f"max.message.bytes of {self._max_message_bytes} ({why})"
        )
        key = None if record.key is None else record.key.decode(errors="replace")
        source = f"{record.topic} key={key}"
        log.warning("record too large, dead-lettered", reason=reason, source=source)
        await self._send(self._dead_letter_record(record.value, reason, STAGE_PUBLISH, source))
        if self._on_dead_letter is not None:
            self._on_dead_letter(STAGE_PUBLISH, record_type)

    async def _send(self, record: _Record) -> None:
        while len(self._pending) >= self._max_in_flight:
            await self._settle_oldest()
        future: asyncio.Future[Any] | None = None
        try:
            async for attempt in self._retrying("send"):
                with attempt:
                    # send() waits for room in the accumulator and raises KafkaTimeoutError when
                    # none frees up in request_timeout_ms (broker down): the retry loop is our
                    # back-pressure.
                    future = await self._queue(record)
        except _TOO_LARGE:
            # Over max_request_size: the client refused it before it left. Dead letters are
            # cut to fit beforehand; should one still be refused, its first bytes go instead.
            if record.topic != self._settings.dead_letter_topic:
                await self._refuse(record, "refused by the producer")
            elif len(record.value) > FALLBACK_BODY_BYTES:
                await self._send(self._cut(record))
            else:
                raise
            return
        assert future is not None
        self._pending.append((record, future))

    async def _queue(self, record: _Record) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = await self._started().send(
            record.topic,
            record.value,
            key=record.key,
            partition=record.partition,
            headers=list(record.headers),
        )
        return future

    async def _settle_oldest(self) -> None:
        record, future = self._pending.popleft()
        try:
            # Shielded: a task cancelled while it waits (the watcher stopping) must not cancel
            # the delivery itself; the record goes back to the queue for flush() to wait on.
            await asyncio.shield(future)
        except asyncio.CancelledError:
            if not future.done() or (not future.cancelled() and future.exception() is not None):
                self._pending.appendleft((record, future))
            raise
        except _TOO_LARGE:
            # The broker refused the batch: its limit for the topic is below ours (a topic
            # created elsewhere). The batch may hold smaller records too: each is tried alone.
            await self._settle_alone(record)
        except Exception as exc:
            if not is_retriable(exc):
                raise
            if self._on_retry is not None:
                self._on_retry()
            log.warning("delivery failed, sending again", topic=record.topic, error=repr(exc))
            async for attempt in self._retrying("redeliver"):
                with attempt:
                    await (await self._queue(record))

    async def _settle_alone(self, record: _Record) -> None:
        """Deliver ``record`` in a batch of its own; one the broker still refuses is
        dead-lettered (a dead letter: its first :data:`FALLBACK_BODY_BYTES` bytes are sent)."""
        try:
            async for attempt in self._retrying("redeliver"):
                with attempt:
                    await self._send_alone(record)
        except _TOO_LARGE:
            if record.topic != self._settings.dead_letter_topic:
                await self._refuse(record, "refused by the broker")
            elif len(record.value) > FALLBACK_BODY_BYTES:
                log.warning("dead letter refused as too large; sending its first bytes")
                await self._settle_alone(self._cut(record))
            else:
                raise

    async def _send_alone(self, record: _Record) -> None:
        producer = self._started()
        partition = record.partition
        if partition is None:
            # The partition send() would choose: murmur2 of the key (random without one).
            partitions = sorted(await producer.partitions_for(record.topic))
            partition = int(DefaultPartitioner()(record.key, partitions, partitions))
        batch = producer.create_batch()
        batch.append(
            key=record.key, value=record.value, timestamp=None, headers=list(record.headers)
        )
        batch.close()
        await (await producer.send_batch(batch, record.topic, partition=partition))

    async def flush(self) -> None:
        """Wait until every queued record is acknowledged (retrying failed ones)."""
        while self._pending:
            await self._settle_oldest()

    async def close(self, flush_timeout_seconds: float | None = None) -> None:
        """Flush (for at most ``flush_timeout_seconds`` seconds if given), then disconnect.
        Records still unacknowledged after the timeout are logged, not lost for good: the next
        start of the watcher LISTs and re-emits every Pod's current devices. Safe to call twice."""
        if self._producer is None:
            return
        try:
            async with asyncio.timeout(flush_timeout_seconds):
                await self.flush()
        except TimeoutError:
            log.warning("closing with unacknowledged records", pending=len(self._pending))
        finally:
            producer, self._producer = self._producer, None
            self._pending.clear()
            await producer.stop()
