"""Properties of the PodTracker over generated Pods and watch histories."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from services.domain.events import DeviceHealthObserved
from services.domain.pod_reader import read_pod
from services.domain.watch.pod_tracker import PodTracker, WatchKind

AT = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
RESOURCE_IDS = ("GPU-0", "GPU-1", "GPU-2", "common", "drv/pool/dev-3")
HEALTHS = ("Healthy", "Unhealthy", "Unknown", "Degraded", None)
CONTAINERS = ("main", "sidecar")
UIDS = ("uid-1", "uid-2")

resource_versions = st.one_of(
    st.integers(min_value=1, max_value=50).map(str), st.just(None), st.just("v2-abc")
)


@st.composite
def resources(draw: st.DrawFn) -> list[dict[str, Any]]:
    items = []
    for resource_id in draw(st.lists(st.sampled_from(RESOURCE_IDS), max_size=5)):
        item: dict[str, Any] = {"resourceID": resource_id}
        health = draw(st.sampled_from(HEALTHS))
        if health is not None:
            item["health"] = health
        message = draw(st.one_of(st.none(), st.sampled_from(["ECC", "XID 79"])))
        if message is not None:
            item["message"] = message
        items.append(item)
    return items


@st.composite
def pods(draw: st.DrawFn, uid: str | None = None) -> dict[str, Any]:
    statuses = []
    for container in draw(
        st.lists(st.sampled_from(CONTAINERS), min_size=1, max_size=2, unique=True)
    ):
        entries = [
            {"name": name, "resources": draw(resources())}
            for name in draw(
                st.lists(st.sampled_from(["nvidia.com/gpu", "claim:g/r"]), max_size=2, unique=True)
            )
        ]
        statuses.append({"name": container, "allocatedResourcesStatus": entries})
    metadata: dict[str, Any] = {
        "name": "p",
        "namespace": "ns",
        "uid": uid or draw(st.sampled_from(UIDS)),
    }
    version = draw(resource_versions)
    if version is not None:
        metadata["resourceVersion"] = version
    return {
        "metadata": metadata,
        "spec": {"nodeName": "gpu-node-a", "containers": [{"name": c} for c in CONTAINERS]},
        "status": {
            "phase": draw(st.sampled_from(["Running", "Running", "Running", "Failed"])),
            "containerStatuses": statuses,
        },
    }


watch_events = st.tuples(st.sampled_from(list(WatchKind)), pods())


def with_version(pod: dict[str, Any], version: int) -> dict[str, Any]:
    changed = copy.deepcopy(pod)
    changed["metadata"]["resourceVersion"] = str(version)
    return changed


@given(pods(uid="uid-1"), st.randoms(use_true_random=False))
def test_shuffling_resources_emits_nothing(pod: dict[str, Any], rnd: Any) -> None:
    tracker = PodTracker()
    tracker.apply(WatchKind.ADDED, read_pod(with_version(pod, 10), AT))
    shuffled = with_version(pod, 11)
    for status in shuffled["status"]["containerStatuses"]:
        rnd.shuffle(status["allocatedResourcesStatus"])
        for entry in status["allocatedResourcesStatus"]:
            rnd.shuffle(entry["resources"])
    rnd.shuffle(shuffled["status"]["containerStatuses"])
    assert tracker.apply(WatchKind.MODIFIED, read_pod(shuffled, AT)) == []


@given(st.lists(watch_events, max_size=8), watch_events)
def test_replaying_a_watch_event_emits_nothing_the_second_time(
    history: list[tuple[WatchKind, dict[str, Any]]], last: tuple[WatchKind, dict[str, Any]]
) -> None:
    tracker = PodTracker()
    for kind, pod in history:
        tracker.apply(kind, read_pod(pod, AT))
    kind, pod = last
    tracker.apply(kind, read_pod(pod, AT))
    assert tracker.apply(kind, read_pod(pod, AT)) == []


@given(
    st.lists(watch_events, max_size=6),
    pods(uid="uid-1"),
    pods(uid="uid-1"),
    st.integers(min_value=2, max_value=100),
    st.integers(min_value=0, max_value=99),
    st.sampled_from([WatchKind.ADDED, WatchKind.MODIFIED]),
)
def test_an_older_resource_version_after_a_newer_one_emits_nothing(
    history: list[tuple[WatchKind, dict[str, Any]]],
    newer: dict[str, Any],
    older: dict[str, Any],
    version: int,
    back: int,
    kind: WatchKind,
) -> None:
    tracker = PodTracker()
    for past_kind, pod in history:
        tracker.apply(past_kind, read_pod(pod, AT))
    tracker.apply(WatchKind.MODIFIED, read_pod(with_version(newer, version), AT))
    stale = with_version(older, max(1, version - back))
    assert tracker.apply(kind, read_pod(stale, AT)) == []


@given(
    st.lists(st.tuples(st.sampled_from([WatchKind.ADDED, WatchKind.MODIFIED]), pods()), max_size=10)
)
def test_every_pod_is_released_exactly_once(
    history: list[tuple[WatchKind, dict[str, Any]]],
) -> None:
    tracker = PodTracker()
    events = []
    last_seen: dict[str, dict[str, Any]] = {}
    for kind, pod in history:
        events += tracker.apply(kind, read_pod(pod, AT))
        last_seen[pod["metadata"]["uid"]] = pod
    for pod in last_seen.values():  # then every Pod is deleted
        events += tracker.apply(WatchKind.DELETED, read_pod(pod, AT))
    released = [e.pod_uid for e in events if e.type == "PodDevicesReleased"]
    observations = [e for e in events if isinstance(e, DeviceHealthObserved)]
    # A Pod that reported a device while running (an allocation) is released once; one that only
    # ever reported devices after it terminated may be (it holds none); any other never is.
    assert len(released) == len(set(released))
    assert {o.pod_uid for o in observations if not o.pod_terminated} <= set(released)
    assert set(released) <= {o.pod_uid for o in observations}
    assert len(tracker) == 0
    assert len(tracker.tombstones) == 0
