"""Capacity views, the reconcile check and their gauges (issue 4, items 3 and 5c): exact numbers on
the fleet of ``tests/api/inventory_scenario.py`` (real PostgreSQL), and the pure computation's
edge cases (``services.domain.inventory.capacity_report`` and ``.reconcile``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import pytest

from services.adapters.projection.store import ProjectionStore
from services.domain.inventory.capacity import CapacityRow
from services.domain.inventory.capacity_report import build_capacity
from services.domain.inventory.directory import build_directory
from services.domain.inventory.reconcile import divergence
from services.domain.inventory.snapshot import (
    GovernanceRow,
    NodeResources,
    ObservedDevice,
    Snapshot,
)
from tests.api.conftest import ApiFactory, Governor, InventoryWriter
from tests.api.inventory_scenario import GPU, NODE_A, dra_objects, load_fleet
from tests.conftest import T0, LogFactory, ObservationFactory


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


def rows(body: dict[str, Any]) -> dict[str, tuple[int, int, int, int, int]]:
    """key -> (total, allocated, idle, unavailable, fragmented)."""
    return {
        r["key"]: (r["total"], r["allocated"], r["idle"], r["unavailable"], r["fragmented"])
        for r in body["items"]
    }


@pytest.mark.integration
@pytest.mark.usefixtures("fleet")
async def test_capacity_views_exact_numbers(api: httpx.AsyncClient) -> None:
    node = (await api.get("/v1/capacity", params={"view": "node"})).json()
    # Request size: the claim's request count (2), as no setting is given.
    assert (node["view"], node["requestSize"], node["requestSizeSource"]) == ("node", 2, "claims")
    assert rows(node) == {
        # 8 slice devices; gpu-2/gpu-3 allocated (one claim shared by two Pods: counted once);
        # gpu-5 quarantined (never idle); 5 idle, enough for a request of 2.
        "gpu-node-a": (8, 2, 5, 1, 0),
        # Device plugin, capacity 2: GPU-b0 allocated, GPU-b1 quarantined, nothing idle.
        "gpu-node-b": (2, 1, 0, 1, 0),
        # Capacity 2: GPU-c0 allocated, one never-reported GPU idle but alone (< 2).
        "gpu-node-c": (2, 1, 1, 0, 1),
        "gpu-node-e": (4, 0, 4, 0, 0),
    }
    pool = (await api.get("/v1/capacity", params={"view": "pool"})).json()
    assert rows(pool) == {f"gpu.example.com/{NODE_A}": (8, 2, 5, 1, 0)}
    classes = (await api.get("/v1/capacity", params={"view": "deviceClass"})).json()
    assert rows(classes) == {
        "gpu.example.com": (8, 2, 5, 1, 0),
        "nvidia.com/gpu": (8, 2, 5, 1, 1),
    }
    namespaces = (await api.get("/v1/capacity", params={"view": "namespace"})).json()
    assert rows(namespaces) == {
        "batch": (1, 1, 0, 0, 0),
        "ml": (1, 1, 0, 0, 0),
        "ml-serving": (2, 2, 0, 0, 0),  # two Pods share the claim: its 2 devices, once
    }
    assert (await api.get("/v1/capacity")).json() == node  # node is the default view
    assert (await api.get("/v1/capacity", params={"view": "rack"})).status_code == 422


@pytest.mark.integration
@pytest.mark.usefixtures("fleet")
async def test_configured_request_size_counts_stranded_idle_devices(
    make_inventory_api: ApiFactory,
) -> None:
    async with make_inventory_api(capacity_request_size=8) as api:
        node = (await api.get("/v1/capacity", params={"view": "node"})).json()
    assert (node["requestSize"], node["requestSizeSource"]) == (8, "setting")
    assert rows(node) == {
        "gpu-node-a": (8, 2, 5, 1, 5),
        "gpu-node-b": (2, 1, 0, 1, 0),
        "gpu-node-c": (2, 1, 1, 0, 1),
        "gpu-node-e": (4, 0, 4, 0, 4),
    }


@pytest.mark.integration
@pytest.mark.usefixtures("fleet")
async def test_a_quarantined_untainted_device_is_unavailable_not_idle(
    governor: Governor, api: httpx.AsyncClient
) -> None:
    await governor.device(
        NODE_A, GPU[6], "Quarantined", T0, resource_name="claim:gpus/main", source="dra"
    )
    await governor.device(NODE_A, GPU[7], "Restricted", T0, resource_name="x", source="dra")
    await governor.device(NODE_A, GPU[2], "Quarantined", T0, resource_name="x", source="dra")
    node = rows((await api.get("/v1/capacity", params={"view": "node"})).json())
    # gpu-2 is allocated: it counts as allocated whatever its state.
    assert node["gpu-node-a"] == (8, 2, 3, 3, 0)


@pytest.mark.integration
@pytest.mark.usefixtures("fleet")
async def test_capacity_gauges(api: httpx.AsyncClient) -> None:
    text = (await api.get("/metrics")).text
    assert "devicestate_api_inventory_up 1.0" in text
    for kind, value in {
        "total": 8,
        "allocated": 2,
        "idle": 5,
        "unavailable": 1,
        "fragmented": 0,
    }.items():
        line = (
            f'devicestate_capacity_devices{{key="gpu-node-a",kind="{kind}",view="node"}} {value}.0'
        )
        assert line in text
    assert (
        'devicestate_capacity_devices{key="ml-serving",kind="allocated",view="namespace"} 2.0'
        in text
    )
    assert (
        'devicestate_capacity_devices{key="nvidia.com/gpu",kind="fragmented",view="deviceClass"} '
        "1.0" in text
    )
    assert "devicestate_capacity_request_size 2.0" in text
    small = (await api.get("/metrics", params={"capacityNodeView": "false"})).text
    assert 'view="node"' not in small
    assert 'view="pool"' in small


@pytest.mark.integration
async def test_divergence_between_slices_and_node_capacity(
    inventory_writer: InventoryWriter, api: httpx.AsyncClient
) -> None:
    await inventory_writer.objects(*dra_objects())
    # gpu-node-a: the DRA driver advertises 8 example.com/gpu devices while a device plugin
    # exposes 6 (a migration half done); gpu-node-x: only the plugin; gpu-node-y: nvidia.com/gpu
    # is no DeviceClass's extended resource.
    await inventory_writer.node(NODE_A, {"example.com/gpu": 6}, {"example.com/gpu": 5})
    await inventory_writer.node("gpu-node-x", {"example.com/gpu": 4})
    await inventory_writer.node("gpu-node-y", {"nvidia.com/gpu": 8})
    body = (await api.get("/v1/capacity/divergence")).json()
    assert body["items"] == [
        {
            "node": NODE_A,
            "resourceName": "example.com/gpu",
            "deviceClasses": ["gpu.example.com"],
            "sliceDevices": 8,
            "nodeCapacity": 6,
            "nodeAllocatable": 5,
            "difference": 2,
            "status": "mismatch",
        },
        {
            "node": "gpu-node-x",
            "resourceName": "example.com/gpu",
            "deviceClasses": ["gpu.example.com"],
            "sliceDevices": 0,
            "nodeCapacity": 4,
            "nodeAllocatable": 4,
            "difference": -4,
            "status": "plugin-only",
        },
    ]
    only = (await api.get("/v1/capacity/divergence", params={"diverging": "true"})).json()
    assert [r["node"] for r in only["items"]] == [NODE_A]
    text = (await api.get("/metrics")).text
    assert (
        'devicestate_inventory_divergence{node="gpu-node-a",resource="example.com/gpu"} 2.0' in text
    )
    assert 'node="gpu-node-x"' not in text.split("devicestate_inventory_divergence", 1)[1]


# --- pure -----------------------------------------------------------------------------------------


def plugin_row(node: str, rid: str, pods: tuple[tuple[str, str], ...] = ()) -> ObservedDevice:
    return ObservedDevice(node, rid, "nvidia.com/gpu", "device-plugin", "Healthy", T0, pods)


def test_plugin_capacity_not_allocatable_is_unavailable() -> None:
    """stream-03b: the plugin unregistered, allocatable 8 -> 0 while capacity stays 8."""
    snapshot = Snapshot(
        node_resources={
            "n": NodeResources("n", {"nvidia.com/gpu": 8}, {"nvidia.com/gpu": 0}),
        },
        devices=[plugin_row("n", "GPU-0", (("ml", "p"),)), plugin_row("n", "GPU-1")],
    )
    report = build_capacity(snapshot)
    assert report.views["node"] == [CapacityRow("node", "n", 8, 1, 0, 7, 0)]
    assert sorted(set(report.unavailable.values())) == ["device-plugin-lost"]


def test_plugin_replicas_are_units_and_a_quarantined_gpu_blocks_each_replica() -> None:
    snapshot = Snapshot(
        node_resources={"n": NodeResources("n", {"nvidia.com/gpu": 4}, {"nvidia.com/gpu": 4})},
        devices=[
            plugin_row("n", "GPU-a::0", (("ml", "p"),)),
            plugin_row("n", "GPU-a::1"),
            plugin_row("n", "GPU-b::0"),
            plugin_row("n", "GPU-b::1"),
        ],
        governance=[
            GovernanceRow(
                "n", "GPU-b", "nvidia.com/gpu", "device-plugin", "Quarantined", "Unhealthy", T0
            )
        ],
    )
    directory = build_directory(snapshot)
    assert [(d.device_id, d.reported_ids, d.state) for d in directory] == [
        ("GPU-a", ("GPU-a::0", "GPU-a::1"), None),
        ("GPU-b", ("GPU-b::0", "GPU-b::1"), "Quarantined"),
    ]
    assert build_capacity(snapshot, 2).views["node"] == [CapacityRow("node", "n", 4, 1, 1, 2, 1)]


def test_known_ids_beyond_capacity_do_not_inflate_the_total() -> None:
    """A replaced GPU leaves its old ID in the directory: the Node's capacity bounds the total,
    allocated IDs always count."""
    snapshot = Snapshot(
        node_resources={"n": NodeResources("n", {"nvidia.com/gpu": 2}, {"nvidia.com/gpu": 2})},
        devices=[
            plugin_row("n", "GPU-old"),
            plugin_row("n", "GPU-new"),
            plugin_row("n", "GPU-x", (("ml", "p"),)),
        ],
    )
    assert build_capacity(snapshot).views["node"] == [CapacityRow("node", "n", 2, 1, 1, 0, 0)]


def test_request_size_falls_back_to_plugin_pods_then_one() -> None:
    pods = Snapshot(
        devices=[
            plugin_row("n", "GPU-0", (("ml", "a"),)),
            plugin_row("n", "GPU-1", (("ml", "a"),)),
            plugin_row("n", "GPU-2", (("ml", "b"),)),
            plugin_row("n", "GPU-3", (("ml", "b"),)),
            plugin_row("n", "GPU-4", (("ml", "c"),)),
        ]
    )
    report = build_capacity(pods)
    assert (report.request_size, report.request_size_source) == (2, "pods")
    empty = build_capacity(Snapshot())
    assert (empty.request_size, empty.request_size_source) == (1, "default")
    assert empty.views["node"] == []


def test_divergence_needs_a_device_class_with_an_extended_resource() -> None:
    snapshot = Snapshot(
        node_resources={"n": NodeResources("n", {"example.com/gpu": 8}, {"example.com/gpu": 8})}
    )
    assert divergence(snapshot) == []


def test_unhealthy_observation_makes_an_unreported_state_device_unavailable() -> None:
    later = T0 + timedelta(seconds=5)
    snapshot = Snapshot(
        node_resources={"n": NodeResources("n", {"nvidia.com/gpu": 2}, {"nvidia.com/gpu": 2})},
        devices=[
            ObservedDevice("n", "GPU-0", "nvidia.com/gpu", "device-plugin", "Unhealthy", later),
            plugin_row("n", "GPU-1"),
        ],
    )
    report = build_capacity(snapshot)
    assert report.unavailable == {("n", "GPU-0"): "Unhealthy"}
    assert report.views["node"] == [CapacityRow("node", "n", 2, 0, 1, 1, 0)]
