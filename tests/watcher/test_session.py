"""WatchSession with node Leases, Nodes and ticks, over a fake publisher (no Kafka): what the
watcher publishes for recorded streams and live items, and the live ticker."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson

from services.domain.codec import parse_time
from services.domain.node_events import WatcherTick
from services.domain.watch.node_tracker import NodeTracker
from services.processes.watcher.file_source import HarnessClock
from services.processes.watcher.live import tick_every
from services.processes.watcher.metrics import WatcherMetrics
from services.processes.watcher.processor import STAGE_NODE_LEASE, STAGE_NODE_STATUS, NodeProcessor
from services.processes.watcher.run import run_file
from services.processes.watcher.session import WatchSession
from services.processes.watcher.summary import WatchSummary
from services.processes.watcher.watch_lines import Bookmark, decode_watch_line
from services.processes.watcher.watch_loop import ObjectsListed
from services.runtime.config import Settings
from tests.domain.test_node_tracker import lease, node
from tests.fakes.event_publisher import FakePublisher
from tests.fakes.watch_apis import event_line

EXAMPLES = Path(__file__).parents[2].parent / "shared" / "examples"
STREAM_03B = EXAMPLES / "stream-03b-plugin-unregistered-observed-kubelet.jsonl"
WALL = datetime(2030, 1, 1, tzinfo=UTC)


def session_for(
    publisher: FakePublisher, interval_seconds: float = 60, source: str = "test"
) -> WatchSession:
    nodes = NodeProcessor(NodeTracker(timedelta(seconds=interval_seconds)))
    return WatchSession(
        publisher,
        WatcherMetrics(),
        WatchSummary(source=source),
        clock=HarnessClock(wall=lambda: WALL),
        nodes=nodes,
    )


def counter(session: WatchSession, name: str) -> float | None:
    return session.metrics.registry.get_sample_value(f"devicestate_watcher_{name}_total")


def clock(text: str) -> bytes:
    return orjson.dumps({"type": "_CLOCK", "now": text})


async def test_stream_03b_publishes_allocatable_8_0_8_and_ticks(
    publisher: FakePublisher,
) -> None:
    session = session_for(publisher)
    await run_file(session, STREAM_03B, Settings())
    expected = orjson.loads(STREAM_03B.with_suffix("").with_suffix(".expected.json").read_bytes())
    (signal,) = expected["expectedSignals"]
    assert (signal["node"], signal["resourceName"]) == ("gpu-node-c", "nvidia.com/gpu")

    changes = publisher.of_type("NodeResourcesChanged")
    assert [
        (c.node, dict(c.capacity), dict(c.allocatable), c.status_version, c.observed_at)
        for c in changes
    ] == [
        ("gpu-node-c", {"nvidia.com/gpu": 8}, {"nvidia.com/gpu": 8}, 90011, T("11:00:00")),
        ("gpu-node-c", {"nvidia.com/gpu": 8}, {"nvidia.com/gpu": 0}, 90240, T("11:20:15")),
        ("gpu-node-c", {"nvidia.com/gpu": 8}, {"nvidia.com/gpu": 8}, 90270, T("11:21:50")),
    ]
    # The signal "allocatable < capacity" holds exactly from..to of the expected file.
    short = [c for c in changes if c.missing()]
    assert [c.observed_at for c in short] == [parse_time(signal["from"])]
    assert short[0].missing() == {"nvidia.com/gpu": 8}
    recovered = changes[changes.index(short[0]) + 1]
    assert recovered.observed_at == parse_time(signal["to"]) and not recovered.missing()

    ticks = publisher.of_type("WatcherTick")
    assert [(t.partition, t.observed_at) for t in ticks] == [
        (p, T(hhmmss)) for hhmmss in ("11:00:00", "11:20:15", "11:21:50") for p in range(3)
    ] + [(p, T("11:21:50") + timedelta(milliseconds=1)) for p in range(3)]  # the stream's end
    assert all(t.node == f"~tick/{t.partition}" for t in ticks)
    # Each tick comes before what the watcher saw at its time.
    order = [r.type for r in publisher.records]
    assert order[:3] == ["WatcherTick"] * 3
    assert order.index("NodeResourcesChanged") > order.index("DeviceHealthObserved")
    assert len(publisher.of_type("DeviceHealthObserved")) == 8
    summary = session.summary
    assert summary.ticks_sent == 12 and summary.nodes_tracked == 1
    assert summary.events_published["NodeResourcesChanged"] == 3
    assert summary.resource_version == "90010"  # the Pod's: Nodes do not move it
    assert publisher.dead_letters == []


def T(hhmmss: str) -> datetime:
    return parse_time(f"2026-11-29T{hhmmss}Z")


async def test_without_node_watch_the_nodes_of_a_stream_are_ignored(
    publisher: FakePublisher,
) -> None:
    session = session_for(publisher)
    await run_file(session, STREAM_03B, Settings(watch_nodes=False))
    assert publisher.of_type("NodeResourcesChanged") == []
    assert session.summary.ignored["kind Node"] == 3


async def test_leases_in_a_stream_are_coarsened_on_renew_time(
    publisher: FakePublisher, tmp_path: Path
) -> None:
    lines = [clock("2026-11-29T12:00:00Z")]
    for i in range(13):  # kubelet renews every 10 s: 0..120 s
        stamp = (T("11:00:00") + timedelta(seconds=10 * i)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        lines.append(event_line("MODIFIED", lease("gpu-node-a", stamp, str(100 + i))))
    lines.append(event_line("MODIFIED", lease("gpu-node-b", "2026-11-29T11:00:05.5Z", "200")))
    leader = lease("kube-scheduler", "2026-11-29T11:00:00Z", "300", namespace="kube-system")
    lines.append(event_line("MODIFIED", leader))  # leader election, not a node
    path = tmp_path / "leases.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    session = session_for(publisher, interval_seconds=60)
    await run_file(session, path, Settings())
    beats = publisher.of_type("NodeHeartbeat")
    assert [(b.node, b.renewed_at, b.lease_version) for b in beats] == [
        ("gpu-node-a", T("11:00:00"), 100),
        ("gpu-node-a", T("11:01:00"), 106),
        ("gpu-node-a", T("11:02:00"), 112),
        ("gpu-node-b", T("11:00:05.500000"), 200),
    ]
    assert {b.observed_at for b in beats} == {T("12:00:00")}  # the watcher's clock, not renewTime
    assert session.summary.heartbeats_coarsened == 10
    assert session.summary.ignored["Lease outside kube-node-lease"] == 1
    assert counter(session, "heartbeats_coarsened") == 10
    assert counter(session, "heartbeats_published") == 4


async def test_malformed_leases_and_nodes_are_dead_lettered_and_the_stream_goes_on(
    publisher: FakePublisher, tmp_path: Path
) -> None:
    bad_lease = event_line("MODIFIED", lease("gpu-node-a", "2026-11-29 11:00", "1"))
    nameless = event_line("ADDED", node(None, "2"))
    milli = event_line("ADDED", node("gpu-node-d", "3", allocatable={"nvidia.com/gpu": "100m"}))
    lines = [
        bad_lease,
        event_line("MODIFIED", lease("gpu-node-a", "2026-11-29 11:00", "4")),  # same problem
        nameless,
        milli,
        event_line("MODIFIED", lease("gpu-node-a", "2026-11-29T11:00:10Z", "5")),
    ]
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    session = session_for(publisher)
    await run_file(session, path, Settings())
    letters = publisher.dead_letters
    assert [(orig, stage, source) for orig, _, stage, source in letters] == [
        (bad_lease, STAGE_NODE_LEASE, f"file:{path}:1"),
        (nameless, STAGE_NODE_STATUS, f"file:{path}:3"),
        (milli, STAGE_NODE_STATUS, f"file:{path}:4"),
    ]
    assert "bad-renew-time" in letters[0][1]
    assert "object-without-name" in letters[1][1]
    assert "status.allocatable[nvidia.com/gpu]" in letters[2][1] and "100m" in letters[2][1]
    # The Node with the bad quantity is still published, without the unreadable entry.
    (change,) = publisher.of_type("NodeResourcesChanged")
    assert (change.node, change.capacity, change.allocatable) == (
        "gpu-node-d",
        (("nvidia.com/gpu", 8),),
        (),
    )
    (beat,) = publisher.of_type("NodeHeartbeat")
    assert beat.renewed_at == T("11:00:10")
    assert session.summary.problems == {
        "bad-renew-time": 2,
        "object-without-name": 1,
        "bad-quantity": 1,
    }
    assert session.summary.dead_lettered == 3


async def test_live_lease_stream_keeps_its_own_resume_point(publisher: FakePublisher) -> None:
    session = session_for(publisher)
    await session.handle(
        ObjectsListed("Lease", [lease("a", "2026-11-29T11:00:00Z", "5")], "6"),
        "kube:leases/list@6",
        stream="Lease",
    )
    line = event_line("MODIFIED", lease("a", "2026-11-29T11:02:00Z", "7"))
    item = decode_watch_line(line, kinds=frozenset({"Lease"}), default_kind="Lease")
    await session.handle(item, "kube:leases/watch@6", stream="Lease")
    await session.handle(Bookmark("9"), "kube:leases/watch@7", stream="Lease")
    assert session.summary.object_versions == {"Lease": "9"}
    assert session.summary.resource_version is None  # the Pod resume point is untouched
    beats = publisher.of_type("NodeHeartbeat")
    assert [b.observed_at for b in beats] == [WALL, WALL]  # no _CLOCK: the wall clock


async def test_ticker_sends_a_tick_to_every_partition_until_stopped(
    publisher: FakePublisher,
) -> None:
    session = session_for(publisher)
    stop = asyncio.Event()
    task = asyncio.create_task(tick_every(session, 0.01, stop))
    async with asyncio.timeout(5):
        await publisher.wait_for(9)
    stop.set()
    await asyncio.wait_for(task, 5)
    ticks = publisher.of_type("WatcherTick")
    assert len(ticks) >= 9 and len(ticks) % 3 == 0
    assert [t.partition for t in ticks[:6]] == [0, 1, 2, 0, 1, 2]
    assert all(isinstance(t, WatcherTick) and t.observed_at == WALL for t in ticks)
    assert session.summary.ticks_sent == len(ticks)
    assert counter(session, "ticks_sent") == len(ticks)


async def test_ticker_sends_the_first_tick_at_once(publisher: FakePublisher) -> None:
    session = session_for(publisher)
    stop = asyncio.Event()
    task = asyncio.create_task(tick_every(session, 3600, stop))
    async with asyncio.timeout(5):
        await publisher.wait_for(3)
    stop.set()
    await asyncio.wait_for(task, 5)  # stops without waiting for the hour
    assert len(publisher.of_type("WatcherTick")) == 3


async def test_ticks_carry_when_the_quietest_watch_last_delivered(
    publisher: FakePublisher,
) -> None:
    now = [WALL]
    session = WatchSession(
        publisher, WatcherMetrics(), WatchSummary(source="test"), clock=HarnessClock(lambda: now[0])
    )

    def later(seconds: float) -> datetime:
        now[0] = WALL + timedelta(seconds=seconds)
        return now[0]

    await session.tick(WALL)  # the start: every expected watch counts from here
    await session.handle(Bookmark("9"), "kube:pods/watch@8")
    await session.handle(Bookmark("3"), "kube:leases/watch@2", stream="Lease")
    await session.tick(later(30))
    later(50)
    await session.handle(Bookmark("10"), "kube:pods/watch@9")  # the Lease watch goes quiet
    await session.tick(later(90))
    session.not_served("leases")  # not a DRA kind: the plural passes through unchanged
    await session.handle(Bookmark("4"), "kube:leases/watch@3", stream="Lease")
    await session.tick(later(120))
    ticks = publisher.of_type("WatcherTick")[::3]  # one per tick (three partitions)
    assert [(t.observed_at, t.watch_seen_at) for t in ticks] == [
        (WALL, WALL),
        (later(30), WALL),  # both delivered at the start's clock (WALL)
        (later(90), WALL),  # the Lease watch last delivered at the start
        (later(120), later(50)),  # the Pod watch's bookmark at 50 is now the quietest
    ]


async def test_a_dra_watch_not_served_leaves_the_count(publisher: FakePublisher) -> None:
    session = session_for(publisher)
    await session.handle(
        ObjectsListed("ResourceSlice", [], "1"),
        "kube:resourceslices/list@1",
        stream="ResourceSlice",
    )
    session.not_served("resourceslices")
    await session.tick(WALL + timedelta(seconds=500))
    assert {t.watch_seen_at for t in publisher.of_type("WatcherTick")} == {
        WALL + timedelta(seconds=500)  # only the Pod watch, counted from this first tick
    }
