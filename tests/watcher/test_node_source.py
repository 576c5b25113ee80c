"""ObjectSource (LIST/WATCH of node Leases and Nodes) over a fake API, and the real
kubernetes-asyncio adapters (lease_api, node_api) over a fake API server on 127.0.0.1."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import orjson
import pytest

from services.adapters.kube.errors import ApiRejected, ApiUnavailable, ResourceExpired
from services.adapters.kube.list_watch import ObjectList
from services.adapters.kube.watch_apis import lease_api, node_api
from services.domain.node_events import NodeHeartbeat, NodeResourcesChanged
from services.domain.records import TopicRecord
from services.domain.watch.node_tracker import NodeTracker
from services.processes.watcher.node_source import ObjectSource
from services.processes.watcher.processor import STAGE_NODE_LEASE, DeadLetter, NodeProcessor
from services.processes.watcher.watch_lines import ObjectChange
from services.processes.watcher.watch_loop import ObjectsListed, SourceItem
from services.runtime.config import Settings
from tests.domain.test_node_tracker import lease, node
from tests.fakes.watch_apis import GONE, FakeObjectApi, event_line
from tests.watcher.conftest import LEASES_PATH, FakeCluster

AT = datetime(2026, 11, 29, 11, 0, tzinfo=UTC)

Step = bytes | Exception


def renewed(name: str, seconds: int, version: str) -> dict[str, object]:
    stamp = (AT + timedelta(seconds=seconds)).isoformat().replace("+00:00", ".000000Z")
    return lease(name, stamp, version)


def lease_bookmark(version: str) -> bytes:
    return event_line("BOOKMARK", {"kind": "Lease", "metadata": {"resourceVersion": version}})


@dataclass
class NodeCollector:
    """The handler: runs each item through the (pure) node processor and keeps the results."""

    processor: NodeProcessor = field(
        default_factory=lambda: NodeProcessor(NodeTracker(timedelta(seconds=60)))
    )
    items: list[tuple[SourceItem, str]] = field(default_factory=list)
    events: list[TopicRecord] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)

    async def __call__(self, item: SourceItem, source: str) -> None:
        self.items.append((item, source))
        if isinstance(item, ObjectsListed):
            actions = self.processor.listed(item.object_kind, item.items, source, AT)
        elif isinstance(item, ObjectChange):
            actions = self.processor.object_event(
                item.kind, item.object_kind, item.obj, item.raw, source, AT
            )
        else:
            return
        self.events.extend(actions.events)
        self.dead_letters.extend(actions.dead_letters)

    def heartbeats(self) -> list[tuple[str, int]]:
        return [
            (e.node, int((e.renewed_at - AT).total_seconds()))
            for e in self.events
            if isinstance(e, NodeHeartbeat)
        ]

    def allocatable(self) -> list[tuple[str, dict[str, int]]]:
        return [
            (e.node, dict(e.allocatable))
            for e in self.events
            if isinstance(e, NodeResourcesChanged)
        ]


async def run_source(api: FakeObjectApi) -> tuple[NodeCollector, list[str], ObjectSource]:
    restarts: list[str] = []

    async def sleep(seconds: float) -> None:
        pass

    source = ObjectSource(api, sleep=sleep, on_restart=restarts.append)
    collector = NodeCollector()
    async with asyncio.timeout(10):
        await source.run(collector, api.stop)
    return collector, restarts, source


async def test_lease_list_then_watch_coarsens_renewals() -> None:
    api = FakeObjectApi(
        "Lease",
        [ObjectList([renewed("a", 0, "10"), renewed("b", 3, "11")], "12")],
        [
            [
                event_line("MODIFIED", renewed("a", 10, "13")),
                event_line("MODIFIED", renewed("b", 13, "14")),
                event_line("MODIFIED", renewed("a", 60, "15")),
                lease_bookmark("20"),
            ]
        ],
    )
    collector, restarts, source = await run_source(api)
    assert collector.heartbeats() == [("a", 0), ("b", 3), ("a", 60)]
    first, where = collector.items[0]
    assert isinstance(first, ObjectsListed) and first.object_kind == "Lease"
    assert where == "kube:leases/list@12"
    assert [s for _, s in collector.items[1:3]] == ["kube:leases/watch@12", "kube:leases/watch@13"]
    assert api.watch_calls[:2] == ["12", "20"]  # resumed after the bookmark
    assert source.resource == "leases" and restarts[0] == "timeout"


@pytest.mark.parametrize("expiry", [GONE, ResourceExpired("HTTP 410")], ids=["event", "http"])
async def test_lease_410_relists_and_forgets_vanished_nodes(expiry: Step) -> None:
    api = FakeObjectApi(
        "Lease",
        [
            ObjectList([renewed("a", 0, "10"), renewed("b", 0, "11")], "12"),
            ObjectList([renewed("a", 70, "40")], "41"),
        ],
        [[event_line("MODIFIED", renewed("b", 20, "13")), expiry], [lease_bookmark("50")]],
    )
    collector, restarts, source = await run_source(api)
    assert api.list_calls == 2
    assert api.watch_calls[:3] == ["12", "41", "50"]
    assert "expired" in restarts
    assert collector.heartbeats() == [("a", 0), ("b", 0), ("a", 70)]
    assert collector.processor.tracker.nodes == 1  # b's Lease is gone: forgotten
    assert source.resource_version == "50"


async def test_node_watch_publishes_allocatable_changes_and_survives_errors() -> None:
    api = FakeObjectApi(
        "Node",
        [ApiUnavailable("503"), ObjectList([node("gpu-node-c", "100")], "100")],
        [
            [
                event_line("MODIFIED", node("gpu-node-c", "101")),  # heartbeat-only update
                event_line(
                    "MODIFIED", node("gpu-node-c", "102", allocatable={"nvidia.com/gpu": "0"})
                ),
                ApiUnavailable("reset"),
            ],
            [event_line("MODIFIED", node("gpu-node-c", "103"))],
        ],
    )
    collector, restarts, _ = await run_source(api)
    assert api.list_calls == 2  # the first LIST failed and was retried
    assert api.watch_calls[:2] == ["100", "102"]  # resumed, not re-listed, after the reset
    assert collector.allocatable() == [
        ("gpu-node-c", {"nvidia.com/gpu": 8}),
        ("gpu-node-c", {"nvidia.com/gpu": 0}),
        ("gpu-node-c", {"nvidia.com/gpu": 8}),
    ]
    assert restarts[:3] == ["error", "error", "timeout"]


async def test_malformed_lease_in_a_list_is_dead_lettered_with_its_bytes() -> None:
    bad = lease("gpu-node-x", "not-a-time", "5")
    api = FakeObjectApi("Lease", [ObjectList([bad, renewed("a", 0, "6")], "7")], [])
    collector, _, _ = await run_source(api)
    (letter,) = collector.dead_letters
    assert letter.stage == STAGE_NODE_LEASE and letter.source == "kube:leases/list@7"
    assert orjson.loads(letter.original) == bad
    assert letter.reason.startswith("Lease gpu-node-x: bad-renew-time")
    assert collector.heartbeats() == [("a", 0)]


async def test_rejected_api_stops_the_object_source() -> None:
    api = FakeObjectApi("Node", [ObjectList([], "1")], [[ApiRejected("HTTP 403: forbidden")]])
    with pytest.raises(ApiRejected):
        await run_source(api)


# --- the real client against a fake API server --------------------------------------------


async def test_lease_api_lists_pages_in_the_lease_namespace(fake_cluster: FakeCluster) -> None:
    fake_cluster.leases.pods = [renewed(name, 0, str(i + 1)) for i, name in enumerate("abc")]
    async with fake_cluster.api_client() as api_client:
        api = lease_api(api_client, Settings(), page_size=2)
        listed = await api.list_objects()
    assert [o["metadata"]["name"] for o in listed.items] == ["a", "b", "c"]
    assert listed.resource_version == "100"
    assert [r.get("continue") for r in fake_cluster.leases.requests] == [None, "2"]
    assert fake_cluster.pods.requests == []  # the Pod selectors are not applied to Leases


async def test_node_api_watch_asks_for_bookmarks(fake_cluster: FakeCluster) -> None:
    line = event_line("MODIFIED", node("gpu-node-c", "101"))
    fake_cluster.nodes.watch_script = [[line + b"\n"]]
    async with fake_cluster.api_client() as api_client:
        api = node_api(api_client, Settings(watch_timeout_seconds=42))
        assert api.object_kind == "Node"
        lines = [item async for item in api.watch_objects("100")]
    assert lines == [line]
    (request,) = fake_cluster.nodes.requests
    assert request["watch"].lower() == "true"
    assert request["allowWatchBookmarks"].lower() == "true"
    assert (request["timeoutSeconds"], request["resourceVersion"]) == ("42", "100")


async def test_lease_api_in_another_namespace(fake_cluster: FakeCluster) -> None:
    async with fake_cluster.api_client() as api_client:
        api = lease_api(api_client, Settings(lease_namespace="elsewhere"))
        with pytest.raises(ApiRejected, match="404"):
            await api.list_objects()  # the fake serves kube-node-lease only
    assert LEASES_PATH.endswith("/kube-node-lease/leases")


@pytest.mark.parametrize("kind", ["Lease", "Node"])
async def test_object_source_over_the_real_client_relists_after_410(
    fake_cluster: FakeCluster, kind: str
) -> None:
    if kind == "Lease":
        server = fake_cluster.leases
        server.pods = [renewed("a", 0, "90"), renewed("b", 0, "91")]
        change = event_line("MODIFIED", renewed("a", 120, "101"))
    else:
        server = fake_cluster.nodes
        server.pods = [node("a", "90"), node("b", "91")]
        change = event_line("MODIFIED", node("a", "101", allocatable={"nvidia.com/gpu": "7"}))
    server.watch_script = [[change + b"\n", GONE + b"\n"]]
    stop = asyncio.Event()
    collector = NodeCollector()

    async def handle(item: SourceItem, source: str) -> None:
        await collector(item, source)
        if isinstance(item, ObjectsListed):
            if item.resource_version == "100":
                server.pods = server.pods[:1]  # b goes away while the watch runs
                server.list_version = "200"
            else:
                stop.set()

    async def fast_sleep(seconds: float) -> None:
        await asyncio.sleep(0)

    async with fake_cluster.api_client() as api_client:
        api = (lease_api if kind == "Lease" else node_api)(api_client, Settings())
        async with asyncio.timeout(10):
            await ObjectSource(api, sleep=fast_sleep).run(handle, stop)
    listed = [item for item, _ in collector.items if isinstance(item, ObjectsListed)]
    assert [(i.object_kind, i.resource_version, len(i.items)) for i in listed] == [
        (kind, "100", 2),
        (kind, "200", 1),
    ]
    watched = [r.get("resourceVersion") for r in server.requests if r.get("watch")]
    assert watched == ["100", "200"]
    assert collector.processor.tracker.nodes == 1  # b forgotten after the re-LIST
    if kind == "Lease":
        assert collector.heartbeats() == [("a", 0), ("b", 0), ("a", 120)]
    else:
        assert collector.allocatable() == [
            ("a", {"nvidia.com/gpu": 8}),
            ("b", {"nvidia.com/gpu": 8}),
            ("a", {"nvidia.com/gpu": 7}),
        ]
