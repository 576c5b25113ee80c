"""The inventory and identity folds do not depend on how partitions interleave (issue 10, part 2).

A DRA Pod reports its GPUs by CDI-form resourceIDs; the ResourceClaim that resolves them is keyed
``claim:<ns>/<name>`` while it is not allocated and by its node once it is, so its records sit in
two partitions, one of them not the Pod's. A DeviceClass is keyed apart again. The worker (several
batches of several partitions) and the replay (another fetch order) read the same per-partition
logs in other interleavings: the rows the fold writes must end the same for every interleaving
that keeps each partition's order, and for every batching.

The logs are built from the shared examples (``../shared/examples``): the ResourceSlice of
gpu-node-a, the allocated ResourceClaim of pod-04 (with an unallocated form before it and maybe a
deletion after it), the DeviceClass, pod-04's observations (repeated under newer resourceVersions)
and stream-09's device-plugin GPU.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from services.domain.events import DeviceHealthObserved, Health
from services.domain.inventory.events import InventoryObserved, record_key
from services.domain.inventory.fold import InventoryFold
from services.domain.inventory.objects import ResourceClaimInfo
from services.domain.log import LogPosition
from tests.projection.inventory_examples import (
    CDI_GPU_2,
    CDI_GPU_3,
    GPU_2,
    GPU_3,
    at,
    claim_event,
    class_event,
    plugin_gpu,
    pod_04,
    slice_event,
)

TOPIC = "health"
Log = list[object]


def claim(seconds: float, **fields: Any) -> InventoryObserved:
    """The example ResourceClaim (allocated, rv 51860) with ``fields`` replaced; its record key
    follows the replaced object (``claim:<ns>/<name>`` without a node)."""
    obj = claim_event().obj
    assert isinstance(obj, ResourceClaimInfo)
    obj = dataclasses.replace(obj, **fields)
    return InventoryObserved(record_key(obj), obj, False, at(seconds))


@st.composite
def partition_logs(draw: st.DrawFn) -> list[Log]:
    """Three partitions: the node's, the unallocated claim's (``claim:...``), the DeviceClass's."""
    node: Log = []
    claims: Log = [claim(1, results=(), node=None, resource_version=51800)]
    allocated_apart = draw(st.booleans())  # the allocated claim keyed apart (no single node)
    allocated = claim(2) if not allocated_apart else claim(2, node=None)
    (claims if allocated_apart else node).append(allocated)
    observations = pod_04(10)
    repeats = draw(st.integers(0, 2))
    slice_at = draw(st.integers(0, 1 + repeats))
    for round_ in range(repeats + 1):
        if round_ == slice_at:
            node.append(slice_event(5))
        health = draw(st.sampled_from(list(Health)))
        node.extend(
            dataclasses.replace(o, health=health, status_version=51877 + 10 * round_)
            for o in observations
        )
    if slice_at > repeats:
        node.append(slice_event(40))
    if draw(st.booleans()):
        node.append(plugin_gpu(50))
    if draw(st.booleans()):  # the Pod ended: its claim is deleted (keyed by its node)
        gone = claim(60, resource_version=52100)
        node.append(dataclasses.replace(gone, deleted=True))
    return [node, claims, [class_event(0)]]


def positioned(logs: Sequence[Log]) -> list[list[tuple[LogPosition, object]]]:
    return [
        [(LogPosition(TOPIC, p, offset), record) for offset, record in enumerate(log)]
        for p, log in enumerate(logs)
    ]


def fold_in(order: Sequence[int], logs: Sequence[Log], batch: int) -> dict[str, Any]:
    """Fold ``logs`` taking the next record of partition ``order[i]`` at step ``i``, in batches of
    ``batch`` records; the tables as the plans leave them, and the state."""
    queues = [list(reversed(log)) for log in positioned(logs)]
    items = [queues[p].pop() for p in order]
    applied = {position for position, record in items if isinstance(record, DeviceHealthObserved)}
    fold = InventoryFold()
    tables: dict[str, dict[Any, Any]] = {"objects": {}, "identities": {}, "conflicts": {}}
    for start in range(0, len(items), batch):
        plan = fold.fold(items[start : start + batch], applied)
        tables["objects"].update(plan.objects)
        tables["identities"].update(plan.identities)
        tables["conflicts"].update(
            {key: (row.detail, row.active) for key, row in plan.conflicts.items()}
        )
    state = fold.state
    return {
        **tables,
        "claims": state.claims,
        "slices": state.slices,
        "classes": state.classes,
        "aliases": state.aliases,
        "active": sorted(fold.active),
    }


def claims_first(logs: Sequence[Log]) -> list[int]:
    """The order in which the claim is known before any observation (the live case that
    resolved): the claim and class partitions, then the node's."""
    return [1] * len(logs[1]) + [2] * len(logs[2]) + [0] * len(logs[0])


@st.composite
def interleaved(draw: st.DrawFn) -> tuple[list[Log], list[int], int]:
    logs = draw(partition_logs())
    labels = [p for p, log in enumerate(logs) for _ in log]
    return logs, draw(st.permutations(labels)), draw(st.integers(1, 8))


@settings(max_examples=300, deadline=None)
@given(interleaved())
def test_any_interleaving_of_the_partitions_folds_to_the_same_tables(
    case: tuple[list[Log], list[int], int],
) -> None:
    logs, order, batch = case
    expected = fold_in(claims_first(logs), logs, len(order))
    assert fold_in(order, logs, batch) == expected


def test_an_identity_left_unresolved_is_resolved_when_its_claim_arrives() -> None:
    """The node's partition first (the Pod's observations before any claim record): the claim
    resolves the CDI-form IDs it allocated, with the slice's UUIDs, as if it had come first."""
    node_first = [
        [slice_event(5), *pod_04(10)],
        [claim(1, results=(), node=None, resource_version=51800), claim(2, node=None)],
        [class_event(0)],
    ]
    got = fold_in([0] * 4 + [1, 1, 2], node_first, 100)
    rows = {rid: (row["device_id"], row["status"]) for (_, rid), row in got["identities"].items()}
    assert rows[CDI_GPU_2] == (GPU_2, "resolved")
    assert rows[CDI_GPU_3] == (GPU_3, "resolved")
    assert got == fold_in(claims_first(node_first), node_first, 100)


def test_an_older_claim_record_from_another_partition_does_not_undo_a_newer_one() -> None:
    """The allocated claim (rv 51860, keyed by its node) folded before its unallocated form (rv
    51800, keyed ``claim:...``): the claim stays allocated, its row stays the newer form."""
    logs = [[claim(2)], [claim(1, results=(), node=None, resource_version=51800)], []]
    got = fold_in([0, 1], logs, 10)
    [held] = got["claims"].values()
    assert held.resource_version == 51860 and held.results
    [row] = got["objects"].values()
    assert row["object"]["resourceVersion"] == "51860"
