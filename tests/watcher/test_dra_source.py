"""The DRA inventory in the watcher (issue 4, item 1): ObjectSource over a fake API for
ResourceSlices, ResourceClaims and DeviceClasses (410 re-LIST, 404 = no DRA), the real
kubernetes-asyncio adapters over a fake API server on 127.0.0.1, and WatchSession turning DRA
objects of a recorded stream or a live watch into InventoryObserved (no Kafka)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from services.adapters.kube.errors import ApiRejected, ResourceExpired, ResourceNotServed
from services.adapters.kube.list_watch import ObjectList
from services.adapters.kube.watch_apis import (
    device_class_api,
    resource_claim_api,
    resource_slice_api,
)
from services.domain.inventory.events import InventoryObserved
from services.domain.inventory.objects import (
    DeviceClassInfo,
    ResourceClaimInfo,
    ResourceSliceInfo,
)
from services.processes.watcher.file_source import HarnessClock
from services.processes.watcher.live import DRA_APIS
from services.processes.watcher.metrics import WatcherMetrics
from services.processes.watcher.node_source import ObjectSource
from services.processes.watcher.processor import STAGE_DRA_INVENTORY, DeadLetter, InventoryProcessor
from services.processes.watcher.run import run_file
from services.processes.watcher.session import WatchSession
from services.processes.watcher.summary import WatchSummary
from services.processes.watcher.watch_lines import OBJECT_KINDS, ObjectChange, decode_watch_line
from services.processes.watcher.watch_loop import ObjectsListed, SourceItem
from services.runtime.config import Settings
from tests.fakes.watch_apis import GONE, FakeObjectApi, event_line
from tests.watcher.conftest import (
    CLAIMS_PATH,
    CLASSES_PATH,
    SLICES_PATH,
    FakeCluster,
    FakePublisher,
)

EXAMPLES = Path(__file__).parents[2].parent / "shared" / "examples"
STREAM_05B = EXAMPLES / "stream-05b-shared-claim-across-pods.jsonl"
AT = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
WALL = datetime(2030, 1, 1, tzinfo=UTC)


def load(name: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((EXAMPLES / name).read_text())
    return result


def resource_slice(name: str, version: str, devices: int = 8) -> dict[str, Any]:
    obj = load("dra-resourceslice-gpu-node-a.json")
    obj["metadata"].update(name=name, resourceVersion=version)
    obj["spec"]["nodeName"] = name
    obj["spec"]["pool"]["name"] = name
    obj["spec"]["devices"] = obj["spec"]["devices"][:devices]
    return obj


def claim(name: str, version: str, allocated: bool = True) -> dict[str, Any]:
    obj = load("dra-resourceclaim-allocated.json")
    obj["metadata"].update(name=name, resourceVersion=version)
    if not allocated:
        obj["status"] = {}
    return obj


def device_class(
    name: str, version: str, extended: str | None = "example.com/gpu"
) -> dict[str, Any]:
    obj = load("dra-deviceclass-gpu.json")
    obj["metadata"].update(name=name, resourceVersion=version)
    obj["spec"]["extendedResourceName"] = extended
    return obj


def unlisted(obj: dict[str, Any]) -> dict[str, Any]:
    """As a LIST item: without kind and apiVersion."""
    return {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}


def bookmark(kind: str, version: str) -> bytes:
    return event_line("BOOKMARK", {"kind": kind, "metadata": {"resourceVersion": version}})


@dataclass
class InventoryCollector:
    """The handler: runs each item through the (pure) inventory processor, keeps the results."""

    processor: InventoryProcessor = field(default_factory=InventoryProcessor)
    items: list[tuple[SourceItem, str]] = field(default_factory=list)
    events: list[InventoryObserved] = field(default_factory=list)
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

    def published(self) -> list[tuple[str, str, bool]]:
        return [(e.obj.name, e.key, e.deleted) for e in self.events]


async def run_source(
    api: FakeObjectApi, optional: bool = True
) -> tuple[InventoryCollector, list[str], ObjectSource, list[str]]:
    restarts: list[str] = []
    not_served: list[str] = []

    async def sleep(seconds: float) -> None:
        pass

    source = ObjectSource(
        api,
        sleep=sleep,
        on_restart=restarts.append,
        optional=optional,
        on_not_served=lambda: not_served.append(api.object_kind),
    )
    collector = InventoryCollector()
    async with asyncio.timeout(10):
        await source.run(collector, api.stop)
    return collector, restarts, source, not_served


# --- ObjectSource over a fake API ------------------------------------------------------------


async def test_slices_list_then_watch_publish_only_changes() -> None:
    touched = resource_slice("gpu-node-a", "13")
    touched["metadata"]["labels"] = {"only": "metadata"}
    api = FakeObjectApi(
        "ResourceSlice",
        [ObjectList([unlisted(resource_slice("gpu-node-a", "10"))], "12")],
        [
            [
                event_line("MODIFIED", touched),  # a new resourceVersion, the same compact form
                event_line("ADDED", resource_slice("gpu-node-b", "14")),
                event_line("MODIFIED", resource_slice("gpu-node-a", "15", devices=7)),
                event_line("MODIFIED", resource_slice("gpu-node-a", "11", devices=1)),  # stale
                bookmark("ResourceSlice", "20"),
            ]
        ],
    )
    collector, restarts, source, _ = await run_source(api)
    assert collector.published() == [
        ("gpu-node-a", "gpu-node-a", False),
        ("gpu-node-b", "gpu-node-b", False),
        ("gpu-node-a", "gpu-node-a", False),
    ]
    last = collector.events[-1].obj
    assert isinstance(last, ResourceSliceInfo) and len(last.devices) == 7
    first, where = collector.items[0]
    assert isinstance(first, ObjectsListed) and first.object_kind == "ResourceSlice"
    assert where == "kube:resourceslices/list@12"
    assert api.watch_calls[:2] == ["12", "20"]  # resumed after the bookmark
    assert source.resource == "resourceslices" and restarts[0] == "timeout"


@pytest.mark.parametrize("expiry", [GONE, ResourceExpired("HTTP 410")], ids=["event", "http"])
@pytest.mark.parametrize("kind", ["ResourceSlice", "ResourceClaim", "DeviceClass"])
async def test_410_relists_and_deletes_what_is_gone(kind: str, expiry: bytes | Exception) -> None:
    make = {"ResourceSlice": resource_slice, "ResourceClaim": claim, "DeviceClass": device_class}[
        kind
    ]
    api = FakeObjectApi(
        kind,
        [
            ObjectList([unlisted(make("a", "10")), unlisted(make("b", "11"))], "12"),
            ObjectList([unlisted(make("a", "10"))], "41"),  # b went away during the outage
        ],
        [[event_line("MODIFIED", make("b", "13")), expiry], [bookmark(kind, "50")]],
    )
    collector, restarts, source, _ = await run_source(api)
    assert api.list_calls == 2 and api.watch_calls[:3] == ["12", "41", "50"]
    assert "expired" in restarts
    names = [(e.obj.name, e.deleted) for e in collector.events]
    assert names == [("a", False), ("b", False), ("b", True)]
    assert collector.processor.tracked()[kind] == 1
    assert source.resource_version == "50"


async def test_claims_move_from_their_own_key_to_their_node_when_allocated() -> None:
    api = FakeObjectApi(
        "ResourceClaim",
        [ObjectList([unlisted(claim("c", "10", allocated=False))], "10")],
        [[event_line("MODIFIED", claim("c", "11")), event_line("DELETED", claim("c", "12"))]],
    )
    collector, _, _, _ = await run_source(api)
    assert collector.published() == [
        ("c", "claim:ml-serving/c", False),
        ("c", "gpu-node-a", False),
        ("c", "gpu-node-a", True),
    ]
    assert isinstance(collector.events[1].obj, ResourceClaimInfo)


async def test_malformed_objects_are_dead_lettered_and_the_watch_goes_on() -> None:
    bad_listed = {"metadata": {"name": "broken", "resourceVersion": "5"}, "spec": "none"}
    bad_watched = device_class("worse", "8")
    bad_watched["metadata"].pop("name")
    line = event_line("ADDED", bad_watched)
    api = FakeObjectApi(
        "DeviceClass",
        [ObjectList([bad_listed, unlisted(device_class("good", "6"))], "7")],
        [[line, event_line("MODIFIED", device_class("good", "9", extended=None))]],
    )
    collector, _, _, _ = await run_source(api)
    assert [(e.obj.name, e.key) for e in collector.events] == [
        ("good", "class:good"),
        ("good", "class:good"),
    ]
    last = collector.events[-1].obj
    assert isinstance(last, DeviceClassInfo) and last.extended_resource_name is None
    listed, watched = collector.dead_letters
    assert (listed.stage, listed.source) == (STAGE_DRA_INVENTORY, "kube:deviceclasses/list@7")
    assert orjson.loads(listed.original) == bad_listed
    # The parser names the field that is not an object (InventoryParseError, not a crash).
    assert listed.reason.startswith("DeviceClass broken: ")
    assert "must be an object" in listed.reason
    assert (watched.original, watched.source) == (line, "kube:deviceclasses/watch@7")
    assert watched.reason == "DeviceClass <no name>: metadata.name must be a non-empty string"


async def test_404_ends_an_optional_source_with_a_warning_and_nothing_else() -> None:
    api = FakeObjectApi("ResourceClaim", [ResourceNotServed("HTTP 404: NotFound")], [])
    collector, _, source, not_served = await run_source(api)
    assert source.not_served and not_served == ["ResourceClaim"]
    assert api.list_calls == 1 and api.watch_calls == [] and collector.items == []


async def test_404_is_a_rejection_for_a_source_that_is_not_optional() -> None:
    api = FakeObjectApi("ResourceSlice", [ResourceNotServed("HTTP 404: NotFound")], [])
    with pytest.raises(ApiRejected, match="404"):
        await run_source(api, optional=False)


async def test_other_rejections_still_stop_an_optional_source() -> None:
    api = FakeObjectApi("DeviceClass", [ApiRejected("HTTP 403: forbidden")], [])
    with pytest.raises(ApiRejected, match="403"):
        await run_source(api)


# --- the real client against a fake API server --------------------------------------------


@pytest.mark.parametrize(
    ("make_api", "path", "kind"),
    [
        (resource_slice_api, SLICES_PATH, "ResourceSlice"),
        (resource_claim_api, CLAIMS_PATH, "ResourceClaim"),
        (device_class_api, CLASSES_PATH, "DeviceClass"),
    ],
)
async def test_dra_apis_list_pages_and_watch_with_bookmarks(
    fake_cluster: FakeCluster, make_api: Any, path: str, kind: str
) -> None:
    fake_cluster.dra_served = True
    server = {
        SLICES_PATH: fake_cluster.slices,
        CLAIMS_PATH: fake_cluster.claims,
        CLASSES_PATH: fake_cluster.classes,
    }[path]
    server.pods = [device_class(n, str(i + 1)) for i, n in enumerate("abc")]
    line = event_line("MODIFIED", device_class("a", "101"))
    server.watch_script = [[line + b"\n"]]
    async with fake_cluster.api_client() as api_client:
        api = make_api(api_client, Settings(watch_timeout_seconds=42), page_size=2)
        assert api.object_kind == kind
        listed = await api.list_objects()
        lines = [item async for item in api.watch_objects("100")]
    assert [o["metadata"]["name"] for o in listed.items] == ["a", "b", "c"]
    assert [r.get("continue") for r in server.requests[:2]] == [None, "2"]
    assert lines == [line]
    watch = server.requests[2]
    assert watch["allowWatchBookmarks"].lower() == "true"
    assert (watch["timeoutSeconds"], watch["resourceVersion"]) == ("42", "100")
    assert fake_cluster.pods.requests == []


async def test_dra_apis_raise_not_served_on_a_cluster_without_dra(
    fake_cluster: FakeCluster,
) -> None:
    async with fake_cluster.api_client() as api_client:
        for make_api in DRA_APIS:
            with pytest.raises(ResourceNotServed, match="404"):
                await make_api(api_client, Settings()).list_objects()
    assert all(len(s.requests) == 1 for s in (fake_cluster.slices, fake_cluster.claims))


async def test_optional_source_over_the_real_client_relists_after_410_then_stops_on_404(
    fake_cluster: FakeCluster,
) -> None:
    fake_cluster.dra_served = True
    server = fake_cluster.slices
    server.pods = [unlisted(resource_slice("a", "90")), unlisted(resource_slice("b", "91"))]
    change = event_line("MODIFIED", resource_slice("a", "101", devices=2))
    server.watch_script = [[change + b"\n", GONE + b"\n"]]
    collector = InventoryCollector()
    not_served: list[str] = []

    async def handle(item: SourceItem, source: str) -> None:
        await collector(item, source)
        if isinstance(item, ObjectsListed):
            if item.resource_version == "100":
                server.pods = server.pods[:1]  # b goes away while the watch runs
                server.list_version = "200"
            else:
                fake_cluster.dra_served = False  # then DRA is switched off: the WATCH gets 404

    async def fast_sleep(seconds: float) -> None:
        await asyncio.sleep(0)

    async with fake_cluster.api_client() as api_client:
        source = ObjectSource(
            resource_slice_api(api_client, Settings()),
            sleep=fast_sleep,
            optional=True,
            on_not_served=lambda: not_served.append("resourceslices"),
        )
        async with asyncio.timeout(10):
            await source.run(handle)
    assert [(e.obj.name, e.deleted) for e in collector.events] == [
        ("a", False),
        ("b", False),
        ("a", False),
        ("b", True),
    ]
    assert not_served == ["resourceslices"] and source.not_served


# --- WatchSession: recorded streams and live items --------------------------------------------


def session_for(publisher: FakePublisher) -> WatchSession:
    return WatchSession(
        publisher,
        WatcherMetrics(),
        WatchSummary(source="test"),
        clock=HarnessClock(wall=lambda: WALL),
    )


def sample(session: WatchSession, name: str, **labels: str) -> float | None:
    return session.metrics.registry.get_sample_value(f"devicestate_watcher_{name}", labels)


async def test_stream_05b_publishes_its_claim_keyed_by_node_before_the_pod_events(
    publisher: FakePublisher,
) -> None:
    session = session_for(publisher)
    await run_file(session, STREAM_05B, Settings())
    records = [r for r in publisher.records if r.type != "WatcherTick"]
    (inventory,) = [r for r in records if isinstance(r, InventoryObserved)]
    assert records[0] is inventory
    assert (inventory.key, inventory.node, inventory.deleted) == ("gpu-node-a", "gpu-node-a", False)
    assert isinstance(inventory.obj, ResourceClaimInfo)
    assert (inventory.obj.namespace, inventory.obj.name) == ("ml-serving", "shared-gpu-pool-a")
    assert [r.device_id for r in inventory.obj.results] == ["gpu.example.com/gpu-node-a/gpu-1"]
    assert [name for name, _ in inventory.obj.reserved_for] == [
        "ocr-6d5f7c9b4-aa1bc",
        "ocr-6d5f7c9b4-dd2ef",
    ]
    assert inventory.observed_at == datetime(2026, 11, 29, 13, 0, tzinfo=UTC)  # the _CLOCK
    # Besides the device events, each Ready Pod's claim lifecycle stages (issue 16 item 5).
    assert {r.type for r in records[1:]} == {"DeviceHealthObserved", "PodLifecycleObserved"}
    lifecycles = [r for r in records if r.type == "PodLifecycleObserved"]
    assert sorted(r.pod_name for r in lifecycles) == ["ocr-6d5f7c9b4-aa1bc", "ocr-6d5f7c9b4-dd2ef"]
    summary = session.summary
    assert summary.events_published["InventoryObserved"] == 1
    assert summary.inventory_tracked == {"ResourceSlice": 0, "ResourceClaim": 1, "DeviceClass": 0}
    assert "kind ResourceClaim" not in summary.ignored and publisher.dead_letters == []
    assert sample(session, "inventory_published_total", kind="ResourceClaim", change="observed")
    assert sample(session, "inventory_tracked", kind="ResourceClaim") == 1
    assert sample(session, "events_published_total", type="InventoryObserved") == 1


async def test_without_the_dra_watch_the_dra_objects_of_a_stream_are_ignored(
    publisher: FakePublisher,
) -> None:
    session = session_for(publisher)
    await run_file(session, STREAM_05B, Settings(watch_dra=False))
    assert publisher.of_type("InventoryObserved") == []
    assert session.summary.ignored["kind ResourceClaim"] == 1


async def test_malformed_dra_objects_of_a_stream_are_dead_lettered_and_the_stream_goes_on(
    publisher: FakePublisher, tmp_path: Path
) -> None:
    broken = claim("broken", "5")
    broken["status"]["allocation"]["devices"]["results"][0].pop("device")
    path = tmp_path / "stream.jsonl"
    lines = [
        event_line("ADDED", broken),
        event_line("ADDED", resource_slice("gpu-node-a", "6")),
        event_line("MODIFIED", resource_slice("gpu-node-a", "7")),  # nothing changed
        event_line("DELETED", resource_slice("gpu-node-a", "8")),
    ]
    path.write_bytes(b"\n".join(lines) + b"\n")
    session = session_for(publisher)
    await run_file(session, path, Settings())
    (letter,) = publisher.dead_letters
    original, reason, stage, source = letter
    assert (original, stage, source) == (lines[0], "dra-inventory", f"file:{path}:1")
    assert reason.startswith("ResourceClaim ml-serving/broken: status.allocation.devices")
    assert [(r.key, r.deleted) for r in publisher.of_type("InventoryObserved")] == [
        ("gpu-node-a", False),
        ("gpu-node-a", True),
    ]
    summary = session.summary
    assert summary.problems["dra-inventory"] == 1 and summary.dead_lettered == 1
    assert summary.ignored["ResourceSlice unchanged"] == 1
    assert summary.inventory_tracked["ResourceSlice"] == 0
    assert sample(session, "dead_lettered_total", stage="dra-inventory") == 1
    assert sample(session, "inventory_published_total", kind="ResourceSlice", change="deleted")


async def test_live_dra_items_keep_their_own_resume_points(publisher: FakePublisher) -> None:
    session = session_for(publisher)
    listed = ObjectsListed("DeviceClass", [unlisted(device_class("gpu", "3"))], "4")
    await session.handle(listed, "kube:deviceclasses/list@4", stream="DeviceClass")
    change = event_line("MODIFIED", device_class("gpu", "9", extended=None))
    item = decode_watch_line(change, kinds=OBJECT_KINDS)
    await session.handle(item, "kube:deviceclasses/watch@4", stream="DeviceClass")
    assert session.summary.object_versions == {"DeviceClass": "9"}
    assert session.summary.resource_version is None  # the Pods' resume point is not moved
    assert [r.key for r in publisher.of_type("InventoryObserved")] == ["class:gpu", "class:gpu"]
    session.not_served("resourceclaims")
    session.not_served("resourceclaims")
    assert session.summary.not_served == ["resourceclaims"]
    assert sample(session, "dra_not_served", resource="resourceclaims") == 1
