"""Hypothesis strategies for device-health event logs (shared by property tests)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import strategies as st

from services.domain.events import (
    ContainerKind,
    ContainerRef,
    DeviceHealthObserved,
    DeviceSource,
    Event,
    Health,
    PodDevicesReleased,
    PodsListed,
    ReleaseReason,
)

NODES = ("gpu-node-a", "gpu-node-b")
RESOURCE_IDS = ("GPU-0", "GPU-1", "gpu.example.com/pool-a/gpu-2")
PODS = (("ns-a", "pod-1", "uid-1"), ("ns-a", "pod-2", "uid-2"), ("ns-b", "pod-3", "uid-3"))
EPOCH = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)

versions = st.one_of(st.none(), st.integers(min_value=1, max_value=40), st.just(2**70))
times = st.integers(min_value=0, max_value=3600).map(lambda s: EPOCH + timedelta(seconds=s))


@st.composite
def observations(draw: st.DrawFn) -> DeviceHealthObserved:
    namespace, name, uid = draw(st.sampled_from(PODS))
    resource_id = draw(st.sampled_from(RESOURCE_IDS))
    return DeviceHealthObserved(
        node=draw(st.sampled_from(NODES)),
        namespace=namespace,
        pod_name=name,
        pod_uid=uid,
        containers=(ContainerRef("main", ContainerKind.REGULAR),),
        resource_name="nvidia.com/gpu",
        resource_id=resource_id,
        health=draw(st.sampled_from(list(Health))),
        source=DeviceSource.DRA if "/" in resource_id else DeviceSource.DEVICE_PLUGIN,
        status_version=draw(versions),
        observed_at=draw(times),
        message=draw(st.one_of(st.none(), st.sampled_from(["ECC error", "XID 79"]))),
    )


@st.composite
def releases(draw: st.DrawFn) -> PodDevicesReleased:
    namespace, name, uid = draw(st.sampled_from(PODS))
    return PodDevicesReleased(
        node=draw(st.sampled_from(NODES)),
        namespace=namespace,
        pod_name=name,
        pod_uid=uid,
        reason=draw(st.sampled_from(list(ReleaseReason))),
        status_version=draw(versions),
        observed_at=draw(times),
    )


@st.composite
def snapshots(draw: st.DrawFn) -> PodsListed:
    """A snapshot of a node, whole or one chunk of a UID range."""
    uid_from, uid_to = draw(st.sampled_from([("", None), ("", "uid-2"), ("uid-2", None)]))
    uids = [uid for _, _, uid in PODS if uid >= uid_from and (uid_to is None or uid < uid_to)]
    listed = draw(st.lists(st.sampled_from(uids), unique=True)) if uids else []
    return PodsListed(
        node=draw(st.sampled_from(NODES)),
        list_version=draw(versions),
        observed_at=draw(times),
        pod_uids=tuple(sorted(listed)),
        uid_from=uid_from,
        uid_to=uid_to,
    )


events: st.SearchStrategy[Event] = st.one_of(
    observations(), observations(), releases(), snapshots()
)
event_logs = st.lists(events, max_size=40)
