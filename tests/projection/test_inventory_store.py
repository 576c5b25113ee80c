"""The inventory tables written by ``ProjectionStore.apply_batch`` with ``LoggedBatch.inventory`` against
the real PostgreSQL: the rows, the hook's view, rollback and reload, a restarted worker (a new
store) resolving from the loaded state, a partition another writer advanced, and the replay's
path (``prepare_batch``/``write_prepared``) writing the same rows."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from services.adapters.projection.cache import DeviceCache
from services.adapters.projection.compare import INVENTORY_COMPARED_TABLES, diff_projections
from services.adapters.projection.inventory_store import conflict_rows
from services.adapters.projection.store import ProjectionStore
from services.domain.batch import CommitHook, LoggedBatch, PendingCommit
from services.domain.events import DeviceHealthObserved, PodDevicesReleased
from services.domain.log import LoggedEvent, LogPosition
from tests.conftest import TOPIC, SchemaFactory
from tests.projection.inventory_examples import (
    CDI_GPU_2,
    CDI_GPU_3,
    GPU_2,
    GPU_3,
    NODE,
    UUID_GPU_2,
    UUID_GPU_3,
    at,
    inventory_events,
    plugin_gpu,
    pod_04,
    slice_event,
)

pytestmark = pytest.mark.integration


def batch(
    records: Sequence[object], start: int = 0, partition: int = 0
) -> tuple[list[LoggedEvent], list[tuple[LogPosition, object]]]:
    """``records`` at consecutive offsets: the device events (for the directory) and every record
    (for the inventory), as the health agent hands them over."""
    items = [(LogPosition(TOPIC, partition, start + i), r) for i, r in enumerate(records)]
    events = [
        LoggedEvent(p, r)
        for p, r in items
        if isinstance(r, DeviceHealthObserved | PodDevicesReleased)
    ]
    return events, items


async def apply(
    store: ProjectionStore,
    records: Sequence[object],
    start: int = 0,
    before_commit: CommitHook | None = None,
) -> Any:
    events, items = batch(records, start)
    consumed = {(TOPIC, 0): start + len(records) - 1}
    times = [(p, r.observed_at) for p, r in items if not isinstance(r, DeviceHealthObserved)]  # type: ignore[attr-defined]
    logged = LoggedBatch(
        events,
        consumed_through=consumed,
        event_times=times,
        inventory=items,  # type: ignore[arg-type]
    )
    return await store.apply_batch(logged, before_commit)


async def table(engine: AsyncEngine, schema: str, sql: str) -> list[tuple[Any, ...]]:
    async with engine.connect() as conn:
        return [tuple(r) for r in await conn.execute(text(sql.replace("{s}", f'"{schema}"')))]


async def identities(engine: AsyncEngine, schema: str) -> dict[str, tuple[Any, ...]]:
    rows = await table(
        engine, schema, "SELECT resource_id, device_id, status, uuid FROM {s}.device_identities"
    )
    return {r[0]: r[1:] for r in rows}


async def test_a_batch_writes_objects_identities_and_shows_them_to_the_hook(
    store: ProjectionStore, engine: AsyncEngine
) -> None:
    seen: list[PendingCommit] = []

    async def hook(commit: PendingCommit) -> None:
        seen.append(commit)

    await apply(store, [*inventory_events(), *pod_04()], before_commit=hook)
    schema = store.schema
    objects = await table(
        engine,
        schema,
        "SELECT kind, object_key, record_key, node, deleted FROM {s}.inventory_objects",
    )
    assert sorted(objects) == [
        ("DeviceClass", "gpu.example.com", "class:gpu.example.com", None, False),
        ("ResourceClaim", "ml-serving/infer-dra-0-gpus-7xk2q", NODE, NODE, False),
        (
            "ResourceSlice",
            "gpu.example.com/gpu-node-a/gpu-node-a-gpu.example.com-k7d2m",
            NODE,
            NODE,
            False,
        ),
    ]
    assert await identities(engine, schema) == {
        CDI_GPU_2: (GPU_2, "resolved", UUID_GPU_2),
        CDI_GPU_3: (GPU_3, "resolved", UUID_GPU_3),
        "accel.example.org/gpu-node-a/accel-1": (
            "accel.example.org/gpu-node-a/accel-1",
            "as-reported",
            None,
        ),
    }
    [commit] = seen
    assert commit.inventory is not None
    by_offset = {p.offset: i.device_id for p, i in commit.inventory.resolved.items()}
    assert by_offset == {3: "accel.example.org/gpu-node-a/accel-1", 4: GPU_2, 5: GPU_3}
    assert [t.position.offset for t in commit.transitions] == [3, 4, 5]


async def test_conflicts_are_stored_and_a_redelivery_changes_nothing(
    store: ProjectionStore, engine: AsyncEngine
) -> None:
    await apply(store, inventory_events())
    seen: list[PendingCommit] = []

    async def hook(commit: PendingCommit) -> None:
        seen.append(commit)

    await apply(store, [plugin_gpu(20)], start=3, before_commit=hook)
    async with engine.connect() as conn:
        [row] = await conflict_rows(conn, store.schema)
    assert (row["kind"], row["node"], row["subject"], row["active"]) == (
        "plugin-and-dra",
        NODE,
        UUID_GPU_2,
        True,
    )
    assert (row["first_seen"], row["last_seen"]) == (at(20), at(20))
    assert seen[0].inventory is not None and len(seen[0].inventory.changes) == 1
    await apply(store, [plugin_gpu(20)], start=3, before_commit=hook)  # redelivered
    assert seen[1].inventory is not None
    assert seen[1].inventory.changes == [] and seen[1].inventory.writes == 0

    await apply(store, [slice_event(30, without=("gpu-2",))], start=4, before_commit=hook)
    assert seen[2].inventory is not None
    changes = [(c.row.kind, c.row.subject, c.row.active) for c in seen[2].inventory.changes]
    assert changes == [
        ("vanished-from-slice", GPU_2, True),
        ("plugin-and-dra", UUID_GPU_2, False),  # the slice no longer publishes that GPU
    ]
    async with engine.connect() as conn:
        rows = {
            (r["kind"], r["subject"]): r["active"] for r in await conflict_rows(conn, store.schema)
        }
    assert rows == {("plugin-and-dra", UUID_GPU_2): False, ("vanished-from-slice", GPU_2): True}


async def test_a_rolled_back_batch_is_folded_again_from_the_tables(
    store: ProjectionStore, engine: AsyncEngine
) -> None:
    await apply(store, inventory_events())
    assert store.inventory.loads == 1

    async def failing(commit: PendingCommit) -> None:
        raise ConnectionError("governance topic unreachable")

    with pytest.raises(ConnectionError):
        await apply(store, [plugin_gpu(20)], start=3, before_commit=failing)
    assert await conflict_rows_of(engine, store.schema) == []
    seen: list[PendingCommit] = []

    async def hook(commit: PendingCommit) -> None:
        seen.append(commit)

    await apply(store, [plugin_gpu(20)], start=3, before_commit=hook)  # the retry
    assert store.inventory.loads == 2  # the fold had gone ahead of the tables: reloaded
    assert seen[0].inventory is not None
    assert [c.row.subject for c in seen[0].inventory.changes] == [UUID_GPU_2]
    assert len(await conflict_rows_of(engine, store.schema)) == 1


async def conflict_rows_of(engine: AsyncEngine, schema: str) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        return await conflict_rows(conn, schema)


async def test_a_restarted_worker_resolves_from_the_loaded_inventory(
    store: ProjectionStore, engine: AsyncEngine
) -> None:
    await apply(store, [*inventory_events(), plugin_gpu(20)])
    restarted = ProjectionStore(engine, store.schema)
    seen: list[PendingCommit] = []

    async def hook(commit: PendingCommit) -> None:
        seen.append(commit)

    again = [dataclasses.replace(o, status_version=60000) for o in pod_04(30)]
    await apply(restarted, [*again, plugin_gpu(31, version=73310)], start=4, before_commit=hook)
    [commit] = seen
    assert commit.inventory is not None
    assert sorted(i.device_id for i in commit.inventory.resolved.values()) == sorted(
        ["accel.example.org/gpu-node-a/accel-1", GPU_2, GPU_3, UUID_GPU_2]
    )
    assert commit.inventory.changes == []  # the conflict was loaded active: not raised again
    assert restarted.inventory.loads == 1


async def test_a_partition_advanced_by_another_writer_reloads_the_state(
    store: ProjectionStore, engine: AsyncEngine
) -> None:
    await apply(store, [pod_04()[1]])  # the claim is unknown: unresolved
    other = ProjectionStore(engine, store.schema)  # e.g. the partition's owner after a rebalance
    await apply(other, inventory_events(), start=1)
    seen: list[PendingCommit] = []

    async def hook(commit: PendingCommit) -> None:
        seen.append(commit)

    await apply(
        store, [dataclasses.replace(pod_04()[1], status_version=60000)], 4, before_commit=hook
    )
    assert store.inventory.loads == 2
    assert seen[0].inventory is not None
    [identity] = seen[0].inventory.resolved.values()
    assert identity.device_id == GPU_2


async def test_the_replay_path_writes_the_same_rows(
    store: ProjectionStore, engine: AsyncEngine, new_schema: SchemaFactory
) -> None:
    records: list[Any] = [
        *inventory_events(),
        *pod_04(),
        plugin_gpu(20),
        slice_event(30, without=("gpu-3",)),
        plugin_gpu(40, version=73310),
    ]
    await apply(store, records[:4])
    await apply(store, records[4:], start=4)
    replayed = ProjectionStore(engine, await new_schema())
    cache = DeviceCache()
    for start, end in ((0, 2), (2, 7), (7, 9)):
        events, items = batch(records[start:end], start)
        prepared = replayed.prepare_batch(LoggedBatch(events, inventory=items), cache)  # type: ignore[arg-type]
        cache.update(prepared.written, prepared.offsets)
        await replayed.write_prepared(prepared)
    assert (
        await diff_projections(engine, store.schema, replayed.schema, INVENTORY_COMPARED_TABLES)
        == []
    )
    assert len(await conflict_rows_of(engine, replayed.schema)) == 2
