"""The governor agent's batch handling without a broker or database: a fake governance sink that
keeps what PostgreSQL would (snapshots, offset), fake decision and dead-letter senders, the real
state machine."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from services.adapters.kafka.headers import HEADER_REASON, HEADER_SOURCE, HEADER_STAGE, type_headers
from services.domain.events import DeviceSource, Health
from services.domain.governance.decisions import decode_decision
from services.domain.governance.input_batch import RECORD_TYPE, encode_batch
from services.domain.governance.input_codec import encode_input
from services.domain.governance.inputs import (
    GovernanceInput,
    HealthTransition,
    MergeKey,
    PartitionWatermark,
    WatermarkAdvanced,
)
from services.runtime.config import Settings
from streams.app import build_worker_app
from streams.governor import Governor
from tests.conftest import T0
from tests.fakes.batch_sink import FakeSink
from tests.fakes.governance_sink import FakeGovernanceSink
from tests.streams.test_dedup_unit import FakeDeadLetters

TOPIC = "unit-governance"


class Sent:
    def __init__(self) -> None:
        self.batches: list[list[tuple[bytes, bytes, str]]] = []

    async def __call__(self, records: Sequence[tuple[bytes, bytes, str]]) -> None:
        self.batches.append(list(records))

    @property
    def ids(self) -> list[str]:
        return [key.decode() for batch in self.batches for key, _, _ in batch]


def make_governor(
    tmp_path: Any, sink: FakeGovernanceSink, on_fatal: Any = None, **policy: Any
) -> tuple[Governor, Sent, FakeDeadLetters]:
    settings = Settings(
        worker_store="memory://",
        worker_data_dir=str(tmp_path),
        topic="unit-events",
        governance_topic=TOPIC,
        consumer_group=f"unit-gov-{id(sink)}",
        **policy,
    )
    built = build_worker_app(
        settings, sink=FakeSink(run_hooks=False), governance_sink=sink, on_fatal=on_fatal
    )
    governor = built.governor
    sent = Sent()
    governor.send_decisions = sent
    dead = FakeDeadLetters()
    governor.dead_letter_topic = dead
    return governor, sent, dead


def event(offset: int, value: bytes | None, headers: Any = None) -> Any:
    return SimpleNamespace(
        message=SimpleNamespace(
            topic=TOPIC,
            partition=0,
            offset=offset,
            key=b"k",
            value=value,
            acked=False,
            tp=(TOPIC, 0),
            headers=headers,
        )
    )


def events(records: Sequence[GovernanceInput | bytes], start: int = 0) -> list[Any]:
    return [
        event(start + i, r if isinstance(r, bytes) else encode_input(r))
        for i, r in enumerate(records)
    ]


def transition(resource_id: str, health: Health, version: int, seconds: float) -> HealthTransition:
    return HealthTransition(
        node="gpu-node-a",
        resource_id=resource_id,
        resource_name="nvidia.com/gpu",
        source=DeviceSource.DEVICE_PLUGIN,
        health=health,
        status_version=version,
        observed_at=T0 + timedelta(seconds=seconds),
        partition=0,
        offset=version,
    )


def watermark(seconds: float) -> WatermarkAdvanced:
    return WatermarkAdvanced(0, 1, T0 + timedelta(seconds=seconds))


def story() -> list[GovernanceInput]:
    """Unknown at 0 (tolerated 60 s), Unhealthy at 5, Healthy at 20, the watermark to 100."""
    return [
        watermark(0),
        transition("GPU-0", Health.UNKNOWN, 1, 0),
        transition("GPU-1", Health.UNHEALTHY, 2, 5),
        watermark(30),
        transition("GPU-0", Health.HEALTHY, 3, 40),
        watermark(100),
    ]


async def test_decisions_are_sent_then_written_and_a_restart_continues_alike(
    tmp_path: Any,
) -> None:
    records = story()
    reference_sink = FakeGovernanceSink()
    reference, reference_sent, _ = make_governor(
        tmp_path, reference_sink, unknown_tolerance_seconds=60
    )
    await reference.handle_batch(events(records))
    assert reference_sink.offset == len(records) - 1
    assert reference_sent.ids == [f"{s}.{i}" for s, i in sorted(reference_sink.decisions)]
    kinds = [decode_decision(v).kind.value for b in reference_sent.batches for _, v, _ in b]
    assert "DeviceQuarantined" in kinds and "UnknownToleranceStarted" in kinds

    # The same log in three batches, with a new governor (a restarted worker) for the last two.
    sink = FakeGovernanceSink()
    first, sent, _ = make_governor(tmp_path, sink, unknown_tolerance_seconds=60)
    await first.handle_batch(events(records[:2]))
    second, sent2, _ = make_governor(tmp_path, sink, unknown_tolerance_seconds=60)
    await second.handle_batch(events(records[:4]))  # redelivers 0-1: skipped
    await second.handle_batch(events(records[4:], start=4))
    assert sink.loads == 2
    assert sink.decisions == reference_sink.decisions
    assert sent.ids + sent2.ids == reference_sent.ids

    assert sink.devices == reference_sink.devices and sink.fleet == reference_sink.fleet

    metrics = second.metrics
    assert metrics.devices_by_state.labels("Quarantined")._value.get() == 1
    assert metrics.devices_by_state.labels("Available")._value.get() == 1
    assert metrics.active_quarantines._value.get() == 1
    assert metrics.watermark._value.get() == (T0 + timedelta(seconds=100)).timestamp()
    assert metrics.decisions.labels("DeviceQuarantined")._value.get() == 1
    assert metrics.decisions.labels("UnknownToleranceStarted")._value.get() == 0  # by `first`
    assert first.metrics.decisions.labels("UnknownToleranceStarted")._value.get() == 1
    # GPU-0 was Unknown from 0 to 40 (event time).
    assert reference.metrics.unknown_seconds._sum.get() == 40.0


async def test_a_range_read_twice_within_one_batch_is_folded_once(tmp_path: Any) -> None:
    """After a rebalance the consumer can fetch a range again while the stream still holds it:
    the copies are the records already folded, so the decisions are the log's, once each."""
    records = story()
    reference_sink = FakeGovernanceSink()
    reference, reference_sent, _ = make_governor(
        tmp_path, reference_sink, unknown_tolerance_seconds=60
    )
    await reference.handle_batch(events(records))

    sink = FakeGovernanceSink()
    governor, sent, _ = make_governor(tmp_path, sink, unknown_tolerance_seconds=60)
    await governor.handle_batch(events(records[:4]) + events(records[1:], start=1))
    assert sink.offset == len(records) - 1
    assert sink.decisions == reference_sink.decisions
    assert sent.ids == reference_sent.ids


async def test_a_type_header_is_followed_and_one_that_disagrees_is_dead_lettered(
    tmp_path: Any,
) -> None:
    sink = FakeGovernanceSink()
    governor, _, dead = make_governor(tmp_path, sink)
    mark, change = watermark(0), transition("GPU-1", Health.UNHEALTHY, 2, 5)
    batch = [
        event(0, encode_input(mark), type_headers(mark.type)),
        event(1, encode_input(change), type_headers("WatermarkAdvanced")),  # disagrees
        event(2, encode_input(change), type_headers(change.type)),
    ]
    await governor.handle_batch(batch)
    [letter] = dead.sent
    assert letter["value"] == encode_input(change)
    headers = dict(letter["headers"])
    assert headers[HEADER_STAGE] == b"governor-decode"
    assert headers[HEADER_REASON] == (
        b"type header says 'WatermarkAdvanced' but the body is of type 'HealthTransition'"
    )
    assert headers[HEADER_SOURCE] == f"{TOPIC}/0/1".encode()
    assert sink.offset == 2 and len(sink.quarantines) == 1  # offsets 0 and 2 folded


async def test_undecodable_records_are_dead_lettered_and_the_stream_goes_on(
    tmp_path: Any,
) -> None:
    sink = FakeGovernanceSink()
    governor, _, dead = make_governor(tmp_path, sink)
    batch = events([watermark(0), b"{not json", transition("GPU-1", Health.UNHEALTHY, 2, 5)])
    await governor.handle_batch(batch)
    [letter] = dead.sent
    assert letter["value"] == b"{not json"
    headers = dict(letter["headers"])
    assert headers[HEADER_STAGE] == b"governor-decode"
    assert headers[HEADER_REASON].startswith(b"not JSON")
    assert headers[HEADER_SOURCE] == f"{TOPIC}/0/1".encode()
    assert sink.offset == 2 and len(sink.quarantines) == 1
    assert governor.metrics.dead_lettered.labels("governor-decode")._value.get() == 1
    assert not any(e.message.acked for e in batch)  # take_events acks them


async def test_a_transient_write_error_refolds_from_the_committed_state(tmp_path: Any) -> None:
    sink = FakeGovernanceSink(fail=2)
    governor, sent, _ = make_governor(tmp_path, sink)
    await governor.handle_batch(events(story()))
    assert sink.calls == 3 and len(sink.writes) == 1
    assert sink.loads == 3  # the state was reloaded before each attempt
    assert governor.metrics.db_retries._value.get() == 2
    # Decisions are sent once the rows are written, just before the commit: a failed write
    # sends none (a crash after the send re-folds the same ids: consumers deduplicate).
    assert len(sent.batches) == 1


async def test_a_stale_state_is_reloaded(tmp_path: Any) -> None:
    sink = FakeGovernanceSink()
    governor, _, _ = make_governor(tmp_path, sink)
    records = story()
    await governor.handle_batch(events(records[:3]))
    # Another worker folded record 3 meanwhile (a rebalance) ...
    other, _, _ = make_governor(tmp_path, sink)
    await other.handle_batch(events(records[3:4], start=3))
    # ... so this governor's state is behind: it reloads and skips what was folded.
    await governor.handle_batch(events(records[3:], start=3))
    assert sink.offset == len(records) - 1
    reference = FakeGovernanceSink()
    alone, _, _ = make_governor(tmp_path, reference)
    await alone.handle_batch(events(records))
    assert sink.decisions == reference.decisions


async def test_a_non_transient_error_stops_without_acks(tmp_path: Any) -> None:
    failures: list[BaseException] = []
    sink = FakeGovernanceSink(fail=1, error=ValueError("column does not exist"))
    governor, _, _ = make_governor(tmp_path, sink, on_fatal=failures.append)
    batch = events(story())
    await governor.handle_batch(batch)
    assert [type(e).__name__ for e in failures] == ["BatchNotWritten"]
    assert all(e.message.acked for e in batch)  # withheld: faust's ack skips them
    later = events(story(), start=6)
    await governor.handle_batch(later)
    assert sink.calls == 1 and all(e.message.acked for e in later)


async def test_shutdown_during_a_retry_abandons_the_batch_unacknowledged(tmp_path: Any) -> None:
    sink = FakeGovernanceSink(fail=10**6)
    governor, _, _ = make_governor(tmp_path, sink)
    governor.writer.grace_seconds = 0.3
    governor.begin_shutdown()
    batch = events(story())
    await asyncio.wait_for(governor.handle_batch(batch), 10)
    assert all(e.message.acked for e in batch)
    assert sink.writes == []


@pytest.mark.parametrize("stage_result", ["passed", "failed"])
def test_recovery_and_false_quarantine_metrics(tmp_path: Any, stage_result: str) -> None:
    from services.domain.governance.decisions import Decision, DecisionKind
    from streams.governor_metrics import record_decision
    from streams.metrics import WorkerMetrics

    metrics = WorkerMetrics()
    kind = (
        DecisionKind.RECOVERY_STAGE_PASSED
        if stage_result == "passed"
        else DecisionKind.RECOVERY_FAILED
    )
    record_decision(metrics, Decision(kind, 1, 0, T0, details={"stage": "probe"}))
    record_decision(
        metrics,
        Decision(DecisionKind.QUARANTINE_RELEASED, 2, 0, T0, details={"confirmedFault": False}),
    )
    record_decision(
        metrics,
        Decision(DecisionKind.QUARANTINE_RELEASED, 3, 0, T0, details={"confirmedFault": True}),
    )
    assert metrics.recovery_stages.labels("probe", stage_result)._value.get() == 1
    assert metrics.false_quarantines._value.get() == 1
    assert metrics.decisions.labels("QuarantineReleased")._value.get() == 2


async def test_a_new_device_over_the_node_ceiling_is_dead_lettered_with_the_reason(
    tmp_path: Any,
) -> None:
    sink = FakeGovernanceSink()
    governor, sent, dead = make_governor(tmp_path, sink, max_devices_per_node=2)
    batch = events(
        [
            watermark(0),
            transition("GPU-0", Health.HEALTHY, 1, 1),
            transition("GPU-1", Health.HEALTHY, 2, 2),
            transition("GPU-2", Health.UNHEALTHY, 3, 3),  # a third device: over the ceiling
            transition("GPU-3", Health.UNHEALTHY, 4, 4),
            transition("GPU-0", Health.UNHEALTHY, 5, 5),  # a governed one: quarantined
        ]
    )
    await governor.handle_batch(batch)
    assert [letter["value"] for letter in dead.sent] == [
        batch[3].message.value,
        batch[4].message.value,
    ]
    headers = dict(dead.sent[0]["headers"])
    assert headers[HEADER_STAGE] == b"governor-device-ceiling"
    assert headers[HEADER_REASON] == (
        b"device ceiling: node gpu-node-a already has 2 governed devices "
        b"(max_devices_per_node=2); GPU-2 is not governed"
    )
    assert headers[HEADER_SOURCE] == f"{TOPIC}/0/3".encode()
    assert governor.metrics.dead_lettered.labels("governor-device-ceiling")._value.get() == 2
    kinds = [decode_decision(v).kind.value for b in sent.batches for _, v, _ in b]
    assert kinds.count("DataQualityFlagged") == 1  # one per node, not one per refused record
    assert sink.offset == 5 and len(sink.quarantines) == 1  # the stream went on
    assert set(sink.devices) == {("gpu-node-a", "GPU-0"), ("gpu-node-a", "GPU-1")}


async def test_the_gauge_counts_quarantines_needing_an_operator_and_a_restart_recounts(
    tmp_path: Any,
) -> None:
    """Issue 15 item 4: past the age the gauge is 1 (the batch's increment, and the recount of a
    restarted governor loading the state)."""
    records = [*story(), watermark(5 + 100)]
    sink = FakeGovernanceSink()
    governor, sent, _ = make_governor(
        tmp_path, sink, unknown_tolerance_seconds=60, quarantine_operator_age_seconds=100
    )
    await governor.handle_batch(events(records[:-1]))
    assert governor.metrics.quarantines_needing_operator._value.get() == 0
    await governor.handle_batch(events(records[-1:], start=len(records) - 1))
    kinds = [decode_decision(v).kind.value for b in sent.batches for _, v, _ in b]
    assert kinds.count("QuarantineNeedsOperator") == 1
    assert governor.metrics.quarantines_needing_operator._value.get() == 1
    restarted, _, _ = make_governor(
        tmp_path, sink, unknown_tolerance_seconds=60, quarantine_operator_age_seconds=100
    )
    await restarted.handle_batch(events(records, start=0))  # all redelivered: loads, skips
    assert restarted.metrics.quarantines_needing_operator._value.get() == 1


async def test_a_forwarded_batch_is_taken_entry_by_entry_and_a_bad_entry_dead_lettered_alone(
    tmp_path: Any,
) -> None:
    """Issue 12: the entries of a ``ForwardedBatch`` decide as the same records sent one each;
    an entry that does not decode is dead-lettered alone (each bad entry once), the rest taken."""
    keyed: list[tuple[GovernanceInput, MergeKey | None]] = [
        (transition("GPU-0", Health.UNKNOWN, 1, 0), MergeKey(T0, 0, 1, 0)),
        (PartitionWatermark(0, 1, T0), None),
        (transition("GPU-1", Health.UNHEALTHY, 2, 5), MergeKey(T0 + timedelta(seconds=5), 0, 2, 0)),
        (transition("GPU-0", Health.HEALTHY, 3, 40), MergeKey(T0 + timedelta(seconds=40), 0, 3, 0)),
        (PartitionWatermark(0, 1, T0 + timedelta(seconds=100)), None),
    ]
    wire = [encode_input(r, k) for r, k in keyed]
    reference_sink = FakeGovernanceSink()
    reference, reference_sent, _ = make_governor(tmp_path, reference_sink)
    await reference.handle_batch(
        [
            event(i, v, type_headers(r.type))
            for i, (v, (r, _)) in enumerate(zip(wire, keyed, strict=True))
        ]
    )

    sink = FakeGovernanceSink()
    governor, sent, dead = make_governor(tmp_path, sink)
    bad = [b'{"schema":1,"type":"FromTheFuture"}', b'{"schema":1,"type":"AlsoNew"}']
    packed = [
        event(0, encode_batch([wire[0], bad[0], wire[1]]), type_headers(RECORD_TYPE)),
        event(1, encode_batch([wire[2], bad[1], *wire[3:]]), type_headers(RECORD_TYPE)),
    ]
    await governor.handle_batch(packed)
    assert sink.decisions == reference_sink.decisions and sink.offset == 1
    assert sent.ids == reference_sent.ids
    assert "DeviceQuarantined" in {
        decode_decision(v).kind.value for b in sent.batches for _, v, _ in b
    }
    assert [letter["value"] for letter in dead.sent] == bad
    reasons = [dict(letter["headers"])[HEADER_REASON] for letter in dead.sent]
    assert reasons[0].startswith(b"entry 1 of ForwardedBatch: unknown governance record type")
    assert [dict(letter["headers"])[HEADER_SOURCE] for letter in dead.sent] == [
        f"{TOPIC}/0/0".encode(),
        f"{TOPIC}/0/1".encode(),
    ]
    assert governor.metrics.dead_lettered.labels("governor-decode")._value.get() == 2
