"""The worker's governor gauges of issue 15: ``devicestate_governor_watch_stale`` (1 while the
watch is stale) and ``devicestate_governor_node_incidents_open``, from keyed records as the worker
forwards them."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from services.domain.events import Health
from services.domain.governance.decisions import decode_decision
from services.domain.governance.input_codec import encode_input
from services.domain.governance.inputs import GovernanceInput, MergeKey, PartitionWatermark
from services.domain.node_events import WatcherTick
from tests.conftest import T0
from tests.fakes.governance_sink import FakeGovernanceSink
from tests.streams.test_governor_unit import event, make_governor, transition


def keyed(records: list[tuple[GovernanceInput, float]], start: int) -> list[Any]:
    """Each record with its merge key (partition 0), then the partition's watermark."""
    out = []
    for i, (record, seconds) in enumerate(records):
        key = MergeKey(T0 + timedelta(seconds=seconds), 0, start + i, 0)
        out.append(event(start + i, encode_input(record, key)))
    last = T0 + timedelta(seconds=records[-1][1])
    out.append(event(start + len(records), encode_input(PartitionWatermark(0, 1, last))))
    return out


def tick(seconds: float, seen: float) -> tuple[GovernanceInput, float]:
    at = T0 + timedelta(seconds=seconds)
    return (WatcherTick(0, at, watch_seen_at=T0 + timedelta(seconds=seen)), seconds)


async def test_the_gauges_follow_the_stale_watch_and_the_node_incident(tmp_path: Any) -> None:
    sink = FakeGovernanceSink()
    governor, sent, _ = make_governor(tmp_path, sink)
    healthy = [(transition(f"GPU-{i}", Health.HEALTHY, i + 1, 0), 0.0) for i in range(4)]
    faults = [(transition(f"GPU-{i}", Health.UNHEALTHY, 10 + i, 10), 10.0) for i in range(2)]
    await governor.handle_batch(keyed([tick(0, 0), *healthy, *faults, tick(100, 0)], 0))
    kinds = [decode_decision(v).kind.value for b in sent.batches for _, v, _ in b]
    assert kinds.count("WatchStale") == 1 and kinds.count("NodeFaultIncidentOpened") == 1
    assert governor.metrics.watch_stale._value.get() == 1
    assert governor.metrics.node_incidents_open._value.get() == 1
    await governor.handle_batch(keyed([tick(105, 104)], 20))
    kinds = [decode_decision(v).kind.value for b in sent.batches for _, v, _ in b]
    assert kinds.count("WatchFresh") == 1
    assert governor.metrics.watch_stale._value.get() == 0
    assert governor.metrics.node_incidents_open._value.get() == 1
