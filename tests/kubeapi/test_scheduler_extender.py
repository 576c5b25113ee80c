"""The real kube-scheduler (v1.36), configured with the devicestate extender, does not place a
device-plugin Pod on a node whose only free GPU is quarantined.

The directory is ``tests/api/inventory_scenario.py``'s fleet in real PostgreSQL: gpu-node-b has 2
GPUs, GPU-b0 in use and GPU-b1 free but Quarantined; gpu-node-c has 2, one in use and one free and
healthy. The directory API (``create_app``, ``DEVICESTATE_SCHEDULER_EXTENDER=true``) is served by
uvicorn on a free port; a second kube-scheduler, profile ``devicestate-extender``, calls its
``POST /scheduler/filter`` (``KubeSchedulerConfiguration.extenders``, ``nodeCacheCapable``, not
``ignorable``, for ``nvidia.com/gpu``) beside the session's default scheduler. The cluster's Nodes
both advertise ``nvidia.com/gpu: 2`` allocatable, so the scheduler alone would use either.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn
from sqlalchemy.ext.asyncio import AsyncEngine

from devtools.testenv import control_plane
from devtools.testenv.processes import free_port, stop_process
from services.adapters.projection.store import ProjectionStore
from services.processes.api.app import create_app
from services.runtime.config import Settings
from tests.api.conftest import Governor, InventoryWriter
from tests.api.inventory_scenario import NODE_B, NODE_C, load_fleet
from tests.conftest import LogFactory, ObservationFactory
from tests.kubeapi.conftest import ControlPlaneEnv
from tests.kubeapi.kube_rest import KubeREST
from tests.kubeapi.kubelet import eventually, node_heartbeats, register_node

SCHEDULER = "devicestate-extender"
NAMESPACE = "ml-extender"


@pytest.fixture
async def directory_api(
    database_url: str,
    engine: AsyncEngine,
    fresh_schema: str,
    observation: ObservationFactory,
    logged: LogFactory,
) -> AsyncIterator[str]:
    """The fleet in the test's schema and the directory API serving it over HTTP: its URL."""
    writer = InventoryWriter(engine, fresh_schema)
    await writer.create_tables()
    store = ProjectionStore(engine, fresh_schema)
    await load_fleet(writer, store, Governor(engine, fresh_schema), observation, logged)
    settings = Settings(
        database_url=database_url,
        database_schema=fresh_schema,
        api_read_cache=False,
        scheduler_extender=True,
    )
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(settings), host="127.0.0.1", port=port, log_level="warning", lifespan="on"
        )
    )
    serving = asyncio.create_task(server.serve())
    await eventually("the directory API listening", lambda: _started(server), 30)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, 30)


async def _started(server: uvicorn.Server) -> bool | None:
    return True if server.started else None


@pytest.fixture
async def extender_scheduler(
    kube_control_plane: ControlPlaneEnv, directory_api: str
) -> AsyncIterator[str]:
    """A second kube-scheduler whose filter step asks the directory API."""
    extender = {
        "urlPrefix": f"{directory_api}/scheduler",
        "filterVerb": "filter",
        "nodeCacheCapable": True,
        "ignorable": False,  # a devicestate failure fails the attempt: the test sees it
        "httpTimeout": "10s",
        "managedResources": [{"name": "nvidia.com/gpu", "ignoredByScheduler": False}],
    }
    api = kube_control_plane.api
    scheduler = await asyncio.to_thread(
        control_plane.start_scheduler,
        api,
        kube_control_plane.plane.work_dir,
        extenders=[extender],
        scheduler_name=SCHEDULER,
    )
    try:
        yield SCHEDULER
    finally:
        await asyncio.to_thread(stop_process, scheduler.process, print)


@pytest.fixture
async def plugin_nodes(control_plane_rest: KubeREST) -> AsyncIterator[list[str]]:
    """gpu-node-b and gpu-node-c as Ready Nodes, each with 2 nvidia.com/gpu allocatable (as the
    device plugin makes kubelet report), Leases renewed; a namespace for the Pods."""
    rest = control_plane_rest
    await rest.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    for node in (NODE_B, NODE_C):
        await register_node(rest, node, {"nvidia.com/gpu": "2"})
    async with node_heartbeats(rest, [NODE_B, NODE_C]):
        yield [NODE_B, NODE_C]
        await rest.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}", ok=(200, 202))


def _gpu_pod(name: str, scheduler: str, node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [
            {
                "name": "train",
                "image": "registry.example.com/train:1",
                "resources": {"limits": {"nvidia.com/gpu": "1"}},
            }
        ],
        "terminationGracePeriodSeconds": 0,
    }
    if node is not None:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


async def _outcome(rest: KubeREST, name: str) -> tuple[str | None, dict[str, Any]]:
    """Wait for the scheduler's verdict: ``(nodeName, PodScheduled condition)``."""

    async def probe() -> tuple[str | None, dict[str, Any]] | None:
        pod = (await rest.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}")).body
        node = pod["spec"].get("nodeName")
        for condition in (pod.get("status") or {}).get("conditions", []):
            if condition["type"] == "PodScheduled" and (node or condition["status"] == "False"):
                return node, dict(condition)
        return None

    return await eventually(f"the scheduler's verdict on Pod {NAMESPACE}/{name}", probe)


async def test_the_extender_keeps_a_pod_off_the_node_whose_only_free_gpu_is_quarantined(
    control_plane_rest: KubeREST, plugin_nodes: list[str], extender_scheduler: str
) -> None:
    rest = control_plane_rest
    # Pinned to gpu-node-b: the scheduler alone would bind it (2 GPUs allocatable, none used);
    # the extender drops the node, so the Pod stays Pending with devicestate's reason.
    await rest.create(_gpu_pod("pinned-b", extender_scheduler, NODE_B))
    node, condition = await _outcome(rest, "pinned-b")
    assert node is None
    assert condition["reason"] == "Unschedulable", condition
    assert "only quarantined devices free" in condition["message"], condition

    # Free to go anywhere: it lands on gpu-node-c, the node with a healthy free GPU.
    await rest.create(_gpu_pod("anywhere", extender_scheduler))
    node, condition = await _outcome(rest, "anywhere")
    assert (node, condition["status"]) == (NODE_C, "True")

    # Control: the default scheduler (no extender) binds the same pinned Pod to gpu-node-b.
    await rest.create(_gpu_pod("pinned-b-default", "default-scheduler", NODE_B))
    node, condition = await _outcome(rest, "pinned-b-default")
    assert (node, condition["status"]) == (NODE_B, "True")
