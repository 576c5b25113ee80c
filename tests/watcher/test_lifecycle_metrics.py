"""Claim lifecycle stages in the watcher (issue 4, item 4): WatchSession observes
``devicestate_claim_stage_seconds`` once per Pod first seen Ready by a watch event, never for Pods
already Ready in a LIST or a re-LIST (after 410 Gone), with the ResourceClaims the inventory
tracker holds. Live path: KubeSource over the fake Pod API; file mode: recorded streams (a
recorded stream is a watch). Values are read from the session's own Prometheus registry."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from services.adapters.kube.list_watch import ObjectList
from services.domain.lifecycle_events import PodLifecycleObserved
from services.processes.watcher.file_source import HarnessClock
from services.processes.watcher.metrics import WatcherMetrics
from services.processes.watcher.pod_source import KubeSource
from services.processes.watcher.run import run_file
from services.processes.watcher.session import WatchSession
from services.processes.watcher.summary import WatchSummary
from services.processes.watcher.watch_loop import ObjectsListed
from services.runtime.config import Settings
from tests.domain.test_lifecycle import claim, dra_pod, plugin_pod
from tests.fakes.event_publisher import FakePublisher
from tests.fakes.watch_apis import GONE, FakePodApi, event_line

EXAMPLES = Path(__file__).parents[2].parent / "shared" / "examples"
STREAM_02 = EXAMPLES / "stream-02-eight-gpus-one-unhealthy.jsonl"
STREAM_05B = EXAMPLES / "stream-05b-shared-claim-across-pods.jsonl"
WALL = datetime(2030, 1, 1, tzinfo=UTC)
HISTOGRAM = "devicestate_claim_stage_seconds"


def new_session(publisher: FakePublisher) -> WatchSession:
    return WatchSession(
        publisher,
        WatcherMetrics(),
        WatchSummary(source="test"),
        clock=HarnessClock(wall=lambda: WALL),
    )


def histogram(session: WatchSession, stage: str, device_class: str, path: str) -> tuple[int, float]:
    """``(count, sum)`` of one series (``(0, 0.0)`` when never observed)."""
    labels = {"stage": stage, "device_class": device_class, "path": path}
    registry = session.metrics.registry
    count = registry.get_sample_value(f"{HISTOGRAM}_count", labels)
    total = registry.get_sample_value(f"{HISTOGRAM}_sum", labels)
    return int(count or 0), float(total or 0.0)


def all_counts(session: WatchSession) -> dict[tuple[str, str, str], int]:
    """Every observed series: (stage, device_class, path) -> count."""
    counts = {}
    for family in session.metrics.registry.collect():
        if family.name == HISTOGRAM:
            for sample in family.samples:
                if sample.name == f"{HISTOGRAM}_count" and sample.value:
                    key = (
                        sample.labels["stage"],
                        sample.labels["device_class"],
                        sample.labels["path"],
                    )
                    counts[key] = int(sample.value)
    return counts


def unknown_claims(session: WatchSession) -> float:
    value = session.metrics.registry.get_sample_value(
        "devicestate_claim_stage_claims_unknown_total"
    )
    return value or 0.0


def versioned(pod: dict[str, Any], version: str) -> dict[str, Any]:
    pod["metadata"]["resourceVersion"] = version
    return pod


async def run_live(
    session: WatchSession, lists: list[ObjectList | Exception], watches: list[list[Any]]
) -> FakePodApi:
    api = FakePodApi(lists, watches)

    async def sleep(seconds: float) -> None:
        pass

    source = KubeSource(api, sleep=sleep)
    async with asyncio.timeout(10):
        await source.run(session.handle, api.stop)
    return api


async def test_live_observes_each_pod_once_and_never_after_a_relist(
    publisher: FakePublisher,
) -> None:
    session = new_session(publisher)
    # The claim of the DRA Pods, as the ResourceClaim watch would have listed it.
    await session.handle(ObjectsListed("ResourceClaim", [claim()], "5"), "test")

    first_list = ObjectList(
        [
            versioned(plugin_pod("a"), "10"),  # already Ready: remembered, not observed
            versioned(plugin_pod("b", ready=None), "11"),
            versioned(dra_pod("c"), "12"),  # already Ready
        ],
        "20",
    )
    relist = ObjectList(
        [
            versioned(plugin_pod("a"), "10"),
            versioned(plugin_pod("b"), "21"),
            versioned(dra_pod("d"), "22"),
            versioned(plugin_pod("e"), "30"),  # turned Ready while the watch was expired
        ],
        "40",
    )
    api = await run_live(
        session,
        [first_list, relist],
        [
            [
                event_line("MODIFIED", versioned(plugin_pod("a"), "13")),
                event_line("MODIFIED", versioned(plugin_pod("b"), "21")),  # turns Ready
                event_line("ADDED", versioned(dra_pod("d"), "22")),  # added Ready
                event_line("MODIFIED", versioned(dra_pod("d"), "23")),
                GONE,
            ],
            [
                event_line("MODIFIED", versioned(plugin_pod("a"), "41")),
                event_line("MODIFIED", versioned(plugin_pod("b"), "42")),
                event_line("MODIFIED", versioned(dra_pod("d"), "43")),
                event_line("MODIFIED", versioned(plugin_pod("e"), "44")),
                event_line("DELETED", versioned(dra_pod("c"), "45")),
            ],
        ],
    )
    assert api.list_calls == 2
    # b (device plugin) and d (DRA) only, once each.
    assert all_counts(session) == {
        ("pod_bound", "nvidia.com/gpu", "device-plugin"): 1,
        ("pod_ready", "nvidia.com/gpu", "device-plugin"): 1,
        ("claim_allocated", "gpu.example.com", "dra"): 1,
        ("pod_bound", "gpu.example.com", "dra"): 1,
        ("pod_ready", "gpu.example.com", "dra"): 1,
    }
    assert histogram(session, "pod_bound", "nvidia.com/gpu", "device-plugin") == (1, 5.0)
    assert histogram(session, "pod_ready", "nvidia.com/gpu", "device-plugin") == (1, 30.0)
    assert histogram(session, "claim_allocated", "gpu.example.com", "dra") == (1, 3.0)
    assert histogram(session, "pod_bound", "gpu.example.com", "dra") == (1, 1.0)
    assert histogram(session, "pod_ready", "gpu.example.com", "dra") == (1, 30.0)
    assert unknown_claims(session) == 0
    # The same stages, published once per Pod as PodLifecycleObserved (issue 16 item 5).
    published = [r for r in publisher.records if isinstance(r, PodLifecycleObserved)]
    assert [r.pod_uid for r in published] == ["b", "d"]
    assert {
        (s.stage.value, s.device_class, s.path.value, s.seconds) for s in published[1].stages
    } == {
        ("claim_allocated", "gpu.example.com", "dra", 3.0),
        ("pod_bound", "gpu.example.com", "dra", 1.0),
        ("pod_ready", "gpu.example.com", "dra", 30.0),
    }
    assert published[1].observed_at == WALL and published[1].unknown_claims == 0
    assert session.summary.events_published["PodLifecycleObserved"] == 2
    # a, b, d, e remembered (c deleted); the buckets suit scheduling: 1 s is in le=1.
    assert len(session.lifecycle) == 4 and "c" not in session.lifecycle
    bucket = session.metrics.registry.get_sample_value(
        f"{HISTOGRAM}_bucket",
        {"stage": "pod_bound", "device_class": "gpu.example.com", "path": "dra", "le": "1.0"},
    )
    assert bucket == 1


async def test_live_claim_not_known_yet_observes_pod_ready_and_counts_it(
    publisher: FakePublisher,
) -> None:
    session = new_session(publisher)
    await run_live(
        session,
        [ObjectList([], "20")],
        [
            [event_line("ADDED", versioned(dra_pod("f", ready=None), "21"))],
            [event_line("MODIFIED", versioned(dra_pod("f"), "22"))],
        ],
    )
    assert all_counts(session) == {("pod_ready", "unknown", "dra"): 1}
    assert unknown_claims(session) == 1
    [record] = [r for r in publisher.records if isinstance(r, PodLifecycleObserved)]
    assert record.unknown_claims == 1
    assert [(s.stage.value, s.device_class) for s in record.stages] == [("pod_ready", "unknown")]
    # The claim turning up later does not make the Pod count again.
    await session.handle(ObjectsListed("ResourceClaim", [claim()], "30"), "test")
    await run_live(
        session,
        [ObjectList([versioned(dra_pod("f"), "22")], "40")],
        [[event_line("MODIFIED", versioned(dra_pod("f"), "41"))]],
    )
    assert all_counts(session) == {("pod_ready", "unknown", "dra"): 1}


async def test_file_mode_stream_02_is_a_watch(publisher: FakePublisher) -> None:
    # One device-plugin Pod, Ready in its ADDED line (created 09:55:01, scheduled 09:55:02, Ready
    # 09:56:11), later MODIFIED (Ready, then not Ready): observed once.
    session = new_session(publisher)
    await run_file(session, STREAM_02, Settings())
    assert all_counts(session) == {
        ("pod_bound", "nvidia.com/gpu", "device-plugin"): 1,
        ("pod_ready", "nvidia.com/gpu", "device-plugin"): 1,
    }
    assert histogram(session, "pod_ready", "nvidia.com/gpu", "device-plugin") == (1, 69.0)


async def test_file_mode_stream_05b_shared_claim(publisher: FakePublisher) -> None:
    # Two Pods share a claim that has no creation or allocation time in the example: pod_ready
    # once per Pod, no claim stage.
    session = new_session(publisher)
    await run_file(session, STREAM_05B, Settings())
    assert all_counts(session) == {("pod_ready", "gpu.example.com", "dra"): 2}
    assert histogram(session, "pod_ready", "gpu.example.com", "dra") == (2, 138.0)
    assert unknown_claims(session) == 0


async def test_file_mode_shared_claim_with_times_counts_its_allocation_once(
    publisher: FakePublisher, tmp_path: Path
) -> None:
    lines = [json.loads(line) for line in STREAM_05B.read_text().splitlines() if line.strip()]
    for line in lines:
        obj = line.get("object", {})
        if obj.get("kind") == "ResourceClaim":
            obj["metadata"]["creationTimestamp"] = "2026-11-29T09:55:00Z"
            obj["status"]["allocation"]["allocationTimestamp"] = "2026-11-29T09:55:02Z"
    path = tmp_path / "shared-claim.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(line) for line in lines) + b"\n")
    session = new_session(publisher)
    await run_file(session, path, Settings())
    assert histogram(session, "claim_allocated", "gpu.example.com", "dra") == (1, 2.0)
    assert histogram(session, "pod_bound", "gpu.example.com", "dra") == (2, 0.0)
    assert histogram(session, "pod_ready", "gpu.example.com", "dra") == (2, 138.0)


async def test_file_mode_without_dra_watch_counts_claims_unknown(
    publisher: FakePublisher,
) -> None:
    session = new_session(publisher)
    await run_file(session, STREAM_05B, Settings(watch_dra=False))
    assert all_counts(session) == {("pod_ready", "unknown", "dra"): 2}
    assert unknown_claims(session) == 2
