"""The dedup agent: device-health events from Kafka into the PostgreSQL projection.

Per batch of records (``stream.take_events``):

1. decode each record (:func:`~services.domain.records.decode_typed_record`, with the type its
   ``devicestate-type`` header names; records written before the header are told apart by their
   bytes); a record that does not decode, or whose body is of another type than its header
   says, is sent, with its original bytes, to the dead-letter topic (reason in headers) and the
   stream goes on. Node events (heartbeats, resource counts, watcher ticks) and DRA inventory
   records never touch the directory or the table: heartbeats and resource counts are only
   forwarded (step 3), and every record's event time moves its partition's watermark. DRA
   inventory records, resource counts and the observations the directory applies also maintain
   the inventory (:mod:`services.domain.inventory.fold`: objects, identities, conflicts) in
   the same transaction;
2. drop observations the changelog-backed table ``last_applied_version`` already covers (same or
   older statusVersion rank for the device) -- early, before the database sees them. Releases are
   never filtered: only the projection knows which allocations they remove;
3. write what is left with ONE :meth:`ProjectionStore.apply_batch` (one transaction), retrying
   transient database (and Kafka) errors with backoff inside the loop, shielded from
   cancellation. Inside the transaction, just before the commit, the batch's health
   transitions (with the identity each observation resolved to), node facts, inventory conflicts
   and watermarks are forwarded to the governance topic (:mod:`streams.forward`) and their
   delivery awaited;
4. only after the commit, raise the table's ranks, so the table never drops an event PostgreSQL
   did not get.

``take_events`` acknowledges the whole batch in a ``finally`` when the body returns, even if it
raised. So the body never raises for a transient error, and when a batch cannot be written (a
non-transient error, or shutdown before the write finished) its acks are *withheld*: the offsets
are not committed and the batch is read again after a restart. The projection's version guard and
its history keyed by log position make that re-read harmless (at-least-once into an idempotent
sink).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Protocol

import faust
import structlog

from services.adapters.kafka.clients import is_broker_unavailable
from services.adapters.kafka.headers import HEADER_REASON, HEADER_SOURCE, HEADER_STAGE, record_type
from services.adapters.projection.errors import is_transient
from services.domain.batch import CommitHook, InventoryRecord, LoggedBatch
from services.domain.directory import version_rank
from services.domain.events import DeviceHealthObserved
from services.domain.inventory.events import InventoryObserved
from services.domain.log import LoggedEvent, LogPosition
from services.domain.node_events import NodeHeartbeat, NodeResourcesChanged, WatcherTick
from services.domain.records import decode_typed_record
from services.runtime.config import Settings
from streams.batchwrite import SHUTDOWN_GRACE_SECONDS as SHUTDOWN_GRACE_SECONDS
from streams.batchwrite import BatchNotWritten as BatchNotWritten
from streams.batchwrite import BatchWriter
from streams.forward import BatchView, Forwarder, LoggedNodeEvent
from streams.metrics import WorkerMetrics

log = structlog.get_logger(__name__)

TABLE_NAME: Final = "last_applied_version"
"""Faust table: ``f"{node}\\x1f{resourceID}"`` -> highest statusVersion rank committed (decimal)."""

KEY_SEPARATOR: Final = "\x1f"
"""ASCII unit separator: cannot occur in a node name or a resourceID the watcher emits."""

DEAD_LETTER_STAGE: Final = "decode"
"""``devicestate-stage`` header of the worker's dead letters."""


class BatchResult(Protocol):
    """What :meth:`ProjectionStore.apply_batch` reports (``BatchStats``)."""

    @property
    def applied(self) -> int: ...
    @property
    def duplicates(self) -> int: ...
    @property
    def stale(self) -> int: ...
    @property
    def released(self) -> int: ...


class BatchSink(Protocol):
    """Where batches go: the PostgreSQL projection, or a fake in unit tests."""

    def apply_batch(
        self, batch: LoggedBatch, before_commit: CommitHook | None = None
    ) -> Awaitable[BatchResult]: ...


# --- the pure part: which observations the table already covers ------------------------------


def table_key(node: str, resource_id: str) -> str:
    """Key of a device in the dedup table."""
    return f"{node}{KEY_SEPARATOR}{resource_id}"


@dataclass(slots=True)
class Selection:
    """Result of :func:`select_new` on one batch."""

    records: list[LoggedEvent] = field(default_factory=list)
    """Events to write, in input order."""
    kept: list[int] = field(default_factory=list)
    """Index in the input of each entry of ``records``."""
    duplicates: int = 0
    """Observations dropped with the same rank as the table's (or an earlier one in the batch)."""
    stale: int = 0
    """Observations dropped with a lower rank."""
    ranks: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Per table key: (highest rank kept in this batch, input index of the event that carried it)."""


def select_new(items: Sequence[LoggedEvent], known: Mapping[str, int]) -> Selection:
    """Drop observations whose device already has the same or a higher rank.

    ``known`` maps table keys to the rank the projection has committed. The rule is the fold's
    (:func:`services.domain.directory.apply_observation`): an observation can only change a device
    whose rank is lower, or a device not known yet; anything else would be a DUPLICATE or STALE
    no-op there too. Earlier observations of the same batch count as known. Releases always pass.
    """
    selection = Selection()
    seen: dict[str, int] = {}
    for index, item in enumerate(items):
        event = item.event
        if isinstance(event, DeviceHealthObserved):
            key = table_key(event.node, event.resource_id)
            rank = version_rank(event.status_version)
            best = seen.get(key, known.get(key))
            if best is not None and rank <= best:
                if rank == best:
                    selection.duplicates += 1
                else:
                    selection.stale += 1
                continue
            seen[key] = rank
            selection.ranks[key] = (rank, index)
        selection.records.append(item)
        selection.kept.append(index)
    return selection


# --- retriable errors -----------------------------------------------------------------------------


def is_retriable(exc: BaseException) -> bool:
    """What a batch write retries: :func:`is_transient` database errors, and Kafka errors the
    client marks retriable (the forwarding inside the transaction), or a delivery that timed out
    (:func:`~services.adapters.kafka.clients.is_broker_unavailable`)."""
    return is_transient(exc) or is_broker_unavailable(exc)


# --- the agent ---------------------------------------------------------------------------------


@dataclass(slots=True)
class _Batch:
    events: Sequence[Any]  # faust EventT, in stream order
    records: list[LoggedEvent] = field(default_factory=list)
    sources: list[Any] = field(default_factory=list)  # faust event of each record
    node_events: list[LoggedNodeEvent] = field(default_factory=list)
    order: dict[LogPosition, int] = field(default_factory=dict)  # decoded records' batch index
    # What the inventory folds, in batch order: observations, DRA objects, resource counts.
    items: list[tuple[LogPosition, InventoryRecord]] = field(default_factory=list)
    dead: list[Awaitable[Any]] = field(default_factory=list)


class DeviceDedup:
    """Owns the dedup agent, its table, the dead-letter topic and the batch write.

    Built by :func:`streams.app.create_app`; ``on_fatal`` is called once when a batch fails with a
    non-transient error (the worker then stops; the batch's offsets stay uncommitted).
    """

    def __init__(
        self,
        app: Any,
        settings: Settings,
        sink: BatchSink,
        metrics: WorkerMetrics,
        on_fatal: Callable[[BaseException], None] | None = None,
        forwarder: Forwarder | None = None,
    ) -> None:
        self.app = app
        self.settings = settings
        self.sink = sink
        self.metrics = metrics
        self.on_fatal = on_fatal
        self.forwarder = forwarder
        self.source_topic = app.topic(
            settings.topic,
            key_serializer="raw",
            value_serializer="raw",
            partitions=settings.topic_partitions,
        )
        self.dead_letter_topic = app.topic(
            settings.dead_letter_topic, key_serializer="raw", value_serializer="raw"
        )
        # Values are decimal strings: resourceVersions may exceed 64 bits (faust's JSON codec
        # may be orjson, which refuses such ints).
        self.table = app.Table(
            TABLE_NAME,
            default=None,
            schema=faust.Schema(key_serializer="raw", value_serializer="raw"),
            partitions=settings.topic_partitions,
            help="Highest statusVersion rank committed to the projection, per device.",
        )
        self.agent = app.agent(self.source_topic, name="devicestate.dedup")(self.process)
        self.batches = 0
        self.events_seen = 0
        self.writer = BatchWriter(metrics.db_retries, is_retriable, what="health batch")
        self._halted = False

    def begin_shutdown(self) -> None:
        """The worker is stopping: a batch still retrying a transient error gets
        :data:`SHUTDOWN_GRACE_SECONDS` more, then is abandoned unacknowledged (faust waits for
        in-flight batches before it stops, so an endless retry would block the shutdown)."""
        self.writer.begin_shutdown()

    async def process(self, stream: Any) -> None:
        """The agent body: batches from the topic until the stream stops."""
        size = self.settings.worker_batch_size
        within = self.settings.worker_batch_within_seconds
        async for events in stream.take_events(size, within=within):
            await self.handle_batch(stream, events)

    # -- one batch ------------------------------------------------------------------------------

    async def handle_batch(self, stream: Any, events: Sequence[Any]) -> None:
        """Decode, dedup, write and record one batch; never raises for a transient error."""
        if self._halted:  # an earlier batch failed: the worker is stopping
            self._withhold_acks(events)
            return
        started = time.perf_counter()
        batch = _Batch(events)
        self.metrics.consumed.inc(len(events))
        self.metrics.batch_size.observe(len(events))
        self.events_seen += len(events)
        for event in events:
            self._decode_one(event, batch)

        known = self._known_ranks(stream, batch)
        selection = select_new(batch.records, known)
        hook = None
        event_times: list[tuple[LogPosition, datetime]] = []
        if batch.node_events or len(selection.records) < len(batch.records):
            kept = set(selection.kept)
            event_times.extend(
                (r.position, r.event.observed_at)
                for i, r in enumerate(batch.records)
                if i not in kept
            )
            event_times.extend((n.position, n.event.observed_at) for n in batch.node_events)
        if self.forwarder is not None:
            times = [(r.position, r.event.observed_at) for r in selection.records]
            times.extend(event_times)
            view = BatchView(batch.order, batch.node_events, times)
            hook = self.forwarder.before_commit(view)
        if selection.duplicates:
            self.metrics.table_duplicates.labels("duplicate").inc(selection.duplicates)
        if selection.stale:
            self.metrics.table_duplicates.labels("stale").inc(selection.stale)

        highwaters = self._highwaters(events)
        # Progress covers every consumed record, also those dropped early or dead-lettered.
        consumed: dict[tuple[str, int], int] = {}
        for event in events:
            part = (event.message.topic, event.message.partition)
            consumed[part] = max(consumed.get(part, -1), event.message.offset)
        try:
            if batch.dead:
                await asyncio.gather(*batch.dead)
            result, cancelled = await self._write(
                selection.records, highwaters, consumed, event_times, hook, batch.items
            )
        except asyncio.CancelledError:
            self._withhold_acks(events)
            raise
        except Exception as exc:  # BatchNotWritten, or the dead-letter producer failed
            # Withheld offsets stop faust's commits at this batch, so a restart reads it again.
            # Later batches are not written either (halted): applying them first would order a
            # device's events differently from the log. Returning rather than parking lets
            # faust's shutdown, which waits for every event handed to the stream, finish.
            self._withhold_acks(events)
            self._halted = True
            if self.writer.shutting_down:
                log.warning("batch abandoned at shutdown, not acknowledged", error=repr(exc))
            else:
                self._fail(exc)
            return
        if result is None:  # shutdown came first and the write was abandoned
            self._withhold_acks(events)
            raise asyncio.CancelledError
        self._remember(stream, selection, batch)
        self._record(result, events, highwaters, started)
        if cancelled:
            raise asyncio.CancelledError

    def _decode_one(self, event: Any, batch: _Batch) -> None:
        message = event.message
        position = LogPosition(message.topic, message.partition, message.offset)
        payload = message.value
        try:
            if payload is None:
                raise ValueError("record has no value (tombstone)")
            decoded = decode_typed_record(payload, record_type(message.headers), inventory=True)
        except Exception as exc:  # EventDecodeError, or anything a bad payload provokes
            reason = str(exc) or type(exc).__name__
            batch.dead.append(self._dead_letter(message, position, reason))
            return
        batch.order[position] = len(batch.order)
        if isinstance(decoded, DeviceHealthObserved | InventoryObserved | NodeResourcesChanged):
            batch.items.append((position, decoded))
        if isinstance(
            decoded, NodeHeartbeat | NodeResourcesChanged | WatcherTick | InventoryObserved
        ):
            batch.node_events.append(LoggedNodeEvent(position, decoded))
            return
        batch.records.append(LoggedEvent(position, decoded))
        batch.sources.append(event)

    async def _dead_letter(self, message: Any, position: LogPosition, reason: str) -> Any:
        log.warning(
            "event dead-lettered",
            topic=position.topic,
            partition=position.partition,
            offset=position.offset,
            reason=reason,
        )
        self.metrics.dead_lettered.labels(DEAD_LETTER_STAGE).inc()
        headers = [
            (HEADER_REASON, reason.encode()),
            (HEADER_STAGE, DEAD_LETTER_STAGE.encode()),
            (HEADER_SOURCE, f"{position.topic}/{position.partition}/{position.offset}".encode()),
        ]
        fut = await self.dead_letter_topic.send(
            key=message.key, value=message.value, headers=headers, force=True
        )
        return await fut

    def _known_ranks(self, stream: Any, batch: _Batch) -> dict[str, int]:
        known: dict[str, int] = {}
        looked_up: set[str] = set()
        table = self.table
        for record, source in zip(batch.records, batch.sources, strict=True):
            event = record.event
            if not isinstance(event, DeviceHealthObserved):
                continue
            key = table_key(event.node, event.resource_id)
            if key in looked_up:
                continue
            looked_up.add(key)
            with _current_event(stream, source):
                value = table.get(key)
            if value is not None:
                known[key] = int(value)
        return known

    def _remember(self, stream: Any, selection: Selection, batch: _Batch) -> None:
        """After the commit: raise the table's ranks (the changelog goes to the source's partition)."""
        table = self.table
        for key, (rank, index) in selection.ranks.items():
            with _current_event(stream, batch.sources[index]):
                table[key] = str(rank)

    def _highwaters(self, events: Sequence[Any]) -> dict[tuple[str, int], int]:
        highwaters: dict[tuple[str, int], int] = {}
        try:
            consumer = self.app.consumer
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

    # -- the write --------------------------------------------------------------------------------

    async def _write(
        self,
        records: list[LoggedEvent],
        highwaters: Mapping[tuple[str, int], int],
        consumed: Mapping[tuple[str, int], int],
        event_times: Sequence[tuple[LogPosition, datetime]] = (),
        hook: CommitHook | None = None,
        inventory_items: Sequence[tuple[LogPosition, InventoryRecord]] = (),
    ) -> tuple[BatchResult | None, bool]:
        """Commit the batch (:meth:`BatchWriter.write <streams.batchwrite.BatchWriter.write>`:
        retried, shielded). Returns the store's result (``None``: not committed) and whether the
        agent was cancelled meanwhile. Raises :class:`BatchNotWritten` for a non-transient error.
        ``inventory_items`` (the batch's observations, DRA objects and resource counts in batch
        order) make the store maintain the inventory with the directory.
        """
        batch = LoggedBatch(records, highwaters, consumed, event_times, inventory_items)

        def apply() -> Awaitable[BatchResult]:
            return self.sink.apply_batch(batch, hook)

        return await self.writer.write(apply, len(records))

    # -- bookkeeping ------------------------------------------------------------------------------

    def _withhold_acks(self, events: Sequence[Any]) -> None:
        """Keep ``take_events``'s ``finally`` from acknowledging events that were not committed.

        A message already marked acked is skipped by faust's ack (``Message.ack``) and is not
        added to the consumer's committable offsets, so the committed offset stays before it.
        """
        for event in events:
            event.message.acked = True

    def _fail(self, exc: BaseException) -> None:
        """A batch cannot be written: stop the worker through ``on_fatal``; without it (unit
        tests) the error is raised, which crashes the agent."""
        log.error("batch not written; stopping the worker", error=repr(exc))
        if self.on_fatal is None:
            raise exc
        self.on_fatal(exc)

    def _record(
        self,
        result: BatchResult,
        events: Sequence[Any],
        highwaters: Mapping[tuple[str, int], int],
        started: float,
    ) -> None:
        metrics = self.metrics
        metrics.applied.labels("observed").inc(result.applied)
        metrics.applied.labels("released").inc(result.released)
        if result.duplicates:
            metrics.db_noops.labels("duplicate").inc(result.duplicates)
        if result.stale:
            metrics.db_noops.labels("stale").inc(result.stale)
        last: dict[tuple[str, int], int] = {}
        for event in events:
            message = event.message
            key = (message.topic, message.partition)
            last[key] = max(last.get(key, -1), message.offset)
        metrics.set_lag(highwaters, last)
        metrics.batch_seconds.observe(time.perf_counter() - started)
        self.batches += 1


@contextmanager
def _current_event(stream: Any, event: Any) -> Iterator[None]:
    """Make ``event`` faust's current event while reading or writing its table key.

    The table picks the RocksDB partition and the changelog partition from the current event, so
    each key lives in (and its changelog entry goes to) the partition of the record it came from.
    ``take_events`` reads ``stream.current_event`` in its background drainer, so the previous
    value is restored before anything else runs (this block has no ``await``).
    """
    previous = stream.current_event
    stream._set_current_event(event)
    try:
        yield
    finally:
        stream._set_current_event(previous)
