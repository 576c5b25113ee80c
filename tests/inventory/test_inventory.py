"""The inventory core on the shared DRA examples: parsing, identity resolution, conflicts,
capacity numbers (issue 4, items 2, 3 and 6)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from services.domain.events import (
    ClaimRef,
    ContainerRef,
    DeviceHealthObserved,
    DeviceSource,
    Health,
)
from services.domain.inventory.capacity import CapacityDevice, capacity_views, common_request_size
from services.domain.inventory.events import (
    InventoryObserved,
    decode_inventory,
    encode_inventory,
    record_key,
)
from services.domain.inventory.identity import IdentityStatus, plugin_identity
from services.domain.inventory.objects import (
    InventoryParseError,
    parse_device_class,
    parse_resource_claim,
    parse_resource_slice,
)
from services.domain.inventory.state import ConflictKind, InventoryState
from services.domain.pod_reader import read_pod

EXAMPLES = Path(__file__).parents[2].parent / "shared" / "examples"
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
CLAIM_UID = "fdce17bd-c0bb-5f8c-9301-0b06386c9967"


def load(name: str) -> Any:
    return json.loads((EXAMPLES / name).read_text())


def inventory() -> InventoryState:
    state = InventoryState()
    for obj in (
        parse_resource_slice(load("dra-resourceslice-gpu-node-a.json")),
        parse_resource_claim(load("dra-resourceclaim-allocated.json")),
        parse_device_class(load("dra-deviceclass-gpu.json")),
    ):
        assert state.apply(InventoryObserved(record_key(obj), obj, False, T0)) == []
    return state


def observation(resource_id: str, claim: ClaimRef | None, **kw: Any) -> DeviceHealthObserved:
    base = DeviceHealthObserved(
        node="gpu-node-a",
        namespace="ml-serving",
        pod_name="infer-dra-0",
        pod_uid="e71c2dba-c432-5d7b-9dd2-52378aba9e6f",
        containers=(ContainerRef("server"),),
        resource_name="claim:gpus/main",
        resource_id=resource_id,
        health=Health.HEALTHY,
        source=DeviceSource.DRA,
        status_version=100,
        observed_at=T0,
        claim=claim,
    )
    return replace(base, **kw)


GPUS = ClaimRef("gpus", "main", "infer-dra-0-gpus-7xk2q")


def test_examples_parse_into_the_fields_devicestate_uses() -> None:
    resource_slice = parse_resource_slice(load("dra-resourceslice-gpu-node-a.json"))
    assert (resource_slice.driver, resource_slice.pool, resource_slice.node) == (
        "gpu.example.com",
        "gpu-node-a",
        "gpu-node-a",
    )
    assert [d.name for d in resource_slice.devices] == [f"gpu-{i}" for i in range(8)]
    tainted = [d for d in resource_slice.devices if d.taints]
    assert [(d.name, d.taints[0].key, d.taints[0].effect) for d in tainted] == [
        ("gpu-5", "gpu.example.com/xid", "NoSchedule")
    ]
    claim = parse_resource_claim(load("dra-resourceclaim-allocated.json"))
    assert [r.device_id for r in claim.results] == [
        "gpu.example.com/gpu-node-a/gpu-2",
        "gpu.example.com/gpu-node-a/gpu-3",
    ]
    assert claim.node == "gpu-node-a"
    assert claim.reserved_for == (("infer-dra-0", "e71c2dba-c432-5d7b-9dd2-52378aba9e6f"),)
    device_class = parse_device_class(load("dra-deviceclass-gpu.json"))
    assert device_class.extended_resource_name == "example.com/gpu"
    assert device_class.drivers == ("gpu.example.com",)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda o: o["spec"].pop("driver"), "spec.driver"),
        (lambda o: o["spec"]["devices"].append(dict(o["spec"]["devices"][0])), "duplicate"),
        (lambda o: o["spec"]["pool"].update(generation=-1), "generation"),
    ],
)
def test_a_malformed_slice_is_refused_with_the_reason(mutate: Any, message: str) -> None:
    obj = load("dra-resourceslice-gpu-node-a.json")
    mutate(obj)
    with pytest.raises(InventoryParseError, match=message):
        parse_resource_slice(obj)


def test_pod_04_cdi_ids_resolve_through_the_resource_claim() -> None:
    state = inventory()
    for device in ("gpu-2", "gpu-3"):
        cdi = f"k8s.gpu.example.com/claim={CLAIM_UID}-{device}"
        identity, conflicts = state.resolve(observation(cdi, GPUS))
        assert identity.status is IdentityStatus.RESOLVED
        assert identity.device_id == f"gpu.example.com/gpu-node-a/{device}"
        assert identity.uuid is not None and identity.uuid.startswith("GPU-")
        assert conflicts == []
    expected = load("pod-04-dra-claim-names.expected.json")["expectedDeviceResolution"]
    for cdi, text in expected.items():
        identity, _ = state.resolve(observation(cdi, GPUS))
        assert identity.device_id == text.split()[0]


def test_documented_form_is_its_own_identity_and_unknown_claims_stay_unresolved() -> None:
    state = inventory()
    accel, _ = state.resolve(observation("accel.example.org/gpu-node-a/accel-1", ClaimRef("accel")))
    assert (accel.status, accel.device_id) == (
        IdentityStatus.REPORTED,
        "accel.example.org/gpu-node-a/accel-1",
    )
    unknown, _ = state.resolve(
        observation("k8s.gpu.example.com/claim=x-gpu-0", ClaimRef("gpus", None, "not-there"))
    )
    assert unknown.status is IdentityStatus.UNRESOLVED and "not seen" in (unknown.reason or "")


def test_a_shared_cdi_id_is_flagged_ambiguous_never_merged() -> None:
    """stream-10 line 12 shape: every device lists the driver's 'common' CDI device first."""
    identity, conflicts = inventory().resolve(observation("k8s.gpu.example.com/gpu=common", GPUS))
    assert identity.status is IdentityStatus.AMBIGUOUS
    assert identity.candidates == (
        "gpu.example.com/gpu-node-a/gpu-2",
        "gpu.example.com/gpu-node-a/gpu-3",
    )
    assert [c.kind for c in conflicts] == [ConflictKind.AMBIGUOUS_RESOURCE_ID]


def test_stream_05b_two_pods_sharing_one_claim_resolve_to_one_device() -> None:
    lines = [
        json.loads(x)
        for x in (EXAMPLES / "stream-05b-shared-claim-across-pods.jsonl").read_text().splitlines()
        if x.strip()
    ]
    claim = parse_resource_claim(
        next(x["object"] for x in lines if x.get("object", {}).get("kind") == "ResourceClaim")
    )
    state = InventoryState()
    state.apply(InventoryObserved(record_key(claim), claim, False, T0))
    pods = [x["object"] for x in lines if x.get("object", {}).get("kind") == "Pod"]
    resolved = set()
    for pod in pods:
        for event in read_pod(pod, T0).observations:
            identity, _ = state.resolve(event)
            resolved.add(identity.device_id)
    assert resolved == {"gpu.example.com/gpu-node-a/gpu-1"}


def test_plugin_and_dra_owning_one_gpu_or_one_resource_is_flagged() -> None:
    state = inventory()
    # stream-09's device-plugin GPU on gpu-node-a has the UUID the slice publishes for gpu-2.
    state.resolve(
        observation(
            "GPU-0e18c688-f23f-5391-a735-114e22f43e9f",
            None,
            source=DeviceSource.DEVICE_PLUGIN,
            resource_name="nvidia.com/gpu",
        )
    )
    state.set_capacity("gpu-node-a", [("example.com/gpu", 8)])
    conflicts = state.ownership_conflicts()
    assert {(c.kind, c.subject) for c in conflicts} == {
        (ConflictKind.PLUGIN_AND_DRA, "GPU-0e18c688-f23f-5391-a735-114e22f43e9f"),
        (ConflictKind.PLUGIN_AND_DRA, "example.com/gpu"),
    }
    state.set_capacity("gpu-node-a", [])
    assert {c.subject for c in state.ownership_conflicts()} == {
        "GPU-0e18c688-f23f-5391-a735-114e22f43e9f"
    }


def test_a_device_leaving_its_slice_is_flagged() -> None:
    state = inventory()
    old = parse_resource_slice(load("dra-resourceslice-gpu-node-a.json"))
    shrunk = replace(old, devices=tuple(d for d in old.devices if d.name not in ("gpu-3", "gpu-7")))
    conflicts = state.apply(InventoryObserved(record_key(shrunk), shrunk, False, T0))
    assert [(c.kind, c.subject) for c in conflicts] == [
        (ConflictKind.VANISHED, "gpu.example.com/gpu-node-a/gpu-3"),
        (ConflictKind.VANISHED, "gpu.example.com/gpu-node-a/gpu-7"),
    ]
    assert "while allocated" in conflicts[0].detail and "while allocated" not in conflicts[1].detail


def test_a_resource_id_resolving_to_two_devices_over_time_is_flagged() -> None:
    state = inventory()
    cdi = f"k8s.gpu.example.com/claim={CLAIM_UID}-gpu-2"
    state.resolve(observation(cdi, GPUS))
    claim = state.claims[("ml-serving", "infer-dra-0-gpus-7xk2q")]
    moved = replace(claim, results=claim.results[1:])  # only gpu-3 left in the request
    state.apply(InventoryObserved(record_key(moved), moved, False, T0))
    _, conflicts = state.resolve(observation(cdi, GPUS))
    assert [c.kind for c in conflicts] == [ConflictKind.RESOURCE_ID_REUSED]


def test_device_plugin_replicas_map_to_the_physical_gpu() -> None:
    assert plugin_identity("GPU-1234::3").device_id == "GPU-1234"
    assert plugin_identity("MIG-abcd").uuid == "MIG-abcd"
    assert plugin_identity("0").uuid is None
    assert plugin_identity("odd::name").device_id == "odd::name"


def test_capacity_numbers_on_the_example_node() -> None:
    state = inventory()
    devices = state.dra_capacity_devices()
    assert len(devices) == 8
    quarantined = {("gpu-node-a", "gpu.example.com/gpu-node-a/gpu-5"): "quarantined"}
    views = capacity_views(devices, quarantined, request_size=2)
    (node,) = views["node"]
    assert (node.total, node.allocated, node.unavailable, node.idle, node.fragmented) == (
        8,
        2,
        1,
        5,
        0,
    )
    assert [(r.key, r.total) for r in views["deviceClass"]] == [("gpu.example.com", 8)]
    assert [(r.key, r.allocated) for r in views["namespace"]] == [("ml-serving", 2)]
    assert [r.key for r in views["pool"]] == ["gpu.example.com/gpu-node-a"]
    # A request of 8 fits on no node with 5 idle: all 5 are stranded.
    (big,) = capacity_views(devices, quarantined, request_size=8)["node"]
    assert big.fragmented == 5


def test_a_shared_device_counts_once() -> None:
    shared = CapacityDevice("n1", "d/p/gpu-1", "gpu", "d/p", namespaces=("a", "b"))
    views = capacity_views([shared, CapacityDevice("n1", "d/p/gpu-2", "gpu", "d/p")], {})
    (node,) = views["node"]
    assert (node.total, node.allocated, node.idle) == (2, 1, 1)
    assert [(r.key, r.allocated) for r in views["namespace"]] == [("a", 1), ("b", 1)]


def test_common_request_size() -> None:
    assert common_request_size([]) == 1
    assert common_request_size([2, 2, 1, 8]) == 2
    assert common_request_size([1, 2]) == 1


def test_inventory_events_round_trip() -> None:
    for obj in (
        parse_resource_slice(load("dra-resourceslice-gpu-node-a.json")),
        parse_resource_claim(load("dra-resourceclaim-allocated.json")),
        parse_device_class(load("dra-deviceclass-gpu.json")),
    ):
        event = InventoryObserved(record_key(obj), obj, False, T0)
        assert decode_inventory(encode_inventory(event)) == event
    assert (
        record_key(parse_device_class(load("dra-deviceclass-gpu.json"))) == "class:gpu.example.com"
    )
