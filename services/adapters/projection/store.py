"""The PostgreSQL projection of the device directory: the batch writer.

:meth:`ProjectionStore.apply_batch` is the only writer. In one transaction it locks the rows the
batch touches, runs the pure :func:`services.domain.directory.apply_event` over the batch in log
order in memory (:mod:`services.adapters.projection.batch_plan`: any batch split gives the same
rows as one-by-one processing), then writes the changed devices and their history rows by binary COPY into session temporary
tables merged by one statement (:mod:`services.adapters.projection.batch_copy`), the released
devices and the partition progress with one set-based statement each
(:mod:`services.adapters.projection.batch_sql`); the reads and locks at the transaction's start
are in :mod:`services.adapters.projection.batch_reads`.
Redelivered observations are duplicates or stale in the fold, and history rows are keyed by log
position (``ON CONFLICT DO NOTHING``), so at-least-once delivery never writes history twice. An
``ON CONFLICT`` version guard backs up the row locks: a write the guard refuses raises
:class:`~services.adapters.projection.errors.ProjectionConflictError`. Row values come from events
only, never from the wall clock, so a replay of the same log gives identical ``devices`` and
``device_history`` rows.

The reads are in :mod:`services.adapters.projection.reads_devices`. Times are aware ``datetime``
objects in UTC. Status versions are ``int`` (``NUMERIC(39,0)``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services.adapters.projection.batch_copy import (
    CopyStatements,
    device_tuples,
    history_tuples,
    write_rows,
)
from services.adapters.projection.batch_plan import (
    BatchPlan,
    applied_positions,
    health_transitions,
    plan_batch,
    progress_params,
    recorded_offsets,
)
from services.adapters.projection.batch_reads import (
    lock_devices,
    lock_progress,
    locked_within_ceiling,
    workload_inputs,
)
from services.adapters.projection.batch_result import BatchStats as BatchStats
from services.adapters.projection.batch_result import PreparedBatch, batch_stats
from services.adapters.projection.batch_sql import BatchStatements, device_rows
from services.adapters.projection.cache import DeviceCache
from services.adapters.projection.early_drops_sql import check_early_drops
from services.adapters.projection.errors import ProjectionConflictError
from services.adapters.projection.failure_sql import (
    FailureStatements,
    fresh_failure_rows,
    projected_occurrences,
    write_failures,
)
from services.adapters.projection.inventory_store import (
    InventoryProjection,
    fresh_items,
    write_plan,
)
from services.adapters.projection.lifecycle_sql import (
    LifecycleStatements,
    fresh_lifecycle_rows,
    write_lifecycles,
)
from services.adapters.projection.retention_sql import (
    RetentionStatements,
    batch_event_times,
    prune_history,
)
from services.adapters.projection.tombstone_sql import (
    TombstoneStatements,
    write_tombstones,
)
from services.adapters.projection.workload_sql import (
    WorkloadStatements,
    fresh_rows,
    write_workloads,
)
from services.domain.adoption.failure_forward import forwarded_failures
from services.domain.adoption.ready_forward import ready_to_forward
from services.domain.batch import (
    CommitHook,
    LoggedBatch,
    Partition,
    PendingCommit,
    RecordsAfterGap,
    find_gaps,
)
from services.domain.device_ceiling import new_device_nodes, within_ceiling
from services.domain.log import LogPosition
from services.domain.workloads.on_device import batch_workloads_on_devices


class ProjectionStore:
    """The device directory's writer in PostgreSQL schema ``schema`` (migrated, see
    :func:`services.adapters.projection.migrate.migrate`), accessed through ``engine`` (asyncpg).

    Raises ``ValueError`` for a schema name that is not a plain identifier.
    """

    def __init__(self, engine: AsyncEngine, schema: str) -> None:
        self._engine = engine
        self._schema = schema
        self._sql = BatchStatements(schema)
        self._copy = CopyStatements(schema)
        self._tombstones = TombstoneStatements(schema)
        self._retention = RetentionStatements(schema)
        self._workloads = WorkloadStatements(schema)
        self._failures = FailureStatements(schema)
        self._lifecycles = LifecycleStatements(schema)
        self.inventory = InventoryProjection(schema)
        """The inventory this store maintains when batches carry :attr:`LoggedBatch.inventory`."""

    @property
    def schema(self) -> str:
        return self._schema

    async def apply_batch(
        self,
        batch: LoggedBatch,
        before_commit: CommitHook | None = None,
        *,
        cache: DeviceCache | None = None,
    ) -> BatchStats:
        """Write ``batch`` (see :class:`~services.domain.batch.LoggedBatch`) in one transaction;
        return what it did.

        Exactly-once in effect: the partition progress is read (and locked) in the same
        transaction, and records at or before a partition's recorded offset are skipped whole
        (``redelivered``), so a batch redelivered after a crash between the commit and the Kafka
        offset commit changes nothing, whatever its events are. The result equals applying the
        records one by one whatever the batch split. Redelivered observations are
        DUPLICATE/STALE no-ops and history rows are keyed by log position, so at-least-once
        delivery never writes a history row twice. Raises
        :class:`~services.domain.early_drops.EarlyDropsUnjustified` (rolled back) when an
        observation of :attr:`LoggedBatch.dropped_early` is not in the projection, and
        :class:`~services.adapters.projection.errors.ProjectionConflictError` when a concurrent
        writer changed the same devices (rolled back; retry), and SQLAlchemy's ``DBAPIError``
        family for database failures (rolled back).

        ``before_commit`` (not with ``cache``: ``ValueError``) is awaited inside the transaction
        after every write, just before the commit, with the batch's
        :class:`~services.domain.batch.PendingCommit` (its health transitions, and what it did to
        the inventory): what it does before returning happens before the commit, and an
        exception from it rolls the batch back.

        ``cache`` is for a caller that owns the projection alone (the replay, on a fresh or
        truncated schema): the current device rows and the recorded partition offsets come from it
        instead of being locked and read back (:meth:`prepare_batch`), and it is updated with what
        was written once the transaction has committed. It must hold exactly what the tables hold
        (see :class:`~services.adapters.projection.cache.DeviceCache`); the rows written are then
        the same as without it.

        With :attr:`LoggedBatch.inventory` the batch maintains the inventory tables too, in the
        same transaction (:attr:`inventory`, :mod:`services.domain.inventory.fold`): records after
        the recorded offsets are folded, an observation only when the directory fold applied it.
        """
        if batch.empty:
            return BatchStats()
        if cache is not None:
            if before_commit is not None:
                raise ValueError("apply_batch: before_commit cannot be used with a cache")
            prepared = self.prepare_batch(batch, cache)
            stats = await self.write_prepared(prepared)
            cache.update(
                prepared.written, prepared.offsets, prepared.tombstones, prepared.watermarks
            )
            return stats
        inventory_items = batch.inventory
        async with self._engine.begin() as conn:
            parts = batch.partitions()
            applied_through, last_event_at = await lock_progress(conn, self._sql, parts)
            gaps = find_gaps(batch, applied_through)
            if gaps:
                raise RecordsAfterGap(gaps)  # rolls back: nothing of the batch is written

            def fresh_position(position: LogPosition) -> bool:
                return position.offset > applied_through.get(
                    (position.topic, position.partition), -1
                )

            records = [r for r in batch.records if fresh_position(r.position)]
            redelivered = len(batch.records) - len(records)
            dropped = [r for r in batch.dropped_early if fresh_position(r.position)]
            if dropped:
                await check_early_drops(conn, self._sql, dropped, records)
            workloads = [(p, w) for p, w in batch.workloads if fresh_position(p)]
            held = [(w.node, w.pod_uid) for _, w in workloads] if before_commit else []
            current, tombstones = await lock_devices(
                conn, self._sql, self._tombstones, records, held
            )
            applied, refused = await locked_within_ceiling(conn, self._sql, records, current, batch)
            plan = plan_batch(current, applied, tombstones)
            joined = None
            if before_commit is not None:  # read before this batch writes them
                joined = await workload_inputs(
                    conn, self._workloads, current, plan, workloads, inventory_items is not None
                )
            written = await self._write_rows(conn, *_device_rows(plan), len(plan.written))
            await write_tombstones(conn, self._tombstones, plan.tombstones)
            times = [(p, t) for p, t in batch.event_times if fresh_position(p)]
            progress = progress_params(records, batch.highwaters, batch.consumed_through, times)
            await conn.execute(self._sql.upsert_progress, progress)
            clock = batch_event_times(records, times, last_event_at)
            retention = batch.history_retention_seconds
            await prune_history(conn, self._retention, clock[1], retention)
            rows = fresh_rows(batch.workloads, applied_through.get)
            await write_workloads(conn, self._workloads, rows)
            fresh_failures = [(p, f) for p, f in batch.failures if fresh_position(p)]
            on_nodes = []
            if before_commit is not None and fresh_failures:  # read before this batch raises them
                projected = await projected_occurrences(
                    conn, self._failures, (f.source_uid for _, f in fresh_failures)
                )
                on_nodes = forwarded_failures(fresh_failures, projected)
            failures = fresh_failure_rows(batch.failures, applied_through.get)
            await write_failures(conn, self._failures, failures)
            lifecycles = fresh_lifecycle_rows(batch.lifecycles, applied_through.get)
            await write_lifecycles(conn, self._lifecycles, lifecycles)
            inventory = None
            if inventory_items is not None:
                inventory = await self.inventory.apply(
                    conn,
                    fresh_items(inventory_items, applied_through),
                    applied_positions(plan),
                    applied_through,
                    parts,
                    clock,
                )
            if before_commit is not None:
                assert joined is not None
                stored, names = joined
                await before_commit(
                    PendingCommit(
                        health_transitions(plan),
                        applied_through,
                        last_event_at,
                        inventory,
                        refused,
                        batch_workloads_on_devices(
                            current, plan.history, workloads, stored, names, inventory
                        ),
                        on_nodes,
                        ready_to_forward(
                            [(p, r) for p, r in batch.lifecycles if fresh_position(p)],
                            None
                            if self.inventory.current is None
                            else self.inventory.current.state,
                        ),
                    )
                )
        if inventory_items is not None:
            self.inventory.committed(recorded_offsets(progress, applied_through))
        return batch_stats(plan, written, redelivered, len(refused))

    def prepare_batch(self, batch: LoggedBatch, cache: DeviceCache) -> PreparedBatch:
        """The in-memory half of :meth:`apply_batch` with a ``cache``: drop the records at or before
        the offsets the cache recorded (``redelivered``), fold the rest over the cached devices and
        encode the rows to write. CPU only, no I/O; ``cache`` is read, not changed.

        A writer that owns the projection may pipeline: fold the next batch over
        ``cache.update(prepared.written, prepared.offsets)`` while :meth:`write_prepared` writes
        this one, provided the writes then happen in order and a failed one ends the whole run
        (the cache is then ahead of the tables).

        With :attr:`LoggedBatch.inventory` the inventory is folded too, over :attr:`inventory`'s
        in-memory state from an empty inventory (the writer owns the schema: nothing is loaded),
        and its rows written by :meth:`write_prepared`. ``inventory`` then folds on from this
        batch: prepared batches must be written in order.
        """
        records = batch.records
        fresh = cache.fresh(records)
        current = cache.current(fresh)
        applied, refused = within_ceiling(
            fresh,
            lambda key: key in current,
            cache.node_counts(new_device_nodes(fresh, lambda key: key in current)),
            batch.max_devices_per_node,
        )
        plan = plan_batch(current, applied, cache.tombstones(fresh))
        times = []
        for position, observed_at in batch.event_times:
            recorded_offset = cache.offset(position.topic, position.partition)
            if recorded_offset is None or position.offset > recorded_offset:
                times.append((position, observed_at))
        clock = batch_event_times(fresh, times, cache.event_times())

        def allocated(aliases: list[tuple[str, str]]) -> set[tuple[str, str]]:
            held = (plan.written.get(a) or cache.get(a) for a in aliases)
            return {a for a, r in zip(aliases, held, strict=True) if r and r.allocations}

        inventory = None
        if batch.inventory is not None:
            recorded = {
                (p.topic, p.partition): offset
                for p, _ in batch.inventory
                if (offset := cache.offset(p.topic, p.partition)) is not None
            }
            inventory = self.inventory.fold_owned(
                fresh_items(batch.inventory, recorded), applied_positions(plan), clock, allocated
            )
        observed_rows, released_rows, history = _device_rows(plan)
        progress = progress_params(fresh, batch.highwaters, batch.consumed_through, times)
        offsets = {
            (topic, partition): offset
            for topic, partition, offset in zip(
                progress["topic"], progress["partition"], progress["offset"], strict=True
            )
            if offset is not None
        }
        return PreparedBatch(
            workload_rows=fresh_rows(batch.workloads, lambda part: cache.offset(*part)),
            failure_rows=fresh_failure_rows(batch.failures, lambda part: cache.offset(*part)),
            lifecycle_rows=fresh_lifecycle_rows(batch.lifecycles, lambda part: cache.offset(*part)),
            written=plan.written,
            offsets=offsets,
            stats=batch_stats(plan, len(plan.written), len(records) - len(fresh), len(refused)),
            observed_rows=observed_rows,
            released_rows=released_rows,
            history_rows=history,
            progress=progress,
            inventory=inventory,
            tombstones=plan.tombstones or None,
            watermarks=clock[1],
        )

    async def write_prepared(self, prepared: PreparedBatch) -> BatchStats:
        """Write a :meth:`prepare_batch` result in one transaction (the same statements as
        :meth:`apply_batch`); return its stats. Raises :class:`ProjectionConflictError` when the
        version guard refuses a device write (rolled back), and SQLAlchemy's ``DBAPIError``
        family for database failures (rolled back)."""
        async with self._engine.begin() as conn:
            await conn.execute(self._sql.upsert_progress, prepared.progress)
            await self._write_rows(
                conn,
                prepared.observed_rows,
                prepared.released_rows,
                prepared.history_rows,
                len(prepared.written),
            )
            if prepared.inventory is not None:
                await write_plan(conn, self.inventory.sql, prepared.inventory)
            if prepared.tombstones:
                await write_tombstones(conn, self._tombstones, prepared.tombstones)
            await write_workloads(conn, self._workloads, prepared.workload_rows)
            await write_failures(conn, self._failures, prepared.failure_rows)
            await write_lifecycles(conn, self._lifecycles, prepared.lifecycle_rows)
        return prepared.stats

    async def prune_history(
        self, watermarks: Mapping[Partition, datetime], retention_seconds: float
    ) -> None:
        """Delete the ``device_history`` rows observed more than ``retention_seconds`` before
        their partition's watermark (each batch does it for its partitions; the replay once at
        its end). Nothing with a retention of 0."""
        async with self._engine.begin() as conn:
            await prune_history(conn, self._retention, watermarks, retention_seconds)

    async def _write_rows(
        self,
        conn: AsyncConnection,
        observed: list[tuple[Any, ...]] | None,
        released: dict[str, str] | None,
        history: list[tuple[Any, ...]] | None,
        expected: int,
    ) -> int:
        """Write the observed device rows and the history rows by COPY and one merge
        (:mod:`services.adapters.projection.batch_copy`), the released ones by one ``UPDATE``;
        raise :class:`ProjectionConflictError` when the version guard let fewer than
        ``expected`` device rows through."""
        written = await write_rows(conn, self._copy, observed, history)
        if released is not None:
            result = await conn.execute(self._sql.update_released, released)
            written += result.rowcount
        if written != expected:
            raise ProjectionConflictError(
                f"version guard refused {expected - written} of {expected} "
                "device writes: a concurrent writer changed them; the batch was rolled back"
            )
        return written


def _device_rows(
    plan: BatchPlan,
) -> tuple[list[tuple[Any, ...]] | None, dict[str, str] | None, list[tuple[Any, ...]] | None]:
    """The plan's rows to write: observed devices (stage tuples), released devices (the JSON
    parameter of ``update_released``), history (stage tuples); ``None`` for an empty set."""
    observed = [r for k, r in plan.written.items() if k in plan.observed]
    released = [r for k, r in plan.written.items() if k not in plan.observed]
    return (
        device_tuples(observed) if observed else None,
        device_rows(released) if released else None,
        history_tuples(plan) if plan.history else None,
    )
