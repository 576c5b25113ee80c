"""PodTracker: watch events about Pods -> only the device events that changed."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from services.domain.events import (
    DeviceHealthObserved,
    Event,
    Health,
    PodDevicesReleased,
    ReleaseReason,
)
from services.domain.pod_reader import read_pod
from services.domain.pod_status import PodReading
from services.domain.watch.pod_tracker import PodTracker, WatchKind, fingerprint

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


def make_pod(
    devices: Mapping[str, str | None],
    version: str | None = "100",
    *,
    uid: str = "uid-1",
    name: str = "train-0",
    node: str | None = "gpu-node-a",
    phase: str = "Running",
    message: str | None = None,
    containers: tuple[str, ...] = ("main",),
    entry_name: str = "nvidia.com/gpu",
) -> dict[str, Any]:
    """A raw Pod whose containers all report ``devices`` (resourceID -> health, in that order)."""
    resources = []
    for resource_id, health in devices.items():
        item: dict[str, Any] = {"resourceID": resource_id}
        if health is not None:
            item["health"] = health
        if message is not None:
            item["message"] = message
        resources.append(item)
    metadata: dict[str, Any] = {"name": name, "namespace": "ml", "uid": uid}
    if version is not None:
        metadata["resourceVersion"] = version
    spec: dict[str, Any] = {"containers": [{"name": c} for c in containers]}
    if node is not None:
        spec["nodeName"] = node
    statuses = [
        {"name": c, "allocatedResourcesStatus": [{"name": entry_name, "resources": resources}]}
        for c in containers
    ]
    return {
        "metadata": metadata,
        "spec": spec,
        "status": {"phase": phase, "containerStatuses": statuses},
    }


def reading(raw: dict[str, Any], at: float = 0) -> PodReading:
    return read_pod(raw, T0 + timedelta(seconds=at))


def observed(events: list[Event]) -> list[tuple[str, Health, int | None]]:
    return [
        (e.resource_id, e.health, e.status_version)
        for e in events
        if isinstance(e, DeviceHealthObserved)
    ]


def released(events: list[Event]) -> list[PodDevicesReleased]:
    return [e for e in events if isinstance(e, PodDevicesReleased)]


def test_first_sight_emits_every_device() -> None:
    tracker = PodTracker()
    events = tracker.apply(
        WatchKind.ADDED, reading(make_pod({"GPU-1": "Healthy", "GPU-0": "Healthy"}))
    )
    assert observed(events) == [("GPU-0", Health.HEALTHY, 100), ("GPU-1", Health.HEALTHY, 100)]
    assert len(tracker) == 1 and "uid-1" in tracker


def test_only_changed_devices_are_emitted() -> None:
    tracker = PodTracker()
    tracker.apply(WatchKind.ADDED, reading(make_pod({"GPU-0": "Healthy", "GPU-1": "Healthy"})))
    events = tracker.apply(
        WatchKind.MODIFIED,
        reading(make_pod({"GPU-1": "Unhealthy", "GPU-0": "Healthy"}, "101"), at=5),
    )
    assert observed(events) == [("GPU-1", Health.UNHEALTHY, 101)]
    assert events[0].observed_at == T0 + timedelta(seconds=5)


def test_same_health_under_a_new_version_emits_nothing() -> None:
    tracker = PodTracker()
    tracker.apply(WatchKind.ADDED, reading(make_pod({"GPU-0": "Healthy"})))
    assert tracker.apply(WatchKind.MODIFIED, reading(make_pod({"GPU-0": "Healthy"}, "105"))) == []
    tracked = tracker.get("uid-1")
    assert tracked is not None and tracked.status_version == 105


def test_message_containers_and_flags_are_part_of_the_comparison() -> None:
    tracker = PodTracker()
    tracker.apply(WatchKind.ADDED, reading(make_pod({"dev": "Unhealthy"}, "1")))
    steps = [
        make_pod({"dev": "Unhealthy"}, "2", message="ECC"),
        make_pod({"dev": "Unhealthy"}, "3", message="ECC", containers=("main", "side")),
        make_pod(
            {"dev": "Unhealthy"},
            "4",
            message="ECC",
            containers=("main", "side"),
            entry_name="claim:g",
        ),
        make_pod(
            {"dev": "unhealthy"},
            "5",
            message="ECC",
            containers=("main", "side"),
            entry_name="claim:g",
        ),
    ]
    for raw in steps:
        assert len(observed(tracker.apply(WatchKind.MODIFIED, reading(raw)))) == 1


def test_older_or_equal_resource_version_is_ignored() -> None:
    tracker = PodTracker()
    tracker.apply(WatchKind.ADDED, reading(make_pod({"GPU-0": "Healthy"}, "100")))
    tracker.apply(WatchKind.MODIFIED, reading(make_pod({"GPU-0": "Unhealthy"}, "140")))
    assert tracker.apply(WatchKind.MODIFIED, reading(make_pod({"GPU-0": "Healthy"}, "120"))) == []
    assert tracker.apply(WatchKind.MODIFIED, reading(make_pod({"GPU-0": "Healthy"}, "140"))) == []
    after = tracker.apply(WatchKind.MODIFIED, reading(make_pod({"GPU-0": "Healthy"}, "141")))
    assert observed(after) == [("GPU-0", Health.HEALTHY, 141)]


def test_unordered_readings_are_processed_but_do_not_lower_the_version() -> None:
    tracker = PodTracker()
    tracker.apply(WatchKind.ADDED, reading(make_pod({"GPU-0": "Healthy"}, "100")))
    events = tracker.apply(WatchKind.MODIFIED, reading(make_pod({"GPU-0": "Unhealthy"}, None)))
    assert observed(events) == [("GPU-0", Health.UNHEALTHY, None)]
    # The newest comparable version is still 100: an older ordered event stays stale.
    assert tracker.apply(WatchKind.MODIFIED, reading(make_pod({"GPU-0": "Healthy"}, "90"))) == []


def test_terminal_phase_releases_once() -> None:
    tracker = PodTracker()
    tracker.apply(WatchKind.ADDED, reading(make_pod({"GPU-0": "Unhealthy"}, "100")))
    events = tracker.apply(
        WatchKind.MODIFIED, reading(make_pod({"GPU-0": "Unhealthy"}, "110", phase="Failed"), at=9)
    )
    (release,) = events
    assert isinstance(release, PodDevicesReleased)
    assert (release.reason, release.status_version, release.resource_ids) == (
        ReleaseReason.TERMINATED,
        110,
        ("GPU-0",),
    )
    assert (release.node, release.pod_uid, release.observed_at) == (
        "gpu-node-a",
        "uid-1",
        T0 + timedelta(seconds=9),
    )
    later = make_pod({"GPU-0": "Healthy"}, "120", phase="Failed")
    # A Healthy after termination is published frozen (issue 15 item 2); no second release.
    (frozen,) = tracker.apply(WatchKind.MODIFIED, reading(later))
    assert isinstance(frozen, DeviceHealthObserved)
    assert (frozen.health, frozen.pod_terminated, frozen.frozen) == (Health.HEALTHY, True, True)
    assert tracker.apply(WatchKind.DELETED, reading(later)) == []
    assert "uid-1" not in tracker
    assert "uid-1" not in tracker.tombstones


def test_health_change_in_the_terminal_update_comes_before_the_release() -> None:
    tracker = PodTracker()
    tracker.apply(WatchKind.ADDED, reading(make_pod({"GPU-0": "Healthy"}, "100")))
    events = tracker.apply(
        WatchKind.MODIFIED, reading(make_pod({"GPU-0": "Unhealthy"}, "110", phase="Succeeded"))
    )
    assert [type(e).__name__ for e in events] == ["DeviceHealthObserved", "PodDevicesReleased"]


def test_deleted_releases_and_forgets_without_rereading_health() -> None:
    tracker = PodTracker()
    tracker.apply(WatchKind.ADDED, reading(make_pod({"GPU-0": "Unhealthy", "GPU-1": "Healthy"})))
    # The DELETED object says Healthy: that is no news, only the allocation ends.
    events = tracker.apply(WatchKind.DELETED, reading(make_pod({"GPU-0": "Healthy"}, "130"), at=3))
    (release,) = events
    assert isinstance(release, PodDevicesReleased)
    assert (release.reason, release.status_version, release.resource_ids) == (
        ReleaseReason.DELETED,
        130,
        ("GPU-0", "GPU-1"),
    )
    assert len(tracker) == 0


def test_deleted_for_an_untracked_pod_emits_nothing() -> None:
    tracker = PodTracker()
    assert tracker.apply(WatchKind.DELETED, reading(make_pod({"GPU-0": "Healthy"}))) == []


def test_pods_without_a_node_are_not_tracked() -> None:
    tracker = PodTracker()
    assert tracker.apply(WatchKind.ADDED, reading(make_pod({}, node=None))) == []
    assert len(tracker) == 0
    scheduled = tracker.apply(WatchKind.MODIFIED, reading(make_pod({"GPU-0": "Healthy"}, "101")))
    assert observed(scheduled) == [("GPU-0", Health.HEALTHY, 101)]


def test_pod_without_uid_is_ignored() -> None:
    raw = make_pod({"GPU-0": "Healthy"})
    del raw["metadata"]["uid"]
    tracker = PodTracker()
    assert tracker.apply(WatchKind.ADDED, reading(raw)) == []
    assert len(tracker) == 0


def test_reconcile_reemits_listed_pods_and_releases_vanished_ones() -> None:
    tracker = PodTracker()
    tracker.apply(WatchKind.ADDED, reading(make_pod({"GPU-0": "Healthy"}, "100", uid="a")))
    tracker.apply(
        WatchKind.ADDED, reading(make_pod({"GPU-1": "Unhealthy"}, "101", uid="b", name="b"))
    )
    tracker.apply(
        WatchKind.ADDED,
        reading(make_pod({"GPU-2": "Healthy"}, "102", uid="c", name="c", phase="Failed")),
    )
    listed = [reading(make_pod({"GPU-0": "Healthy"}, "100", uid="a"), at=60)]
    events = tracker.reconcile(listed, 200, T0 + timedelta(seconds=60))
    # a: unchanged but re-emitted; b: vanished -> released; c: vanished but already released.
    assert observed(events) == [("GPU-0", Health.HEALTHY, 100)]
    (release,) = released(events)
    assert (release.pod_uid, release.reason, release.status_version) == (
        "b",
        ReleaseReason.DELETED,
        200,
    )
    assert release.resource_ids == ("GPU-1",)
    assert release.observed_at == T0 + timedelta(seconds=60)
    assert sorted(tracker) == ["a"]


def test_reconcile_on_an_empty_tracker_is_an_initial_list() -> None:
    tracker = PodTracker()
    events = tracker.reconcile(
        [
            reading(make_pod({"GPU-0": "Healthy"}, "100", uid="a")),
            reading(make_pod({"GPU-1": "Healthy"}, "90", uid="b", phase="Succeeded")),
            reading(make_pod({}, "95", uid="c", node=None)),
        ],
        100,
        T0,
    )
    assert observed(events) == [("GPU-0", Health.HEALTHY, 100), ("GPU-1", Health.HEALTHY, 90)]
    assert [r.pod_uid for r in released(events)] == ["b"]
    # The released terminal Pod is kept as a tombstone only.
    assert sorted(tracker) == ["a"]
    assert list(tracker.tombstones) == ["b"]


def test_reconcile_does_not_reemit_an_older_listed_state() -> None:
    tracker = PodTracker()
    tracker.apply(WatchKind.ADDED, reading(make_pod({"GPU-0": "Unhealthy"}, "150")))
    events = tracker.reconcile([reading(make_pod({"GPU-0": "Healthy"}, "120"))], 151, T0)
    assert events == []


def test_tracked_state_is_the_compact_fingerprint() -> None:
    tracker = PodTracker()
    read = reading(make_pod({"GPU-0": "Healthy"}, "100", message="ok"))
    tracker.apply(WatchKind.ADDED, read)
    tracked = tracker.get("uid-1")
    assert tracked is not None
    assert dict(tracked.devices) == {"GPU-0": fingerprint(read.observations[0])}
    assert (tracked.node, tracked.namespace, tracked.name, tracked.released) == (
        "gpu-node-a",
        "ml",
        "train-0",
        False,
    )
