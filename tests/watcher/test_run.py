"""run_watch in file mode, end to end into the real Kafka broker (``devicestate-dev stack up``)."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from uuid import uuid4

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from services.adapters.kube.errors import ApiRejected
from services.domain.codec import parse_time
from services.domain.events import DeviceHealthObserved, format_time
from services.domain.inventory.events import InventoryObserved
from services.domain.inventory.objects import ResourceClaimInfo, ResourceSliceInfo
from services.domain.node_events import NodeHeartbeat, NodeResourcesChanged, WatcherTick
from services.domain.observations import DeviceHealthObservations
from services.domain.records import TopicRecord, decode_record
from services.processes.watcher.run import run_watch
from services.runtime.config import Settings
from tests.domain.test_node_tracker import lease, node
from tests.fakes.watch_apis import GONE, bookmark, event_line
from tests.watcher.conftest import FakeCluster
from tests.watcher.test_dra_source import claim, device_class, resource_slice, unlisted
from tests.watcher.test_kube_source import pod

pytestmark = pytest.mark.integration

BUNDLED = Path(__file__).parents[2] / "devtools" / "examples"
SHARED = Path(__file__).parents[2].parent / "shared" / "examples"
PARTITIONS = 6  # settings.topic_partitions: ensure_topics creates the topic with it


@pytest.fixture
async def settings() -> AsyncIterator[Settings]:
    suffix = uuid4().hex[:12]
    settings = Settings().model_copy(
        update={
            "topic": f"test-watch-{suffix}.events",
            "dead_letter_topic": f"test-watch-{suffix}.dead-letter",
            "watcher_metrics_port": 0,
            "topic_partitions": PARTITIONS,
            # Counts here are of the device, node and DRA records; the workload resolver's
            # records are tested in test_workloads.py and tests/kubeapi/test_watcher_workloads.py.
            "watch_workloads": False,
            # One record per observation, so the counts are of observations; schema 2 (the
            # default) is tested on its own below.
            "watcher_record_schema": 1,
        }
    )
    yield settings
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap_servers)
    await admin.start()
    try:
        await admin.delete_topics([settings.topic, settings.dead_letter_topic])
    finally:
        await admin.close()


async def read_all(
    settings: Settings, topic: str, count: int
) -> list[ConsumerRecord[bytes, bytes]]:
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=settings.kafka_bootstrap_servers,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    records: list[ConsumerRecord[bytes, bytes]] = []
    try:
        async with asyncio.timeout(30):
            while len(records) < count:
                for batch in (await consumer.getmany(timeout_ms=500)).values():
                    records.extend(batch)
    finally:
        await consumer.stop()
    return records


async def log_size(settings: Settings) -> int:
    """How many records ``settings.topic`` holds (the sum of its end offsets)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap_servers)
    await consumer.start()
    try:
        parts = [TopicPartition(settings.topic, p) for p in range(PARTITIONS)]
        return sum((await consumer.end_offsets(parts)).values())
    finally:
        await consumer.stop()


def decoded(records: list[ConsumerRecord[bytes, bytes]]) -> list[TopicRecord]:
    """Every record decoded, checking its key: the node, or ``~tick/<partition>`` for a tick
    sent to exactly that partition."""
    out = []
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        assert record.value is not None
        value = decode_record(record.value, inventory=True)
        assert record.key == value.node.encode()
        if isinstance(value, WatcherTick):
            assert record.partition == value.partition
        out.append(value)
    return out


def ticks_by_partition(values: list[TopicRecord]) -> dict[int, list[str]]:
    by_partition: dict[int, list[str]] = {}
    for value in values:
        if isinstance(value, WatcherTick):
            by_partition.setdefault(value.partition, []).append(
                value.observed_at.isoformat().replace("+00:00", "Z")
            )
    return by_partition


async def test_demo_stream_is_published_with_dead_letters(settings: Settings) -> None:
    path = BUNDLED / "demo-stream.jsonl"
    summary = await asyncio.wait_for(run_watch(settings, from_file=path), 60)
    assert summary.events_published == {
        "DeviceHealthObserved": 23,
        "PodDevicesReleased": 1,
        "PodLifecycleObserved": 17,  # each Ready Pod's claim lifecycle stages (issue 16)
    }
    assert summary.dead_lettered == 2
    assert summary.problems["missing-node-name"] == 1
    assert summary.problems["conflicting-health"] == 1
    assert summary.problems["unknown-event-type"] == 1
    assert summary.problems["watch-error"] == 1
    assert summary.resource_version == "95021"
    assert "41 events published" in summary.line()
    clocks = [
        line for line in path.read_bytes().splitlines() if line.startswith(b'{"type":"_CLOCK"')
    ]
    # one round per _CLOCK, and one just after the end (the governor's merge needs it)
    assert summary.ticks_sent == (len(clocks) + 1) * PARTITIONS

    values = decoded(await read_all(settings, settings.topic, 41 + summary.ticks_sent))
    events = [v for v in values if not isinstance(v, WatcherTick)]
    assert len(events) == 41
    # observedAt comes from the stream's _CLOCK lines, not from the wall clock.
    unhealthy = next(
        e
        for e in events
        if isinstance(e, DeviceHealthObserved)
        and e.resource_id == "GPU-a5ced723-33de-5eef-89d7-909771744097"
        and e.status_version == 70344
    )
    assert unhealthy.observed_at == parse_time("2026-11-29T10:42:10Z")
    # One tick per _CLOCK on every partition, in the stream's order.
    times = [orjson.loads(line)["now"] for line in clocks]
    end = format_time(parse_time(times[-1]) + timedelta(milliseconds=1))
    assert ticks_by_partition(values) == {p: [*times, end] for p in range(PARTITIONS)}

    lines = path.read_bytes().splitlines()
    letters = await read_all(settings, settings.dead_letter_topic, 2)
    by_source = {dict(r.headers)["devicestate-source"].decode(): r for r in letters}
    assert set(by_source) == {f"file:{path}:{n}" for n in (28, 35)}
    assert by_source[f"file:{path}:28"].value == lines[27]  # stream-10 line 5: no nodeName
    assert dict(by_source[f"file:{path}:28"].headers)["devicestate-stage"] == b"pod-status"
    assert b"missing-node-name" in dict(by_source[f"file:{path}:28"].headers)["devicestate-reason"]


async def test_schema_2_publishes_the_same_observations_in_fewer_records(
    settings: Settings,
) -> None:
    """Issue 12: with ``watcher_record_schema`` 2 (the default) each Pod status change's
    observations go as one ``DeviceHealthObservations`` record keyed by its node; flattened,
    the topic holds the observations the schema-1 run publishes, in the same order per node."""
    path = BUNDLED / "demo-stream.jsonl"
    await asyncio.wait_for(run_watch(settings, from_file=path), 60)
    grouped = settings.model_copy(
        update={"topic": settings.topic + "-v2", "watcher_record_schema": 2}
    )
    assert Settings().watcher_record_schema == 2
    try:
        summary = await asyncio.wait_for(run_watch(grouped, from_file=path), 60)
        assert summary.events_published["DeviceHealthObserved"] == 23  # observations
        before = decoded(await read_all(settings, settings.topic, 41 + summary.ticks_sent))
        after = decoded(await read_all(grouped, grouped.topic, await log_size(grouped)))
    finally:
        admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap_servers)
        await admin.start()
        try:
            await admin.delete_topics([grouped.topic])
        finally:
            await admin.close()

    def observations(values: list[TopicRecord]) -> dict[str, list[DeviceHealthObserved]]:
        by_node: dict[str, list[DeviceHealthObserved]] = {}
        for value in values:
            if isinstance(value, DeviceHealthObservations):
                by_node.setdefault(value.node, []).extend(value.observations)
            elif isinstance(value, DeviceHealthObserved):
                by_node.setdefault(value.node, []).append(value)
        return by_node

    flat = observations(after)
    assert flat == observations(before)
    assert sum(len(v) for v in flat.values()) == 23
    grouped_records = [v for v in after if isinstance(v, DeviceHealthObservations)]
    singles = [v for v in after if isinstance(v, DeviceHealthObserved)]
    assert grouped_records and len(grouped_records) + len(singles) < 23


async def test_truncated_line_is_dead_lettered_with_its_line_number(settings: Settings) -> None:
    path = BUNDLED / "stream-10b-truncated-line.jsonl"
    summary = await asyncio.wait_for(run_watch(settings, from_file=path), 60)
    assert summary.problems == {"broken-line": 1}
    assert summary.events_published == {"DeviceHealthObserved": 2, "PodLifecycleObserved": 1}
    (letter,) = await read_all(settings, settings.dead_letter_topic, 1)
    headers = dict(letter.headers)
    assert headers["devicestate-source"] == f"file:{path}:3".encode()
    assert headers["devicestate-stage"] == b"watch-line"
    assert letter.value == path.read_bytes().splitlines()[2]


async def test_stream_03b_publishes_node_allocatable_8_0_8_and_ticks(settings: Settings) -> None:
    path = SHARED / "stream-03b-plugin-unregistered-observed-kubelet.jsonl"
    expected = orjson.loads(path.with_suffix("").with_suffix(".expected.json").read_bytes())
    summary = await asyncio.wait_for(run_watch(settings, from_file=path), 60)
    assert summary.events_published == {
        "DeviceHealthObserved": 8,
        "NodeResourcesChanged": 3,
        "NodeLabelsChanged": 1,  # the Node's first sighting (its labels never change)
        "PodLifecycleObserved": 1,
    }
    assert summary.ticks_sent == (3 + 1) * PARTITIONS  # the _CLOCKs' and the end's
    records = await read_all(settings, settings.topic, 13 + summary.ticks_sent)
    values = decoded(records)
    changes = [v for v in values if isinstance(v, NodeResourcesChanged)]
    assert [(c.node, c.capacity, c.allocatable, format_z(c.observed_at)) for c in changes] == [
        ("gpu-node-c", GPUS_8, GPUS_8, "2026-11-29T11:00:00Z"),
        ("gpu-node-c", GPUS_8, (("nvidia.com/gpu", 0),), "2026-11-29T11:20:15Z"),
        ("gpu-node-c", GPUS_8, GPUS_8, "2026-11-29T11:21:50Z"),
    ]
    (signal,) = expected["expectedSignals"]
    short = [c for c in changes if c.missing().get(signal["resourceName"])]
    assert [format_z(c.observed_at) for c in short] == [signal["from"]]
    assert format_z(changes[-1].observed_at) == signal["to"] and not changes[-1].missing()
    clocks = ["2026-11-29T11:00:00Z", "2026-11-29T11:20:15Z", "2026-11-29T11:21:50Z"]
    end = "2026-11-29T11:21:50.001000Z"  # just after the stream's end
    assert ticks_by_partition(values) == {p: [*clocks, end] for p in range(PARTITIONS)}
    # On gpu-node-c's partition the records keep the stream's order: each tick, then what the
    # watcher saw at its time.
    (partition,) = {r.partition for r in records if r.key == b"gpu-node-c"}
    on_partition = [
        decode_record(r.value)
        for r in sorted(records, key=lambda r: r.offset)
        if r.partition == partition and r.value is not None
    ]
    assert [v.type for v in on_partition] == [
        "WatcherTick",
        *["DeviceHealthObserved"] * 8,
        "PodLifecycleObserved",  # the Pod first seen Ready (after its devices)
        "NodeResourcesChanged",
        "NodeLabelsChanged",  # first sighting: after its resources
        "WatcherTick",
        "NodeResourcesChanged",
        "WatcherTick",
        "NodeResourcesChanged",
        "WatcherTick",  # the end of the stream
    ]


GPUS_8 = (("nvidia.com/gpu", 8),)


def format_z(value: object) -> str:
    assert hasattr(value, "isoformat")
    return str(value.isoformat()).replace("+00:00", "Z")


async def test_live_mode_runs_pods_leases_nodes_and_ticks_and_stops_on_sigterm(
    settings: Settings, fake_cluster: FakeCluster, tmp_path: Path
) -> None:
    fake_cluster.pods.watch_script = [
        [
            event_line("MODIFIED", pod("a", "101", **{"GPU-0": "Unhealthy"})) + b"\n",
            bookmark("102") + b"\n",
        ],
        ["hold"],
    ]
    fake_cluster.leases.pods = [
        lease("gpu-node-a", "2026-11-29T11:00:00.000000Z", "50"),
        lease("gpu-node-b", "2026-11-29T11:00:04.250000Z", "51"),
    ]
    fake_cluster.leases.watch_script = [
        [
            event_line("MODIFIED", lease("gpu-node-a", "2026-11-29T11:00:10.000000Z", "52"))
            + b"\n",
            event_line("MODIFIED", lease("gpu-node-a", "2026-11-29T11:01:00.000000Z", "53"))
            + b"\n",
        ],
        ["hold"],
    ]
    fake_cluster.nodes.pods = [node("gpu-node-c", "60")]
    fake_cluster.nodes.watch_script = [
        [
            event_line("MODIFIED", node("gpu-node-c", "61", allocatable={"nvidia.com/gpu": "0"}))
            + b"\n",
            GONE + b"\n",  # 410: the watcher LISTs Nodes again and goes on
        ],
        ["hold"],
    ]
    live = settings.model_copy(
        update={
            "kubeconfig": str(fake_cluster.kubeconfig(tmp_path)),
            "tick_interval_seconds": 3600.0,  # one round of ticks, at start
        }
    )
    watching = asyncio.create_task(run_watch(live))
    async with asyncio.timeout(30):
        for server in (fake_cluster.pods, fake_cluster.leases, fake_cluster.nodes):
            await server.holding.wait()  # listed, watched, now idle in the second watch
        await fake_cluster.events.holding.wait()  # listed (none), watched, idle
    os.kill(os.getpid(), signal.SIGTERM)
    summary = await asyncio.wait_for(watching, 30)
    # The fake cluster serves no resource.k8s.io/v1 nor v1beta2 (404): each DRA loop (and the
    # DeviceTaintRule one, issue 15) ended by itself.
    assert sorted(summary.not_served) == [
        "deviceclasses",
        "devicetaintrules",
        "resourceclaims",
        "resourceslices",
    ]
    assert all(len(s.requests) == 1 for s in (fake_cluster.slices, fake_cluster.claims))
    # One snapshot per node known at the Pod LIST: the Pods' node, and those of the Leases and
    # Nodes when their LISTs came first (the loops run concurrently).
    assert 1 <= summary.events_published.pop("PodsListed") <= 3
    assert summary.events_published == {
        "DeviceHealthObserved": 4,  # a, b, c, then a changed
        "NodeHeartbeat": 3,  # a and b listed, a again 60 s later (11:00:10 coarsened)
        "NodeResourcesChanged": 2,  # listed with 8, then 0
        "NodeLabelsChanged": 2,  # listed, then re-stated by the LIST after the 410
    }
    assert (summary.ticks_sent, summary.heartbeats_coarsened) == (PARTITIONS, 1)
    assert summary.resource_version == "102"
    # Namespaces are watched with the DRA inventory (issue 16, tenant-boundary): none listed.
    assert summary.object_versions == {
        "Lease": "53",
        "Node": "100",
        "Event": "100",
        "Namespace": "100",
    }
    # The Events are the Warnings about Pods (issue 16 item 3), filtered by the API server.
    assert (
        fake_cluster.events.requests[0]["fieldSelector"] == "involvedObject.kind=Pod,type=Warning"
    )
    assert summary.pods_tracked == 3 and summary.nodes_tracked == 3
    assert [r.get("resourceVersion") for r in fake_cluster.pods.requests if r.get("watch")] == [
        "100",
        "102",
    ]
    node_lists = [r for r in fake_cluster.nodes.requests if not r.get("watch")]
    assert len(node_lists) == 2  # the 410 made the watcher LIST again
    values = decoded(await read_all(settings, settings.topic, 4 + 3 + 2 + PARTITIONS))
    beats = [(v.node, format_z(v.renewed_at)) for v in values if isinstance(v, NodeHeartbeat)]
    assert sorted(beats) == [
        ("gpu-node-a", "2026-11-29T11:00:00Z"),
        ("gpu-node-a", "2026-11-29T11:01:00Z"),
        ("gpu-node-b", "2026-11-29T11:00:04.250000Z"),
    ]
    allocatable = [dict(v.allocatable) for v in values if isinstance(v, NodeResourcesChanged)]
    assert allocatable == [{"nvidia.com/gpu": 8}, {"nvidia.com/gpu": 0}]
    assert sorted(ticks_by_partition(values)) == list(range(PARTITIONS))
    versions = sorted(v.status_version or 0 for v in values if isinstance(v, DeviceHealthObserved))
    assert versions == [10, 11, 12, 101]


async def test_live_mode_stops_every_loop_when_one_is_refused(
    settings: Settings, fake_cluster: FakeCluster, tmp_path: Path
) -> None:
    fake_cluster.pods.watch_script = [["hold"]]
    fake_cluster.leases.watch_script = [["hold"]]
    fake_cluster.nodes.list_status = 403  # RBAC: the watcher may not list Nodes
    live = settings.model_copy(update={"kubeconfig": str(fake_cluster.kubeconfig(tmp_path))})
    with pytest.raises(ApiRejected, match="403"):
        await asyncio.wait_for(run_watch(live), 30)
    others = {task.get_name() for task in asyncio.all_tasks()}
    assert not any(name.startswith("watcher-") for name in others)


async def test_live_mode_without_lease_and_node_watches(
    settings: Settings, fake_cluster: FakeCluster, tmp_path: Path
) -> None:
    fake_cluster.pods.watch_script = [["hold"]]
    live = settings.model_copy(
        update={
            "kubeconfig": str(fake_cluster.kubeconfig(tmp_path)),
            "watch_leases": False,
            "watch_nodes": False,
            "watch_dra": False,
        }
    )
    watching = asyncio.create_task(run_watch(live))
    async with asyncio.timeout(30):
        await fake_cluster.pods.holding.wait()
    os.kill(os.getpid(), signal.SIGTERM)
    summary = await asyncio.wait_for(watching, 30)
    assert fake_cluster.leases.requests == [] and fake_cluster.nodes.requests == []
    assert [s.requests for s in fake_cluster.servers[3:6]] == [[], [], []]
    assert len(fake_cluster.events.requests) >= 1  # Events are watched unless told not to
    assert summary.events_published == {"DeviceHealthObserved": 3, "PodsListed": 1}
    assert summary.not_served == []


# --- DRA inventory ------------------------------------------------------------------------


async def test_file_mode_slice_and_claim_land_keyed_by_their_node(
    settings: Settings, tmp_path: Path
) -> None:
    """stream-05b with a ResourceSlice of gpu-node-a and a pool-scoped one: the inventory lands
    keyed by node, in the partition of that node's Pod observations, before them."""
    stream_05b = SHARED / "stream-05b-shared-claim-across-pods.jsonl"
    lines = stream_05b.read_bytes().splitlines()
    pool_slice = resource_slice("shared-pool", "30001")
    del pool_slice["spec"]["nodeName"]
    extra = [
        event_line("ADDED", resource_slice("gpu-node-a", "30000")),
        event_line("ADDED", pool_slice),
    ]
    path = tmp_path / "stream-05b-with-slices.jsonl"
    path.write_bytes(b"\n".join([lines[0], *extra, *lines[1:]]) + b"\n")
    summary = await asyncio.wait_for(run_watch(settings, from_file=path), 60)
    assert summary.events_published["InventoryObserved"] == 3
    assert summary.dead_lettered == 0
    events = summary.events_total
    records = await read_all(settings, settings.topic, events + summary.ticks_sent)
    values = decoded(records)  # checks every key: record.key == value.node
    inventory = [v for v in values if isinstance(v, InventoryObserved)]
    assert sorted((v.kind.value, v.key) for v in inventory) == [
        ("ResourceClaim", "gpu-node-a"),
        ("ResourceSlice", "gpu-node-a"),
        ("ResourceSlice", "pool:gpu.example.com/shared-pool"),
    ]
    (node_slice,) = [r for r in records if r.key == b"gpu-node-a" and b"ResourceSlice" in r.value]
    assert node_slice.partition == next(
        r.partition
        for r in records
        if r.key == b"gpu-node-a" and b"DeviceHealthObserved" in r.value
    )
    on_partition = [
        decode_record(r.value, inventory=True).type
        for r in sorted(records, key=lambda r: r.offset)
        if r.partition == node_slice.partition and r.key == b"gpu-node-a" and r.value
    ]
    assert on_partition[:2] == ["InventoryObserved", "InventoryObserved"]
    assert set(on_partition[2:]) == {"DeviceHealthObserved", "PodLifecycleObserved"}
    slice_value = next(
        v for v in inventory if isinstance(v.obj, ResourceSliceInfo) and v.key == "gpu-node-a"
    )
    assert slice_value.observed_at == parse_time("2026-11-29T13:00:00Z")


async def test_live_mode_watches_the_dra_inventory_and_relists_after_410(
    settings: Settings, fake_cluster: FakeCluster, tmp_path: Path
) -> None:
    fake_cluster.dra_served = True
    fake_cluster.pods.watch_script = [["hold"]]
    fake_cluster.classes.pods = [unlisted(device_class("gpu.example.com", "5"))]
    fake_cluster.classes.watch_script = [["hold"]]
    slice_a, slice_b = resource_slice("gpu-node-a", "10"), resource_slice("gpu-node-b", "11")
    fake_cluster.slices.pods = [unlisted(slice_a), unlisted(slice_b)]
    shrunk = resource_slice("gpu-node-a", "101", devices=7)
    fake_cluster.slices.next_lists = [([unlisted(shrunk)], "200")]  # b is gone at the re-LIST
    fake_cluster.slices.watch_script = [
        [event_line("MODIFIED", shrunk) + b"\n", GONE + b"\n"],
        ["hold"],
    ]
    fake_cluster.claims.pods = [unlisted(claim("c", "20", allocated=False))]
    fake_cluster.claims.watch_script = [
        [event_line("MODIFIED", claim("c", "21")) + b"\n", bookmark("30") + b"\n"],
        ["hold"],
    ]
    live = settings.model_copy(
        update={
            "kubeconfig": str(fake_cluster.kubeconfig(tmp_path)),
            "tick_interval_seconds": 3600.0,
            "watch_leases": False,
            "watch_nodes": False,
            "watch_events": False,
        }
    )
    watching = asyncio.create_task(run_watch(live))
    async with asyncio.timeout(30):
        for server in (fake_cluster.pods, *fake_cluster.servers[3:6]):
            await server.holding.wait()
    os.kill(os.getpid(), signal.SIGTERM)
    summary = await asyncio.wait_for(watching, 30)
    assert summary.not_served == ["devicetaintrules"]  # the fake serves no v1beta2 (issue 15)
    assert summary.events_published == {
        "DeviceHealthObserved": 3,
        "InventoryObserved": 7,
        "PodsListed": 1,
    }
    assert summary.inventory_tracked == {"ResourceSlice": 1, "ResourceClaim": 1, "DeviceClass": 1}
    assert summary.object_versions == {
        "Namespace": "100",
        "DeviceClass": "100",
        "ResourceSlice": "200",
        "ResourceClaim": "30",
    }
    slice_lists = [r for r in fake_cluster.slices.requests if not r.get("watch")]
    assert len(slice_lists) == 2  # the 410 made the watcher LIST ResourceSlices again
    values = decoded(await read_all(settings, settings.topic, 3 + 7 + PARTITIONS))
    inventory = [
        (v.kind.value, v.obj.name, v.key, v.deleted)
        for v in values
        if isinstance(v, InventoryObserved)
    ]
    assert sorted(inventory) == [
        ("DeviceClass", "gpu.example.com", "class:gpu.example.com", False),
        ("ResourceClaim", "c", "claim:ml-serving/c", False),
        ("ResourceClaim", "c", "gpu-node-a", False),
        ("ResourceSlice", "gpu-node-a", "gpu-node-a", False),
        ("ResourceSlice", "gpu-node-a", "gpu-node-a", False),
        ("ResourceSlice", "gpu-node-b", "gpu-node-b", False),
        ("ResourceSlice", "gpu-node-b", "gpu-node-b", True),
    ]
    allocated = next(
        v
        for v in values
        if isinstance(v, InventoryObserved)
        and v.key == "gpu-node-a"
        and isinstance(v.obj, ResourceClaimInfo)
    )
    assert isinstance(allocated.obj, ResourceClaimInfo) and len(allocated.obj.results) == 2
