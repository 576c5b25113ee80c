"""The kubelet's part, played by the tests on ``kube_control_plane`` (no kubelet runs there).

``register_node`` creates a Node and writes its status as kubelet does on registration (capacity,
allocatable, ``Ready=True``); ``node_heartbeats`` renews the Nodes' Leases in ``kube-node-lease``
(what keeps the node lifecycle controller from tainting them unreachable after 50 s) and waits
until that controller has lifted the ``node.kubernetes.io/not-ready`` taint admission puts on
every new Node. ``eventually`` polls an API answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TypeVar

import pytest

from tests.kubeapi.kube_rest import KubeREST

T = TypeVar("T")
LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"


async def eventually(
    what: str, probe: Callable[[], Awaitable[T | None]], within: float = 60.0
) -> T:
    """Poll ``probe`` until it returns something other than None; fail after ``within`` s."""
    deadline = time.monotonic() + within
    while True:
        value = await probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {within:.0f} s")
        await asyncio.sleep(0.2)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def register_node(
    rest: KubeREST,
    node: str,
    extended: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
) -> None:
    """Create Node ``node`` and write its status: 16 cpu, 64Gi, 110 pods plus ``extended``
    (e.g. ``{"nvidia.com/gpu": "2"}``, what a device plugin makes kubelet report), Ready."""
    metadata = {"name": node, "labels": {"kubernetes.io/hostname": node, **(labels or {})}}
    await rest.create({"apiVersion": "v1", "kind": "Node", "metadata": metadata})
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    resources = {"cpu": "16", "memory": "64Gi", "pods": "110", **(extended or {})}
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": "kubelet is posting ready status",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
    await rest.request(
        "PATCH",
        f"/api/v1/nodes/{node}/status",
        body={"status": {"capacity": resources, "allocatable": resources, "conditions": [ready]}},
        content_type="application/strategic-merge-patch+json",
    )


async def renew_node_lease(rest: KubeREST, node: str, every: float = 5.0) -> None:
    """Kubelet's heartbeat: create the Node's Lease and renew it every ``every`` seconds until
    cancelled."""
    await rest.create(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": node, "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": node, "leaseDurationSeconds": 40, "renewTime": _now()},
        }
    )
    while True:
        await asyncio.sleep(every)
        await rest.request(
            "PATCH",
            f"{LEASES}/{node}",
            body={"spec": {"renewTime": _now()}},
            content_type="application/merge-patch+json",
        )


async def wait_node_schedulable(rest: KubeREST, node: str) -> None:
    """Wait until the Node has no taints left (the ``not-ready`` one lifted), so a Pod's first
    scheduling attempt sees the Node as it will stay."""

    async def probe() -> bool | None:
        taints = (await rest.request("GET", f"/api/v1/nodes/{node}")).body["spec"].get("taints")
        return None if taints else True

    await eventually(f"Node {node} without taints", probe)


@contextlib.asynccontextmanager
async def node_heartbeats(rest: KubeREST, nodes: Sequence[str]) -> AsyncIterator[None]:
    """Renew the Leases of ``nodes`` while the block runs (once each is schedulable); delete the
    Leases and the Nodes at the end (a Node the block deleted is fine)."""
    heartbeats = [asyncio.create_task(renew_node_lease(rest, node)) for node in nodes]
    try:
        for node in nodes:
            await wait_node_schedulable(rest, node)
        yield
    finally:
        for heartbeat in heartbeats:
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat
        for node in nodes:
            await rest.request("DELETE", f"{LEASES}/{node}", ok=(200, 404))
            await rest.request("DELETE", f"/api/v1/nodes/{node}", ok=(200, 404))
