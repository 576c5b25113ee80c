"""Examples of the directory fold's rules (services/domain/directory.py)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from services.domain.directory import Outcome, apply_event, fold
from services.domain.events import (
    ContainerKind,
    ContainerRef,
    DeviceHealthObserved,
    DeviceSource,
    Health,
    PodDevicesReleased,
    ReleaseReason,
)
from tests.domain.strategies import EPOCH

OBS = DeviceHealthObserved(
    node="gpu-node-a",
    namespace="ml",
    pod_name="train-0",
    pod_uid="uid-0",
    containers=(ContainerRef("trainer", ContainerKind.REGULAR),),
    resource_name="nvidia.com/gpu",
    resource_id="GPU-1",
    health=Health.HEALTHY,
    source=DeviceSource.DEVICE_PLUGIN,
    status_version=100,
    observed_at=EPOCH,
)


def test_first_observation_creates_the_device_as_a_transition() -> None:
    [change] = apply_event({}, OBS)
    assert change.outcome is Outcome.APPLIED and change.transition
    assert change.record.last_transition_at == EPOCH
    assert [a.pod_uid for a in change.record.allocations] == ["uid-0"]


def test_same_health_at_newer_version_is_applied_without_transition() -> None:
    later = replace(OBS, status_version=101, observed_at=EPOCH + timedelta(seconds=30))
    state = fold([OBS])
    [change] = apply_event(state, later)
    assert change.outcome is Outcome.APPLIED and not change.transition
    assert change.record.last_transition_at == EPOCH
    assert change.record.last_observed_at == EPOCH + timedelta(seconds=30)


def test_unhealthy_then_older_healthy_keeps_unhealthy() -> None:
    """stream-08: the 81020 Healthy arriving after 81040 Unhealthy is stale."""
    bad = replace(OBS, status_version=81040, health=Health.UNHEALTHY)
    old = replace(OBS, status_version=81020)
    state = fold([bad, old])
    assert state[OBS.device_key].health is Health.UNHEALTHY
    assert apply_event(state, old)[0].outcome is Outcome.STALE


def test_exact_repeat_is_a_duplicate() -> None:
    state = fold([OBS])
    assert apply_event(state, OBS)[0].outcome is Outcome.DUPLICATE


def test_second_pod_adds_an_allocation_and_release_removes_only_its_own() -> None:
    other = replace(OBS, pod_uid="uid-1", pod_name="train-1", status_version=105)
    release = PodDevicesReleased(
        node="gpu-node-a",
        namespace="ml",
        pod_name="train-0",
        pod_uid="uid-0",
        reason=ReleaseReason.DELETED,
        status_version=110,
        observed_at=EPOCH,
    )
    state = fold([OBS, other])
    assert [a.pod_uid for a in state[OBS.device_key].allocations] == ["uid-0", "uid-1"]
    state = fold([release], state)
    record = state[OBS.device_key]
    assert [a.pod_uid for a in record.allocations] == ["uid-1"]
    assert record.health is Health.HEALTHY and record.status_version == 105


def test_release_on_another_node_touches_nothing() -> None:
    release = PodDevicesReleased(
        node="gpu-node-b",
        namespace="ml",
        pod_name="train-0",
        pod_uid="uid-0",
        reason=ReleaseReason.DELETED,
        status_version=110,
        observed_at=EPOCH,
    )
    assert apply_event(fold([OBS]), release) == []


def test_release_older_than_the_allocation_keeps_it() -> None:
    release = PodDevicesReleased(
        node="gpu-node-a",
        namespace="ml",
        pod_name="train-0",
        pod_uid="uid-0",
        reason=ReleaseReason.TERMINATED,
        status_version=99,
        observed_at=EPOCH,
    )
    assert apply_event(fold([OBS]), release) == []
