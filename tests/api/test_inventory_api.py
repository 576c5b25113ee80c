"""The inventory directory (``/v1/inventory/devices``, ``/unseen``, ``/conflicts``) on a real
PostgreSQL projection written as the pipeline would (``tests/api/inventory_scenario.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from services.adapters.projection.store import ProjectionStore
from services.domain.batch import LoggedBatch
from services.domain.events import DeviceSource
from services.domain.inventory.events import InventoryObserved
from services.domain.inventory.objects import ResourceSliceInfo
from services.domain.inventory.state import ConflictKind, InventoryState
from tests.api.conftest import (
    INVENTORY_TABLES,
    ApiFactory,
    Governor,
    InventoryWriter,
    example_object,
)
from tests.api.inventory_scenario import (
    B1_QID,
    CDI,
    CLAIM,
    GPU,
    GPU5_QID,
    NODE_A,
    NODE_B,
    NODE_C,
    dra_objects,
    load_fleet,
)
from tests.conftest import T0, LogFactory, ObservationFactory

pytestmark = pytest.mark.integration


@pytest.fixture
async def fleet(
    inventory_writer: InventoryWriter,
    store: ProjectionStore,
    governor: Governor,
    observation: ObservationFactory,
    logged: LogFactory,
) -> None:
    await load_fleet(inventory_writer, store, governor, observation, logged)


@pytest.fixture
async def api(make_inventory_api: ApiFactory) -> AsyncIterator[httpx.AsyncClient]:
    async with make_inventory_api() as client:
        yield client


async def all_items(api: httpx.AsyncClient, limit: int = 100, **params: Any) -> list[Any]:
    items: list[Any] = []
    query: dict[str, Any] = {**params, "limit": limit}
    while True:
        response = await api.get("/v1/inventory/devices", params=query)
        assert response.status_code == 200, response.text
        body = response.json()
        items += body["items"]
        if body["nextCursor"] is None:
            return items
        query["cursor"] = body["nextCursor"]


def keys(items: list[Any]) -> list[tuple[str | None, str]]:
    return [(d["node"], d["deviceID"]) for d in items]


ALL_KEYS = [
    *((NODE_A, GPU[i]) for i in range(8)),
    (NODE_B, "GPU-b0"),
    (NODE_B, "GPU-b1"),
    (NODE_C, "GPU-c0"),
]


@pytest.mark.usefixtures("fleet")
async def test_every_device_is_listed_idle_ones_included(api: httpx.AsyncClient) -> None:
    items = await all_items(api)
    assert keys(items) == ALL_KEYS
    by_id = {d["deviceID"]: d for d in items}

    idle = by_id[GPU[0]]
    assert idle == {
        "node": NODE_A,
        "deviceID": GPU[0],
        "owner": "dra",
        "pool": NODE_A,
        "driver": "gpu.example.com",
        "uuid": "GPU-7d1ab9d3-92d7-5056-a63f-8c47362936c2",
        "deviceClass": "gpu.example.com",
        "resourceName": None,
        "taints": [],
        "allocatedTo": {"claims": [], "pods": []},
        "health": None,
        "healthObservedAt": None,
        "state": None,
        "quarantineID": None,
        "unavailable": None,
        "reportedIDs": [],
        "inSlice": True,
    }

    # gpu-2: one claim shared by two Pods, reported under a CDI name and the documented form.
    shared = by_id[GPU[2]]
    assert shared["allocatedTo"] == {
        "claims": [f"ml-serving/{CLAIM}"],
        "pods": ["ml-serving/infer-dra-0", "ml-serving/infer-dra-1"],
    }
    assert shared["reportedIDs"] == sorted([CDI[2], GPU[2]])
    assert shared["health"] == "Healthy"
    assert shared["uuid"] == "GPU-0e18c688-f23f-5391-a735-114e22f43e9f"
    assert shared["unavailable"] is None

    quarantined = by_id[GPU[5]]
    assert quarantined["taints"] == [
        {
            "key": "gpu.example.com/xid",
            "value": "79",
            "effect": "NoSchedule",
            "timeAdded": "2026-11-29T10:42:09Z",  # as the example slice has it
            "rule": None,  # the slice's own taint, not a DeviceTaintRule's
        }
    ]
    assert (quarantined["state"], quarantined["quarantineID"]) == ("Quarantined", GPU5_QID)
    assert quarantined["health"] == "Unhealthy"
    assert quarantined["unavailable"] == "Quarantined"
    assert quarantined["allocatedTo"] == {"claims": [], "pods": []}  # its Pod is gone

    plugin = by_id["GPU-b0"]
    assert plugin["owner"] == "device-plugin"
    assert (plugin["resourceName"], plugin["uuid"]) == ("nvidia.com/gpu", "GPU-b0")
    assert (plugin["pool"], plugin["driver"], plugin["deviceClass"]) == (None, None, None)
    assert plugin["allocatedTo"] == {"claims": [], "pods": ["ml/train-0"]}
    assert (plugin["state"], plugin["health"]) == ("Available", "Healthy")
    b1 = by_id["GPU-b1"]
    assert (b1["state"], b1["quarantineID"], b1["unavailable"]) == (
        "Quarantined",
        B1_QID,
        "Quarantined",
    )
    assert b1["allocatedTo"]["pods"] == []


@pytest.mark.usefixtures("fleet")
async def test_keyset_pages_walk_the_same_list(api: httpx.AsyncClient) -> None:
    assert keys(await all_items(api, limit=3)) == ALL_KEYS
    assert keys(await all_items(api, limit=1)) == ALL_KEYS
    first = (await api.get("/v1/inventory/devices", params={"limit": 8})).json()
    assert keys(first["items"]) == ALL_KEYS[:8]
    rest = (await api.get("/v1/inventory/devices", params={"cursor": first["nextCursor"]})).json()
    assert keys(rest["items"]) == ALL_KEYS[8:]
    assert rest["nextCursor"] is None
    bad = await api.get("/v1/inventory/devices", params={"cursor": "nope"})
    assert bad.status_code == 422


@pytest.mark.usefixtures("fleet")
async def test_filters(api: httpx.AsyncClient) -> None:
    assert keys(await all_items(api, node=NODE_B)) == [(NODE_B, "GPU-b0"), (NODE_B, "GPU-b1")]
    assert keys(await all_items(api, node=NODE_B, limit=1)) == [
        (NODE_B, "GPU-b0"),
        (NODE_B, "GPU-b1"),
    ]
    assert len(await all_items(api, owner="dra")) == 8
    assert keys(await all_items(api, owner="device-plugin")) == ALL_KEYS[8:]
    assert len(await all_items(api, pool=NODE_A)) == 8
    assert len(await all_items(api, pool=f"gpu.example.com/{NODE_A}")) == 8
    assert await all_items(api, pool="other") == []
    assert len(await all_items(api, deviceClass="gpu.example.com")) == 8
    assert len(await all_items(api, resourceName="nvidia.com/gpu")) == 3
    assert keys(await all_items(api, state="Quarantined")) == [
        (NODE_A, GPU[5]),
        (NODE_B, "GPU-b1"),
    ]
    # Available also matches the devices the governor never saw (idle since the start).
    assert len(await all_items(api, state="Available")) == len(ALL_KEYS) - 2
    assert keys(await all_items(api, health="Unhealthy")) == [
        (NODE_A, GPU[5]),
        (NODE_B, "GPU-b1"),
    ]
    assert (await api.get("/v1/inventory/devices", params={"state": "Broken"})).status_code == 422
    assert (await api.get("/v1/inventory/devices", params={"owner": "x"})).status_code == 422


@pytest.mark.usefixtures("fleet")
async def test_unseen_plugin_devices_are_a_count_per_node_and_resource(
    api: httpx.AsyncClient,
) -> None:
    body = (await api.get("/v1/inventory/unseen")).json()
    assert body["items"] == [
        {
            "node": NODE_B,
            "resourceName": "nvidia.com/gpu",
            "capacity": 2,
            "allocatable": 2,
            "seen": 2,
            "unseen": 0,
        },
        {
            "node": NODE_C,
            "resourceName": "nvidia.com/gpu",
            "capacity": 2,
            "allocatable": 2,
            "seen": 1,
            "unseen": 1,
        },
        {
            "node": "gpu-node-e",
            "resourceName": "nvidia.com/gpu",
            "capacity": 4,
            "allocatable": 4,
            "seen": 0,
            "unseen": 4,
        },
    ]
    assert body["unseen"] == 5
    one = (await api.get("/v1/inventory/unseen", params={"node": NODE_C})).json()
    assert [i["node"] for i in one["items"]] == [NODE_C]


async def test_pool_scoped_slice_devices_have_no_node_and_come_first(
    inventory_writer: InventoryWriter, api: httpx.AsyncClient
) -> None:
    node_slice = example_object("dra-resourceslice-gpu-node-a.json")
    assert isinstance(node_slice, ResourceSliceInfo)
    from dataclasses import replace

    pooled = replace(
        node_slice, name="rack-1-fabric", pool="rack-1", node=None, devices=node_slice.devices[:2]
    )
    await inventory_writer.objects(pooled, node_slice)
    items = await all_items(api, limit=1)
    assert keys(items)[:2] == [
        (None, "gpu.example.com/rack-1/gpu-0"),
        (None, "gpu.example.com/rack-1/gpu-1"),
    ]
    assert len(items) == 10
    assert keys(await all_items(api, node=NODE_A)) == [(NODE_A, GPU[i]) for i in range(8)]


async def test_a_deleted_slice_is_gone_and_a_reported_device_outside_slices_is_flagged(
    inventory_writer: InventoryWriter,
    store: ProjectionStore,
    observation: ObservationFactory,
    logged: LogFactory,
    api: httpx.AsyncClient,
) -> None:
    resource_slice, device_class, claim = (
        dra_objects()[1],
        dra_objects()[0],
        dra_objects()[2],
    )
    await inventory_writer.objects(device_class, claim)
    await inventory_writer.objects(resource_slice, deleted=True)  # tombstone
    # A device reported in the documented form, in no current slice (no identity row yet:
    # the documented form is its own identity).
    event = observation(
        5,
        node=NODE_A,
        resource_id=GPU[3],
        resource_name="claim:gpus/main",
        source=DeviceSource.DRA,
        namespace="ml-serving",
        pod_name="infer-dra-0",
    )
    await store.apply_batch(LoggedBatch(logged([event]), highwaters={}))
    items = await all_items(api)
    assert keys(items) == [(NODE_A, GPU[3])]
    [lost] = items
    assert lost["inSlice"] is False
    assert (lost["pool"], lost["driver"], lost["deviceClass"]) == (
        NODE_A,
        "gpu.example.com",
        "gpu.example.com",
    )
    assert lost["allocatedTo"]["claims"] == [f"ml-serving/{CLAIM}"]


async def test_conflicts(inventory_writer: InventoryWriter, api: httpx.AsyncClient) -> None:
    objects = dra_objects()
    state = InventoryState()
    for obj in objects:
        state.apply(InventoryObserved("k", obj, False, T0))
    state.set_capacity(NODE_A, [("example.com/gpu", 8)])
    ownership = state.ownership_conflicts()
    shrunk = objects[1]
    assert isinstance(shrunk, ResourceSliceInfo)
    from dataclasses import replace

    vanished = state.apply(
        InventoryObserved("k", replace(shrunk, devices=shrunk.devices[:7]), False, T0)
    )
    assert [c.kind for c in ownership] == [ConflictKind.PLUGIN_AND_DRA]
    assert [c.kind for c in vanished] == [ConflictKind.VANISHED]
    await inventory_writer.conflicts(ownership)
    await inventory_writer.conflicts(vanished, active=False)

    everything = (await api.get("/v1/inventory/conflicts")).json()["items"]
    assert [(c["kind"], c["subject"], c["active"]) for c in everything] == [
        ("plugin-and-dra", "example.com/gpu", True),
        ("vanished-from-slice", GPU[7], False),
    ]
    active = (await api.get("/v1/inventory/conflicts", params={"active": "true"})).json()
    assert [c["kind"] for c in active["items"]] == ["plugin-and-dra"]
    assert active["items"][0]["node"] == NODE_A
    assert "DeviceClass gpu.example.com" in active["items"][0]["detail"]
    assert active["items"][0]["firstSeen"] == "2026-11-29T12:00:00Z"
    cleared = (await api.get("/v1/inventory/conflicts", params={"active": "false"})).json()
    assert [c["subject"] for c in cleared["items"]] == [GPU[7]]
    by_kind = await api.get("/v1/inventory/conflicts", params={"kind": "vanished-from-slice"})
    assert [c["subject"] for c in by_kind.json()["items"]] == [GPU[7]]
    assert (await api.get("/v1/inventory/conflicts", params={"kind": "x"})).status_code == 422


async def test_inventory_reads_follow_the_anonymous_read_setting(
    inventory_writer: InventoryWriter, make_inventory_api: ApiFactory
) -> None:
    from tests.api.conftest import bearer, tokens_json

    async with make_inventory_api(api_anonymous_read=False, api_tokens=tokens_json()) as client:
        for path in ("/v1/inventory/devices", "/v1/capacity", "/v1/inventory/conflicts"):
            assert (await client.get(path)).status_code == 401
            assert (await client.get(path, headers=bearer("viewer"))).status_code == 200


async def test_missing_inventory_tables_are_a_503(
    engine: AsyncEngine, fresh_schema: str, make_inventory_api: ApiFactory
) -> None:
    """A database the inventory migration has not reached yet."""
    async with engine.begin() as conn:
        for table in INVENTORY_TABLES:
            await conn.execute(text(f'DROP TABLE IF EXISTS "{fresh_schema}"."{table}"'))
    async with make_inventory_api() as client:
        response = await client.get("/v1/inventory/devices")
        assert response.status_code == 503
        assert "database unavailable" in response.json()["detail"]
        metrics = (await client.get("/metrics")).text
        assert "devicestate_api_inventory_up 0.0" in metrics


@pytest.mark.usefixtures("fleet")
async def test_devices_read_the_governance_of_their_physical_identity(
    governor: Governor, api: httpx.AsyncClient
) -> None:
    """Issue 10: the governor keys a DRA device by ``driver/pool/device``; the directory holds it
    under the reported resourceID (CDI-form for infer-dra-0, as reported for infer-dra-1). Both
    read the physical record's state: a restricted GPU never reads Available."""
    await governor.device(
        NODE_A,
        GPU[2],
        "Restricted",
        T0,
        resource_name="claim:gpus/main",
        source="dra",
        observed_health="Unknown",
        effective_health="Unknown",
    )
    listed = await api.get("/v1/devices", params={"node": NODE_A})
    assert listed.status_code == 200, listed.text
    states = {d["resourceID"]: (d["governance"] or {}).get("state") for d in listed.json()["items"]}
    assert states[CDI[2]] == "Restricted"
    assert states[GPU[2]] == "Restricted"
    assert states[CDI[3]] is None  # the governor never saw gpu-3
    one = await api.get(f"/v1/nodes/{NODE_A}/devices/{CDI[2]}")
    assert one.status_code == 200 and one.json()["governance"]["state"] == "Restricted"
    node = await api.get(f"/v1/nodes/{NODE_A}")
    assert node.status_code == 200
    by_id = {d["resourceID"]: d["governance"] for d in node.json()["devices"]}
    assert by_id[CDI[2]]["state"] == "Restricted"
    restricted = await api.get("/v1/devices", params={"node": NODE_A, "state": "Restricted"})
    assert {d["resourceID"] for d in restricted.json()["items"]} == {CDI[2], GPU[2]}
