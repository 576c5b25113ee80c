"""Terminated Pods (issue 15 item 2): post-mortem faults applied, frozen Healthy recorded only, no
release for a Pod that never held a device, and a bounded tombstone in the watcher's memory."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.domain.codec import EventDecodeError
from services.domain.directory import Outcome, apply_event, fold
from services.domain.event_codec import decode_event, encode_event
from services.domain.events import (
    DeviceHealthObserved,
    Event,
    Health,
    PodDevicesReleased,
    ReleaseReason,
)
from services.domain.pod_reader import read_pod
from services.domain.watch.pod_tombstones import PodTombstones
from services.domain.watch.pod_tracker import PodTracker, WatchKind
from tests.domain.test_directory import OBS
from tests.domain.test_pod_tracker import T0, make_pod


def _apply(tracker: PodTracker, kind: WatchKind, pod: dict[str, object]) -> list[object]:
    return list(tracker.apply(kind, read_pod(pod, T0)))


def test_post_mortem_unhealthy_on_a_failed_pod_is_published_with_pod_terminated() -> None:
    tracker = PodTracker()
    _apply(tracker, WatchKind.ADDED, make_pod({"GPU-0": "Healthy"}, "100"))
    terminal = _apply(
        tracker, WatchKind.MODIFIED, make_pod({"GPU-0": "Healthy"}, "110", phase="Failed")
    )
    assert [type(e).__name__ for e in terminal] == ["PodDevicesReleased"]
    assert "uid-1" not in tracker and "uid-1" in tracker.tombstones
    (late,) = _apply(
        tracker, WatchKind.MODIFIED, make_pod({"GPU-0": "Unhealthy"}, "120", phase="Failed")
    )
    assert isinstance(late, DeviceHealthObserved)
    assert (late.health, late.status_version, late.pod_terminated, late.frozen) == (
        Health.UNHEALTHY,
        120,
        True,
        False,
    )
    # The version guard still holds for the tombstone: an older or repeated state is no news.
    stale = make_pod({"GPU-0": "Healthy"}, "115", phase="Failed")
    assert _apply(tracker, WatchKind.MODIFIED, stale) == []
    # A newer update that changes no device (a finalizer removed) publishes nothing either.
    same = make_pod({"GPU-0": "Unhealthy"}, "130", phase="Failed")
    assert _apply(tracker, WatchKind.MODIFIED, same) == []
    assert _apply(tracker, WatchKind.DELETED, same) == []
    assert "uid-1" not in tracker.tombstones


def test_a_pod_that_never_held_a_device_is_never_released() -> None:
    tracker = PodTracker()
    _apply(tracker, WatchKind.ADDED, make_pod({}, "100"))
    assert _apply(tracker, WatchKind.MODIFIED, make_pod({}, "110", phase="Failed")) == []
    assert len(tracker) == 0 and len(tracker.tombstones) == 1
    assert _apply(tracker, WatchKind.DELETED, make_pod({}, "120", phase="Failed")) == []
    running = make_pod({}, "100", uid="uid-2")
    _apply(tracker, WatchKind.ADDED, running)
    assert _apply(tracker, WatchKind.DELETED, running) == []
    _apply(tracker, WatchKind.ADDED, make_pod({}, "100", uid="uid-3"))
    assert tracker.reconcile([], 200, T0) == []


def test_a_flood_of_failed_pods_keeps_a_bounded_tombstone_set() -> None:
    tracker = PodTracker(tombstone_limit=10)
    events = []
    for n in range(60):
        pod = make_pod({}, str(100 + n), uid=f"uid-{n:03}", phase="Failed")
        events += _apply(tracker, WatchKind.ADDED, pod)
    assert events == [] and len(tracker) == 0
    assert list(tracker.tombstones) == [f"uid-{n:03}" for n in range(50, 60)]


def test_relist_reemits_a_tombstoned_pod_only_when_its_devices_changed() -> None:
    tracker = PodTracker()
    _apply(tracker, WatchKind.ADDED, make_pod({"GPU-0": "Healthy"}, "100"))
    _apply(tracker, WatchKind.MODIFIED, make_pod({"GPU-0": "Healthy"}, "110", phase="Failed"))
    same = read_pod(make_pod({"GPU-0": "Healthy"}, "110", phase="Failed"), T0)
    assert tracker.reconcile([same], 200, T0) == []
    changed = read_pod(make_pod({"GPU-0": "Unknown"}, "150", phase="Failed"), T0)
    (late,) = tracker.reconcile([changed], 200, T0)
    assert isinstance(late, DeviceHealthObserved) and late.health is Health.UNKNOWN
    assert tracker.reconcile([], 300, T0) == [] and len(tracker.tombstones) == 0


def test_a_pod_first_seen_terminal_publishes_frozen_observations_and_its_release() -> None:
    tracker = PodTracker()
    events = _apply(
        tracker,
        WatchKind.ADDED,
        make_pod({"GPU-0": "Healthy", "GPU-1": "Unhealthy"}, "100", phase="Succeeded"),
    )
    observed = [e for e in events if isinstance(e, DeviceHealthObserved)]
    assert [(o.resource_id, o.frozen) for o in observed] == [("GPU-0", True), ("GPU-1", False)]
    assert isinstance(events[-1], PodDevicesReleased)


def test_pod_terminated_round_trips_and_is_absent_when_false() -> None:
    assert b"podTerminated" not in encode_event(OBS)
    terminated = replace(OBS, pod_terminated=True)
    assert decode_event(encode_event(terminated)) == terminated
    bad = encode_event(terminated).replace(b'"podTerminated":true', b'"podTerminated":"yes"')
    with pytest.raises(EventDecodeError, match="podTerminated"):
        decode_event(bad)


def test_a_frozen_healthy_is_recorded_but_changes_nothing() -> None:
    bad = replace(OBS, health=Health.UNHEALTHY, status_version=100)
    frozen = replace(OBS, status_version=120, pod_terminated=True)
    state = fold([bad])
    [change] = apply_event(state, frozen)
    assert change.outcome is Outcome.FROZEN and not change.transition
    assert change.record == state[OBS.device_key]
    # The version guard holds for it as for any observation.
    assert apply_event(state, replace(frozen, status_version=90))[0].outcome is Outcome.STALE


def test_a_post_mortem_unhealthy_is_applied_without_adding_an_allocation() -> None:
    late = replace(OBS, health=Health.UNHEALTHY, status_version=120, pod_terminated=True)
    released = PodDevicesReleased(
        node=OBS.node,
        namespace=OBS.namespace,
        pod_name=OBS.pod_name,
        pod_uid=OBS.pod_uid,
        reason=ReleaseReason.TERMINATED,
        status_version=110,
        observed_at=OBS.observed_at,
        resource_ids=(OBS.resource_id,),
    )
    state = fold([OBS, released, late])
    record = state[OBS.device_key]
    assert record.health is Health.UNHEALTHY and record.allocations == ()


@given(st.lists(st.sampled_from(list(Health)), min_size=1, max_size=8))
def test_frozen_observations_never_change_a_known_device(healths: list[Health]) -> None:
    first = replace(OBS, health=Health.UNHEALTHY)
    events = [first] + [
        replace(OBS, health=h, status_version=101 + n, pod_terminated=True)
        for n, h in enumerate(healths)
    ]
    state = fold(list[Event](events))
    applied = [e for e in events[1:] if not e.frozen]
    expected = applied[-1].health if applied else Health.UNHEALTHY
    assert state[OBS.device_key].health is expected


def test_tombstones_refuse_a_zero_bound() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        PodTombstones(0)
