"""Bytes the governor writes per batch for the nodes' labels (issue 12 / 16), pure (no stack):

    .venv/bin/python -m bench.label_rows --nodes 5000 --labels 100

Folds ``--nodes`` ``NodeLabelsChanged`` of ``--labels`` NFD-style labels each into a
:class:`~services.domain.governance.state.GovernorState` (no pool declared), writes that first
batch (every node's label row, once), then measures one later batch that changes one node's
labels, through :func:`~services.adapters.projection.governance_rows.batch_rows`: the encoded
fleet row and label rows. "before" is the fleet row of the layout before ``0016`` (every node's
labels in ``governor_fleet.snapshot -> 'adoption' -> 'nodeLabels'``, the form the previous
``AdoptionGov.to_json`` wrote), rebuilt from the same state. Prints one JSON object (bytes).
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime, timedelta

import orjson

from services.adapters.projection.governance_rows import batch_rows
from services.domain.governance.inputs import WatermarkAdvanced
from services.domain.governance.machine import step
from services.domain.governance.policy import GovernancePolicy
from services.domain.governance.state import GovernorState
from services.domain.node_labels import NodeLabelsChanged

T0 = datetime(2026, 12, 4, tzinfo=UTC)


def labels_of(node: int, count: int, t: float, version: str = "535") -> NodeLabelsChanged:
    values = {
        f"feature.node.kubernetes.io/cpu-cpuid.F{i:03d}": "true" for i in range(max(count - 3, 0))
    }
    values["nvidia.com/cuda.driver.major"] = version
    values["topology.kubernetes.io/zone"] = f"zone-{node % 3}"
    values["kubernetes.io/hostname"] = f"node-{node:05d}"
    return NodeLabelsChanged(f"node-{node:05d}", tuple(values.items()), T0 + timedelta(seconds=t))


def old_fleet_row(fleet_rows: str, state: GovernorState) -> bytes:
    """The fleet row as the layout before 0016 wrote it: the labels in the adoption snapshot."""
    row = orjson.loads(fleet_rows)
    adoption = row[0]["snapshot"].setdefault("adoption", {})
    adoption["nodeLabels"] = [
        [r["node"], r["observedAt"], r["labels"]] for r in state.fleet.adoption.label_rows()
    ]
    return orjson.dumps(row)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--labels", type=int, default=100)
    args = parser.parse_args()
    policy = GovernancePolicy()
    state = GovernorState()
    offset = 0
    step(state, WatermarkAdvanced(0, 1, T0), offset, policy)
    for n in range(args.nodes):
        offset += 1
        step(state, labels_of(n, args.labels, 1), offset, policy)
    first = batch_rows(state, [], topic="t", offset=offset, expected_offset=None)
    state.clear_dirty()
    offset += 1
    step(state, labels_of(7, args.labels, 5, version="550"), offset, policy)
    started = time.perf_counter()
    rows = batch_rows(state, [], topic="t", offset=offset, expected_offset=offset - 1)
    encode_seconds = time.perf_counter() - started
    before = len(old_fleet_row(rows.fleet, state))
    after = len(rows.fleet.encode()) + len((rows.labels or "").encode())
    print(
        orjson.dumps(
            {
                "nodes": args.nodes,
                "labels_per_node": args.labels,
                "before_bytes_per_batch": before,
                "after_bytes_per_batch": after,
                "after_fleet_row_bytes": len(rows.fleet.encode()),
                "after_label_rows_bytes": len((rows.labels or "").encode()),
                "after_label_rows": len(orjson.loads(rows.labels or "[]")),
                "first_batch_label_rows_bytes": len((first.labels or "").encode()),
                "batch_rows_seconds": round(encode_seconds, 4),
            },
            option=orjson.OPT_INDENT_2,
        ).decode()
    )


if __name__ == "__main__":
    main()
