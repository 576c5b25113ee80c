"""The worker's side of the adoption gate in the governor (issue 16): the inventory fold tells the
governor a node's gate facts after each record that changes them (slices, claims, Node capacity,
DeviceClasses), once per change, and those facts equal the API's on-read reading."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from services.domain.adoption.facts import read_facts
from services.domain.inventory.events import InventoryObserved, record_key
from services.domain.inventory.fold import InventoryFold
from services.domain.inventory.objects import (
    parse_device_class,
    parse_resource_claim,
    parse_resource_slice,
)
from services.domain.inventory.snapshot import NodeResources, Snapshot
from services.domain.log import LogPosition
from services.domain.node_events import NodeResourcesChanged

EXAMPLES = Path(__file__).parents[2].parent / "shared" / "examples"
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
NODE = "gpu-node-a"


def load(name: str) -> Any:
    return json.loads((EXAMPLES / name).read_text())


def observed(obj: Any, n: int) -> InventoryObserved:
    return InventoryObserved(record_key(obj), obj, False, T0 + timedelta(seconds=n))


def test_each_change_of_a_nodes_gate_facts_is_told_once_after_its_record() -> None:
    slice_ = parse_resource_slice(load("dra-resourceslice-gpu-node-a.json"))
    claim = parse_resource_claim(load("dra-resourceclaim-allocated.json"))
    device_class = parse_device_class(load("dra-deviceclass-gpu.json"))
    capacity = NodeResourcesChanged(
        node=NODE,
        capacity=(("example.com/gpu", 2),),
        allocatable=(("example.com/gpu", 2),),
        status_version=None,
        observed_at=T0 + timedelta(seconds=4),
    )
    # allocated, no consumer yet (an older resourceVersion): it may leak
    assert claim.resource_version is not None
    idle = dataclasses.replace(claim, reserved_for=(), resource_version=claim.resource_version - 1)
    records: list[tuple[LogPosition, object]] = [
        (LogPosition("health", 0, 1), observed(slice_, 1)),
        (LogPosition("health", 0, 2), observed(idle, 2)),
        (LogPosition("health", 0, 3), observed(device_class, 3)),
        (LogPosition("health", 0, 4), capacity),
        (LogPosition("health", 0, 5), observed(idle, 5)),  # the same again: nothing new
        (LogPosition("health", 0, 6), observed(claim, 6)),  # a consumer reserved it
    ]
    fold = InventoryFold()
    plan = fold.fold(records, applied=set())
    told = [(p.offset, f) for p, f in plan.adoption]
    # the DeviceClass changes nothing yet (no Node capacity: DRA-only is no divergence)
    assert [o for o, _ in told] == [1, 2, 4, 6]
    first, with_claim, with_capacity, reserved = (f for _, f in told)
    assert not reserved.claims
    assert first.slices == (("gpu.example.com", NODE),) and not first.claims
    [c] = with_claim.claims
    assert (c.namespace, c.name, c.node, c.reserved) == ("ml-serving", claim.name, NODE, False)
    assert c.devices == (("gpu.example.com", NODE),)
    [d] = with_capacity.divergences
    assert (d.resource_name, d.slice_devices, d.node_capacity) == (
        "example.com/gpu",
        len(slice_.devices),
        2,
    )
    assert with_capacity.observed_at == T0 + timedelta(seconds=4)
    # The same facts as the API's reading of the projection (services/domain/adoption/facts.py).
    snapshot = Snapshot(
        inventory=fold.state,
        node_resources={NODE: NodeResources(NODE, capacity={"example.com/gpu": 2}, allocatable={})},
    )
    api = read_facts(snapshot, ())
    assert set(with_capacity.divergences) == set(api.divergences)
    assert not {x for x in api.claims if x.allocated_at is not None and not x.reserved}
    assert {(s.driver, s.pool) for s in api.slices} == set(with_capacity.slices)
