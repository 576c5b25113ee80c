"""Each node's labels (issue 16) are that node's own row (``governor_node_labels``), written only
when its labels change; the fleet's row, rewritten every batch, holds none (issue 12: 5,000 nodes
of ~100 labels made it ~29 MB a batch). A state of either layout restores to the same gate."""

from __future__ import annotations

from datetime import timedelta

import orjson

from services.adapters.projection.governance_rows import BatchRows, batch_rows
from services.domain.governance.inputs import GovernanceInput, WatermarkAdvanced
from services.domain.governance.machine import step
from services.domain.governance.policy import GovernancePolicy
from services.domain.governance.state import GovernorState
from services.domain.node_labels import NodeLabelsChanged
from tests.conftest import T0

POLICY = GovernancePolicy()
TOPIC = "t.governance"


def nfd_labels(node: int, t: float, version: str = "535") -> NodeLabelsChanged:
    """~100 NFD-style labels of node ``node`` at ``T0 + t``."""
    values = {f"feature.node.kubernetes.io/cpu-cpuid.F{i:03d}": "true" for i in range(97)}
    values["nvidia.com/cuda.driver.major"] = version
    values["topology.kubernetes.io/zone"] = f"zone-{node % 3}"
    values["kubernetes.io/hostname"] = f"node-{node:05d}"
    return NodeLabelsChanged(f"node-{node:05d}", tuple(values.items()), T0 + timedelta(seconds=t))


def fold(state: GovernorState, items: list[GovernanceInput], start: int = 0) -> int:
    for offset, record in enumerate(items, start):
        step(state, record, offset, POLICY)
    return start + len(items) - 1


def write(state: GovernorState, offset: int) -> BatchRows:
    rows = batch_rows(state, [], topic=TOPIC, offset=offset, expected_offset=None)
    state.clear_dirty()
    return rows


def labelled(nodes: int) -> tuple[GovernorState, int]:
    state = GovernorState()
    last = fold(state, [WatermarkAdvanced(0, 1, T0), *(nfd_labels(n, 1) for n in range(nodes))])
    return state, last


def restore(fleet: object, nodes: list[object], labels: list[object] | None) -> GovernorState:
    return GovernorState.restore([], nodes, fleet, 60, None, labels)  # type: ignore[arg-type]


def test_a_batch_touching_one_node_writes_its_labels_only_and_a_fleet_row_without_labels() -> None:
    state, last = labelled(1_000)
    first = write(state, last)
    assert len(orjson.loads(first.labels or "[]")) == 1_000  # each node's own row, once
    unlabelled = GovernorState()
    fold(unlabelled, [WatermarkAdvanced(0, 1, T0)])
    bare = write(unlabelled, 0)

    last = fold(state, [nfd_labels(7, 5, version="550")], last + 1)
    rows = write(state, last)

    assert [r["node"] for r in orjson.loads(rows.labels or "[]")] == ["node-00007"]
    assert rows.deleted_labels == []
    # The fleet row is the same bytes as a governor's that holds no labels at all.
    assert "nodeLabels" not in rows.fleet
    assert len(rows.fleet) == len(bare.fleet) == len(first.fleet)
    assert rows.nodes is None  # labels do not make a node's governance row dirty

    quiet = write(
        state, fold(state, [WatermarkAdvanced(0, 1, T0 + timedelta(seconds=9))], last + 1)
    )
    assert quiet.labels is None and quiet.deleted_labels == []  # unchanged labels: not rewritten


def test_labels_restore_from_their_rows() -> None:
    state, last = labelled(3)
    fold(state, [nfd_labels(1, 4, version="550")], last + 1)
    snap = orjson.loads(orjson.dumps(state.snapshot()))
    restored = restore(snap["fleet"], snap["nodes"], snap["nodeLabels"])
    assert restored.fleet.adoption.labels == state.fleet.adoption.labels
    assert restored.fleet.adoption.dirty_labels == set()  # already written
    assert orjson.dumps(restored.snapshot()) == orjson.dumps(state.snapshot())


def test_a_fleet_snapshot_of_the_old_layout_restores_and_moves_its_labels_to_the_nodes() -> None:
    state, last = labelled(3)
    snap = orjson.loads(orjson.dumps(state.snapshot()))
    # What the previous version wrote: every node's labels in the fleet's adoption snapshot.
    old_fleet = dict(snap["fleet"])
    old_fleet["adoption"] = {
        **(old_fleet.get("adoption") or {}),
        "nodeLabels": [[r["node"], r["observedAt"], r["labels"]] for r in snap["nodeLabels"]],
    }
    restored = restore(old_fleet, snap["nodes"], None)
    assert restored.fleet.adoption.labels == state.fleet.adoption.labels
    assert orjson.dumps(restored.snapshot()) == orjson.dumps(state.snapshot())

    rows = write(restored, last + 1)  # the first batch after the restore
    assert [r["snapshot"] for r in orjson.loads(rows.labels or "[]")] == snap["nodeLabels"]
    assert "nodeLabels" not in rows.fleet
    again = restore(orjson.loads(rows.fleet)[0]["snapshot"], snap["nodes"], snap["nodeLabels"])
    assert orjson.dumps(again.snapshot()) == orjson.dumps(state.snapshot())


def test_a_node_row_wins_over_the_old_fleet_key_for_the_same_node() -> None:
    state, _ = labelled(1)
    snap = orjson.loads(orjson.dumps(state.snapshot()))
    stale = nfd_labels(0, 0, version="470")
    old_fleet = {
        **snap["fleet"],
        "adoption": {
            "nodeLabels": [[stale.node, "2026-11-29T08:00:00Z", dict(stale.labels)]],
        },
    }
    restored = restore(old_fleet, [], snap["nodeLabels"])
    assert restored.fleet.adoption.labels == state.fleet.adoption.labels
    assert restored.fleet.adoption.dirty_labels == set()


def test_dropped_labels_delete_the_nodes_row() -> None:
    state, last = labelled(2)
    write(state, last)
    state.fleet.adoption.drop_labels("node-00001")
    rows = write(state, last + 1)
    assert rows.deleted_labels == ["node-00001"] and rows.labels is None
