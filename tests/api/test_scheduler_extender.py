"""The scheduler-extender filter (issue 4, item 5b): the kube-scheduler extender protocol
(``k8s.io/kube-scheduler/extender/v1``: ``ExtenderArgs`` -> ``ExtenderFilterResult``, Go field
names without JSON tags) on the fleet of ``tests/api/inventory_scenario.py`` (real PostgreSQL),
and the pure request arithmetic."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from services.adapters.projection.store import ProjectionStore
from services.domain.placement import (
    BlockedDevice,
    NodeFacts,
    PluginDevice,
    node_verdict,
    pod_extended_requests,
)
from tests.api.conftest import ApiFactory, Governor, InventoryWriter, bearer, tokens_json
from tests.api.inventory_scenario import NODE_A, NODE_B, NODE_C, NODE_E, load_fleet
from tests.conftest import LogFactory, ObservationFactory

UNKNOWN_NODE = "gpu-node-d"
CANDIDATES = [NODE_B, NODE_C, UNKNOWN_NODE, NODE_E]


def pod(gpus: int, resource: str = "nvidia.com/gpu", **spec: Any) -> dict[str, Any]:
    containers = [
        {"name": "main", "resources": {"limits": {resource: str(gpus), "cpu": "4"}}},
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train-7", "namespace": "ml", "uid": "u-7"},
        "spec": {"containers": containers, **spec},
    }


def node_object(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"capacity": {"nvidia.com/gpu": "2"}},
    }


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
async def extender(make_inventory_api: ApiFactory) -> AsyncIterator[httpx.AsyncClient]:
    async with make_inventory_api(
        scheduler_extender=True, api_anonymous_read=False, api_tokens=tokens_json()
    ) as client:
        yield client


@pytest.mark.integration
async def test_disabled_by_default_404(make_inventory_api: ApiFactory) -> None:
    async with make_inventory_api() as client:
        response = await client.post(
            "/scheduler/filter", json={"Pod": pod(1), "NodeNames": CANDIDATES}
        )
        assert response.status_code == 404
        assert "devicestate_scheduler_extender" not in (await client.get("/metrics")).text


@pytest.mark.integration
@pytest.mark.usefixtures("fleet")
async def test_node_whose_only_free_gpu_is_quarantined_fails_with_a_reason(
    extender: httpx.AsyncClient,
) -> None:
    # No bearer token, although anonymous reads are off: the scheduler sends none.
    response = await extender.post(
        "/scheduler/filter", json={"Pod": pod(1), "NodeNames": CANDIDATES}
    )
    assert response.status_code == 200
    result = response.json()
    assert set(result) == {
        "Nodes",
        "NodeNames",
        "FailedNodes",
        "FailedAndUnresolvableNodes",
        "Error",
    }
    # gpu-node-c has a healthy free GPU (never reported: capacity 2, one allocated);
    # gpu-node-d is unknown to devicestate (fail open); gpu-node-e has 4 free.
    assert result["NodeNames"] == [NODE_C, UNKNOWN_NODE, NODE_E]
    assert list(result["FailedNodes"]) == [NODE_B]
    reason = result["FailedNodes"][NODE_B]
    assert reason.startswith("only quarantined devices free: ")
    assert "nvidia.com/gpu: Pod needs 1, 1 free of which 1 quarantined or restricted" in reason
    assert "GPU-b1 Quarantined" in reason
    assert result["FailedAndUnresolvableNodes"] == {}
    assert result["Error"] == ""
    assert result["Nodes"] is None

    metrics = (await extender.get("/metrics")).text
    assert 'devicestate_scheduler_extender_calls_total{outcome="ok"} 1.0' in metrics
    assert "devicestate_scheduler_extender_failed_nodes_total 1.0" in metrics
    # The rest of the API still wants a token.
    assert (await extender.get("/v1/capacity")).status_code == 401
    assert (await extender.get("/v1/capacity", headers=bearer("viewer"))).status_code == 200


@pytest.mark.integration
@pytest.mark.usefixtures("fleet")
async def test_full_node_objects_are_filtered_and_returned(extender: httpx.AsyncClient) -> None:
    nodes = {"apiVersion": "v1", "kind": "NodeList", "items": [node_object(n) for n in CANDIDATES]}
    result = (await extender.post("/scheduler/filter", json={"Pod": pod(1), "Nodes": nodes})).json()
    assert result["NodeNames"] is None
    assert result["Nodes"]["kind"] == "NodeList"
    assert result["Nodes"]["items"] == [node_object(n) for n in (NODE_C, UNKNOWN_NODE, NODE_E)]
    assert list(result["FailedNodes"]) == [NODE_B]


@pytest.mark.integration
@pytest.mark.usefixtures("fleet")
async def test_requests_that_do_not_fit_even_counting_quarantined_devices_are_left_to_the_scheduler(
    extender: httpx.AsyncClient,
) -> None:
    two = (
        await extender.post("/scheduler/filter", json={"Pod": pod(2), "NodeNames": CANDIDATES})
    ).json()
    # gpu-node-b has 1 free (quarantined) GPU for 2: the scheduler's resource fit rejects it.
    assert two["NodeNames"] == CANDIDATES
    assert two["FailedNodes"] == {}
    # Pods without device-plugin resources (or DRA-only nodes: gpu-node-a) all pass.
    cpu_only = {"spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": "1"}}}]}}
    plain = (
        await extender.post(
            "/scheduler/filter", json={"Pod": cpu_only, "NodeNames": [*CANDIDATES, NODE_A]}
        )
    ).json()
    assert plain["NodeNames"] == [*CANDIDATES, NODE_A]
    other = (
        await extender.post(
            "/scheduler/filter",
            json={"Pod": pod(1, "example.com/fpga"), "NodeNames": CANDIDATES},
        )
    ).json()
    assert other["NodeNames"] == CANDIDATES


@pytest.mark.integration
@pytest.mark.usefixtures("fleet")
async def test_a_released_quarantine_lets_the_node_pass(
    governor: Governor, engine: Any, fresh_schema: str, extender: httpx.AsyncClient
) -> None:
    from sqlalchemy import update

    from services.adapters.projection.governance_tables import device_governance
    from services.adapters.projection.tables import in_schema

    async with engine.begin() as conn:
        await conn.execute(
            update(device_governance)
            .where(device_governance.c.resource_id == "GPU-b1")
            .values(state="Available", quarantine_id=None),
            execution_options=in_schema(fresh_schema),
        )
    result = (
        await extender.post("/scheduler/filter", json={"Pod": pod(1), "NodeNames": CANDIDATES})
    ).json()
    assert result["NodeNames"] == CANDIDATES
    assert result["FailedNodes"] == {}


@pytest.mark.integration
async def test_internal_errors_are_reported_in_error_with_status_200(
    make_inventory_api: ApiFactory,
) -> None:
    # A schema without the projection's tables: every read fails.
    async with make_inventory_api(
        scheduler_extender=True, database_schema="no_such_schema_here"
    ) as client:
        broken = await client.post(
            "/scheduler/filter", json={"Pod": pod(1), "NodeNames": CANDIDATES}
        )
        assert broken.status_code == 200
        body = broken.json()
        assert body["Error"].startswith("devicestate: projection unavailable: ")
        assert body["NodeNames"] is None and body["FailedNodes"] == {}

        garbage = await client.post("/scheduler/filter", content=b"{not json")
        assert garbage.status_code == 200
        assert garbage.json()["Error"].startswith("devicestate: invalid ExtenderArgs")
        no_spec = await client.post("/scheduler/filter", json={"Pod": {}, "NodeNames": []})
        assert "Pod.spec must be an object" in no_spec.json()["Error"]
        metrics = (await client.get("/metrics")).text
        assert 'devicestate_scheduler_extender_calls_total{outcome="error"} 3.0' in metrics


# --- pure -----------------------------------------------------------------------------------------


def test_pod_requests_sum_containers_and_take_the_init_peak() -> None:
    spec = {
        "containers": [
            {"name": "a", "resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "1"}}},
            {"name": "b", "resources": {"requests": {"nvidia.com/gpu": 1}}},
            {"name": "c"},
        ],
        "initContainers": [
            {"name": "warm", "resources": {"limits": {"nvidia.com/gpu": "4"}}},
            {"name": "fpga", "resources": {"limits": {"example.com/fpga": "1"}}},
        ],
    }
    assert pod_extended_requests({"spec": spec}) == {"example.com/fpga": 1, "nvidia.com/gpu": 4}
    spec["initContainers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1"
    assert pod_extended_requests({"spec": spec}) == {"example.com/fpga": 1, "nvidia.com/gpu": 3}


def test_native_sidecars_add_to_the_pod_and_to_later_init_containers() -> None:
    spec = {
        "containers": [{"name": "app", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        "initContainers": [
            {
                "name": "proxy",
                "restartPolicy": "Always",
                "resources": {"limits": {"nvidia.com/gpu": "1"}},
            },
            {"name": "setup", "resources": {"limits": {"nvidia.com/gpu": "2"}}},
        ],
    }
    # app + sidecar = 2; setup runs beside the sidecar: 2 + 1 = 3.
    assert pod_extended_requests({"spec": spec}) == {"nvidia.com/gpu": 3}


def test_native_resources_and_bad_quantities_are_ignored() -> None:
    limits = {
        "cpu": "2",
        "memory": "1Gi",
        "hugepages-2Mi": "2Mi",
        "kubernetes.io/foo": "1",
        "nvidia.com/gpu": "1.5",
        "example.com/x": "0",
    }
    spec = {"containers": [{"name": "a", "resources": {"limits": limits}}]}
    assert pod_extended_requests({"spec": spec}) == {}


def test_replicas_of_a_quarantined_gpu_are_all_blocked() -> None:
    facts = NodeFacts(
        {"nvidia.com/gpu": 4},
        {"nvidia.com/gpu": 4},
        devices=[
            PluginDevice("GPU-a::0", "nvidia.com/gpu", "GPU-a", True),
            PluginDevice("GPU-a::1", "nvidia.com/gpu", "GPU-a", False),
            PluginDevice("GPU-b::0", "nvidia.com/gpu", "GPU-b", False),
            PluginDevice("GPU-b::1", "nvidia.com/gpu", "GPU-b", False),
        ],
        blocked=[BlockedDevice("GPU-b", "nvidia.com/gpu", "Quarantined")],
    )
    assert node_verdict(facts, {"nvidia.com/gpu": 1}) is None  # GPU-a::1 is free and healthy
    reason = node_verdict(facts, {"nvidia.com/gpu": 2})
    assert reason is not None
    assert "Pod needs 2, 3 free of which 2 quarantined or restricted" in reason
    assert "GPU-b::0 Quarantined, GPU-b::1 Quarantined" in reason
    # A quarantined device the directory never saw still counts as free and blocked.
    unseen = NodeFacts(
        {"nvidia.com/gpu": 2},
        None,
        blocked=[BlockedDevice("GPU-z", "nvidia.com/gpu", "Restricted")],
    )
    assert node_verdict(unseen, {"nvidia.com/gpu": 2}) is not None
    assert node_verdict(unseen, {"nvidia.com/gpu": 1}) is None
    # Allocatable below capacity (the plugin lost devices) is what is free.
    lost = NodeFacts({"nvidia.com/gpu": 2}, {"nvidia.com/gpu": 1}, blocked=unseen.blocked)
    assert node_verdict(lost, {"nvidia.com/gpu": 1}) is not None
    assert node_verdict(None, {"nvidia.com/gpu": 1}) is None
