"""ResourceSlice device taints on their way to the governor (issue 15 item 1): the watcher's tracker
keeps ``timeAdded`` and publishes a changed taint set, the inventory record keeps it on the wire,
and the forwarder turns each node-local slice record into one ``DeviceTaintsObserved`` in batch
order with its merge key."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from services.domain.governance.input_codec import decode_keyed, encode_input
from services.domain.governance.taint_inputs import DeviceTaintsObserved, SliceTaint
from services.domain.inventory.events import (
    InventoryKind,
    InventoryObserved,
    decode_inventory,
    encode_inventory,
)
from services.domain.inventory.objects import ResourceSliceInfo
from services.domain.log import LogPosition
from services.domain.watch.inventory_tracker import InventoryTracker
from services.domain.watch.pod_tracker import WatchKind
from streams.forward import LoggedNodeEvent, governance_records
from streams.forward_taints import slice_taints
from tests.conftest import T0, TOPIC
from tests.streams.test_forward_unit import at, commit, key, view

EXAMPLES = Path(__file__).parents[2].parent / "shared" / "examples"
SLICE = InventoryKind.RESOURCE_SLICE


def resource_slice(version: str, taints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads((EXAMPLES / "dra-resourceslice-gpu-node-a.json").read_text())
    obj = copy.deepcopy(obj)
    obj["metadata"]["resourceVersion"] = version
    for device in obj["spec"]["devices"]:
        device.pop("taints", None)
    if taints is not None:
        obj["spec"]["devices"][0]["taints"] = taints
    return obj


XID = {"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}


def test_the_tracker_keeps_time_added_and_publishes_a_changed_taint_set() -> None:
    tracker = InventoryTracker()
    assert tracker.event(WatchKind.ADDED, SLICE, resource_slice("1"), T0).events
    tainted = resource_slice("2", [{**XID, "timeAdded": "2026-11-29T11:59:00Z"}])
    (event,) = tracker.event(WatchKind.MODIFIED, SLICE, tainted, T0).events
    assert isinstance(event.obj, ResourceSliceInfo)
    (taint,) = event.obj.devices[0].taints
    assert taint.time_added == T0 - timedelta(minutes=1)
    assert decode_inventory(encode_inventory(event)) == event
    # the same taint again: nothing; gone: published
    same = resource_slice("3", [{**XID, "timeAdded": "2026-11-29T11:59:00Z"}])
    assert tracker.event(WatchKind.MODIFIED, SLICE, same, T0).ignored == "unchanged"
    (cleared,) = tracker.event(WatchKind.MODIFIED, SLICE, resource_slice("4"), T0).events
    assert isinstance(cleared.obj, ResourceSliceInfo)
    assert all(not d.taints for d in cleared.obj.devices)


def test_a_slice_without_time_added_keeps_the_bytes_of_before() -> None:
    tracker = InventoryTracker()
    (event,) = tracker.event(WatchKind.ADDED, SLICE, resource_slice("1", [XID]), T0).events
    assert b"timeAdded" not in encode_inventory(event)


def test_a_malformed_time_added_is_a_rejection_with_its_reason() -> None:
    tracker = InventoryTracker()
    bad = resource_slice("1", [{**XID, "timeAdded": "yesterday"}])
    outcome = tracker.event(WatchKind.ADDED, SLICE, bad, T0)
    assert outcome.events == []
    assert outcome.reject_reason is not None and "timeAdded" in outcome.reject_reason


def observed(version: str, taints: list[dict[str, Any]] | None, deleted: bool = False) -> Any:
    tracker = InventoryTracker()
    (event,) = tracker.event(WatchKind.ADDED, SLICE, resource_slice(version, taints), at(3)).events
    return InventoryObserved(event.key, event.obj, deleted, event.observed_at)


def test_a_node_local_slice_becomes_one_taints_record() -> None:
    record = slice_taints(observed("1", [XID]))
    assert record is not None
    assert (record.node, record.driver, record.pool) == (
        "gpu-node-a",
        "gpu.example.com",
        "gpu-node-a",
    )
    assert record.slice == "gpu-node-a-gpu.example.com-k7d2m"
    assert record.devices == tuple(sorted(record.devices)) and "gpu-0" in record.devices
    assert record.taints == (SliceTaint("gpu-0", "gpu.nvidia.com/xid", "79", "NoSchedule", None),)
    assert record.device_id("gpu-0") == "gpu.example.com/gpu-node-a/gpu-0"
    assert not record.deleted and record.observed_at == at(3)
    gone = slice_taints(observed("1", [XID], deleted=True))
    assert gone is not None and gone.deleted


def test_pool_scoped_slices_forward_nothing() -> None:
    event = observed("1", [XID])
    pooled = InventoryObserved("pool:x/y", _no_node(event.obj), False, event.observed_at)
    assert slice_taints(pooled) is None


def _no_node(obj: Any) -> ResourceSliceInfo:
    assert isinstance(obj, ResourceSliceInfo)
    return replace(obj, node=None)


def test_the_forwarder_sends_it_in_batch_order_with_its_merge_key() -> None:
    event = observed("1", [XID])
    position = LogPosition(TOPIC, 0, 7)
    batch = view([(position, at(3))], [LoggedNodeEvent(position, event)])
    records = governance_records(batch, commit([]), partitions=1)
    forwarded = [(r, k) for r, k in records if isinstance(r, DeviceTaintsObserved)]
    assert len(forwarded) == 1
    record, merge_key = forwarded[0]
    assert merge_key == key(3, 0, 7)
    assert decode_keyed(encode_input(record, merge_key)) == (record, merge_key)
    # a redelivered record (at or before the partition's recorded offset) is skipped
    again = governance_records(batch, commit([], applied={(TOPIC, 0): 7}), partitions=1)
    assert not [r for r, _ in again if isinstance(r, DeviceTaintsObserved)]


def test_a_taint_without_a_key_is_left_out_and_the_others_still_go() -> None:
    """The new user's find: one keyless taint made the governor refuse the whole slice record,
    so a real XID taint on another device of the slice was never seen."""
    tracker = InventoryTracker()
    tracker.event(WatchKind.ADDED, SLICE, resource_slice("1"), T0)
    tainted = resource_slice("2", [{"key": "", "effect": "NoSchedule"}, XID])
    (event,) = tracker.event(WatchKind.MODIFIED, SLICE, tainted, T0).events
    record = slice_taints(event)
    assert record is not None
    assert [(t.key, t.value) for t in record.taints] == [("gpu.nvidia.com/xid", "79")]
    assert decode_keyed(encode_input(record, key(0, 0, 0))) == (record, key(0, 0, 0))
