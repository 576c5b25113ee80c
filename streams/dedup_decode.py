"""Decoding one batch of the health topic for the health agent (:mod:`streams.dedup`).

:func:`decode_into` decodes a faust event's record
(:func:`~services.domain.records.decode_typed_record`, with the type its ``devicestate-type``
header names; records written before the header are told apart by their bytes) and files it in
a :class:`DecodedBatch`: device observations and releases go to the directory (``records``), node
events (heartbeats, resource counts, watcher ticks) and DRA inventory records are only forwarded
(``node_events``), and what the inventory folds goes to ``items``. A record that does not decode
(or a tombstone) is handed to ``dead_letter``; nothing is raised.

A schema-2 record (:class:`~services.domain.observations.DeviceHealthObservations`, one Pod's
status change) is filed as its observations, each at its own position ``(topic, partition,
offset, index)`` with the record's event time and faust event: from here on nothing tells them
from schema-1 records. Each of its entries that did not decode is dead-lettered alone (its
reason names its index; the value is the Pod's fields and that entry), the others are kept.
"""

from __future__ import annotations

from collections.abc import Awaitable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import structlog

from services.adapters.kafka.headers import record_type
from services.domain.adoption.failure_events import DRAFailureObserved
from services.domain.batch import InventoryRecord
from services.domain.event_time import append_time, bounded
from services.domain.events import DeviceHealthObserved
from services.domain.inventory.events import InventoryObserved
from services.domain.lifecycle_events import PodLifecycleObserved
from services.domain.log import LoggedEvent, LogPosition
from services.domain.node_events import (
    NodeHeartbeat,
    NodeLabelsChanged,
    NodeResourcesChanged,
    WatcherTick,
)
from services.domain.observations import DeviceHealthObservations, observation_positions
from services.domain.records import check_key, decode_typed_record
from services.domain.workloads.events import PodWorkloadObserved
from streams.forward import LoggedNodeEvent
from streams.metrics import WorkerMetrics

log = structlog.get_logger(__name__)


class DeadLetter(Protocol):
    """``(faust message, its position, reason, original=None) -> awaitable`` putting it on the
    dead-letter topic's producer and giving its acknowledgement (``None``: sent already), for
    :func:`streams.deadletter.deliver_in_order`. ``original``: the letter's value instead of the
    message's bytes (one bad observation of a schema-2 record, alone)."""

    def __call__(
        self, message: Any, position: LogPosition, reason: str, *, original: bytes | None = None
    ) -> Awaitable[Awaitable[Any] | None]: ...


async def already_sent(
    message: Any, position: LogPosition, reason: str, *, original: bytes | None = None
) -> None:
    """The :class:`DeadLetter` of a record a first attempt at its batch has sent already."""


@dataclass(slots=True)
class DecodedBatch:
    """One batch of faust events, decoded (:func:`decode_into`, in stream order)."""

    events: Sequence[Any]  # faust EventT, in stream order
    records: list[LoggedEvent] = field(default_factory=list)
    sources: list[Any] = field(default_factory=list)  # faust event of each record
    node_events: list[LoggedNodeEvent] = field(default_factory=list)
    order: dict[LogPosition, int] = field(default_factory=dict)  # decoded records' batch index
    # What the inventory folds, in batch order: observations, DRA objects, resource counts.
    items: list[tuple[LogPosition, InventoryRecord]] = field(default_factory=list)
    dead: list[Awaitable[Awaitable[Any] | None]] = field(default_factory=list)
    """Pending dead-letter sends (:data:`DeadLetter`), delivered before the batch is written."""
    skew_seconds: float = 30.0
    """How far ``observedAt`` may run ahead of the Kafka timestamp (:mod:`services.domain.event_time`)."""
    times: dict[LogPosition, datetime] = field(default_factory=dict)
    """Each decoded record's event time, bounded by its Kafka timestamp."""
    clamped: list[LogPosition] = field(default_factory=list)
    """Records whose event time was clamped to the bound."""
    skews: dict[tuple[str, int], float] = field(default_factory=dict)
    """Per partition, the most ``observedAt`` ran ahead of the Kafka timestamp (seconds)."""
    workloads: list[tuple[LogPosition, PodWorkloadObserved]] = field(default_factory=list)
    """The Pods' workload records (issue 13), in batch order: to ``pod_workloads`` only."""
    failures: list[tuple[LogPosition, DRAFailureObserved]] = field(default_factory=list)
    """The driver and claim failures (issue 16 item 3), in batch order: to ``dra_failures``
    only (not forwarded to the governance topic)."""
    lifecycles: list[tuple[LogPosition, PodLifecycleObserved]] = field(default_factory=list)
    """The Pods' lifecycle stages (issue 16), in batch order: to ``pod_lifecycle_stages`` only."""


def decode_into(batch: DecodedBatch, event: Any, dead_letter: DeadLetter) -> None:
    """Decode faust ``event`` into ``batch`` (see the module doc)."""
    message = event.message
    position = LogPosition(message.topic, message.partition, message.offset)
    payload = message.value
    try:
        if payload is None:
            raise ValueError("record has no value (tombstone)")
        decoded = check_key(
            decode_typed_record(payload, record_type(message.headers), inventory=True),
            message.key,
        )
    except Exception as exc:  # EventDecodeError, or anything a bad payload provokes
        reason = str(exc) or type(exc).__name__
        batch.dead.append(dead_letter(message, position, reason))
        return
    appended = append_time(getattr(message, "timestamp", None))
    at, clamped = bounded(decoded.observed_at, appended, batch.skew_seconds)
    if appended is not None:
        part = (position.topic, position.partition)
        ahead = (decoded.observed_at - appended).total_seconds()
        if part not in batch.skews or ahead > batch.skews[part]:
            batch.skews[part] = ahead
    if isinstance(decoded, DeviceHealthObservations):
        for bad in decoded.rejected:
            batch.dead.append(dead_letter(message, position, bad.reason, original=bad.original))
        for at_index, observation in observation_positions(position, decoded):
            _file_time(batch, at_index, at, clamped)
            batch.items.append((at_index, observation))
            batch.records.append(LoggedEvent(at_index, observation))
            batch.sources.append(event)
        return
    _file_time(batch, position, at, clamped)
    if isinstance(decoded, PodWorkloadObserved):
        batch.workloads.append((position, decoded))
        return
    if isinstance(decoded, DRAFailureObserved):
        batch.failures.append((position, decoded))
        return
    if isinstance(decoded, PodLifecycleObserved):
        batch.lifecycles.append((position, decoded))
        return
    if isinstance(
        decoded,
        DeviceHealthObserved | InventoryObserved | NodeResourcesChanged | NodeLabelsChanged,
    ):
        batch.items.append((position, decoded))
    if isinstance(
        decoded,
        NodeHeartbeat | NodeResourcesChanged | WatcherTick | InventoryObserved | NodeLabelsChanged,
    ):
        batch.node_events.append(LoggedNodeEvent(position, decoded))
        return
    batch.records.append(LoggedEvent(position, decoded))
    batch.sources.append(event)


def _file_time(batch: DecodedBatch, position: LogPosition, at: datetime, clamped: bool) -> None:
    batch.order[position] = len(batch.order)
    batch.times[position] = at
    if clamped:
        batch.clamped.append(position)


def record_event_time(metrics: WorkerMetrics, batch: DecodedBatch) -> None:
    """Count clamped event times and track how far ``observedAt`` runs ahead of the broker."""
    for position in batch.clamped:
        metrics.clock_clamped.labels(position.topic, str(position.partition)).inc()
    for (topic, partition), ahead in batch.skews.items():
        metrics.clock_skew.labels(topic, str(partition)).set(ahead)
    if batch.clamped:
        first = batch.clamped[0]
        log.warning(
            "event time clamped to the broker's clock",
            records=len(batch.clamped),
            topic=first.topic,
            partition=first.partition,
            offset=first.offset,
            max_skew_seconds=batch.skew_seconds,
        )


def early_event_times(
    batch: DecodedBatch, kept: Collection[int]
) -> tuple[list[LoggedEvent], list[tuple[LogPosition, datetime]]]:
    """The observations of ``batch`` not ``kept`` (indexes into ``batch.records``: the rest was
    dropped early), and the event times the store must count besides its applied observations:
    those dropped early and the node events, plus the clamped ones (kept observations count at
    their bounded time, not their observedAt), bounded by the broker's clock like the rest."""
    times = batch.times
    keep = set(kept)
    dropped = [r for i, r in enumerate(batch.records) if i not in keep]
    event_times = [(r.position, times[r.position]) for r in dropped]
    event_times.extend((n.position, times[n.position]) for n in batch.node_events)
    event_times.extend((position, times[position]) for position, _ in batch.workloads)
    event_times.extend((position, times[position]) for position, _ in batch.failures)
    event_times.extend((position, times[position]) for position, _ in batch.lifecycles)
    if batch.clamped:
        counted = {position for position, _ in event_times}
        event_times.extend((p, times[p]) for p in batch.clamped if p not in counted)
    return dropped, event_times


def split_repeats(events: Sequence[Any]) -> tuple[list[Any], list[Any]]:
    """``events`` (faust events) split into the first copy of each log position, in batch order,
    and the later copies: after a rebalance the consumer can fetch a range again while the
    stream still holds it, so one batch may carry a record twice. A copy is the same record:
    only the first is processed."""
    first: list[Any] = []
    repeats: list[Any] = []
    seen: set[tuple[str, int, int]] = set()
    for event in events:
        message = event.message
        position = (message.topic, message.partition, message.offset)
        (repeats if position in seen else first).append(event)
        seen.add(position)
    return first, repeats


def consumed_offsets(events: Sequence[Any]) -> dict[tuple[str, int], list[int]]:
    """Per ``(topic, partition)``, the offsets of faust ``events``, in batch order."""
    offsets: dict[tuple[str, int], list[int]] = {}
    for event in events:
        message = event.message
        offsets.setdefault((message.topic, message.partition), []).append(message.offset)
    return offsets


def consumer_highwaters(app: Any, events: Sequence[Any]) -> dict[tuple[str, int], int]:
    """Per ``(topic, partition)`` of faust ``events``, the consumer's highwater (the partition's
    end offset as last fetched); partitions without one (no consumer: agent unit tests) are
    absent."""
    highwaters: dict[tuple[str, int], int] = {}
    try:
        consumer = app.consumer
    except Exception:  # no consumer (agent unit tests)
        return highwaters
    for tp in {event.message.tp for event in events}:
        try:
            value = consumer.highwater(tp)
        except Exception:
            continue
        if isinstance(value, int):
            highwaters[(tp.topic, tp.partition)] = value
    return highwaters
