"""DeviceTaintRules written by others as inventory facts (issue 15 item 1): the watcher's tracker
adds a rule's taint to the devices it selects in the ResourceSlice it publishes, publishes the
slices again when a rule changes, and never reads back the rules ``devicestate enforce`` wrote
(owned by label)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from services.domain.inventory.events import (
    InventoryKind,
    InventoryObserved,
    decode_inventory,
    encode_inventory,
)
from services.domain.inventory.objects import ResourceSliceInfo
from services.domain.watch.inventory_tracker import INVENTORY_KINDS, InventoryTracker
from services.domain.watch.pod_tracker import WatchKind
from services.domain.watch.taint_rule_tracker import TAINT_RULE_KIND
from services.processes.enforcement.desired import DesiredRule, Effect, rule_manifest
from tests.conftest import T0

EXAMPLES = Path(__file__).parents[2].parent / "shared" / "examples"
SLICE = InventoryKind.RESOURCE_SLICE
ADDED, MODIFIED, DELETED = WatchKind.ADDED, WatchKind.MODIFIED, WatchKind.DELETED
DRIVER, POOL = "gpu.example.com", "gpu-node-a"


def resource_slice(version: str = "10") -> dict[str, Any]:
    obj: dict[str, Any] = json.loads((EXAMPLES / "dra-resourceslice-gpu-node-a.json").read_text())
    obj["metadata"]["resourceVersion"] = version
    return obj


def rule(
    name: str = "xid-gpu-2",
    version: str = "5",
    *,
    device: str | None = "gpu-2",
    key: str = "gpu.nvidia.com/xid",
    value: str = "79",
) -> dict[str, Any]:
    selector = {"driver": DRIVER, "pool": POOL}
    if device is not None:
        selector["device"] = device
    return {
        "apiVersion": "resource.k8s.io/v1beta2",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name, "resourceVersion": version, "labels": {"team": "sre"}},
        "spec": {
            "deviceSelector": selector,
            "taint": {
                "key": key,
                "value": value,
                "effect": "NoExecute",
                "timeAdded": "2026-11-29T11:00:00Z",
            },
        },
    }


def own_rule() -> dict[str, Any]:
    """A rule exactly as ``devicestate enforce`` writes it for a quarantine of gpu-2."""
    desired = DesiredRule(
        name="devicestate-quarantine-abc",
        quarantine_id="gpu-node-a/gpu.example.com/gpu-node-a/gpu-2@7",
        node="gpu-node-a",
        driver=DRIVER,
        pool=POOL,
        device="gpu-2",
        kind="system",
        reason="driver-taint:gpu.nvidia.com/xid=79",
        effect=Effect.NO_SCHEDULE,
    )
    manifest = rule_manifest(desired)
    manifest["metadata"]["resourceVersion"] = "6"
    return manifest


def taints_of(event: InventoryObserved) -> dict[str, list[tuple[str, str | None, str | None]]]:
    """The rules' taints by device (the example slice taints gpu-5 itself: left out)."""
    assert isinstance(event.obj, ResourceSliceInfo)
    out = {
        d.name: [(t.key, t.value, t.rule) for t in d.taints if t.rule] for d in event.obj.devices
    }
    return {name: taints for name, taints in out.items() if taints}


def test_device_taint_rules_are_an_inventory_kind_of_the_watcher() -> None:
    assert TAINT_RULE_KIND in INVENTORY_KINDS


def test_a_rule_of_others_taints_the_device_it_selects_in_the_published_slice() -> None:
    tracker = InventoryTracker()
    tracker.event(ADDED, SLICE, resource_slice(), T0)
    (event,) = tracker.rule_event(ADDED, rule(), T0).events
    assert taints_of(event) == {"gpu-2": [("gpu.nvidia.com/xid", "79", "xid-gpu-2")]}
    assert event.key == "gpu-node-a" and not event.deleted
    assert decode_inventory(encode_inventory(event)) == event
    # a slice update keeps the rule's taint; the rule's deletion publishes the slice without it
    assert tracker.event(MODIFIED, SLICE, resource_slice("11"), T0).ignored == "unchanged"
    kept = tracker.form(SLICE, "gpu-node-a-gpu.example.com-k7d2m")
    assert kept == replace(event.obj, resource_version=11)
    (cleared,) = tracker.rule_event(DELETED, rule(), T0).events
    assert taints_of(cleared) == {}


def test_a_rule_seen_before_the_slice_is_in_the_slice_when_it_comes() -> None:
    tracker = InventoryTracker()
    assert tracker.rule_event(ADDED, rule(), T0).events == []  # no slice yet
    (event,) = tracker.event(ADDED, SLICE, resource_slice(), T0).events
    assert taints_of(event) == {"gpu-2": [("gpu.nvidia.com/xid", "79", "xid-gpu-2")]}


def test_a_rule_without_a_device_selects_every_device_of_the_pool() -> None:
    tracker = InventoryTracker()
    tracker.event(ADDED, SLICE, resource_slice(), T0)
    (event,) = tracker.rule_event(ADDED, rule("pool-wide", device=None), T0).events
    assert isinstance(event.obj, ResourceSliceInfo)
    assert len(taints_of(event)) == len(event.obj.devices)


def test_devicestates_own_rules_are_never_read_back() -> None:
    tracker = InventoryTracker()
    tracker.event(ADDED, SLICE, resource_slice(), T0)
    outcome = tracker.rule_event(ADDED, own_rule(), T0)
    assert outcome.events == [] and outcome.ignored == "own" and outcome.reject_reason is None
    assert len(tracker.rules) == 0
    # an admin's rule that devicestate's labels are put on is forgotten as if deleted
    tracker.rule_event(ADDED, rule(), T0)
    relabelled = rule(version="9")
    relabelled["metadata"]["labels"] = own_rule()["metadata"]["labels"]
    (event,) = tracker.rule_event(MODIFIED, relabelled, T0).events
    assert taints_of(event) == {}


def test_an_unchanged_or_stale_rule_publishes_nothing() -> None:
    tracker = InventoryTracker()
    tracker.event(ADDED, SLICE, resource_slice(), T0)
    tracker.rule_event(ADDED, rule(version="5"), T0)
    assert tracker.rule_event(MODIFIED, rule(version="6"), T0).ignored == "unchanged"
    assert tracker.rule_event(MODIFIED, rule(version="4", value="48"), T0).ignored == "stale"


def test_a_malformed_rule_is_rejected_once_with_its_reason() -> None:
    tracker = InventoryTracker()
    bad = rule()
    del bad["spec"]["taint"]["key"]
    first = tracker.rule_event(ADDED, bad, T0)
    assert first.reject_reason is not None and "spec.taint.key" in first.reject_reason
    bad["metadata"]["resourceVersion"] = "6"
    assert tracker.rule_event(MODIFIED, bad, T0).reject_reason is None  # reported once


def test_a_list_forgets_the_rules_it_no_longer_has() -> None:
    tracker = InventoryTracker()
    tracker.event(ADDED, SLICE, resource_slice(), T0)
    relist = tracker.rules_listed([rule(), rule("other", device="gpu-3")], T0)
    assert [o.ignored for o in relist.outcomes] == [None, None]
    assert relist.deleted == []
    (event,) = relist.republished  # the slice, published again with both rules' taints
    assert set(taints_of(event)) == {"gpu-2", "gpu-3"}
    (event,) = tracker.rules_listed([rule(version="7")], T0).republished
    assert set(taints_of(event)) == {"gpu-2"}
    assert tracker.rules_listed([rule(version="8")], T0).republished == []
