"""Retention of the projection's side tables (issue 11 item 9) against the real PostgreSQL:
``device_history`` past ``history_retention_seconds`` before its partition's watermark, the
identity rows of claim aliases unobserved for a week once unallocated, cleared conflicts a week
older than the newest; and the same rows whatever the batch split, through the worker's path
(``apply_batch``) and the replay's (``prepare_batch``/``write_prepared`` over a cache, history
pruned once at the end)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from services.adapters.projection.cache import DeviceCache
from services.adapters.projection.compare import diff_projections
from services.adapters.projection.reads_devices import DeviceReads
from services.adapters.projection.store import ProjectionStore
from services.domain.batch import LoggedBatch
from services.domain.events import (
    DeviceHealthObserved,
    PodDevicesReleased,
    ReleaseReason,
)
from services.domain.log import LoggedEvent, LogPosition
from tests.conftest import TOPIC, SchemaFactory
from tests.projection.inventory_examples import (
    CDI_GPU_2,
    CDI_GPU_3,
    GPU_2,
    NODE,
    UUID_GPU_2,
    inventory_events,
    plugin_gpu,
    pod_04,
    slice_event,
)

pytestmark = pytest.mark.integration

DAY = 86400.0
ACCEL = "accel.example.org/gpu-node-a/accel-1"


def released(seconds: float) -> PodDevicesReleased:
    """pod-04 deleted (unordered: its later observations are not tombstoned)."""
    o = pod_04()[0]
    return PodDevicesReleased(
        NODE, o.namespace, o.pod_name, o.pod_uid, ReleaseReason.DELETED, None, _at(seconds)
    )


def _at(seconds: float) -> datetime:
    return plugin_gpu(seconds).observed_at


def logged(records: Sequence[object], start: int, history_retention: float = 0.0) -> LoggedBatch:
    """``records`` at consecutive offsets of partition 0, as the health agent hands them over:
    device events for the directory, every record for the inventory, the others' event times."""
    items = [(LogPosition(TOPIC, 0, start + i), r) for i, r in enumerate(records)]
    device = (DeviceHealthObserved, PodDevicesReleased)
    retention = {"history_retention_seconds": history_retention} if history_retention else {}
    return LoggedBatch(
        [LoggedEvent(p, r) for p, r in items if isinstance(r, device)],  # type: ignore[arg-type]
        consumed_through={(TOPIC, 0): start + len(records) - 1},
        event_times=[(p, r.observed_at) for p, r in items if not isinstance(r, device)],  # type: ignore[attr-defined]
        inventory=items,  # type: ignore[arg-type]
        **retention,
    )


async def apply_in_batches(
    store: ProjectionStore,
    log: Sequence[object],
    size: int,
    history_retention: float = 0.0,
    first: int = 0,
) -> None:
    """The worker's path: ``apply_batch`` over ``log`` (from offset ``first``) cut into batches
    of ``size``."""
    for start in range(0, len(log), size):
        batch = logged(log[start : start + size], first + start, history_retention)
        await store.apply_batch(batch)


async def replay_path(
    store: ProjectionStore, log: Sequence[object], size: int, history_retention: float = 0.0
) -> None:
    """The replay's path: folded over a cache, written in order, the history pruned at the end."""
    cache = DeviceCache()
    for start in range(0, len(log), size):
        prepared = store.prepare_batch(logged(log[start : start + size], start), cache)
        cache.update(prepared.written, prepared.offsets, prepared.tombstones, prepared.watermarks)
        await store.write_prepared(prepared)
    await store.prune_history(cache.event_times(), history_retention)


async def table(engine: AsyncEngine, schema: str, sql: str) -> list[tuple[Any, ...]]:
    async with engine.connect() as conn:
        return [tuple(r) for r in await conn.execute(text(sql.replace("{s}", f'"{schema}"')))]


async def identity_ids(engine: AsyncEngine, schema: str) -> dict[str, datetime]:
    rows = await table(engine, schema, "SELECT resource_id, observed_at FROM {s}.device_identities")
    return dict(rows)  # type: ignore[arg-type]


CLAIM_GONE = [*inventory_events(0), *pod_04(10), released(100), plugin_gpu(8 * DAY)]
"""pod-04's claim aliases observed, the Pod deleted, a week and a day of its partition's event
time later another observation: its two CDI-form aliases lapsed, unallocated."""


async def test_claim_aliases_unobserved_for_a_week_and_unallocated_are_forgotten(
    store: ProjectionStore, engine: AsyncEngine
) -> None:
    await apply_in_batches(store, CLAIM_GONE, 1)
    ids = await identity_ids(engine, store.schema)
    assert CDI_GPU_2 not in ids and CDI_GPU_3 not in ids
    # What names a physical device stays: the documented DRA form, the device-plugin GPU.
    assert {ACCEL, UUID_GPU_2} <= ids.keys()
    # The directory keeps its device rows (released); only the side table is bounded.
    [(allocations,)] = await table(
        engine,
        store.schema,
        f"SELECT allocations FROM {{s}}.devices WHERE resource_id = '{CDI_GPU_2}'",
    )
    assert allocations == []


async def test_an_allocated_or_recently_seen_claim_alias_is_kept(
    new_schema: SchemaFactory, engine: AsyncEngine
) -> None:
    still_held = [*inventory_events(0), *pod_04(10), plugin_gpu(8 * DAY)]
    store = ProjectionStore(engine, await new_schema())
    await apply_in_batches(store, still_held, 1)
    assert {CDI_GPU_2, CDI_GPU_3} <= (await identity_ids(engine, store.schema)).keys()

    within_the_week = [*inventory_events(0), *pod_04(10), released(100), plugin_gpu(6 * DAY)]
    store = ProjectionStore(engine, await new_schema())
    await apply_in_batches(store, within_the_week, 1)
    assert {CDI_GPU_2, CDI_GPU_3} <= (await identity_ids(engine, store.schema)).keys()


def seen_again(seconds: float) -> list[DeviceHealthObserved]:
    """pod-04's aliases observed again (a newer status)."""
    return [
        DeviceHealthObserved(**{**_fields(o), "status_version": 99_000_000})
        for o in pod_04(seconds)
    ]


def _fields(o: DeviceHealthObserved) -> dict[str, Any]:
    return {f: getattr(o, f) for f in o.__dataclass_fields__ if f != "type"}


@pytest.mark.parametrize(
    "log",
    [CLAIM_GONE, [*CLAIM_GONE, *seen_again(8 * DAY + 10)]],
    ids=["forgotten", "forgotten-then-seen-again"],
)
async def test_the_rows_do_not_depend_on_the_batch_split_nor_on_the_path(
    new_schema: SchemaFactory, engine: AsyncEngine, log: list[object]
) -> None:
    one_by_one = ProjectionStore(engine, await new_schema())
    await apply_in_batches(one_by_one, log, 1, history_retention=DAY)
    whole = ProjectionStore(engine, await new_schema())
    await apply_in_batches(whole, log, len(log), history_retention=DAY)
    replayed = ProjectionStore(engine, await new_schema())
    await replay_path(replayed, log, 3, history_retention=DAY)
    assert await diff_projections(engine, one_by_one.schema, whole.schema) == []
    assert await diff_projections(engine, one_by_one.schema, replayed.schema) == []
    ids = await identity_ids(engine, whole.schema)
    if len(log) > len(CLAIM_GONE):  # seen again after it lapsed: it starts afresh
        assert ids[CDI_GPU_2] == _at(8 * DAY + 10)
    else:
        assert CDI_GPU_2 not in ids


async def test_cleared_conflicts_a_week_before_the_newest_event_time_are_deleted(
    store: ProjectionStore, engine: AsyncEngine
) -> None:
    log = [
        *inventory_events(0),
        slice_event(5, without=("gpu-2",)),  # vanished-from-slice raised ...
        slice_event(6),  # ... and cleared
        slice_event(6 * DAY, without=("gpu-3",)),  # another, within the week: kept
    ]
    await apply_in_batches(store, log, 1)
    sql = "SELECT subject, active FROM {s}.inventory_conflicts ORDER BY subject"
    assert await table(engine, store.schema, sql) == [(GPU_2, False), (GPU_2[:-1] + "3", True)]

    await apply_in_batches(
        store,
        [slice_event(8 * DAY), slice_event(9 * DAY, without=("gpu-1",))],
        1,
        first=len(log),
    )
    rows = await table(engine, store.schema, sql)
    # gpu-2's (cleared at 6 s) is gone; gpu-3's (cleared at 8 days) and gpu-1's are kept.
    assert [r[0].rsplit("/", 1)[1] for r in rows] == ["gpu-1", "gpu-3"]


async def test_history_older_than_the_retention_before_the_watermark_is_deleted(
    new_schema: SchemaFactory, engine: AsyncEngine
) -> None:
    log = [*pod_04(10), plugin_gpu(7200)]
    kept_all = ProjectionStore(engine, await new_schema())
    await apply_in_batches(kept_all, log, 1)
    count = "SELECT count(*) FROM {s}.device_history"
    assert await table(engine, kept_all.schema, count) == [(4,)]

    pruned = ProjectionStore(engine, await new_schema())
    await apply_in_batches(pruned, log, 1, history_retention=3600)
    rows = await table(engine, pruned.schema, "SELECT resource_id FROM {s}.device_history")
    assert rows == [(UUID_GPU_2,)]
    reads = DeviceReads(engine, pruned.schema)
    assert await reads.device_history(NODE, CDI_GPU_2) == []
    [entry] = await reads.device_history(NODE, UUID_GPU_2)
    assert entry.observed_at == _at(7200)
