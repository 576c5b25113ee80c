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
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog
from aiokafka.errors import KafkaTimeoutError
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_never,
    wait_random_exponential,
)

from services.adapters.kafka.clients import Producer, is_retriable, make_producer
from services.adapters.kafka.headers import HEADER_REASON, HEADER_SOURCE, HEADER_STAGE, HEADER_TYPE
from services.domain.node_events import WatcherTick
from services.domain.records import TopicRecord, encode_record
from services.runtime.config import KafkaSettings

log = structlog.get_logger(__name__)


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
    ``on_retry`` is called once per retry (e.g. a Prometheus counter's ``inc``).
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
    ) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        self._settings = settings
        self._options: dict[str, Any] = dict(
            client_id=client_id,
            linger_ms=linger_ms,
            max_batch_size=max_batch_size,
            request_timeout_ms=request_timeout_ms,
        )
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

    async def publish_tick(self, observed_at: datetime) -> int:
        """Queue one ``WatcherTick(partition, observed_at)`` on every partition of
        ``settings.topic``; returns how many (the partition count)."""
        partitions = await self.partitions()
        for partition in partitions:
            await self.publish(WatcherTick(partition=partition, observed_at=observed_at))
        return len(partitions)

    async def dead_letter(self, original: bytes, reason: str, stage: str, source: str) -> None:
        """Queue ``original`` (unchanged bytes) on ``settings.dead_letter_topic`` with the
        ``devicestate-reason``/``-stage``/``-source`` headers (UTF-8). No key: dead letters
        have no order to keep."""
        headers = (
            (HEADER_REASON, reason.encode("utf-8")),
            (HEADER_STAGE, stage.encode("utf-8")),
            (HEADER_SOURCE, source.encode("utf-8")),
        )
        await self._send(_Record(self._settings.dead_letter_topic, None, original, headers))

    async def _send(self, record: _Record) -> None:
        while len(self._pending) >= self._max_in_flight:
            await self._settle_oldest()
        future: asyncio.Future[Any] | None = None
        async for attempt in self._retrying("send"):
            with attempt:
                # send() waits for room in the accumulator and raises KafkaTimeoutError when none
                # frees up in request_timeout_ms (broker down): the retry loop is our back-pressure.
                future = await self._queue(record)
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
        except Exception as exc:
            if not is_retriable(exc):
                raise
            if self._on_retry is not None:
                self._on_retry()
            log.warning("delivery failed, sending again", topic=record.topic, error=repr(exc))
            async for attempt in self._retrying("redeliver"):
                with attempt:
                    await (await self._queue(record))

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
