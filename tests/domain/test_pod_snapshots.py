"""Restart memory (issue 11 item 7): LIST snapshots and per-Pod tombstones in the directory fold,
their wire form and their chunking."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest

from services.domain.codec import EventDecodeError
from services.domain.directory import Outcome, apply_event, fold, tombstones_of
from services.domain.event_codec import decode_event, encode_event
from services.domain.events import (
    ContainerRef,
    DeviceHealthObserved,
    DeviceSource,
    Event,
    Health,
    PodDevicesReleased,
    PodsListed,
    ReleaseReason,
)
from services.domain.record_size import fit_events
from services.domain.tombstones import TOMBSTONE_RETENTION, Tombstone, retained

AT = datetime(2026, 12, 2, 1, 0, tzinfo=UTC)
NODE = "gpu-node-a"


def observed(uid: str, gpu: str, version: int | None, node: str = NODE) -> DeviceHealthObserved:
    return DeviceHealthObserved(
        node=node,
        namespace="ns",
        pod_name=f"pod-{uid}",
        pod_uid=uid,
        containers=(ContainerRef("main"),),
        resource_name="nvidia.com/gpu",
        resource_id=gpu,
        health=Health.HEALTHY,
        source=DeviceSource.DEVICE_PLUGIN,
        status_version=version,
        observed_at=AT,
    )


def listed(version: int | None, *uids: str, node: str = NODE) -> PodsListed:
    return PodsListed(node=node, list_version=version, observed_at=AT, pod_uids=tuple(uids))


def holders(devices: dict, gpu: str, node: str = NODE) -> list[str]:
    return [a.pod_uid for a in devices[(node, gpu)].allocations]


def test_a_snapshot_releases_the_pods_that_vanished_before_the_list() -> None:
    devices = fold([observed("uid-a", "GPU-0", 10), observed("uid-b", "GPU-1", 11)])
    # The watcher was down while uid-a was deleted; its LIST at 50 lists uid-b only.
    after = fold([listed(50, "uid-b")], devices)
    assert holders(after, "GPU-0") == []
    assert holders(after, "GPU-1") == ["uid-b"]
    assert after[(NODE, "GPU-0")].health is Health.HEALTHY  # health is not a release's business


def test_a_snapshot_keeps_pods_observed_after_its_list() -> None:
    # uid-c was created after the LIST's snapshot (observed at 60 > 50): not released.
    devices = fold([observed("uid-c", "GPU-0", 60)])
    assert holders(fold([listed(50)], devices), "GPU-0") == ["uid-c"]


def test_a_snapshot_touches_only_its_node_and_needs_a_list_version() -> None:
    devices = fold([observed("uid-a", "GPU-0", 10), observed("uid-x", "GPU-0", 12, node="other")])
    after = fold([listed(50)], dict(devices))
    assert holders(after, "GPU-0") == [] and holders(after, "GPU-0", "other") == ["uid-x"]
    # Without a comparable LIST version a Pod older than the LIST cannot be told apart.
    assert holders(fold([listed(None)], dict(devices)), "GPU-0") == ["uid-a"]


def test_a_snapshot_chunk_releases_only_within_its_uid_range() -> None:
    devices = fold([observed("uid-a", "GPU-0", 10), observed("uid-m", "GPU-1", 10)])
    chunk = replace(listed(50), uid_from="uid-k")  # uid-a is another chunk's business
    changes = apply_event(devices, chunk)
    assert [(c.key, c.outcome) for c in changes] == [((NODE, "GPU-1"), Outcome.RELEASED)]
    assert [a.pod_uid for a in changes[0].released] == ["uid-m"]


def test_a_release_leaves_a_tombstone_and_an_older_observation_adds_no_allocation() -> None:
    release = PodDevicesReleased(
        NODE, "ns", "pod-uid-a", "uid-a", ReleaseReason.DELETED, 20, AT, ("GPU-0",)
    )
    tombstones: dict[str, Tombstone] = {}
    # The producer's retry reordered the observation at 15 after the release at 20.
    log: list[Event] = [observed("uid-a", "GPU-0", 10), release, observed("uid-a", "GPU-0", 15)]
    devices = fold(log, tombstones=tombstones)
    assert tombstones == {"uid-a": Tombstone("uid-a", NODE, 20, AT)}
    assert holders(devices, "GPU-0") == []
    assert devices[(NODE, "GPU-0")].status_version == 15  # the device's health still moves on
    [change] = apply_event(devices, observed("uid-a", "GPU-0", 19), tombstones)
    assert change.outcome is Outcome.APPLIED and change.tombstoned
    assert change.record.allocations == ()
    # A state of the Pod after its release (a terminal phase reported early) is applied.
    [newer] = apply_event(devices, observed("uid-a", "GPU-0", 21), tombstones)
    assert not newer.tombstoned and [a.pod_uid for a in newer.record.allocations] == ["uid-a"]


def test_without_tombstones_the_older_observation_would_add_the_allocation_back() -> None:
    release = PodDevicesReleased(NODE, "ns", "pod-uid-a", "uid-a", ReleaseReason.DELETED, 20, AT)
    devices = fold([observed("uid-a", "GPU-0", 10), release])
    [change] = apply_event(devices, observed("uid-a", "GPU-0", 15))  # no tombstones given
    assert [a.pod_uid for a in change.record.allocations] == ["uid-a"]


def test_a_snapshot_release_leaves_tombstones_at_the_list_version() -> None:
    devices = fold([observed("uid-a", "GPU-0", 10), observed("uid-b", "GPU-1", 11)])
    snapshot = listed(50, "uid-b")
    changes = apply_event(devices, snapshot)
    assert tombstones_of(snapshot, changes) == [Tombstone("uid-a", NODE, 50, AT)]
    tombstones: dict[str, Tombstone] = {}
    after = fold([snapshot, observed("uid-a", "GPU-0", 40)], devices, tombstones)
    assert holders(after, "GPU-0") == []


def test_tombstones_are_kept_for_the_retention_before_the_newest() -> None:
    old = Tombstone("uid-old", NODE, 5, AT - TOMBSTONE_RETENTION - timedelta(seconds=1))
    edge = Tombstone("uid-edge", NODE, 6, AT - TOMBSTONE_RETENTION)
    new = Tombstone("uid-new", NODE, 7, AT)
    kept = retained({t.pod_uid: t for t in (old, edge, new)})
    assert sorted(kept) == ["uid-edge", "uid-new"]


def test_a_snapshot_round_trips_and_bad_ranges_are_refused() -> None:
    snapshot = replace(listed(2**70, "uid-b", "uid-c"), uid_from="uid-b", uid_to="uid-d")
    assert decode_event(encode_event(snapshot)) == snapshot
    outside = replace(snapshot, pod_uids=("uid-a",))
    with pytest.raises(EventDecodeError, match="outside"):
        decode_event(encode_event(outside))
    with pytest.raises(EventDecodeError, match="uidTo"):
        decode_event(encode_event(replace(snapshot, uid_to="uid-a", pod_uids=())))


def test_a_large_snapshot_is_split_into_self_sufficient_chunks() -> None:
    uids = [f"{i:08d}-0000-4000-8000-000000000000" for i in range(400)]
    whole = listed(50, *uids[::2])  # every other Pod is still there
    budget = 2000
    chunks = fit_events([whole], budget).events
    assert len(chunks) >= 5
    assert all(len(encode_event(c)) <= budget for c in chunks)
    assert all(isinstance(c, PodsListed) for c in chunks)
    # The ranges tile the whole UID space, in order.
    ranges = [(c.uid_from, c.uid_to) for c in chunks if isinstance(c, PodsListed)]
    assert ranges[0][0] == "" and ranges[-1][1] is None
    assert all(a[1] == b[0] for a, b in pairwise(ranges))
    # Applied one by one, the chunks release what the whole snapshot releases.
    devices = fold([observed(uid, f"GPU-{i}", 10) for i, uid in enumerate(uids)])
    assert fold(chunks, dict(devices)) == fold([whole], dict(devices))
    assert sum(not d.allocations for d in fold(chunks, dict(devices)).values()) == 200
