"""Dead letters of the worker's agents (:mod:`streams.dedup`, :mod:`streams.governor`).

A record that does not decode, or whose body is of another type than its ``devicestate-type``
header says, is sent with its original key and bytes to ``settings.dead_letter_topic`` and the
stream goes on. Headers: ``devicestate-reason`` (the decode error), ``devicestate-stage`` (the
agent's stage: ``decode`` for the health agent, ``governor-decode`` for the governor,
``governor-device-ceiling`` for a transition of a node over ``max_devices_per_node``),
``devicestate-source`` (``<topic>/<partition>/<offset>`` of the original). Each is counted in
``dead_lettered{stage}``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass
from typing import Any

import structlog

from services.adapters.kafka.headers import (
    HEADER_REASON,
    HEADER_RECORDS,
    HEADER_SOURCE,
    HEADER_STAGE,
)
from services.domain.governance.input_batch import BadEntry
from services.domain.governance.input_codec import encode_input
from services.domain.governance.intake import Folded
from streams.forward import record_key
from streams.metrics import WorkerMetrics

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Letter:
    """One dead letter by its parts: ``records`` originals (1: ``value`` is the original's
    bytes), ``source`` the first original's ``<topic>/<partition>/<offset>``."""

    key: bytes | None
    value: bytes | None
    source: str
    reason: str
    records: int = 1


async def dead_letter(
    topic: Any, metrics: WorkerMetrics, message: Any, *, stage: str, reason: str
) -> Any:
    """Send faust ``message`` to the dead-letter ``topic`` (a faust topic, raw serializers) and
    await the broker's acknowledgement (its record metadata). A producer failure is raised: the
    agent then withholds the batch's acks, so the batch is read again after a restart."""
    source = f"{message.topic}/{message.partition}/{message.offset}"
    return await dead_letter_record(
        topic,
        metrics,
        key=message.key,
        value=message.value,
        source=source,
        stage=stage,
        reason=reason,
    )


async def dead_letter_record(
    topic: Any,
    metrics: WorkerMetrics,
    *,
    key: bytes | None,
    value: bytes | None,
    source: str,
    stage: str,
    reason: str,
) -> Any:
    """:func:`dead_letter` of a record given by its parts (``source``:
    ``<topic>/<partition>/<offset>`` of the original)."""
    return await (
        await enqueue_dead_letter(topic, metrics, Letter(key, value, source, reason), stage)
    )


async def enqueue_dead_letter(
    topic: Any, metrics: WorkerMetrics, letter: Letter, stage: str
) -> Awaitable[Any]:
    """Put ``letter`` on the producer (this waits only for room in its buffer) with stage
    ``stage`` and return the broker's acknowledgement, to be awaited before the batch's offsets
    are committed (:func:`deliver_in_order`). A letter of several originals carries
    :data:`~services.adapters.kafka.headers.HEADER_RECORDS`; each counts in
    ``dead_lettered{stage}``."""
    metrics.dead_lettered.labels(stage).inc(letter.records)
    headers = [
        (HEADER_REASON, letter.reason.encode()),
        (HEADER_STAGE, stage.encode()),
        (HEADER_SOURCE, letter.source.encode()),
    ]
    if letter.records != 1:
        headers.append((HEADER_RECORDS, str(letter.records).encode()))
    ack: Awaitable[Any] = await topic.send(
        key=letter.key, value=letter.value, headers=headers, force=True
    )
    return ack


async def deliver_in_order(letters: Iterable[Awaitable[Awaitable[Any] | None]]) -> list[Any]:
    """Enqueue each of ``letters`` (:func:`enqueue_dead_letter` calls; ``None``: nothing to
    send) in turn, then await all their acknowledgements; a producer failure is raised.

    Why not ``asyncio.gather`` of whole sends: every send waiting for room in the producer's
    batch wakes each time the batch drains (aiokafka ``MessageAccumulator.add_message``), so
    thousands of concurrent sends cost time quadratic in their count. A profile of a 100,000-ID
    burst of one node put 176 s of the worker's 315 s there (``docs/reliability.md``)."""
    acks = [ack for ack in [await letter for letter in letters] if ack is not None]
    return list(await asyncio.gather(*acks))


class OncePerBatch:
    """The dead letters of one batch in progress, each ``(stage, source)`` sent once however often
    the batch is attempted (transient retries, the poison search of :mod:`streams.poison`); call
    :meth:`reset` when the next batch starts."""

    def __init__(self) -> None:
        self.sent: set[tuple[str, str, int | None]] = set()

    def reset(self) -> None:
        self.sent = set()

    async def send(
        self,
        topic: Any,
        metrics: WorkerMetrics,
        *,
        key: bytes | None,
        value: bytes | None,
        source: str,
        stage: str,
        reason: str,
        part: int | None = None,
    ) -> Any:
        """:func:`dead_letter_record`, unless this batch sent it already (then ``None``).
        ``part``: which entry of the record at ``source`` (a ``ForwardedBatch``'s)."""
        if (stage, source, part) in self.sent:
            return None
        log.warning("record dead-lettered", source=source, reason=reason, stage=stage)
        sent = await dead_letter_record(
            topic, metrics, key=key, value=value, source=source, stage=stage, reason=reason
        )
        self.sent.add((stage, source, part))
        return sent

    def message(
        self, topic: Any, metrics: WorkerMetrics, message: Any, *, stage: str, reason: str
    ) -> Awaitable[Any]:
        """:meth:`send` of faust ``message`` (its key, bytes and position)."""
        return self.send(
            topic,
            metrics,
            key=message.key,
            value=message.value,
            source=f"{message.topic}/{message.partition}/{message.offset}",
            stage=stage,
            reason=reason,
        )

    def entry(
        self, topic: Any, metrics: WorkerMetrics, message: Any, bad: BadEntry, *, stage: str
    ) -> Awaitable[Any]:
        """:meth:`send` of one entry of a ``ForwardedBatch`` in faust ``message`` that does not
        decode: the entry's own bytes, the record's key and position, the reason naming the
        entry (each bad entry of a record is a letter of its own)."""
        return self.send(
            topic,
            metrics,
            key=message.key,
            value=bad.value,
            source=f"{message.topic}/{message.partition}/{message.offset}",
            stage=stage,
            reason=bad.reason,
            part=bad.index,
        )

    def merged(
        self,
        topic: Any,
        metrics: WorkerMetrics,
        folded: Folded,
        health_topic: str,
        *,
        stage: str,
        reason: str,
    ) -> Awaitable[Any]:
        """:meth:`send` of a record the governor's merge released (``folded.key`` set). It may
        have been read in an earlier batch, so the letter holds its re-encoded form and the
        source of the health record it was forwarded for (on ``health_topic``)."""
        key = folded.key
        assert key is not None
        return self.send(
            topic,
            metrics,
            key=record_key(folded.record),
            value=encode_input(folded.record, key),
            source=f"{health_topic}/{key.partition}/{key.offset}",
            stage=stage,
            reason=reason,
        )
