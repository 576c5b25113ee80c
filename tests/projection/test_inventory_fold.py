"""The inventory fold of a health-topic batch (:mod:`services.domain.inventory.fold`), pure:
rows, identities, conflicts raised and cleared once, independence from batch boundaries, and the
per-node ownership check of :class:`InventoryState` agreeing with the whole-fleet one."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from typing import Any

import pytest

from services.domain.events import ClaimRef, DeviceHealthObserved
from services.domain.inventory.events import InventoryKind, object_from_json
from services.domain.inventory.fold import (
    InventoryFold,
    InventoryPlan,
    by_key,
    forwards,
    identity_from_row,
    object_key,
    object_row,
)
from services.domain.inventory.identity import Identity, IdentityStatus
from services.domain.inventory.objects import ResourceClaimInfo
from services.domain.inventory.rows import place_identity, place_object
from services.domain.inventory.state import ConflictKind, InventoryState
from services.domain.log import LogPosition
from services.domain.node_events import NodeResourcesChanged, WatcherTick
from tests.projection.inventory_examples import (
    CDI_GPU_2,
    CDI_GPU_3,
    GPU_2,
    GPU_3,
    NODE,
    UUID_GPU_2,
    UUID_GPU_3,
    at,
    claim_event,
    class_event,
    device_class,
    inventory_events,
    inventory_record,
    plugin_gpu,
    pod_04,
    resource_slice,
    slice_event,
)

TOPIC = "health"


def positioned(records: Sequence[object], start: int = 0) -> list[tuple[LogPosition, object]]:
    return [(LogPosition(TOPIC, 0, start + i), r) for i, r in enumerate(records)]


def fold_all(
    fold: InventoryFold, records: Sequence[object], start: int = 0
) -> tuple[InventoryPlan, list[tuple[LogPosition, object]]]:
    """Fold ``records`` as one batch, every observation applied."""
    items = positioned(records, start)
    applied = {p for p, r in items if isinstance(r, DeviceHealthObserved)}
    return fold.fold(items, applied), items


def resources(capacity: dict[str, int], seconds: float) -> NodeResourcesChanged:
    counts = tuple(sorted(capacity.items()))
    return NodeResourcesChanged(NODE, counts, counts, 1, at(seconds))


def test_pod_04_resolves_to_the_slice_devices_with_their_uuids() -> None:
    fold = InventoryFold()
    plan, items = fold_all(fold, [*inventory_events(), *pod_04()])
    assert set(plan.objects) == {
        ("DeviceClass", "gpu.example.com"),
        ("ResourceSlice", "gpu.example.com/gpu-node-a/gpu-node-a-gpu.example.com-k7d2m"),
        ("ResourceClaim", "ml-serving/infer-dra-0-gpus-7xk2q"),
    }
    identities = {
        rid: (r["device_id"], r["status"], r["uuid"]) for (_, rid), r in plan.identities.items()
    }
    assert identities == {
        CDI_GPU_2: (GPU_2, "resolved", UUID_GPU_2),
        CDI_GPU_3: (GPU_3, "resolved", UUID_GPU_3),
        "accel.example.org/gpu-node-a/accel-1": (
            "accel.example.org/gpu-node-a/accel-1",
            "as-reported",
            None,
        ),
    }
    resolved = [plan.resolved[p] for p, r in items if isinstance(r, DeviceHealthObserved)]
    assert [i.device_id for i in resolved] == [
        "accel.example.org/gpu-node-a/accel-1",
        GPU_2,
        GPU_3,
    ]
    assert all(forwards(i) for i in resolved)
    assert plan.conflicts == {} and plan.changes == []
    row = plan.identities[(NODE, CDI_GPU_2)]
    assert identity_from_row(row) == fold.state.aliases[(NODE, CDI_GPU_2)]
    assert row["observed_at"] == at(10)


def test_only_applied_observations_are_resolved() -> None:
    fold = InventoryFold()
    items = positioned([*inventory_events(), *pod_04()])
    plan = fold.fold(items, applied={items[3][0]})
    assert list(plan.resolved) == [items[3][0]]
    assert len(plan.identities) == 1


def test_an_unknown_claim_is_unresolved_and_never_replaces_a_resolved_identity() -> None:
    fold = InventoryFold()
    first = pod_04()[1]
    plan, _ = fold_all(fold, [first])  # the claim is not known yet
    [identity] = plan.resolved.values()
    assert identity.status is IdentityStatus.UNRESOLVED and not forwards(identity)
    assert plan.identities[(NODE, CDI_GPU_2)]["status"] == "unresolved"

    plan, _ = fold_all(fold, [*inventory_events(), dataclasses.replace(first, status_version=2)])
    assert plan.identities[(NODE, CDI_GPU_2)]["status"] == "resolved"

    gone = dataclasses.replace(
        first, claim=ClaimRef("gpus", "main", "another-claim"), status_version=3
    )
    plan, _ = fold_all(fold, [gone], start=10)
    [identity] = plan.resolved.values()
    # The identity kept stays the resolved one, and it is what the transition forwards (issue 10:
    # an unresolved reading must not make the governor key the GPU a second time); the row
    # changes only in the claim the alias was last reported with.
    assert identity.status is IdentityStatus.RESOLVED and identity.device_id == GPU_2
    [row] = plan.identities.values()
    assert (row["status"], row["reported_with"]["resourceClaim"]) == ("resolved", "another-claim")
    assert fold.state.aliases[(NODE, CDI_GPU_2)].device_id == GPU_2


def test_a_plugin_gpu_that_dra_publishes_raises_plugin_and_dra_once() -> None:
    fold = InventoryFold()
    fold_all(fold, inventory_events())
    plan, items = fold_all(fold, [plugin_gpu(20)], start=3)
    [change] = plan.changes
    assert (change.row.kind, change.row.node, change.row.subject) == (
        "plugin-and-dra",
        NODE,
        UUID_GPU_2,
    )
    assert change.row.active and change.position == items[0][0] and change.at == at(20)
    assert GPU_2 in change.row.detail
    assert (change.row.first_seen, change.row.last_seen) == (at(20), at(20))
    # The same GPU again, and a slice update that keeps it: still active, not raised again.
    plan, _ = fold_all(fold, [plugin_gpu(30, version=73310), slice_event(31)], start=4)
    assert plan.changes == []
    [row] = plan.conflicts.values()
    assert row.active and (row.first_seen, row.last_seen) == (at(20), at(31))


def test_a_resource_in_node_capacity_backed_by_dra_is_raised_and_cleared() -> None:
    fold = InventoryFold()
    fold_all(fold, inventory_events())
    plan, _ = fold_all(fold, [resources({"example.com/gpu": 8}, 5)], start=3)
    [raised] = plan.changes
    assert (raised.row.kind, raised.row.subject, raised.row.active) == (
        "plugin-and-dra",
        "example.com/gpu",
        True,
    )
    assert plan.node_resources[NODE]["capacity"] == {"example.com/gpu": 8}
    # Unchanged capacity: nothing re-checked, nothing raised.
    assert fold_all(fold, [resources({"example.com/gpu": 8}, 6)], start=4)[0].changes == []
    plan, _ = fold_all(fold, [resources({}, 7)], start=5)
    [cleared] = plan.changes
    assert cleared.row.key == raised.row.key and not cleared.row.active
    assert (cleared.row.first_seen, cleared.row.last_seen) == (at(5), at(7))
    assert fold.active == {}


def test_a_device_class_change_rechecks_the_nodes_of_its_drivers() -> None:
    fold = InventoryFold()
    fold_all(fold, [slice_event(), resources({"example.com/gpu": 8}, 1)])
    assert fold.active == {}  # no DeviceClass backs example.com/gpu yet
    plan, _ = fold_all(fold, [class_event(2)], start=2)
    assert [(c.row.subject, c.row.active) for c in plan.changes] == [("example.com/gpu", True)]
    without = dataclasses.replace(device_class(), extended_resource_name=None)
    plan, _ = fold_all(fold, [inventory_record(without, 3)], start=3)
    assert [(c.row.subject, c.row.active) for c in plan.changes] == [("example.com/gpu", False)]


def test_a_device_leaving_its_slice_is_raised_then_cleared_when_back() -> None:
    fold = InventoryFold()
    fold_all(fold, inventory_events())
    plan, _ = fold_all(fold, [slice_event(5, without=("gpu-3", "gpu-7"))], start=3)
    assert [(c.row.kind, c.row.subject, c.row.active) for c in plan.changes] == [
        ("vanished-from-slice", GPU_3, True),
        ("vanished-from-slice", "gpu.example.com/gpu-node-a/gpu-7", True),
    ]
    assert "while allocated" in plan.changes[0].row.detail
    # Still missing in the next update: not raised again.
    assert fold_all(fold, [slice_event(6, without=("gpu-3", "gpu-7"))], start=4)[0].changes == []
    plan, _ = fold_all(fold, [slice_event(7, without=("gpu-7",))], start=5)
    assert [(c.row.subject, c.row.active) for c in plan.changes] == [(GPU_3, False)]
    tombstone = inventory_record(slice_event().obj, 8, deleted=True)
    plan, _ = fold_all(fold, [tombstone], start=6)
    assert plan.objects[("ResourceSlice", object_key(tombstone.obj))]["deleted"] is True
    assert len([c for c in plan.changes if c.row.active]) == 7  # gpu-7 still active from before


def test_a_driver_replacing_its_slice_makes_nothing_vanish() -> None:
    fold = InventoryFold()
    fold_all(fold, inventory_events())
    renamed = dataclasses.replace(resource_slice(), name="gpu-node-a-gpu.example.com-x9y8z")
    old = inventory_record(resource_slice(), 2, deleted=True)
    plan, _ = fold_all(fold, [inventory_record(renamed, 1), old], start=3)
    assert plan.changes == [] and fold.active == {}
    assert len(plan.objects) == 2


def test_an_ambiguous_id_is_raised_once_and_cleared_when_it_resolves() -> None:
    fold = InventoryFold()
    fold_all(fold, inventory_events())
    common = dataclasses.replace(pod_04()[1], resource_id="k8s.gpu.example.com/gpu=common")
    plan, _ = fold_all(fold, [common], start=3)
    [raised] = plan.changes
    assert raised.row.kind == ConflictKind.AMBIGUOUS_RESOURCE_ID.value and raised.row.active
    [identity] = plan.resolved.values()
    assert identity.status is IdentityStatus.AMBIGUOUS and not forwards(identity)
    seen_again = dataclasses.replace(common, status_version=51900, observed_at=at(11))
    plan, _ = fold_all(fold, [seen_again], start=4)
    [row] = plan.conflicts.values()  # last_seen moves, nothing forwarded
    assert plan.changes == [] and row.active and row.last_seen == at(11)
    # The claim now holds one device: the same ID resolves to it, the ambiguity is over.
    claim = claim_event(9).obj
    assert isinstance(claim, ResourceClaimInfo)
    one = dataclasses.replace(claim, results=claim.results[:1])
    again = dataclasses.replace(common, status_version=51901, observed_at=at(12))
    plan, _ = fold_all(fold, [inventory_record(one, 9), again], start=5)
    [cleared] = plan.changes
    assert cleared.row.key == raised.row.key and not cleared.row.active
    # Cleared by the claim itself (it re-resolves the alias), not by the next observation.
    assert cleared.position.offset == 5
    assert (cleared.row.first_seen, cleared.row.last_seen) == (at(10), at(11))


def test_a_resource_id_resolving_to_another_device_is_raised() -> None:
    fold = InventoryFold()
    fold_all(fold, [*inventory_events(), pod_04()[1]])
    claim = claim_event().obj
    assert isinstance(claim, ResourceClaimInfo)
    moved = dataclasses.replace(claim, results=claim.results[1:])
    plan, _ = fold_all(
        fold, [inventory_record(moved, 30), dataclasses.replace(pod_04()[1], status_version=9)], 4
    )
    assert [(c.row.kind, c.row.subject) for c in plan.changes] == [
        ("resource-id-reused", CDI_GPU_2)
    ]


def test_other_records_are_ignored() -> None:
    fold = InventoryFold()
    plan, _ = fold_all(fold, [WatcherTick(0, at(1))])
    assert plan.writes == 0 and plan.changes == []


def merged(plans: Sequence[InventoryPlan]) -> dict[str, Any]:
    """What a sequence of batches writes, as the rows the tables end with."""
    out: dict[str, dict[Any, Any]] = {"objects": {}, "nodes": {}, "identities": {}, "conflicts": {}}
    for plan in plans:
        out["objects"].update(plan.objects)
        out["nodes"].update(plan.node_resources)
        out["identities"].update(plan.identities)
        out["conflicts"].update(plan.conflicts)
    return out


def story() -> list[object]:
    observations = pod_04()
    return [
        *inventory_events(),
        *observations,
        plugin_gpu(20),
        resources({"example.com/gpu": 8}, 21),
        slice_event(22, without=("gpu-3",)),
        dataclasses.replace(observations[1], status_version=60000, observed_at=at(23)),
        resources({}, 24),
        plugin_gpu(25, version=73310),
        slice_event(26),
    ]


@pytest.mark.parametrize("cuts", [(), (1,), (3, 4), (5, 7, 9), tuple(range(1, 14))])
def test_batch_boundaries_change_nothing(cuts: tuple[int, ...]) -> None:
    records = story()
    whole = InventoryFold()
    expected_plan, _ = fold_all(whole, records)
    expected = merged([expected_plan])
    split = InventoryFold()
    plans = []
    bounds = [0, *cuts, len(records)]
    changes = []
    for start, end in itertools.pairwise(bounds):
        plan, _ = fold_all(split, records[start:end], start=start)
        plans.append(plan)
        changes.extend(plan.changes)
    assert merged(plans) == expected
    assert changes == expected_plan.changes
    assert split.active == whole.active
    kinds = [(c.row.kind, c.row.subject, c.row.active) for c in changes]
    assert kinds == [
        ("plugin-and-dra", UUID_GPU_2, True),
        ("plugin-and-dra", "example.com/gpu", True),
        ("vanished-from-slice", GPU_3, True),
        ("plugin-and-dra", "example.com/gpu", False),
        ("vanished-from-slice", GPU_3, False),
    ]


def test_a_fold_rebuilt_from_its_rows_continues_the_same_way() -> None:
    records = story()
    continuous = InventoryFold()
    first, _ = fold_all(continuous, records[:9])
    # What a restarted worker loads (inventory_store.load_fold): the objects and tombstones,
    # capacities, identities (with their first observation and reported claim), active rows.
    state = InventoryState()
    for row in first.objects.values():
        place_object(state, row_object(row), row["deleted"])
    state.node_capacity = dict(continuous.state.node_capacity)
    for row in first.identities.values():
        place_identity(state, row)
    state.reindex()
    assert state.aliases == {k: identity_from_row(r) for k, r in first.identities.items()}
    restored = InventoryFold(state, [r for r in first.conflicts.values() if r.active])
    rest_a, _ = fold_all(continuous, records[9:], start=9)
    rest_b, _ = fold_all(restored, records[9:], start=9)
    assert merged([rest_a]) == merged([rest_b])
    assert rest_a.changes == rest_b.changes and rest_a.resolved == rest_b.resolved


def row_object(row: dict[str, Any]) -> Any:
    """The object of an ``inventory_objects`` row of a plan (its JSON form, read back)."""
    kind = InventoryKind(row["kind"])
    return object_from_json(kind, row["object"])


def test_by_key_keeps_the_first_of_one_key() -> None:
    state = InventoryState()
    for event in inventory_events():
        state.apply(event)
    for resource_id in (UUID_GPU_2, f"{UUID_GPU_2}::1"):
        state.resolve(dataclasses.replace(plugin_gpu(), resource_id=resource_id))
    conflicts = state.ownership_conflicts()
    assert len(conflicts) == 2 and len(by_key(conflicts)) == 1
    assert list(by_key(conflicts).values()) == conflicts[:1]


def test_ownership_of_each_node_adds_up_to_the_whole_fleet() -> None:
    state = InventoryState()
    for event in inventory_events():
        state.apply(event)
    base = resource_slice()
    for index in range(3):
        other = dataclasses.replace(base, name=f"s{index}", node=f"node-{index}", pool=f"p{index}")
        state.apply(inventory_record(other))
        state.set_capacity(f"node-{index}", [("example.com/gpu", index)])
    state.resolve(plugin_gpu())
    state.resolve(dataclasses.replace(plugin_gpu(), node="node-2", resource_id=UUID_GPU_3))
    whole = state.ownership_conflicts()
    assert len(whole) == 4
    per_node = sorted(c for node in state.nodes() for c in state.ownership_conflicts([node]))
    assert per_node == whole
    rebuilt = InventoryState(
        slices=dict(state.slices),
        claims=dict(state.claims),
        classes=dict(state.classes),
        node_capacity=dict(state.node_capacity),
        aliases=dict(state.aliases),
    )
    assert rebuilt.ownership_conflicts() == whole
    assert dict(rebuilt.slice_index()) == dict(state.slice_index())


def test_object_rows_name_objects_by_their_keys() -> None:
    row = object_row(claim_event(3))
    assert (row["kind"], row["object_key"], row["record_key"], row["node"]) == (
        "ResourceClaim",
        "ml-serving/infer-dra-0-gpus-7xk2q",
        NODE,
        NODE,
    )
    assert row["observed_at"] == at(3) and row["deleted"] is False
    klass = object_row(class_event())
    assert (klass["object_key"], klass["record_key"], klass["node"]) == (
        "gpu.example.com",
        "class:gpu.example.com",
        None,
    )


def test_identity_rows_round_trip() -> None:
    identity = Identity(
        "k8s.x/claim=1-common",
        pod_04()[0].source,
        IdentityStatus.AMBIGUOUS,
        candidates=(GPU_2, GPU_3),
        reason="why",
    )
    from services.domain.inventory.fold import identity_row

    assert identity_from_row(identity_row(NODE, "r", identity, at(0))) == identity
