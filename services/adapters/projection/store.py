"""The PostgreSQL projection of the device directory: the batch writer.

:meth:`ProjectionStore.apply_batch` is the only writer. In one transaction it locks the rows the
batch touches, runs the pure :func:`services.domain.directory.apply_event` over the batch in log
order in memory (:mod:`services.adapters.projection.batch_plan`: any batch split gives the same
rows as one-by-one processing), then writes the changed devices, their history rows and the
partition progress with one set-based statement each (:mod:`services.adapters.projection.batch_sql`).
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

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services.adapters.projection.batch_plan import (
    BatchPlan,
    applied_positions,
    health_transitions,
    plan_batch,
    progress_params,
    recorded_offsets,
)
from services.adapters.projection.batch_result import BatchStats as BatchStats
from services.adapters.projection.batch_result import PreparedBatch, batch_stats
from services.adapters.projection.batch_sql import BatchStatements, device_rows, history_rows
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
from services.adapters.projection.rows import record_from_row
from services.adapters.projection.tombstone_sql import (
    TombstoneStatements,
    load_tombstones,
    write_tombstones,
)
from services.adapters.projection.workload_sql import (
    WorkloadStatements,
    fresh_rows,
    governed_names,
    stored_facts,
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
from services.domain.device_ceiling import OverCeiling, new_device_nodes, within_ceiling
from services.domain.directory import DeviceKey, DeviceRecord
from services.domain.events import DeviceHealthObserved, PodsListed
from services.domain.log import LoggedEvent, LogPosition
from services.domain.tombstones import Tombstone
from services.domain.workloads.events import PodWorkloadObserved
from services.domain.workloads.on_device import WorkloadFacts, rekeys, workloads_on_devices


class ProjectionStore:
    """The device directory's writer in PostgreSQL schema ``schema`` (migrated, see
    :func:`services.adapters.projection.migrate.migrate`), accessed through ``engine`` (asyncpg).

    Raises ``ValueError`` for a schema name that is not a plain identifier.
    """

    def __init__(self, engine: AsyncEngine, schema: str) -> None:
        self._engine = engine
        self._schema = schema
        self._sql = BatchStatements(schema)
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
            applied_through, last_event_at = await self._lock_progress(conn, parts)
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
            current, tombstones = await self._lock_devices(conn, records, held)
            applied, refused = await self._within_ceiling(conn, records, current, batch)
            plan = plan_batch(current, applied, tombstones)
            joined = None
            if before_commit is not None:  # read before this batch writes them
                joined = await self._workload_inputs(
                    conn, current, plan, workloads, inventory_items is not None
                )
            written = await self._write_devices(conn, plan)
            if plan.history:
                await conn.execute(self._sql.insert_history, history_rows(plan))
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
                        workloads_on_devices(
                            current,
                            plan.history,
                            workloads,
                            stored,
                            names,
                            rekeys(inventory, plan.history),
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
        observed = [r for k, r in plan.written.items() if k in plan.observed]
        released = [r for k, r in plan.written.items() if k not in plan.observed]
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
            observed_rows=device_rows(observed) if observed else None,
            released_rows=device_rows(released) if released else None,
            history_rows=history_rows(plan) if plan.history else None,
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
            await self._write_device_rows(
                conn, prepared.observed_rows, prepared.released_rows, len(prepared.written)
            )
            if prepared.history_rows is not None:
                await conn.execute(self._sql.insert_history, prepared.history_rows)
            await conn.execute(self._sql.upsert_progress, prepared.progress)
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

    async def _lock_progress(
        self, conn: AsyncConnection, partitions: Iterable[Partition]
    ) -> tuple[dict[Partition, int], dict[Partition, datetime]]:
        """The recorded offset and newest event time of each of ``partitions`` (those with a
        value), rows locked until commit."""
        parts = sorted(set(partitions))
        if not parts:
            return {}, {}
        result = await conn.execute(
            self._sql.lock_progress,
            {"topic": [t for t, _ in parts], "partition": [p for _, p in parts]},
        )
        offsets: dict[Partition, int] = {}
        times: dict[Partition, datetime] = {}
        for topic, partition, offset, last_event_at in result:
            if offset is not None:
                offsets[(topic, partition)] = offset
            if last_event_at is not None:
                times[(topic, partition)] = last_event_at
        return offsets, times

    async def _within_ceiling(
        self,
        conn: AsyncConnection,
        records: Sequence[LoggedEvent],
        current: dict[DeviceKey, DeviceRecord],
        batch: LoggedBatch,
    ) -> tuple[list[LoggedEvent], list[OverCeiling]]:
        """:func:`~services.domain.device_ceiling.within_ceiling` over the locked rows, with the
        device counts of the nodes that get a new device (one query; none without a ceiling)."""
        ceiling = batch.max_devices_per_node
        if ceiling is None:
            return list(records), []
        nodes = new_device_nodes(records, current.__contains__)
        counts: dict[str, int] = {}
        if nodes:
            result = await conn.execute(self._sql.count_by_node, {"nodes": sorted(nodes)})
            counts = {node: int(count) for node, count in result}
        return within_ceiling(records, current.__contains__, counts, ceiling)

    async def _workload_inputs(
        self,
        conn: AsyncConnection,
        current: Mapping[DeviceKey, DeviceRecord],
        plan: BatchPlan,
        workloads: Sequence[tuple[LogPosition, PodWorkloadObserved]],
        named: bool,
    ) -> tuple[dict[str, WorkloadFacts], dict[DeviceKey, str]]:
        """What :func:`workloads_on_devices` reads of the projection at the batch's start: the
        stored workload facts of every Pod the batch's devices and workload records name, and
        (``named``: the batch maintains the inventory) the governor's name of those devices."""
        uids = {w.pod_uid for _, w in workloads}
        for record in (*current.values(), *plan.written.values()):
            uids.update(a.pod_uid for a in record.allocations)
        stored = await stored_facts(conn, self._workloads, uids)
        keys = current.keys() | plan.written.keys()
        names = await governed_names(conn, self._workloads, keys) if named else {}
        return stored, names

    async def _lock_devices(
        self,
        conn: AsyncConnection,
        records: Sequence[LoggedEvent],
        holders: Iterable[tuple[str, str]] = (),
    ) -> tuple[dict[DeviceKey, DeviceRecord], dict[str, Tombstone]]:
        """Lock and load the observed devices (by key), the devices released Pods and the Pods of
        ``holders`` (``(node, Pod UID)``) hold, every device a Pod holds on a snapshot's node,
        and the tombstones of the observed Pods."""
        keys: set[DeviceKey] = set()
        pods: set[tuple[str, str]] = set(holders)
        nodes: set[str] = set()
        uids: set[str] = set()
        for logged in records:
            event = logged.event
            if isinstance(event, DeviceHealthObserved):
                keys.add(event.device_key)
                uids.add(event.pod_uid)
            elif isinstance(event, PodsListed):
                nodes.add(event.node)
            else:
                pods.add((event.node, event.pod_uid))
        current: dict[DeviceKey, DeviceRecord] = {}
        if keys:
            ordered = sorted(keys)
            params = {"nodes": [n for n, _ in ordered], "ids": [i for _, i in ordered]}
            result = await conn.execute(self._sql.lock_by_key, params)
            current.update((r.key, r) for r in map(record_from_row, result))
        if pods:
            ordered = sorted(pods)
            params = {"nodes": [n for n, _ in ordered], "pods": [p for _, p in ordered]}
            result = await conn.execute(self._sql.lock_by_pod, params)
            current.update((r.key, r) for r in map(record_from_row, result))
        if nodes:
            result = await conn.execute(self._sql.lock_by_node, {"nodes": sorted(nodes)})
            current.update((r.key, r) for r in map(record_from_row, result))
        return current, await load_tombstones(conn, self._tombstones, uids)

    async def _write_devices(self, conn: AsyncConnection, plan: BatchPlan) -> int:
        observed = [r for k, r in plan.written.items() if k in plan.observed]
        released = [r for k, r in plan.written.items() if k not in plan.observed]
        return await self._write_device_rows(
            conn,
            device_rows(observed) if observed else None,
            device_rows(released) if released else None,
            len(plan.written),
        )

    async def _write_device_rows(
        self,
        conn: AsyncConnection,
        observed: dict[str, str] | None,
        released: dict[str, str] | None,
        expected: int,
    ) -> int:
        written = 0
        if observed is not None:
            result = await conn.execute(self._sql.upsert_observed, observed)
            written += result.rowcount
        if released is not None:
            result = await conn.execute(self._sql.update_released, released)
            written += result.rowcount
        if written != expected:
            raise ProjectionConflictError(
                f"version guard refused {expected - written} of {expected} "
                "device writes: a concurrent writer changed them; the batch was rolled back"
            )
        return written
