"""Rebuild the projection from the event topic's beginning.

:func:`read_log` reads the whole topic as it stands when it starts
(:class:`~services.adapters.kafka.reader.TopicSnapshot`: no consumer group, nothing committed):
every partition is assigned, read from its beginning, and read up to the end offsets captured at
the start. :func:`replay` decodes the records and writes them
into a fresh schema or, ``in_place``, into the truncated live tables, with the worker's fold and
statements (:meth:`ProjectionStore.prepare_batch` / :meth:`~ProjectionStore.write_prepared`, the
two halves of ``apply_batch`` with a :class:`DeviceCache`: the replay owns its target, so it keeps
the device rows in memory instead of reading them back). Records that do not decode are counted
and skipped (the worker dead-lettered them already), and so are the records the live projection
refused (dead letters of stage ``write``, :mod:`.dead_letters`): the replay folds the log minus
what the worker left out; node events (heartbeats, resource counts,
watcher ticks) and DRA inventory records are counted apart: they never touch the directory, but
DRA objects, resource counts and the applied observations rebuild the inventory tables
(``inventory_objects``, ``node_resources``, ``device_identities``, ``inventory_conflicts``) through
the worker's inventory fold (:mod:`services.domain.inventory.fold`), in the same transactions.

Replaying the same log gives the same ``devices`` and ``device_history`` rows whatever the batch
size: the store's rows come from events only, and each device's events come from one partition (the
topic is keyed by node), in order. The inventory's objects, node resources and identities are the
same too, whatever interleaving of the partitions the worker read (a ResourceClaim keyed
``claim:<ns>/<name>``, a DeviceClass, a pool-scoped ResourceSlice sit apart from the node's
records: ``docs/inventory.md``); a conflict that depends on records of several partitions
(``plugin-and-dra`` through a DeviceClass's ``extendedResourceName``) may be dated differently when
the worker read them in another interleaving.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Final

from services.adapters.projection.cache import DeviceCache
from services.adapters.projection.engine import Engine, create_engine
from services.adapters.projection.migrate import migrate
from services.adapters.projection.schema_admin import (
    create_indexes,
    drop_schema,
    drop_secondary_indexes,
    schema_exists,
    truncate_projection,
)
from services.adapters.projection.store import BatchStats, ProjectionStore
from services.adapters.projection.tables import check_schema_name
from services.domain.batch import LoggedBatch
from services.processes.replay.dead_letters import refused_positions
from services.processes.replay.log_reader import REPLAY_CLIENT_ID as REPLAY_CLIENT_ID
from services.processes.replay.log_reader import (
    LogBatch,
    ReplayError,
    ReplayRetention,
    read_log,
    topic_partitions,
)
from services.runtime.config import KafkaSettings

_COLLECT_EVERY: Final = 1_000_000
"""Records between two collections of the young generations during a replay."""

__all__ = [
    "REPLAY_CLIENT_ID",
    "ReplayError",
    "ReplayRetention",
    "ReplaySummary",
    "make_engine",
    "read_log",
    "replay",
    "topic_partitions",
    "verify",
]


@dataclass(slots=True)
class ReplaySummary:
    """What a replay did."""

    schema: str
    total: int = 0
    """Records in the topic between the beginning and the end offsets captured at the start."""
    read: int = 0
    undecodable: int = 0
    node_events: int = 0
    """Node events and inventory records read (skipped: they do not change the directory)."""
    applied: int = 0
    duplicates: int = 0
    stale: int = 0
    released: int = 0
    transitions: int = 0
    batches: int = 0
    elapsed: float = 0.0
    end_offsets: dict[tuple[str, int], int] = field(default_factory=dict)

    @property
    def events_per_second(self) -> float:
        return self.read / self.elapsed if self.elapsed > 0 else 0.0

    def line(self) -> str:
        """The one-line summary the CLI prints."""
        return (
            f"replayed {self.read} records into schema {self.schema}: applied {self.applied}, "
            f"duplicates {self.duplicates}, stale {self.stale}, released {self.released}, "
            f"undecodable {self.undecodable}, node/inventory records {self.node_events}; {self.batches} batches in {self.elapsed:.2f} s "
            f"({self.events_per_second:,.0f} events/s)"
        )


ProgressCallback = Callable[[int, int], None]
"""``progress(records_read_so_far, total_records)``."""


async def replay(
    settings: KafkaSettings,
    *,
    engine: Engine,
    database_url: str,
    schema: str,
    in_place: bool = False,
    batch_size: int = 5000,
    progress: ProgressCallback | None = None,
    on_start: Callable[[int], None] | None = None,
    max_devices_per_node: int | None = None,
    retention: ReplayRetention | None = None,
) -> ReplaySummary:
    """Rebuild the projection in ``schema`` from ``settings.topic``.

    ``max_devices_per_node`` is the worker's device ceiling (``DEVICESTATE_MAX_DEVICES_PER_NODE``,
    :mod:`services.domain.device_ceiling`): give the worker's, so the replay leaves out the
    observations the worker dead-lettered (``None``: no ceiling). ``retention``: the worker's
    clock skew bound and history retention (``None``: event times unbounded, history kept), so
    the replay keeps the rows the worker keeps (:mod:`services.domain.retention`).

    Without ``in_place`` the schema must not exist yet (it is created and migrated); with it, the
    schema is migrated and its tables truncated first (stop the worker meanwhile). ``on_start`` gets
    the number of records to read once the end offsets are known. Reading and folding the next
    batches overlap with writing the current one. A new schema gets its secondary indexes (those no
    constraint needs) once the rows are in, built from the same definitions.
    """
    check_schema_name(schema)
    await topic_partitions(settings.kafka_bootstrap_servers, settings.topic)  # fail early
    if in_place:
        await migrate(database_url, schema)
        await truncate_projection(engine, schema, settings.topic)
        return await _rebuild(
            settings,
            engine,
            schema,
            batch_size,
            progress,
            on_start,
            max_devices_per_node=max_devices_per_node,
            retention=retention,
        )
    if await schema_exists(engine, schema):
        raise ReplayError(
            f"schema {schema!r} already exists; pick another name, drop it, or use --in-place"
        )
    await migrate(database_url, schema)
    try:
        # Nobody reads the new schema before the replay ends: its secondary indexes are built once
        # at the end rather than maintained row by row (about 40% of PostgreSQL's work).
        deferred = await drop_secondary_indexes(engine, schema)
        return await _rebuild(
            settings,
            engine,
            schema,
            batch_size,
            progress,
            on_start,
            deferred_indexes=deferred,
            max_devices_per_node=max_devices_per_node,
            retention=retention,
        )
    except Exception:
        await drop_schema(engine, schema)  # a half-built replay schema is of no use
        raise


async def _rebuild(
    settings: KafkaSettings,
    engine: Engine,
    schema: str,
    batch_size: int,
    progress: ProgressCallback | None,
    on_start: Callable[[int], None] | None,
    *,
    deferred_indexes: Sequence[str] = (),
    max_devices_per_node: int | None = None,
    retention: ReplayRetention | None = None,
) -> ReplaySummary:
    """Read, fold and write the log as a pipeline of three stages that overlap: the reader task
    fetches and decodes batch n+2 and a worker thread folds batch n+1 over the cache (and
    encodes its rows) while PostgreSQL writes batch n. The target schema is empty and ours alone,
    so the current rows come from a :class:`DeviceCache` instead of being read back, and batch
    n+1 may be folded over batch n's rows before they are committed: writes still happen one at a
    time, in log order, and a failed write ends the replay (the cache is then ahead of the tables,
    and the caller drops the schema or the in-place replay must be run again)."""
    store = ProjectionStore(engine, schema)
    cache = DeviceCache()
    summary = ReplaySummary(schema=schema)
    started = time.perf_counter()
    queue: asyncio.Queue[LogBatch | None] = asyncio.Queue(maxsize=2)

    def ready(total: int) -> None:
        summary.total = total
        if on_start is not None:
            on_start(total)

    bootstrap = settings.kafka_bootstrap_servers
    refused = await refused_positions(bootstrap, settings.dead_letter_topic, settings.topic)

    async def reader() -> None:
        cancelled = False
        try:
            async for batch in read_log(
                bootstrap,
                settings.topic,
                batch_size=batch_size,
                end_offsets=summary.end_offsets,
                on_ready=ready,
                skip=refused,
                skew_seconds=None if retention is None else retention.skew_seconds,
            ):
                await queue.put(batch)
        except asyncio.CancelledError:
            # The writer loop ended (a failed write): nobody takes a sentinel from a full queue.
            cancelled = True
            raise
        finally:
            if not cancelled:
                await queue.put(None)

    async def written(batch: LogBatch, writing: asyncio.Task[BatchStats] | None) -> None:
        if writing is not None:
            stats = await writing
            summary.applied += stats.applied
            summary.duplicates += stats.duplicates
            summary.stale += stats.stale
            summary.released += stats.released
            summary.transitions += stats.transitions
        summary.read += batch.read
        summary.undecodable += batch.undecodable
        summary.node_events += batch.node_events
        summary.batches += 1
        if progress is not None:
            progress(summary.read, summary.total)

    in_flight: tuple[LogBatch, asyncio.Task[BatchStats] | None] | None = None
    with _young_collections_only():
        reading = asyncio.create_task(reader())
        try:
            uncollected = 0
            while (batch := await queue.get()) is not None:
                prepared = None
                if batch.records or batch.items or batch.event_times:
                    # In a thread, so that the event loop keeps driving the write in flight and
                    # the reader meanwhile (the GIL changes hands every few milliseconds).
                    logged = LoggedBatch(
                        batch.records,
                        summary.end_offsets,
                        event_times=batch.event_times,
                        inventory=batch.items,
                        max_devices_per_node=max_devices_per_node,
                        workloads=batch.workloads,
                        failures=batch.failures,
                        lifecycles=batch.lifecycles,
                    )
                    prepared = await asyncio.to_thread(
                        functools.partial(store.prepare_batch, logged, cache)
                    )
                    cache.update(  # the next batch folds on it
                        prepared.written,
                        prepared.offsets,
                        prepared.tombstones,
                        prepared.watermarks,
                    )
                if in_flight is not None:
                    await written(*in_flight)  # one write at a time, in log order
                writing = None
                if prepared is not None:
                    writing = asyncio.create_task(store.write_prepared(prepared))
                in_flight = (batch, writing)
                uncollected += batch.read
                if uncollected >= _COLLECT_EVERY:
                    gc.collect(1)
                    uncollected = 0
            if in_flight is not None:
                last, in_flight = in_flight, None
                await written(*last)
            await reading  # re-raise a reader error
            if retention is not None:
                # Once, at the end: nothing reads the history back, so its rows after the last
                # batch are the worker's whenever they are dropped (and no index is needed yet).
                await store.prune_history(cache.event_times(), retention.history_seconds)
        finally:
            tasks = (
                [reading] if in_flight is None or in_flight[1] is None else [reading, in_flight[1]]
            )
            for task in tasks:
                if not task.done():
                    task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    await create_indexes(engine, deferred_indexes)
    summary.elapsed = time.perf_counter() - started
    return summary


@contextmanager
def _young_collections_only() -> Iterator[None]:
    """No automatic garbage collection inside (``_rebuild`` collects the young generations every
    :data:`_COLLECT_EVERY` records itself): the cache of every device lives for the whole replay,
    and the collector's full passes over it, triggered again and again by the batches in flight,
    cost about a third of the replay's CPU. The replay makes next to no reference cycles (a few
    thousand objects per million records, from the Kafka and database clients)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def make_engine(database_url: str) -> Engine:
    """An async engine for the replay (a small pool: one writer).

    No pre-ping: it would cost three round trips per batch, each waiting for the event loop,
    which the replay keeps busy; the pool is created for this one run and is in constant use, so
    there are no stale connections to weed out (a connection lost mid-run fails the replay either
    way)."""
    return create_engine(database_url, pool_size=2, pre_ping=False)


async def verify(engine: Engine, live_schema: str, replay_schema: str) -> list[str]:
    """Differences between the live projection and the replayed one (empty: identical)."""
    from services.adapters.projection.compare import diff_projections

    differences: list[str] = await diff_projections(engine, live_schema, replay_schema)
    return differences
