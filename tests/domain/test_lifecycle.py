"""Claim lifecycle stages (issue 4, item 4): the pure reading of Pods and ResourceClaims
(services.domain.lifecycle) and the once-per-Pod tracker (services.domain.watch.lifecycle_tracker), on
hand-built Pods and on ../shared/examples (pod-01, pod-04 + dra-resourceclaim-allocated,
pod-04b, stream-05b's shared claim)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from services.domain.inventory.objects import ResourceClaimInfo, parse_resource_claim
from services.domain.lifecycle import (
    UNKNOWN_CLASS,
    ClaimLookup,
    DevicePath,
    PodClaim,
    Stage,
    pod_stage_latencies,
    read_lifecycle,
    stage_latencies,
)
from services.domain.watch.lifecycle_tracker import LifecycleTracker
from services.domain.watch.pod_tracker import WatchKind

EXAMPLES = Path(__file__).parents[2].parent / "shared" / "examples"
DRA = DevicePath.DRA
PLUGIN = DevicePath.DEVICE_PLUGIN

Row = tuple[str, str, str, float]


def load(name: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((EXAMPLES / name).read_text())
    return result


def rows(pod: dict[str, Any], claims: ClaimLookup | None = None) -> list[Row]:
    report = pod_stage_latencies(pod, claims or (lambda namespace, name: None))
    return sorted(
        (lat.stage.value, lat.device_class, lat.path.value, lat.seconds) for lat in report.latencies
    )


def lookup(*claims: dict[str, Any]) -> ClaimLookup:
    index: dict[tuple[str, str], ResourceClaimInfo] = {}
    for raw in claims:
        info = parse_resource_claim(raw)
        index[(info.namespace, info.name)] = info
    return lambda namespace, name: index.get((namespace, name))


def at(hhmmss: str) -> str:
    return f"2026-11-29T{hhmmss}Z"


def conditions(
    scheduled: str | None = "10:00:05", ready: str | None = "10:00:35"
) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = [
        {"type": "Initialized", "status": "True", "lastTransitionTime": at("10:00:06")}
    ]
    if scheduled is not None:
        result.append(
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": at(scheduled)}
        )
    if ready is not None:
        result.append({"type": "Ready", "status": "True", "lastTransitionTime": at(ready)})
    return result


def plugin_pod(
    uid: str = "uid-p",
    resources: dict[str, str] | None = None,
    created: str = "10:00:00",
    scheduled: str | None = "10:00:05",
    ready: str | None = "10:00:35",
) -> dict[str, Any]:
    limits = {"cpu": "4", "memory": "8Gi", **(resources or {"nvidia.com/gpu": "1"})}
    return {
        "metadata": {
            "name": f"pod-{uid}",
            "namespace": "ml",
            "uid": uid,
            "creationTimestamp": at(created),
        },
        "spec": {
            "nodeName": "gpu-node-a",
            "containers": [{"name": "main", "resources": {"limits": limits}}],
        },
        "status": {"phase": "Running", "conditions": conditions(scheduled, ready)},
    }


def dra_pod(
    uid: str = "uid-d",
    claims: dict[str, str | None] | None = None,
    created: str = "10:00:00",
    scheduled: str | None = "10:00:05",
    ready: str | None = "10:00:35",
) -> dict[str, Any]:
    """A Pod whose claims come from templates: pod claim name -> ResourceClaim name."""
    claims = claims if claims is not None else {"gpus": "pod-gpus-abc"}
    return {
        "metadata": {
            "name": f"pod-{uid}",
            "namespace": "ml",
            "uid": uid,
            "creationTimestamp": at(created),
        },
        "spec": {
            "nodeName": "gpu-node-a",
            "containers": [
                {"name": "main", "resources": {"claims": [{"name": n} for n in claims]}}
            ],
            "resourceClaims": [{"name": n, "resourceClaimTemplateName": "t"} for n in claims],
        },
        "status": {
            "phase": "Running",
            "conditions": conditions(scheduled, ready),
            "resourceClaimStatuses": [
                {"name": n, "resourceClaimName": c} for n, c in claims.items()
            ],
        },
    }


def claim(
    name: str = "pod-gpus-abc",
    uid: str = "claim-uid-1",
    device_class: str | None = "gpu.example.com",
    created: str | None = "10:00:01",
    allocated: str | None = "10:00:04",
) -> dict[str, Any]:
    raw = load("dra-resourceclaim-allocated.json")
    raw["metadata"].update(name=name, namespace="ml", uid=uid)
    raw["metadata"].pop("creationTimestamp")
    if created is not None:
        raw["metadata"]["creationTimestamp"] = at(created)
    request = raw["spec"]["devices"]["requests"][0]
    if device_class is None:
        request.pop("exactly")
        request["firstAvailable"] = [{"name": "a", "deviceClassName": "gpu.example.com"}]
    else:
        request["exactly"]["deviceClassName"] = device_class
    raw["status"]["allocation"].pop("allocationTimestamp")
    if allocated is not None:
        raw["status"]["allocation"]["allocationTimestamp"] = at(allocated)
    return raw


# --- the shared examples ------------------------------------------------------------------------


def test_pod_01_device_plugin_bound_and_ready() -> None:
    # created 09:55:01, PodScheduled 09:55:02, Ready 09:56:11
    assert rows(load("pod-01-single-gpu-healthy.json")) == [
        ("pod_bound", "nvidia.com/gpu", "device-plugin", 1.0),
        ("pod_ready", "nvidia.com/gpu", "device-plugin", 69.0),
    ]


def test_pod_04_known_claim_gives_all_stages_the_unknown_one_only_pod_ready() -> None:
    # gpus -> infer-dra-0-gpus-7xk2q (the example claim: created 09:55:01, allocated 09:55:02);
    # accel -> infer-dra-0-accel-m4p9z, not known.
    pod = load("pod-04-dra-claim-names.json")
    claims = lookup(load("dra-resourceclaim-allocated.json"))
    report = pod_stage_latencies(pod, claims)
    assert rows(pod, claims) == [
        ("claim_allocated", "gpu.example.com", "dra", 1.0),
        ("pod_bound", "gpu.example.com", "dra", 0.0),
        ("pod_ready", "gpu.example.com", "dra", 69.0),
        ("pod_ready", UNKNOWN_CLASS, "dra", 69.0),
    ]
    assert report.unknown_claims == [PodClaim("accel", "infer-dra-0-accel-m4p9z")]
    assert report.claim_uids == ["fdce17bd-c0bb-5f8c-9301-0b06386c9967"]
    # No extended resource in its limits: nothing on the device-plugin path.
    assert all(lat.path is DRA for lat in report.latencies)


def test_pod_04_with_no_claim_known_observes_pod_ready_only() -> None:
    pod = load("pod-04-dra-claim-names.json")
    assert rows(pod) == [("pod_ready", UNKNOWN_CLASS, "dra", 69.0)]
    assert len(pod_stage_latencies(pod, lambda ns, name: None).unknown_claims) == 2


def test_pod_04_variant_without_conditions_observes_nothing() -> None:
    pod = load("pod-04-dra-claim-names.json")
    del pod["status"]["conditions"]
    claims = lookup(load("dra-resourceclaim-allocated.json"))
    assert rows(pod, claims) == []  # not Ready: no stage at all, not even claim_allocated


def test_pod_04_variant_scheduled_before_allocation_skips_the_negative_stage() -> None:
    # Clock skew: PodScheduled written a second before the claim's allocationTimestamp.
    pod = load("pod-04-dra-claim-names.json")
    scheduled = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
    scheduled["lastTransitionTime"] = "2026-11-29T09:55:01Z"
    claims = lookup(load("dra-resourceclaim-allocated.json"))
    assert ("pod_bound", "gpu.example.com", "dra") not in {r[:3] for r in rows(pod, claims)}
    assert ("claim_allocated", "gpu.example.com", "dra", 1.0) in rows(pod, claims)


def test_pod_04b_direct_claim_is_found_through_spec() -> None:
    pod = load("pod-04b-direct-claim-no-health.json")
    facts = read_lifecycle(pod)
    assert facts is not None
    assert facts.claims == (PodClaim("gpu", "solver-reserved-gpu"),)
    raw = claim(name="solver-reserved-gpu", created="09:55:00", allocated="09:55:02")
    raw["metadata"]["namespace"] = pod["metadata"]["namespace"]
    assert rows(pod, lookup(raw)) == [
        ("claim_allocated", "gpu.example.com", "dra", 2.0),
        ("pod_bound", "gpu.example.com", "dra", 0.0),
        ("pod_ready", "gpu.example.com", "dra", 69.0),
    ]


# --- hand-built Pods ----------------------------------------------------------------------------


def test_dra_pod_all_stages() -> None:
    assert rows(dra_pod(), lookup(claim())) == [
        ("claim_allocated", "gpu.example.com", "dra", 3.0),
        ("pod_bound", "gpu.example.com", "dra", 1.0),
        ("pod_ready", "gpu.example.com", "dra", 30.0),
    ]


def test_claim_without_device_class_or_times() -> None:
    raw = claim(device_class=None, created=None, allocated=None)
    report = pod_stage_latencies(dra_pod(), lookup(raw))
    assert rows(dra_pod(), lookup(raw)) == [("pod_ready", UNKNOWN_CLASS, "dra", 30.0)]
    assert report.unknown_claims == []  # known, just without the data


def test_two_claims_of_one_class_count_pod_stages_once() -> None:
    pod = dra_pod(claims={"a": "claim-a", "b": "claim-b"})
    claims = lookup(
        claim(name="claim-a", uid="ua", created="10:00:01", allocated="10:00:02"),
        claim(name="claim-b", uid="ub", created="10:00:01", allocated="10:00:04"),
    )
    assert rows(pod, claims) == [
        ("claim_allocated", "gpu.example.com", "dra", 1.0),
        ("claim_allocated", "gpu.example.com", "dra", 3.0),
        ("pod_bound", "gpu.example.com", "dra", 1.0),  # from the latest allocation
        ("pod_ready", "gpu.example.com", "dra", 30.0),
    ]


def test_two_classes_split_the_labels() -> None:
    pod = dra_pod(claims={"a": "claim-a", "b": "claim-b"})
    claims = lookup(
        claim(name="claim-a", uid="ua"), claim(name="claim-b", uid="ub", device_class="nic")
    )
    assert [r for r in rows(pod, claims) if r[0] == "pod_ready"] == [
        ("pod_ready", "gpu.example.com", "dra", 30.0),
        ("pod_ready", "nic", "dra", 30.0),
    ]


def test_claim_allocated_before_the_pod_existed_is_not_this_pods_wait() -> None:
    # A claim shared with an earlier Pod: allocated at 09:00, this Pod created at 10:00.
    raw = claim(created="08:59:00", allocated="09:00:00")
    assert rows(dra_pod(), lookup(raw)) == [("pod_ready", "gpu.example.com", "dra", 30.0)]


def test_claim_status_without_name_means_no_claim() -> None:
    pod = dra_pod(claims={"gpus": None})
    facts = read_lifecycle(pod)
    assert facts is not None and facts.claims == () and not facts.uses_devices
    assert rows(pod) == []


def test_template_claim_not_in_status_yet_is_unknown() -> None:
    pod = dra_pod()
    del pod["status"]["resourceClaimStatuses"]
    report = pod_stage_latencies(pod, lookup(claim()))
    assert report.unknown_claims == [PodClaim("gpus", None)]
    assert rows(pod, lookup(claim())) == [("pod_ready", UNKNOWN_CLASS, "dra", 30.0)]


def test_plugin_pod_per_extended_resource() -> None:
    pod = plugin_pod(
        resources={"nvidia.com/gpu": "2", "example.com/nic": "1", "hugepages-2Mi": "1Gi"}
    )
    pod["spec"]["initContainers"] = [
        {"name": "init", "resources": {"requests": {"nvidia.com/gpu": "1", "acme.io/fpga": "0"}}}
    ]
    assert rows(pod) == [
        ("pod_bound", "example.com/nic", "device-plugin", 5.0),
        ("pod_bound", "nvidia.com/gpu", "device-plugin", 5.0),
        ("pod_ready", "example.com/nic", "device-plugin", 30.0),
        ("pod_ready", "nvidia.com/gpu", "device-plugin", 30.0),
    ]  # once per resource name; cpu, memory, hugepages and a zero quantity are not devices


def test_extended_resource_backed_by_dra_is_on_the_dra_path() -> None:
    # KEP-5004: the scheduler serves nvidia.com/gpu from a DRA DeviceClass and says so in
    # status.extendedResourceClaimStatus: migrated to DRA, not a device plugin.
    pod = plugin_pod()
    pod["status"]["extendedResourceClaimStatus"] = {
        "resourceClaimName": "pod-uid-p-extended-resources-xyz",
        "requestMappings": [
            {"containerName": "main", "resourceName": "nvidia.com/gpu", "requestName": "r0"}
        ],
    }
    raw = claim(name="pod-uid-p-extended-resources-xyz", device_class="gpu.nvidia.com")
    assert rows(pod, lookup(raw)) == [
        ("claim_allocated", "gpu.nvidia.com", "dra", 3.0),
        ("pod_bound", "gpu.nvidia.com", "dra", 1.0),
        ("pod_ready", "gpu.nvidia.com", "dra", 30.0),
    ]
    facts = read_lifecycle(pod)
    assert facts is not None and facts.plugin_resources == ()


def test_pod_with_both_paths() -> None:
    pod = dra_pod()
    pod["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "1"}
    assert {(r[0], r[2]) for r in rows(pod, lookup(claim()))} == {
        ("claim_allocated", "dra"),
        ("pod_bound", "dra"),
        ("pod_ready", "dra"),
        ("pod_bound", "device-plugin"),
        ("pod_ready", "device-plugin"),
    }


def test_missing_and_negative_values_are_skipped() -> None:
    assert rows(plugin_pod(ready=None)) == []  # not Ready
    assert rows(plugin_pod(scheduled=None)) == []  # neither stage has both ends
    assert rows(plugin_pod(created="10:00:09")) == [
        ("pod_ready", "nvidia.com/gpu", "device-plugin", 30.0)  # created after scheduled: skew
    ]
    assert rows(plugin_pod(ready="10:00:01")) == [
        ("pod_bound", "nvidia.com/gpu", "device-plugin", 5.0)
    ]
    pod = plugin_pod()
    pod["metadata"]["creationTimestamp"] = "yesterday"
    assert rows(pod) == [("pod_ready", "nvidia.com/gpu", "device-plugin", 30.0)]


def test_ready_false_is_not_ready() -> None:
    pod = plugin_pod()
    pod["status"]["conditions"][-1]["status"] = "False"
    facts = read_lifecycle(pod)
    assert facts is not None and not facts.ready
    assert stage_latencies(facts, lambda ns, name: None).latencies == []


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(
    path=st.sampled_from(
        [
            ("metadata",),
            ("metadata", "creationTimestamp"),
            ("spec",),
            ("spec", "containers"),
            ("spec", "resourceClaims"),
            ("status",),
            ("status", "conditions"),
            ("status", "resourceClaimStatuses"),
            ("status", "extendedResourceClaimStatus"),
        ]
    ),
    value=json_values,
)
def test_never_raises_on_odd_shapes(path: tuple[str, ...], value: object) -> None:
    pod = copy.deepcopy(dra_pod())
    target = pod
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    pod_stage_latencies(pod, lookup(claim()))
    LifecycleTracker().watched(WatchKind.MODIFIED, pod, lookup(claim()))


# --- the tracker --------------------------------------------------------------------------------


def stages(
    tracker: LifecycleTracker,
    kind: WatchKind,
    pod: dict[str, Any],
    claims: ClaimLookup | None = None,
) -> list[str]:
    report = tracker.watched(kind, pod, claims or lookup(claim()))
    return sorted(f"{lat.stage.value}/{lat.path.value}" for lat in report.latencies)


def test_tracker_observes_a_pod_once_when_first_seen_ready() -> None:
    tracker = LifecycleTracker()
    assert stages(tracker, WatchKind.ADDED, plugin_pod(ready=None)) == []
    assert "uid-p" not in tracker
    assert stages(tracker, WatchKind.MODIFIED, plugin_pod()) == [
        "pod_bound/device-plugin",
        "pod_ready/device-plugin",
    ]
    assert stages(tracker, WatchKind.MODIFIED, plugin_pod()) == []
    flapped = plugin_pod(ready=None)
    assert stages(tracker, WatchKind.MODIFIED, flapped) == []
    assert stages(tracker, WatchKind.MODIFIED, plugin_pod(ready="10:05:00")) == []
    assert len(tracker) == 1


def test_tracker_listed_pods_are_remembered_not_observed() -> None:
    tracker = LifecycleTracker()
    tracker.listed([plugin_pod("a"), plugin_pod("b", ready=None), dra_pod("c")])
    assert "a" in tracker and "c" in tracker and "b" not in tracker
    assert stages(tracker, WatchKind.MODIFIED, plugin_pod("a")) == []
    assert stages(tracker, WatchKind.MODIFIED, dra_pod("c")) == []
    assert stages(tracker, WatchKind.MODIFIED, plugin_pod("b")) == [
        "pod_bound/device-plugin",
        "pod_ready/device-plugin",
    ]
    # A re-LIST forgets what it no longer has, and remembers without observing again.
    tracker.listed([plugin_pod("b")])
    assert len(tracker) == 1 and "b" in tracker
    assert stages(tracker, WatchKind.MODIFIED, plugin_pod("b")) == []


def test_tracker_deleted_forgets() -> None:
    tracker = LifecycleTracker()
    assert stages(tracker, WatchKind.ADDED, plugin_pod()) != []
    assert stages(tracker, WatchKind.DELETED, plugin_pod()) == []
    assert len(tracker) == 0


def test_tracker_pods_without_devices_are_not_remembered() -> None:
    tracker = LifecycleTracker()
    pod = plugin_pod(resources={"example": "1"})
    pod["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "1"}
    assert stages(tracker, WatchKind.ADDED, pod) == []
    tracker.listed([pod])
    assert len(tracker) == 0


def test_tracker_counts_a_shared_claims_allocation_once() -> None:
    # stream-05b shape: two Pods created before the allocation of the claim they share.
    claims = lookup(claim(created="09:59:00", allocated="10:00:02"))
    tracker = LifecycleTracker()
    assert stages(tracker, WatchKind.ADDED, dra_pod("a"), claims) == [
        "claim_allocated/dra",
        "pod_bound/dra",
        "pod_ready/dra",
    ]
    assert stages(tracker, WatchKind.ADDED, dra_pod("b"), claims) == [
        "pod_bound/dra",
        "pod_ready/dra",
    ]
    # The claim is remembered while one of its Pods is.
    tracker.watched(WatchKind.DELETED, dra_pod("a"), claims)
    assert stages(tracker, WatchKind.ADDED, dra_pod("c"), claims) == [
        "pod_bound/dra",
        "pod_ready/dra",
    ]
    tracker.listed([])
    assert stages(tracker, WatchKind.ADDED, dra_pod("d"), claims) == [
        "claim_allocated/dra",
        "pod_bound/dra",
        "pod_ready/dra",
    ]


def test_stream_05b_pods_share_one_claim() -> None:
    lines = [
        json.loads(line) for line in (EXAMPLES / "stream-05b-shared-claim-across-pods.jsonl").open()
    ]
    claim_obj = next(
        e["object"] for e in lines if e.get("object", {}).get("kind") == "ResourceClaim"
    )
    pods = [e for e in lines if e.get("object", {}).get("kind") == "Pod"]
    tracker = LifecycleTracker()
    observed = []
    for event in pods:
        report = tracker.watched(WatchKind(event["type"]), event["object"], lookup(claim_obj))
        observed.extend((lat.stage, lat.device_class, lat.seconds) for lat in report.latencies)
        assert report.unknown_claims == []
    # The example claim carries neither creationTimestamp nor allocationTimestamp: only pod_ready,
    # once per Pod (ADDED), not again on MODIFIED.
    assert observed == [
        (Stage.POD_READY, "gpu.example.com", 69.0),
        (Stage.POD_READY, "gpu.example.com", 69.0),
    ]
