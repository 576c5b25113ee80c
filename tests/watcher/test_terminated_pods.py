"""The watcher over a flood of Failed Pods (issue 15 item 2), file mode through the real session:
62 events, 60 of them Pods that never held a device. Only the two Pods with a GPU are released;
the released terminal Pods leave the tracked set and are counted as tombstones."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from services.domain.events import DeviceHealthObserved, PodDevicesReleased
from services.processes.watcher.file_source import HarnessClock
from services.processes.watcher.metrics import WatcherMetrics
from services.processes.watcher.run import run_file
from services.processes.watcher.session import WatchSession
from services.processes.watcher.summary import WatchSummary
from services.runtime.config import Settings
from tests.domain.test_pod_tracker import make_pod
from tests.fakes.event_publisher import FakePublisher

WALL = datetime(2030, 1, 1, tzinfo=UTC)


async def test_a_flood_of_failed_pods_publishes_releases_only_for_pods_with_devices(
    tmp_path: Path,
) -> None:
    lines: list[dict[str, Any]] = [{"type": "_CLOCK", "now": "2026-12-01T10:00:00Z"}]
    for n in range(60):
        lines.append(
            {
                "type": "ADDED",
                "object": make_pod({}, str(1000 + n), uid=f"empty-{n:02}", phase="Failed"),
            }
        )
    lines.append({"type": "ADDED", "object": make_pod({"GPU-0": "Healthy"}, "2000", uid="gpu-0")})
    lines.append(
        {
            "type": "MODIFIED",
            "object": make_pod({"GPU-0": "Healthy"}, "2001", uid="gpu-0", phase="Failed"),
        }
    )
    path = tmp_path / "flood.jsonl"
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    publisher = FakePublisher()
    metrics = WatcherMetrics()
    session = WatchSession(
        publisher, metrics, WatchSummary(source="test"), clock=HarnessClock(wall=lambda: WALL)
    )
    await run_file(session, path, Settings())
    released = [r for r in publisher.records if isinstance(r, PodDevicesReleased)]
    assert [r.pod_uid for r in released] == ["gpu-0"]
    observed = [r for r in publisher.records if isinstance(r, DeviceHealthObserved)]
    assert [(o.pod_uid, o.pod_terminated) for o in observed] == [("gpu-0", False)]
    assert metrics.registry.get_sample_value("devicestate_watcher_pods_tracked") == 0
    assert metrics.registry.get_sample_value("devicestate_watcher_pod_tombstones") == 61
