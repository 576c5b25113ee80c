"""The dedup agent: device-health events from Kafka into the PostgreSQL projection.

Per batch of records (``stream.take_events``):

1. decode each record (:mod:`streams.dedup_decode`:
   :func:`~services.domain.records.decode_typed_record`, with the type its ``devicestate-type``
   header names; records written before the header are told apart by their bytes); a record
   that does not decode, or whose body is of another type than its header says, is sent, with
   its original bytes, to the dead-letter topic (:mod:`streams.deadletter`, stage ``decode``)
   and the stream goes on. A schema-2 record (one Pod's status change,
   :mod:`services.domain.observations`) is filed as its observations, each at its own position
   ``(topic, partition, offset, index)``; a bad entry of one is dead-lettered alone. Node events (heartbeats, resource counts, watcher ticks) and DRA
   inventory records never touch the directory or the table: heartbeats and resource counts are
   only forwarded (step 3), and every record's event time moves its partition's watermark. DRA
   inventory records, resource counts and the observations the directory applies also maintain
   the inventory (:mod:`services.domain.inventory.fold`: objects, identities, conflicts) in
   the same transaction;
2. drop observations the changelog-backed table ``last_applied_versions_by_node``
   (:mod:`streams.dedup_table`) already covers (same or older statusVersion rank for the
   device) -- early, before the database sees them. Releases are never filtered: only the
   projection knows which allocations they remove;
3. write what is left with ONE :meth:`ProjectionStore.apply_batch` (one transaction), retrying
   transient database (and Kafka) errors with backoff inside the loop, shielded from
   cancellation. Inside the transaction, just before the commit, the batch's health
   transitions (with the identity each observation resolved to), node facts, inventory conflicts
   and watermarks are forwarded to the governance topic (:mod:`streams.forward`) and their
   delivery awaited;
4. only after the commit, raise the table's ranks, so the table never drops an event PostgreSQL
   did not get.

A partition whose batch starts after records the projection never got (faust can hand a record
prefetched before a rebalance first) is refused by the store
(:class:`~services.domain.batch.RecordsAfterGap`): its records stay unacknowledged, the partition is
sought back to just after its recorded offset (:mod:`streams.gaps`), and the batch's other
partitions are written. Writing it would have moved the recorded offset past the missing records.

A batch whose data PostgreSQL refuses (a value too long, a constraint violated) is bisected
(:mod:`streams.poison`): each refused record goes to the dead-letter topic (stage ``write``, the
database's error as reason) and the rest is written, each part in its own transaction.

``take_events`` acknowledges the whole batch in a ``finally`` when the body returns, even if it
raised. So the body never raises for a transient error, and when a batch cannot be written (any
other non-transient error, or shutdown before the write finished) its acks are *withheld*: the
offsets are not committed and the batch is read again after a restart. The projection's version
guard and its history keyed by log position make that re-read harmless (at-least-once into an
idempotent sink).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, Protocol

import faust
import structlog

from services.adapters.projection.errors import refusal_reason
from services.domain.batch import CommitHook, LoggedBatch, RecordsAfterGap, first_holes
from services.domain.directory import DeviceKey
from services.domain.early_drops import EarlyDropsUnjustified
from services.runtime.config import WorkerProcessSettings
from streams.batchwrite import BatchNotWritten, BatchWriter, is_retriable, write_grace_seconds
from streams.ceiling import CEILING_STAGE, HEADROOM_BYTES, dead_lettering_over_ceiling
from streams.deadletter import Letter, deliver_in_order, enqueue_dead_letter
from streams.dedup_decode import (
    DecodedBatch,
    already_sent,
    consumed_offsets,
    consumer_highwaters,
    decode_into,
    early_event_times,
    record_event_time,
    split_repeats,
)
from streams.dedup_table import TABLE_NAME, known_ranks, remember, select_new
from streams.forward import BatchView, Forwarder
from streams.gaps import GapRecovery
from streams.metrics import WorkerMetrics
from streams.poison import is_poison, isolate

log = structlog.get_logger(__name__)

DEAD_LETTER_STAGE: Final = "decode"
"""``devicestate-stage`` header of the worker's dead letters."""
POISON_STAGE: Final = "write"
"""``devicestate-stage`` of a record whose values the projection refused (:mod:`streams.poison`)."""


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
    @property
    def tombstoned(self) -> int: ...


class BatchSink(Protocol):
    """Where batches go: the PostgreSQL projection, or a fake in unit tests."""

    def apply_batch(
        self, batch: LoggedBatch, before_commit: CommitHook | None = None
    ) -> Awaitable[BatchResult]: ...


# --- the agent ---------------------------------------------------------------------------------


class DeviceDedup:
    """Owns the dedup agent, its table, the dead-letter topic and the batch write.

    Built by :func:`streams.app.create_app`; ``on_fatal`` is called once when a batch fails with a
    non-transient error (the worker then stops; the batch's offsets stay uncommitted).
    """

    def __init__(
        self,
        app: Any,
        settings: WorkerProcessSettings,
        sink: BatchSink,
        metrics: WorkerMetrics,
        on_fatal: Callable[[BaseException], None] | None = None,
        forwarder: Forwarder | None = None,
        changelog_configs: Mapping[str, str] | None = None,
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
            extra_topic_configs=dict(changelog_configs or {}),  # min.insync.replicas
            help="Highest statusVersion rank committed to the projection, per device, one entry per node.",
        )
        self.agent = app.agent(self.source_topic, name="devicestate.dedup")(self.process)
        self.batches = 0
        self.events_seen = 0
        self.writer = BatchWriter(
            metrics.db_retries,
            is_retriable,
            what="health batch",
            grace_seconds=write_grace_seconds(settings),
        )
        self._halted = False
        self.gaps = GapRecovery(app)

    def begin_shutdown(self) -> None:
        """The worker is stopping: a batch still retrying a transient error gets
        :data:`~streams.batchwrite.SHUTDOWN_GRACE_SECONDS` more, then is abandoned unacknowledged (faust waits for
        in-flight batches before it stops, so an endless retry would block the shutdown)."""
        self.writer.begin_shutdown()
        self.gaps.close()

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
        self.metrics.consumed.inc(len(events))
        self.metrics.batch_size.observe(len(events))
        self.events_seen += len(events)
        events, repeats = split_repeats(events)
        # A repeat's offset is acknowledged (or withheld) with its first copy, never by itself.
        self._withhold_acks(repeats)
        await self._process(stream, events, started, self._dead_letter)

    async def _process(
        self,
        stream: Any,
        events: Sequence[Any],
        started: float,
        dead_letter: Any,
        bisecting: bool = False,
        refusal: str | None = None,
        use_table: bool = True,
    ) -> None:
        """Write ``events`` (``bisecting``: a part of a refused batch; errors are raised to
        :meth:`_isolate`). ``refusal``: the database refused these events' values; they are
        dead-lettered with that reason and only their offsets are written. ``use_table``
        false: nothing is dropped early (the table dropped what the projection lacks)."""
        batch = DecodedBatch(events, skew_seconds=self.settings.max_clock_skew_seconds)
        for event in events:
            if refusal is None:
                decode_into(batch, event, dead_letter)
            else:
                batch.dead.append(self._dead_letter(event.message, None, refusal, POISON_STAGE))
        record_event_time(self.metrics, batch)

        entries: dict[str, dict[str, str]] = {}  # the table's entries read, for remember
        records, sources = batch.records, batch.sources
        known = known_ranks(self.table, stream, records, sources, entries) if use_table else {}
        selection = select_new(batch.records, known)
        hook = None
        times = batch.times
        dropped, event_times = early_event_times(batch, selection.kept)
        if self.forwarder is not None:
            view = BatchView(batch.order, batch.node_events, dict(times), set(batch.clamped))
            hook = self.forwarder.before_commit(view)
        refused: set[DeviceKey] = set()
        budget = self.settings.max_message_bytes - HEADROOM_BYTES
        hook = dead_lettering_over_ceiling(hook, events, self._send, refused, budget)
        if selection.duplicates:
            self.metrics.table_duplicates.labels("duplicate").inc(selection.duplicates)
        if selection.stale:
            self.metrics.table_duplicates.labels("stale").inc(selection.stale)

        highwaters = consumer_highwaters(self.app, events)
        # Progress covers every consumed record, also those dropped early or dead-lettered.
        offsets = consumed_offsets(events)
        consumed = {part: max(seen) for part, seen in offsets.items()}
        first = {part: min(seen) for part, seen in offsets.items()}
        try:
            if batch.dead:
                await deliver_in_order(batch.dead)
            starts = await self.gaps.log_starts(first)
            logged = LoggedBatch(
                selection.records,
                highwaters,
                consumed,
                event_times,
                batch.items,  # the inventory is maintained with the directory
                consumed_from=first,
                log_start=starts,
                consumed_holes=first_holes(offsets),
                max_devices_per_node=self.settings.max_devices_per_node,
                history_retention_seconds=self.settings.device_history_retention_seconds,
                dropped_early=dropped,
                workloads=batch.workloads,
                failures=batch.failures,
                lifecycles=batch.lifecycles,
            )
            result, cancelled = await self.writer.write(
                lambda: self.sink.apply_batch(logged, hook), len(selection.records)
            )
        except asyncio.CancelledError:
            self._withhold_acks(events)
            raise
        except BatchNotWritten as exc:
            if isinstance(exc.__cause__, RecordsAfterGap) and not bisecting:
                await self._skip_gaps(stream, events, started, exc.__cause__)
            elif isinstance(exc.__cause__, EarlyDropsUnjustified) and use_table:
                # The table said the projection has records it does not: write them after all.
                log.error("dedup table ahead of the projection", error=str(exc.__cause__))
                self.metrics.table_unjustified.inc(len(exc.__cause__.positions))
                await self._process(
                    stream, events, started, already_sent, bisecting, refusal, use_table=False
                )
            elif bisecting or not is_poison(exc):
                self._stop_at(events, exc, raise_it=bisecting)
            else:
                await self._isolate(stream, events, started, exc)
            return
        except Exception as exc:  # the dead-letter producer failed
            self._stop_at(events, exc, raise_it=bisecting)
            return
        if result is None:  # shutdown came first and the write was abandoned
            self._withhold_acks(events)
            raise asyncio.CancelledError
        self.gaps.written(consumed)
        remember(self.table, stream, selection, batch.sources, refused, entries)
        self._record(result, events, highwaters, started)
        if cancelled:
            raise asyncio.CancelledError

    async def _skip_gaps(
        self, stream: Any, events: Sequence[Any], started: float, gap: RecordsAfterGap
    ) -> None:
        """Leave the records of partitions that start after a gap unacknowledged (read again in
        order: never written past records the projection did not get) and write the rest."""
        log.warning(
            "records after a gap not written; they stay unacknowledged and are read again",
            error=str(gap),
        )
        self.metrics.gap_batches.inc(len(gap.gaps))
        held = [e for e in events if (e.message.topic, e.message.partition) in gap.gaps]
        self._withhold_acks(held)
        await self.gaps.read_again(gap)
        rest = [e for e in events if (e.message.topic, e.message.partition) not in gap.gaps]
        if rest:  # dead letters of these were sent by the first attempt
            await self._process(stream, rest, started, already_sent)

    async def _isolate(
        self, stream: Any, events: Sequence[Any], started: float, exc: BatchNotWritten
    ) -> None:
        """The database refused the batch's data: bisect it (:func:`streams.poison.isolate`),
        dead-letter the records it refuses and write the rest, each part in its own transaction;
        an error other than a refusal stops the worker as before. Dead letters of undecodable
        records were sent by the first attempt."""
        log.warning("batch refused by the database; isolating the record", error=repr(exc))

        async def write(part: Sequence[Any]) -> None:
            await self._process(stream, part, started, already_sent, bisecting=True)

        async def on_poison(event: Any, error: BaseException) -> None:
            self.metrics.poison_records.labels("health").inc()
            reason = refusal_reason(error.__cause__ or error)
            await self._process(stream, [event], started, already_sent, True, reason)

        try:
            await isolate(events, exc, write, on_poison)
        except asyncio.CancelledError:
            self._withhold_acks(events)
            raise
        except Exception as error:  # committed parts are redelivered harmlessly (offsets)
            self._stop_at(events, error)

    def _stop_at(self, events: Sequence[Any], exc: BaseException, raise_it: bool = False) -> None:
        """A batch cannot be written (a non-transient error, or shutdown): stop here; ``raise_it``
        (a part of a refused batch): raise ``exc`` to :meth:`_isolate` instead."""
        if raise_it:
            raise exc
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

    async def _dead_letter(
        self,
        message: Any,
        _: Any,
        reason: str,
        stage: str = DEAD_LETTER_STAGE,
        *,
        original: bytes | None = None,
    ) -> Awaitable[Any]:
        """Enqueue the dead letter of faust ``message`` (``original``: its value instead of the
        message's bytes); returns its acknowledgement (:func:`~streams.deadletter.deliver_in_order`)."""
        source = f"{message.topic}/{message.partition}/{message.offset}"
        log.warning("event dead-lettered", source=source, reason=reason, stage=stage)
        value = message.value if original is None else original
        return await self._send(Letter(message.key, value, source, reason), stage)

    async def _send(self, letter: Letter, stage: str = CEILING_STAGE) -> Awaitable[Any]:
        return await enqueue_dead_letter(self.dead_letter_topic, self.metrics, letter, stage)

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
        self.metrics.record_batch(result, [e.message for e in events], highwaters, started)
        self.batches += 1
