"""A governor restarted on a state of the previous layout: what the restore holds as not written
yet stays so until a batch writes it, however many batches before it wrote nothing (issue 12's
``governor_pending`` rows; the old fleet row kept the event-time merge's pending records)."""

from __future__ import annotations

from typing import Any

import orjson

from services.domain.governance.input_codec import encode_input
from tests.contracts.test_governance_sink import held, merging_state
from tests.fakes.governance_sink import FakeGovernanceSink
from tests.streams.test_governor_unit import TOPIC, event, events, make_governor, watermark


async def test_pending_records_of_an_old_fleet_row_survive_a_batch_that_writes_nothing(
    tmp_path: Any,
) -> None:
    state, take_all = merging_state()
    take_all([held(0, 10.0, 1), held(0, 20.0, 2)])  # partition 1 lags: both wait in the merge
    old_fleet = orjson.loads(orjson.dumps(state.snapshot()))["fleet"]
    assert len(old_fleet["order"]["pending"]) == 2  # the previous version's row held them
    sink = FakeGovernanceSink()
    sink.fleet, sink.offsets[TOPIC] = old_fleet, 5

    governor, _, _ = make_governor(tmp_path, sink)
    # Redelivered after a crash between the commit and the ack: every record skipped, no write.
    await governor.handle_batch(events([watermark(0)] * 6))
    assert sink.writes == []
    record, key = held(0, 30.0, 3)
    await governor.handle_batch([event(6, encode_input(record, key))])
    assert len(sink.pending) == 3  # the old row's two, then the new one

    restarted, _, _ = make_governor(tmp_path, sink)
    await restarted.handle_batch([event(6, encode_input(record, key))])  # loads, skips
    assert restarted.state is not None and len(restarted.state.fleet.order.pending) == 3
