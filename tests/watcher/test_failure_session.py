"""WatchSession with the failure tracker over a fake publisher (no Kafka): a recorded stream of
Events and Pods gives ``DRAFailureObserved`` records, counted by class, and a malformed Event is
a problem that stops nothing."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import orjson

from services.domain.adoption.failure_classes import FailureClass
from services.domain.adoption.failure_events import DRAFailureObserved
from services.domain.watch.failure_tracker import FailureTracker
from services.processes.watcher.file_source import HarnessClock
from services.processes.watcher.metrics import WatcherMetrics
from services.processes.watcher.run import run_file
from services.processes.watcher.session import WatchSession
from services.processes.watcher.summary import WatchSummary
from services.runtime.config import Settings
from tests.adoption.test_failure_tracker import INVALID_MESSAGE, event, unschedulable_pod
from tests.fakes.event_publisher import FakePublisher

WALL = datetime(2030, 1, 1, tzinfo=UTC)


def line(kind: str, obj: dict[str, object]) -> bytes:
    return orjson.dumps({"type": kind, "object": obj})


async def test_a_recorded_stream_of_events_and_pods(
    publisher: FakePublisher, tmp_path: Path
) -> None:
    broken = event("broken")
    broken["involvedObject"] = {"kind": "Pod"}
    del broken["metadata"]["namespace"]
    lines = [
        orjson.dumps({"type": "_CLOCK", "now": "2030-01-01T00:00:00Z"}),
        line("ADDED", {"kind": "Event", **event("e1")}),
        line("ADDED", {"kind": "Event", **broken}),
        line("MODIFIED", {"kind": "Event", **event("e1")}),  # same count: not again
        line("MODIFIED", {"kind": "Event", **event("e1", count=2)}),
        line("ADDED", {"kind": "Event", **event("e2", message=INVALID_MESSAGE)}),
        line("ADDED", {"kind": "Event", **event("e3", reason="Pulled", message="image")}),
        line("ADDED", {"kind": "Pod", **unschedulable_pod()}),
    ]
    path = tmp_path / "failures.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    session = WatchSession(
        publisher,
        WatcherMetrics(),
        WatchSummary(source="test"),
        clock=HarnessClock(wall=lambda: WALL),
        failures=FailureTracker(),
    )
    await run_file(session, path, Settings())
    records = [r for r in publisher.records if isinstance(r, DRAFailureObserved)]
    assert [(r.source_uid, r.occurrences, r.failure_class) for r in records] == [
        ("e1", 1, FailureClass.RETRYABLE),
        ("e1", 2, FailureClass.RETRYABLE),
        ("e2", 1, FailureClass.NON_RETRYABLE),
        ("pod-2/PodScheduled/2026-12-03T12:00:00Z", 1, FailureClass.RETRYABLE),
    ]
    assert session.summary.problems["failure-unreadable"] == 1
    assert session.summary.ignored["Event seen"] == 1
    assert session.summary.ignored["Event unclassified"] == 1
    sample = session.metrics.registry.get_sample_value
    assert (
        sample(
            "devicestate_watcher_dra_failures_published_total",
            {"class": "retryable", "reason": "FailedPrepareDynamicResources"},
        )
        == 2
    )
    assert session.summary.object_versions == {}


async def test_events_are_not_read_when_the_setting_is_off(
    publisher: FakePublisher, tmp_path: Path
) -> None:
    path = tmp_path / "failures.jsonl"
    path.write_bytes(line("ADDED", {"kind": "Event", **event("e1")}) + b"\n")
    session = WatchSession(publisher, WatcherMetrics(), WatchSummary(source="test"))
    await run_file(session, path, Settings(watch_events=False))
    assert not [r for r in publisher.records if isinstance(r, DRAFailureObserved)]
    assert session.summary.ignored["kind Event"] == 1
