"""Properties of the PostgreSQL projection: for any event log and any batch split, the rows equal
the pure fold of the log, history holds exactly the fold's changes, and re-applying the log gives
what the fold gives (a no-op whenever the fold says so)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from services.adapters.projection.reads_devices import DeviceReads
from services.adapters.projection.store import ProjectionStore
from services.adapters.projection.tables import device_history, in_schema, quoted_schema
from services.domain.batch import LoggedBatch
from services.domain.directory import DeviceKey, DeviceRecord, apply_event, fold, tombstones_of
from services.domain.events import Event
from services.domain.log import LoggedEvent
from services.domain.tombstones import Tombstone, merged
from tests.conftest import as_log
from tests.domain.strategies import event_logs

pytestmark = pytest.mark.integration

batch_sizes = st.lists(st.integers(min_value=1, max_value=12), min_size=1, max_size=40)


def split(log: list[LoggedEvent], sizes: list[int]) -> list[list[LoggedEvent]]:
    """``log`` cut into consecutive batches of the given sizes (the last size repeats)."""
    batches, i, k = [], 0, 0
    while i < len(log):
        size = sizes[min(k, len(sizes) - 1)]
        batches.append(log[i : i + size])
        i, k = i + size, k + 1
    return batches


def expected_history(log: list[LoggedEvent]) -> set[tuple[Any, ...]]:
    """(offset, node, resource_id, kind, health) of every change the sequential fold makes."""
    state: dict[DeviceKey, DeviceRecord] = {}
    tombstones: dict[str, Tombstone] = {}
    rows = set()
    for logged in log:
        changes = apply_event(state, logged.event, tombstones)
        merged(tombstones, tombstones_of(logged.event, changes))
        for change in changes:
            if change.changed:
                state[change.key] = change.record
                kind = "observed" if change.outcome.value == "applied" else "released"
                rows.add((logged.position.offset, *change.key, kind, change.record.health.value))
    return rows


async def projection(
    store: ProjectionStore, engine: AsyncEngine
) -> tuple[dict[Any, Any], set[Any]]:
    reads = DeviceReads(engine, store.schema)
    devices = {d.key: d for d in (await reads.list_devices(limit=1000)).items}
    h = device_history.c
    stmt = select(h.offset, h.node, h.resource_id, h.kind, h.health)
    async with engine.connect() as conn:
        result = await conn.execute(stmt, execution_options=in_schema(store.schema))
        history = {tuple(r) for r in result}
    return devices, history


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],  # tables emptied per example
)
@given(events=event_logs, sizes=batch_sizes)
async def test_projection_equals_the_fold_whatever_the_batch_split(
    store: ProjectionStore, engine: AsyncEngine, events: list[Event], sizes: list[int]
) -> None:
    async with engine.begin() as conn:
        s = quoted_schema(store.schema)
        await conn.execute(
            text(
                f"TRUNCATE {s}.devices, {s}.device_history, {s}.partition_progress, "
                f"{s}.pod_tombstones"
            )
        )
    log = as_log(events)
    for batch in split(log, sizes):
        await store.apply_batch(LoggedBatch(batch))

    devices, history = await projection(store, engine)
    assert devices == fold(events)
    assert history == expected_history(log)

    # Redelivery of the whole log (a crash after the commit, before Kafka's offset commit):
    # every record is at or before the recorded partition offset, so nothing changes at all.
    again = await store.apply_batch(LoggedBatch(log))
    assert again.redelivered == len(log)
    assert (again.applied, again.released, again.devices_written) == (0, 0, 0)
    assert await projection(store, engine) == (devices, history)
