"""InventoryTracker: DRA objects into InventoryObserved, published on first sighting and on a
change of the compact form only; stale versions ignored; DELETED and re-LIST deletions."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.domain.inventory.events import InventoryKind, InventoryObserved
from services.domain.inventory.objects import (
    DeviceClassInfo,
    ResourceClaimInfo,
    ResourceSliceInfo,
    parse_resource_slice,
)
from services.domain.watch.inventory_tracker import (
    INVENTORY_KINDS,
    InventoryTracker,
    compact,
    object_name,
)
from services.domain.watch.pod_tracker import WatchKind

EXAMPLES = Path(__file__).parents[2].parent / "shared" / "examples"
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)

SLICE = InventoryKind.RESOURCE_SLICE
CLAIM = InventoryKind.RESOURCE_CLAIM
CLASS = InventoryKind.DEVICE_CLASS
ADDED, MODIFIED, DELETED = WatchKind.ADDED, WatchKind.MODIFIED, WatchKind.DELETED


def load(name: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((EXAMPLES / name).read_text())
    return result


def resource_slice(version: str = "88120", **spec: Any) -> dict[str, Any]:
    obj = load("dra-resourceslice-gpu-node-a.json")
    obj["metadata"]["resourceVersion"] = version
    obj["spec"].update(spec)
    return obj


def claim(
    version: str = "51860", *, allocated: bool = True, name: str | None = None
) -> dict[str, Any]:
    obj = load("dra-resourceclaim-allocated.json")
    obj["metadata"]["resourceVersion"] = version
    if name is not None:
        obj["metadata"]["name"] = name
    if not allocated:
        obj["status"] = {}
    return obj


def device_class(
    name: str = "gpu.example.com",
    version: str | None = "1204",
    extended: str | None = "example.com/gpu",
    driver: str = "gpu.example.com",
    note: str = "",
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "annotations": {"note": note}}
    if version is not None:
        metadata["resourceVersion"] = version
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": f"device.driver == '{driver}'"}}]}
    if extended is not None:
        spec["extendedResourceName"] = extended
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": metadata,
        "spec": spec,
    }


def keys(events: list[InventoryObserved]) -> list[tuple[str, str, bool]]:
    return [(e.kind.value, e.key, e.deleted) for e in events]


# --- first sighting, keys -----------------------------------------------------------------


def test_first_sighting_publishes_each_kind_under_its_key() -> None:
    tracker = InventoryTracker()
    published = []
    for kind, obj in ((SLICE, resource_slice()), (CLAIM, claim()), (CLASS, device_class())):
        outcome = tracker.event(ADDED, kind, obj, T0)
        assert outcome.reject_reason is None and outcome.ignored is None
        published.extend(outcome.events)
    assert keys(published) == [
        ("ResourceSlice", "gpu-node-a", False),
        ("ResourceClaim", "gpu-node-a", False),
        ("DeviceClass", "class:gpu.example.com", False),
    ]
    assert all(e.observed_at == T0 for e in published)
    slice_info = published[0].obj
    assert isinstance(slice_info, ResourceSliceInfo) and slice_info.resource_version == 88120
    assert {k.value: tracker.tracked(k) for k in InventoryKind} == {
        "ResourceSlice": 1,
        "ResourceClaim": 1,
        "DeviceClass": 1,
    }
    # DeviceTaintRules are read too, folded into the slices (issue 15: tests/domain/
    # test_taint_rule_tracker.py), and Namespaces, folded into the admin-access claims (issue 16:
    # tests/domain/test_namespace_tracker.py)
    assert {
        "ResourceSlice",
        "ResourceClaim",
        "DeviceClass",
        "DeviceTaintRule",
        "Namespace",
    } == INVENTORY_KINDS


def test_pool_scoped_slice_and_unallocated_claim_keys() -> None:
    tracker = InventoryTracker()
    pool_slice = resource_slice(nodeName=None)
    del pool_slice["spec"]["nodeName"]
    (event,) = tracker.event(ADDED, SLICE, pool_slice, T0).events
    assert event.key == "pool:gpu.example.com/gpu-node-a"
    (event,) = tracker.event(ADDED, CLAIM, claim(allocated=False), T0).events
    assert event.key == "claim:ml-serving/infer-dra-0-gpus-7xk2q"


# --- change detection ---------------------------------------------------------------------


def test_a_version_bump_without_a_change_of_the_compact_form_publishes_nothing() -> None:
    tracker = InventoryTracker()
    assert tracker.event(ADDED, CLAIM, claim("100"), T0).events
    bumped = claim("101")
    # Only what devicestate does not keep changes: device conditions, labels, managedFields.
    bumped["status"]["devices"][0]["conditions"][0]["status"] = "False"
    bumped["metadata"]["labels"] = {"new": "label"}
    outcome = tracker.event(MODIFIED, CLAIM, bumped, T0)
    assert outcome.events == [] and outcome.ignored == "unchanged"
    # The tracked form follows the newest resourceVersion all the same.
    form = tracker.form(CLAIM, "ml-serving/infer-dra-0-gpus-7xk2q")
    assert isinstance(form, ResourceClaimInfo) and form.resource_version == 101


def test_a_change_of_the_compact_form_is_published() -> None:
    tracker = InventoryTracker()
    tracker.event(ADDED, SLICE, resource_slice("10"), T0)
    tainted = resource_slice("11")
    tainted["spec"]["devices"][0]["taints"] = [
        {"key": "gpu.example.com/xid", "value": "48", "effect": "NoSchedule"}
    ]
    (event,) = tracker.event(MODIFIED, SLICE, tainted, T0).events
    assert isinstance(event.obj, ResourceSliceInfo)
    assert event.obj.devices[0].taints[0].value == "48" and not event.deleted
    shrunk = resource_slice("12")
    shrunk["spec"]["devices"] = shrunk["spec"]["devices"][:7]
    (event,) = tracker.event(MODIFIED, SLICE, shrunk, T0).events
    assert isinstance(event.obj, ResourceSliceInfo) and len(event.obj.devices) == 7


@pytest.mark.parametrize("version", ["10", "9"])
def test_objects_whose_version_is_not_newer_are_ignored(version: str) -> None:
    tracker = InventoryTracker()
    tracker.event(ADDED, CLASS, device_class(version="10"), T0)
    outcome = tracker.event(MODIFIED, CLASS, device_class(version=version, extended=None), T0)
    assert outcome.events == [] and outcome.ignored == "stale"
    form = tracker.form(CLASS, "gpu.example.com")
    assert isinstance(form, DeviceClassInfo) and form.extended_resource_name == "example.com/gpu"


def test_unordered_versions_are_never_stale() -> None:
    tracker = InventoryTracker()
    tracker.event(ADDED, CLASS, device_class(version=None), T0)
    (event,) = tracker.event(MODIFIED, CLASS, device_class(version=None, extended=None), T0).events
    assert isinstance(event.obj, DeviceClassInfo) and event.obj.extended_resource_name is None


def test_a_claim_allocated_later_is_published_under_its_node() -> None:
    tracker = InventoryTracker()
    (pending,) = tracker.event(ADDED, CLAIM, claim("100", allocated=False), T0).events
    (allocated,) = tracker.event(MODIFIED, CLAIM, claim("101"), T0).events
    assert (pending.key, allocated.key) == ("claim:ml-serving/infer-dra-0-gpus-7xk2q", "gpu-node-a")
    assert isinstance(allocated.obj, ResourceClaimInfo) and len(allocated.obj.results) == 2
    (deleted,) = tracker.event(DELETED, CLAIM, claim("102"), T0).events
    assert (deleted.key, deleted.deleted) == ("gpu-node-a", True)


# --- deletions -----------------------------------------------------------------------------


def test_deleted_publishes_the_last_form_and_forgets() -> None:
    tracker = InventoryTracker()
    tracker.event(ADDED, CLASS, device_class(version="10"), T0)
    tracker.event(MODIFIED, CLASS, device_class(version="11", note="noise"), T0)
    later = T0 + timedelta(minutes=1)
    # The DELETED object's content is not read: the last form is what consumers knew.
    (event,) = tracker.event(
        DELETED, CLASS, device_class(version="12", extended=None), later
    ).events
    assert event.deleted and event.key == "class:gpu.example.com" and event.observed_at == later
    assert isinstance(event.obj, DeviceClassInfo)
    assert (event.obj.extended_resource_name, event.obj.resource_version) == ("example.com/gpu", 11)
    assert tracker.tracked(CLASS) == 0
    # A new object of the same name is a first sighting again, whatever its version.
    assert tracker.event(ADDED, CLASS, device_class(version="5"), T0).events


def test_deleted_of_an_object_never_published_is_ignored() -> None:
    tracker = InventoryTracker()
    outcome = tracker.event(DELETED, CLASS, device_class(), T0)
    assert outcome.events == [] and outcome.ignored == "unknown"
    outcome = tracker.event(DELETED, CLASS, {"metadata": {}}, T0)
    assert outcome.events == [] and outcome.reject_reason is None


def test_an_older_deleted_is_ignored() -> None:
    tracker = InventoryTracker()
    tracker.event(ADDED, CLASS, device_class(version="10"), T0)
    outcome = tracker.event(DELETED, CLASS, device_class(version="9"), T0)
    assert outcome.events == [] and outcome.ignored == "stale"
    assert tracker.tracked(CLASS) == 1


def test_relist_deletes_what_is_gone_and_publishes_only_changes() -> None:
    tracker = InventoryTracker()
    tracker.listed(
        CLASS,
        [device_class("a", "1"), device_class("b", "2"), device_class("c", "3")],
        T0,
    )
    tracker.event(ADDED, CLAIM, claim(), T0)
    later = T0 + timedelta(minutes=5)
    relist = tracker.listed(
        CLASS,
        [
            device_class("a", "1"),  # unchanged version: stale
            device_class("c", "30", note="only an annotation"),  # unchanged form
            device_class("d", "31"),  # new
        ],
        later,
    )
    assert [o.ignored for o in relist.outcomes] == ["stale", "unchanged", None]
    assert keys([e for o in relist.outcomes for e in o.events]) == [
        ("DeviceClass", "class:d", False)
    ]
    assert keys(relist.deleted) == [("DeviceClass", "class:b", True)]
    assert relist.deleted[0].observed_at == later
    assert tracker.tracked(CLASS) == 3
    assert tracker.tracked(CLAIM) == 1  # a LIST of DeviceClasses says nothing about claims


def test_an_empty_relist_deletes_every_object_of_its_kind_sorted() -> None:
    tracker = InventoryTracker()
    tracker.listed(CLAIM, [claim(name="z"), claim(name="m", allocated=False)], T0)
    relist = tracker.listed(CLAIM, [], T0)
    assert keys(relist.deleted) == [
        ("ResourceClaim", "claim:ml-serving/m", True),
        ("ResourceClaim", "gpu-node-a", True),
    ]
    assert tracker.tracked(CLAIM) == 0


# --- malformed objects -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "reason"),
    [
        ({"metadata": {"name": "s"}, "spec": {"pool": {"name": "p"}}}, "spec.driver"),
        ({"metadata": {"resourceVersion": "3"}, "spec": {}}, "<no name>"),
        ({"metadata": {"name": "s"}, "spec": ["not", "an", "object"]}, "spec must be an object"),
    ],
)
def test_malformed_slices_are_rejected_with_the_reason(obj: dict[str, Any], reason: str) -> None:
    outcome = InventoryTracker().event(ADDED, SLICE, obj, T0)
    assert outcome.events == [] and outcome.reject_reason is not None
    assert outcome.reject_reason.startswith("ResourceSlice ")
    assert reason in outcome.reject_reason


@pytest.mark.parametrize(
    "status",
    ["not an object", {"allocation": {"devices": ["x"]}}, {"allocation": {"nodeSelector": [1]}}],
)
def test_claims_of_unexpected_shapes_are_rejected_not_raised(status: Any) -> None:
    obj = claim()
    obj["status"] = status
    outcome = InventoryTracker().event(ADDED, CLAIM, obj, T0)
    assert outcome.events == []
    assert outcome.reject_reason is not None
    assert outcome.reject_reason.startswith("ResourceClaim ml-serving/infer-dra-0-gpus-7xk2q: ")


def test_a_key_that_could_pass_for_a_tick_is_rejected() -> None:
    outcome = InventoryTracker().event(ADDED, SLICE, resource_slice(nodeName="~tick/0"), T0)
    assert outcome.events == [] and outcome.reject_reason is not None
    assert "reserved for ticks" in outcome.reject_reason


def test_the_same_problem_is_reported_once_and_the_last_good_form_stays() -> None:
    tracker = InventoryTracker()
    tracker.event(ADDED, SLICE, resource_slice("10"), T0)
    broken = [resource_slice(str(v), driver="") for v in (11, 12)]
    first, second = (tracker.event(MODIFIED, SLICE, b, T0) for b in broken)
    assert first.reject_reason is not None and "spec.driver" in first.reject_reason
    assert second.reject_reason is None and second.events == []
    assert tracker.tracked(SLICE) == 1
    # Read well again: nothing changed since the last published form, so nothing to publish...
    assert tracker.event(MODIFIED, SLICE, resource_slice("13"), T0).ignored == "unchanged"
    # ...and a new problem is reported again.
    assert tracker.event(MODIFIED, SLICE, resource_slice("14", driver=""), T0).reject_reason
    # Gone from a LIST: deleted with the last good form.
    (deleted,) = tracker.listed(SLICE, [], T0).deleted
    assert deleted.deleted and isinstance(deleted.obj, ResourceSliceInfo)
    assert deleted.obj.driver == "gpu.example.com"


def test_object_names() -> None:
    assert object_name(CLAIM, claim()) == "ml-serving/infer-dra-0-gpus-7xk2q"
    assert object_name(CLAIM, {"metadata": {"name": "c"}}) is None
    assert object_name(SLICE, resource_slice()) == "gpu-node-a-gpu.example.com-k7d2m"
    assert object_name(CLASS, {"metadata": "x"}) is None
    seven, eight = (parse_resource_slice(resource_slice(v)) for v in ("7", "8"))
    assert seven != eight and compact(seven) == compact(eight)
    assert compact(seven).resource_version is None


# --- properties ---------------------------------------------------------------------------

NAMES = ("a", "b", "c")
VARIANTS = (("example.com/gpu", "gpu.example.com"), (None, "gpu.example.com"), (None, "x.io"))

puts = st.tuples(
    st.just("put"),
    st.sampled_from(NAMES),
    st.integers(0, len(VARIANTS) - 1),
    st.integers(1, 12),
    st.text("xyz", max_size=2),
)
deletes = st.tuples(st.just("delete"), st.sampled_from(NAMES), st.integers(1, 12))
relists = st.tuples(
    st.just("relist"),
    st.lists(
        st.tuples(st.sampled_from(NAMES), st.integers(0, len(VARIANTS) - 1), st.integers(1, 12)),
        unique_by=lambda t: t[0],
        max_size=3,
    ),
)


class Model:
    """The rules, stated plainly: per name the last published variant and the newest version."""

    def __init__(self) -> None:
        self.published: dict[str, int] = {}
        self.newest: dict[str, int] = {}

    def put(self, name: str, variant: int, version: int) -> list[tuple[str, bool]]:
        if version <= self.newest.get(name, 0):
            return []
        self.newest[name] = version
        if self.published.get(name) == variant:
            return []
        self.published[name] = variant
        return [(name, False)]

    def delete(self, name: str, version: int) -> list[tuple[str, bool]]:
        if name not in self.published:
            self.newest.pop(name, None)
            return []
        if version < self.newest.get(name, 0):
            return []
        del self.published[name]
        self.newest.pop(name, None)
        return [(name, True)]

    def relist(self, listed: list[tuple[str, int, int]]) -> list[tuple[str, bool]]:
        out = [e for name, variant, version in listed for e in self.put(name, variant, version)]
        present = {name for name, _, _ in listed}
        for name in sorted(set(self.published) - present):
            out.append((name, True))
            del self.published[name]
        for name in set(self.newest) - present:
            del self.newest[name]
        return out


def _class(name: str, variant: int, version: int, note: str = "") -> dict[str, Any]:
    extended, driver = VARIANTS[variant]
    return device_class(name, str(version), extended, driver, note)


@given(st.lists(st.one_of(puts, deletes, relists), max_size=30))
def test_published_exactly_on_first_sighting_change_and_deletion(ops: list[Any]) -> None:
    tracker = InventoryTracker()
    model = Model()
    for op in ops:
        if op[0] == "put":
            _, name, variant, version, note = op
            events = tracker.event(MODIFIED, CLASS, _class(name, variant, version, note), T0).events
            expected = model.put(name, variant, version)
        elif op[0] == "delete":
            _, name, version = op
            events = tracker.event(DELETED, CLASS, _class(name, 0, version), T0).events
            expected = model.delete(name, version)
        else:
            relist = tracker.listed(CLASS, [_class(*entry) for entry in op[1]], T0)
            events = [e for o in relist.outcomes for e in o.events] + relist.deleted
            expected = model.relist(op[1])
        assert [(e.obj.name, e.deleted) for e in events] == expected
        for event in events:
            # What is published is the variant asked for (or, deleted, the last one published).
            assert isinstance(event.obj, DeviceClassInfo)
            assert event.key == f"class:{event.obj.name}"
        assert tracker.tracked(CLASS) == len(model.published)
        for name, variant in model.published.items():
            form = tracker.form(CLASS, name)
            assert form is not None and compact(form) == compact(
                DeviceClassInfo(
                    name,
                    VARIANTS[variant][0],
                    (VARIANTS[variant][1],),
                )
            )


@given(
    st.lists(st.sampled_from(NAMES), unique=True),
    st.lists(st.sampled_from(NAMES), unique=True),
)
def test_a_relist_deletes_exactly_the_objects_it_no_longer_has(
    before: list[str], after: list[str]
) -> None:
    tracker = InventoryTracker()
    tracker.listed(CLASS, [_class(n, 0, 1) for n in before], T0)
    relist = tracker.listed(CLASS, [_class(n, 0, 2) for n in after], T0)
    assert [(e.obj.name, e.deleted) for e in relist.deleted] == [
        (n, True) for n in sorted(set(before) - set(after))
    ]
    published = [e.obj.name for o in relist.outcomes for e in o.events]
    assert published == [n for n in after if n not in before]
    assert tracker.tracked(CLASS) == len(after)


def test_listed_objects_are_not_modified() -> None:
    obj = claim()
    before = copy.deepcopy(obj)
    InventoryTracker().listed(CLAIM, [obj], T0)
    assert obj == before
