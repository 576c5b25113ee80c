"""What the batch writer reads, and locks, at the start of its transaction: the partition
progress, the devices the batch touches, the device counts of the nodes at the ceiling, the
workload facts the forwarding joins. For :class:`~services.adapters.projection.store.ProjectionStore`.

Every function runs on the caller's ``AsyncConnection`` inside its transaction; rows are locked
``FOR UPDATE`` in key order until commit. Raises SQLAlchemy's ``DBAPIError`` family for database
failures.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from services.adapters.projection.batch_plan import BatchPlan
from services.adapters.projection.batch_sql import BatchStatements
from services.adapters.projection.rows import records_from_rows
from services.adapters.projection.tombstone_sql import TombstoneStatements, load_tombstones
from services.adapters.projection.workload_sql import (
    WorkloadStatements,
    governed_names,
    stored_facts,
)
from services.domain.batch import LoggedBatch, Partition
from services.domain.device_ceiling import OverCeiling, new_device_nodes, within_ceiling
from services.domain.directory import DeviceKey, DeviceRecord
from services.domain.events import DeviceHealthObserved, PodsListed
from services.domain.log import LoggedEvent, LogPosition
from services.domain.tombstones import Tombstone
from services.domain.workloads.events import PodWorkloadObserved
from services.domain.workloads.on_device import WorkloadFacts


async def lock_progress(
    conn: AsyncConnection, sql: BatchStatements, partitions: Iterable[Partition]
) -> tuple[dict[Partition, int], dict[Partition, datetime]]:
    """The recorded offset and newest event time of each of ``partitions`` (those with a
    value), rows locked until commit."""
    parts = sorted(set(partitions))
    if not parts:
        return {}, {}
    result = await conn.execute(
        sql.lock_progress,
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


async def locked_within_ceiling(
    conn: AsyncConnection,
    sql: BatchStatements,
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
        result = await conn.execute(sql.count_by_node, {"nodes": sorted(nodes)})
        counts = {node: int(count) for node, count in result}
    return within_ceiling(records, current.__contains__, counts, ceiling)


async def workload_inputs(
    conn: AsyncConnection,
    sql: WorkloadStatements,
    current: Mapping[DeviceKey, DeviceRecord],
    plan: BatchPlan,
    workloads: Sequence[tuple[LogPosition, PodWorkloadObserved]],
    named: bool,
) -> tuple[dict[str, WorkloadFacts], dict[DeviceKey, str]]:
    """What :func:`~services.domain.workloads.on_device.workloads_on_devices` reads of the
    projection at the batch's start: the stored workload facts of every Pod the batch's devices
    and workload records name, and (``named``: the batch maintains the inventory) the
    governor's name of those devices."""
    uids = {w.pod_uid for _, w in workloads}
    for record in (*current.values(), *plan.written.values()):
        uids.update(a.pod_uid for a in record.allocations)
    stored = await stored_facts(conn, sql, uids)
    if not stored and not workloads:  # no fact can be forwarded: no device is named
        return stored, {}
    keys = current.keys() | plan.written.keys()
    names = await governed_names(conn, sql, keys) if named else {}
    return stored, names


async def lock_devices(
    conn: AsyncConnection,
    sql: BatchStatements,
    tombstone_sql: TombstoneStatements,
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
        result = await conn.execute(sql.lock_by_key, params)
        current.update((r.key, r) for r in records_from_rows(result))
    if pods:
        ordered = sorted(pods)
        params = {"nodes": [n for n, _ in ordered], "pods": [p for _, p in ordered]}
        result = await conn.execute(sql.lock_by_pod, params)
        current.update((r.key, r) for r in records_from_rows(result))
    if nodes:
        result = await conn.execute(sql.lock_by_node, {"nodes": sorted(nodes)})
        current.update((r.key, r) for r in records_from_rows(result))
    return current, await load_tombstones(conn, tombstone_sql, uids)
