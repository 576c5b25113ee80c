"""The event-time merge's pending records (issue 10) are rows of their own (``governor_pending``),
written once while pending and deleted once released; the fleet's row, rewritten every batch,
holds none (issue 12: a lagging partition kept ~3,700 records pending, ~1.7 MB of that row a
batch). A fleet snapshot of the old layout restores, and its pending records move to their rows
with the next batch."""

from __future__ import annotations

from datetime import timedelta

import orjson

from services.adapters.projection.governance_rows import batch_rows
from services.domain.governance.inputs import PartitionWatermark
from services.domain.governance.state import GovernorState
from tests.conftest import T0
from tests.contracts.test_governance_sink import POLICY, held, merging_state

TOPIC = "t.governance"


def restore(fleet: object, pending: list[object] | None) -> GovernorState:
    return GovernorState.restore([], [], fleet, POLICY.heartbeat_grace_seconds, None, None, pending)  # type: ignore[arg-type]


def test_a_record_offered_and_released_within_one_batch_is_never_written() -> None:
    state, take_all = merging_state()
    take_all([held(0, 10.0, 1), PartitionWatermark(1, 2, T0 + timedelta(seconds=11))])
    rows = batch_rows(state, [], topic=TOPIC, offset=0, expected_offset=None)
    assert rows.pending is None and rows.deleted_pending == []


def test_the_fleet_row_stays_small_however_many_records_are_pending() -> None:
    state, take_all = merging_state()
    take_all([held(0, 10.0 + i, i) for i in range(1, 2_001)])
    rows = batch_rows(state, [], topic=TOPIC, offset=0, expected_offset=None)
    assert len(orjson.loads(rows.pending or "[]")) == 2_000
    assert len(rows.fleet) < 2_000  # bytes: the merge's marks, not its records
    assert orjson.loads(rows.fleet)[0]["snapshot"]["order"]["pendingCount"] == 2_000
    state.clear_dirty()
    quiet = batch_rows(state, [], topic=TOPIC, offset=1, expected_offset=0)
    assert quiet.pending is None and quiet.deleted_pending == []  # nothing rewritten


def test_a_fleet_snapshot_of_the_old_layout_restores_and_moves_its_pending_records_to_rows() -> (
    None
):
    state, take_all = merging_state()
    take_all([held(0, 10.0, 1), held(0, 20.0, 2)])
    snap = orjson.loads(orjson.dumps(state.snapshot()))
    assert len(snap["fleet"]["order"]["pending"]) == 2  # what the previous version's row held

    restored = restore(snap["fleet"], None)
    assert orjson.dumps(restored.snapshot()) == orjson.dumps(state.snapshot())
    rows = batch_rows(restored, [], topic=TOPIC, offset=3, expected_offset=2)
    assert [r["snapshot"] for r in orjson.loads(rows.pending or "[]")] == snap["fleet"]["order"][
        "pending"
    ]
    fleet_row = orjson.loads(rows.fleet)[0]["snapshot"]
    assert "pending" not in fleet_row["order"]
    again = restore(fleet_row, [r["snapshot"] for r in orjson.loads(rows.pending or "[]")])
    assert orjson.dumps(again.snapshot()) == orjson.dumps(state.snapshot())
    # Held once, whichever layout it came from.
    both = restore(snap["fleet"], snap["fleet"]["order"]["pending"])
    assert len(both.fleet.order.pending) == 2 and both.fleet.order.unstored == set()
