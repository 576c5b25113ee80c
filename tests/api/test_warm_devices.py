"""The point GETs' in-memory copy (:mod:`services.processes.api.warm_devices`) against a real
PostgreSQL: a GET after a commit sees it within the poll bound, whoever wrote it (the worker's
store, the governor's table, the identities), and the copy steps aside when it cannot refresh."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy import text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from services.adapters.projection.governance_tables import device_governance
from services.adapters.projection.reads_changes import ChangeReads, Horizon
from services.adapters.projection.store import ProjectionStore
from services.adapters.projection.tables import in_schema
from services.domain.batch import LoggedBatch
from services.domain.events import DeviceSource, Health
from services.domain.inventory.identity import Identity, IdentityStatus
from services.processes.api.warm_devices import REFRESH_SLICE, WarmDevices
from tests.api.conftest import ApiFactory, Governor, InventoryWriter
from tests.conftest import T0, LogFactory, ObservationFactory

pytestmark = pytest.mark.integration

POLL = 0.05
URL = "/v1/nodes/gpu-node-a/devices/GPU-0"


async def served(api: httpx.AsyncClient, check: Any, within: float = 10.0) -> dict[str, Any]:
    """The device's body once ``check(body)`` holds; fails after ``within`` seconds (a bound
    far above the poll interval, so a slow machine does not fail it)."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        response = await api.get(URL)
        body: dict[str, Any] = response.json() if response.status_code == 200 else {}
        if check(body):
            return body
        assert asyncio.get_running_loop().time() < deadline, f"last answer: {body}"
        await asyncio.sleep(POLL)


async def until(check: Any, within: float = 10.0) -> None:
    """Wait until ``check()`` holds; fails after ``within`` seconds."""
    for _ in range(int(within / POLL)):
        if check():
            return
        await asyncio.sleep(POLL)
    raise AssertionError(f"not true within {within} s")


def warm_of(api: httpx.AsyncClient) -> WarmDevices:
    warm: WarmDevices = api._transport.app.state.warm_devices  # type: ignore[attr-defined]
    return warm


@pytest.fixture
async def warm_api(
    make_api: ApiFactory,
    store: ProjectionStore,
    observation: ObservationFactory,
    logged: LogFactory,
) -> AsyncIterator[httpx.AsyncClient]:
    """The API with a fast-polling copy, loaded with GPU-0 Healthy on gpu-node-a."""
    await store.apply_batch(LoggedBatch(logged([observation(1)])))
    async with make_api(api_read_cache=True, api_read_cache_poll_seconds=POLL) as api:
        await served(api, lambda b: b.get("health") == "Healthy")
        await until(lambda: warm_of(api).ready)
        yield api


async def test_a_worker_write_replaces_the_body_served_from_memory(
    warm_api: httpx.AsyncClient,
    store: ProjectionStore,
    observation: ObservationFactory,
    logged: LogFactory,
) -> None:
    warm = warm_of(warm_api)
    hits = warm.stats.hits
    assert (await warm_api.get(URL)).json()["health"] == "Healthy"
    assert warm.stats.hits == hits + 1  # answered from memory, not PostgreSQL
    await store.apply_batch(
        LoggedBatch(logged([observation(2, Health.UNHEALTHY, at=5, message="XID 79")], start=1))
    )
    body = await served(warm_api, lambda b: b.get("health") == "Unhealthy")
    assert body["message"] == "XID 79"
    assert body["statusVersion"] == "2"
    hits = warm.stats.hits
    assert (await warm_api.get(URL)).json()["health"] == "Unhealthy"
    assert warm.stats.hits == hits + 1  # the new body is the one in memory


async def test_a_governor_write_reaches_the_body(
    warm_api: httpx.AsyncClient, governor: Governor, engine: AsyncEngine, fresh_schema: str
) -> None:
    assert (await warm_api.get(URL)).json()["governance"] is None
    await governor.device("gpu-node-a", "GPU-0", "Healthy", T0)
    await served(warm_api, lambda b: (b.get("governance") or {}).get("state") == "Healthy")
    async with engine.begin() as conn:
        await conn.execute(
            update(device_governance).values(state="Quarantined", quarantine_id="q-1"),
            execution_options=in_schema(fresh_schema),
        )
    body = await served(
        warm_api, lambda b: (b.get("governance") or {}).get("state") == "Quarantined"
    )
    assert body["governance"]["quarantineID"] == "q-1"
    assert warm_of(warm_api).stats.refresh_errors == 0


async def test_a_resolved_identity_joins_the_governance_of_the_physical_device(
    warm_api: httpx.AsyncClient,
    governor: Governor,
    inventory_writer: InventoryWriter,
    observation: ObservationFactory,
) -> None:
    # The governor keys the device by its physical identity; the directory joins it only once
    # the identity row says so, a write to device_identities alone.
    await governor.device("gpu-node-a", "gpu-physical-7", "Restricted", T0)
    await asyncio.sleep(POLL * 4)
    assert (await warm_api.get(URL)).json()["governance"] is None
    identity = Identity("gpu-physical-7", DeviceSource.DEVICE_PLUGIN, IdentityStatus.RESOLVED)
    await inventory_writer.identities([(observation(1), identity)])
    await served(warm_api, lambda b: (b.get("governance") or {}).get("state") == "Restricted")


async def test_a_device_written_after_the_load_appears_within_the_bound(
    warm_api: httpx.AsyncClient,
    store: ProjectionStore,
    observation: ObservationFactory,
    logged: LogFactory,
) -> None:
    warm = warm_of(warm_api)
    assert warm.complete  # one device, far below the limit: a device it lacks is a 404
    assert (await warm_api.get("/v1/nodes/gpu-node-a/devices/GPU-9")).status_code == 404
    await store.apply_batch(LoggedBatch(logged([observation(1, resource_id="GPU-9")], start=1)))
    await until(lambda: ("gpu-node-a", "GPU-9") in warm._bodies)
    response = await warm_api.get("/v1/nodes/gpu-node-a/devices/GPU-9")
    assert response.status_code == 200
    assert response.json()["resourceID"] == "GPU-9"
    assert (await warm_api.get("/v1/nodes/gpu-node-a/devices/GPU-404")).status_code == 404


async def test_a_full_copy_reads_the_devices_it_lacks_from_postgresql(
    make_api: ApiFactory,
    store: ProjectionStore,
    observation: ObservationFactory,
    logged: LogFactory,
) -> None:
    await store.apply_batch(
        LoggedBatch(logged([observation(1), observation(2, resource_id="GPU-1")]))
    )
    async with make_api(
        api_read_cache=True, api_read_cache_poll_seconds=POLL, api_read_cache_max_devices=1
    ) as api:
        warm = warm_of(api)
        assert warm.ready and not warm.complete and len(warm) == 1
        for rid in ("GPU-0", "GPU-1"):  # one from memory, one from PostgreSQL
            response = await api.get(f"/v1/nodes/gpu-node-a/devices/{rid}")
            assert response.status_code == 200
            assert response.json()["resourceID"] == rid
        assert warm.stats.hits == 1 and warm.stats.misses == 1
        assert len(warm) == 1
        assert (await api.get("/v1/nodes/gpu-node-a/devices/GPU-404")).status_code == 404


async def test_a_copy_that_cannot_refresh_is_not_served(
    engine: AsyncEngine,
    fresh_schema: str,
    store: ProjectionStore,
    observation: ObservationFactory,
    logged: LogFactory,
) -> None:
    await store.apply_batch(LoggedBatch(logged([observation(1)])))
    warm = WarmDevices(ChangeReads(engine, fresh_schema), poll_seconds=POLL, max_devices=10)
    await warm.refresh()  # the first refresh loads
    assert warm.ready and warm.get(("gpu-node-a", "GPU-0")) is not None
    moved = f"{fresh_schema}_moved"
    async with engine.begin() as conn:
        await conn.execute(text(f'ALTER SCHEMA "{fresh_schema}" RENAME TO "{moved}"'))
    try:
        task = asyncio.create_task(warm.run())
        await until(lambda: warm.stats.refresh_errors > 0)
        assert not warm.ready
        assert warm.get(("gpu-node-a", "GPU-0")) is None  # the route reads PostgreSQL (503)
    finally:
        async with engine.begin() as conn:
            await conn.execute(text(f'ALTER SCHEMA "{moved}" RENAME TO "{fresh_schema}"'))
    await until(lambda: warm.ready)
    task.cancel()
    assert warm.get(("gpu-node-a", "GPU-0")) is not None


async def test_a_body_read_before_a_refresh_is_not_kept(
    engine: AsyncEngine,
    fresh_schema: str,
    store: ProjectionStore,
    observation: ObservationFactory,
    logged: LogFactory,
) -> None:
    warm = WarmDevices(ChangeReads(engine, fresh_schema), poll_seconds=POLL, max_devices=10)
    await warm.refresh()
    before = warm.generation
    await store.apply_batch(LoggedBatch(logged([observation(1)])))
    await warm.refresh()  # a refresh between the route's read and its put
    warm.put(("gpu-node-a", "GPU-0"), b"{}", before)
    assert warm.get(("gpu-node-a", "GPU-0")) != b"{}"
    warm.put(("gpu-node-a", "GPU-X"), b"{}", warm.generation)
    assert warm.get(("gpu-node-a", "GPU-X")) == b"{}"


async def test_a_long_refresh_lets_requests_in_and_refuses_their_puts(
    engine: AsyncEngine,
    fresh_schema: str,
    store: ProjectionStore,
    observation: ObservationFactory,
    logged: LogFactory,
) -> None:
    """A refresh of thousands of devices (the worker ingesting) yields to the event loop between
    slices, so GETs are answered meanwhile; a body such a GET read from PostgreSQL may predate
    what the refresh applies, so its put is refused until the refresh has ended."""
    warm = WarmDevices(ChangeReads(engine, fresh_schema), poll_seconds=POLL, max_devices=10_000)
    await warm.refresh()
    count = 3 * REFRESH_SLICE
    keys = [("gpu-node-a", f"GPU-{i}") for i in range(count)]
    await store.apply_batch(
        LoggedBatch(logged([observation(1, resource_id=rid) for _, rid in keys]))
    )
    refresh = asyncio.create_task(warm.refresh())
    turns = 0
    while not refresh.done():  # a GET missing the copy, read from PostgreSQL, then put
        for key in keys:
            warm.put(key, b"stale", warm.generation)
        turns += 1
        await asyncio.sleep(0)
    assert await refresh == count
    assert turns > count // REFRESH_SLICE
    assert all(warm.get(key) not in (None, b"stale") for key in keys)
    warm.put(("gpu-node-a", "GPU-X"), b"{}", warm.generation)  # once it has ended: kept
    assert warm.get(("gpu-node-a", "GPU-X")) == b"{}"


async def test_changes_are_found_modulo_the_32_bit_transaction_id(
    engine: AsyncEngine,
    fresh_schema: str,
    store: ProjectionStore,
    observation: ObservationFactory,
    logged: LogFactory,
) -> None:
    reads = ChangeReads(engine, fresh_schema)
    start = (await reads.load(10)).horizon
    await store.apply_batch(LoggedBatch(logged([observation(1)])))
    keys, snapshot = await reads.changed_since(start)
    assert keys == {("gpu-node-a", "GPU-0")}
    assert [d.record.health for d in snapshot.items] == [Health.HEALTHY]
    # A horizon one epoch later is the same 32-bit xmin: the same changes.
    assert (await reads.changed_since(Horizon(start.xid + 2**32)))[0] == keys
    # Nothing changed since the new horizon.
    assert (await reads.changed_since(snapshot.horizon))[0] == set()
