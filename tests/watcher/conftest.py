"""Fakes of the watcher tests: the ``publisher`` fixture (a
:class:`~tests.fakes.event_publisher.FakePublisher`, no Kafka), and a fake Kubernetes API server
serving Pods, node Leases and Nodes, and the DRA objects when asked to (the Kubernetes API only
is faked)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from kubernetes_asyncio import client as k8s_client

from tests.fakes.event_publisher import FakePublisher
from tests.watcher.test_kube_source import FakeApiServer, pod

LEASES_PATH = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
NODES_PATH = "/api/v1/nodes"
PODS_PATH = "/api/v1/pods"
EVENTS_PATH = "/api/v1/events"
NAMESPACES_PATH = "/api/v1/namespaces"
DRA_PATH = "/apis/resource.k8s.io/v1"
SLICES_PATH = f"{DRA_PATH}/resourceslices"
CLAIMS_PATH = f"{DRA_PATH}/resourceclaims"
CLASSES_PATH = f"{DRA_PATH}/deviceclasses"

NOT_FOUND = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "message": "the server could not find the requested resource",
    "reason": "NotFound",
    "code": 404,
}


@pytest.fixture
def publisher() -> FakePublisher:
    return FakePublisher()


@dataclass
class FakeCluster:
    """One fake API server with eight resources, each a :class:`FakeApiServer` (its LIST and
    scripted WATCHes): ``pods``, ``leases`` (in kube-node-lease), ``nodes``, ``events``,
    ``namespaces``, and the DRA
    ``slices``, ``claims`` and ``classes`` (resource.k8s.io/v1), served only when ``dra_served``
    (by default, like a cluster without DRA, every request there gets a 404 Status; the requests
    are recorded all the same)."""

    pods: FakeApiServer
    leases: FakeApiServer
    nodes: FakeApiServer
    slices: FakeApiServer = field(default_factory=lambda: FakeApiServer(pods=[]))
    claims: FakeApiServer = field(default_factory=lambda: FakeApiServer(pods=[]))
    classes: FakeApiServer = field(default_factory=lambda: FakeApiServer(pods=[]))
    events: FakeApiServer = field(
        default_factory=lambda: FakeApiServer(pods=[], watch_script=[["hold"]])
    )
    """core/v1 Events (issue 16 item 3): none, one quiet WATCH."""
    namespaces: FakeApiServer = field(
        default_factory=lambda: FakeApiServer(pods=[], watch_script=[["hold"]])
    )
    """core/v1 Namespaces (issue 16, tenant-boundary): none, one quiet WATCH."""
    dra_served: bool = False
    host: str = ""
    port: int = 0

    @property
    def servers(self) -> tuple[FakeApiServer, ...]:
        return (
            self.pods,
            self.leases,
            self.nodes,
            self.slices,
            self.claims,
            self.classes,
            self.events,
            self.namespaces,
        )

    def dra(self, server: FakeApiServer) -> Any:
        """The handler of a DRA resource: ``server``'s, or 404 unless ``dra_served``."""

        async def handle(request: web.Request) -> web.StreamResponse:
            if self.dra_served:
                return await server.handle(request)
            server.requests.append(dict(request.query))
            return web.json_response(NOT_FOUND, status=404)

        return handle

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def api_client(self) -> k8s_client.ApiClient:
        return k8s_client.ApiClient(configuration=k8s_client.Configuration(host=self.url))

    def kubeconfig(self, directory: Path) -> Path:
        path = directory / "kubeconfig"
        path.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
            f"clusters: [{{name: fake, cluster: {{server: '{self.url}'}}}}]\n"
            "users: [{name: watcher, user: {token: not-a-secret}}]\n"
            "contexts: [{name: fake, context: {cluster: fake, user: watcher}}]\n"
        )
        return path


@pytest.fixture
async def fake_cluster() -> AsyncIterator[FakeCluster]:
    cluster = FakeCluster(
        pods=FakeApiServer(pods=[pod(uid, str(10 + i)) for i, uid in enumerate("abc")]),
        leases=FakeApiServer(pods=[]),
        nodes=FakeApiServer(pods=[]),
    )
    app = web.Application()
    app.router.add_get(PODS_PATH, cluster.pods.handle)
    app.router.add_get(LEASES_PATH, cluster.leases.handle)
    app.router.add_get(NODES_PATH, cluster.nodes.handle)
    app.router.add_get(EVENTS_PATH, cluster.events.handle)
    app.router.add_get(NAMESPACES_PATH, cluster.namespaces.handle)
    app.router.add_get(SLICES_PATH, cluster.dra(cluster.slices))
    app.router.add_get(CLAIMS_PATH, cluster.dra(cluster.claims))
    app.router.add_get(CLASSES_PATH, cluster.dra(cluster.classes))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    cluster.host, cluster.port = runner.addresses[0][:2]
    for server in cluster.servers:
        server.address = (cluster.host, cluster.port)
    yield cluster
    for server in cluster.servers:
        server.closing.set()
    await runner.cleanup()
