"""The governor's poison isolation without a broker or database (issue 11 item 3): a fake
governance sink that refuses the rows of a marked device as PostgreSQL would (a constraint
violation), the real state machine."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import orjson
from sqlalchemy import exc as sa_exc

from services.adapters.kafka.headers import HEADER_REASON, HEADER_SOURCE, HEADER_STAGE
from services.adapters.projection.governance_store import BatchRows
from services.domain.events import Health
from services.domain.governance.decisions import decode_decision
from services.domain.governance.input_codec import decode_keyed, encode_input
from services.domain.governance.inputs import GovernanceInput, MergeKey, PartitionWatermark
from tests.conftest import T0
from tests.fakes.governance_sink import FakeGovernanceSink
from tests.streams.test_governor_unit import TOPIC, event, events, make_governor, transition
from tests.streams.test_poison_unit import _PgError


class RefusingGovernanceSink(FakeGovernanceSink):
    """Refuses (``23514``) any batch whose device rows hold a ``POISON`` resource ID."""

    def refuse(self, rows: BatchRows) -> None:
        for row in orjson.loads(rows.devices or "[]"):
            if row["resource_id"].startswith("POISON"):
                raise sa_exc.IntegrityError(
                    "INSERT", {}, _PgError("23514", 'violates check constraint "test_poison"')
                )


def kinds(sent: Any) -> list[tuple[str, str | None]]:
    return [
        (d.kind.value, d.resource_id)
        for batch in sent.batches
        for d in (decode_decision(v) for _, v, _ in batch)
    ]


async def test_a_refused_command_like_record_is_left_out_and_the_batch_written(
    tmp_path: Any,
) -> None:
    sink = RefusingGovernanceSink()
    governor, sent, dead = make_governor(tmp_path, sink, on_fatal=_no_fatal)
    records: list[GovernanceInput] = [
        transition("GPU-0", Health.HEALTHY, 1, 1),
        transition("POISON-1", Health.UNHEALTHY, 2, 2),
        transition("GPU-1", Health.UNHEALTHY, 3, 3),
        transition("POISON-2", Health.HEALTHY, 4, 4),
        transition("GPU-0", Health.UNHEALTHY, 5, 5),
    ]
    batch = events(records)
    await governor.handle_batch(batch)

    assert set(sink.devices) == {("gpu-node-a", "GPU-0"), ("gpu-node-a", "GPU-1")}
    assert sink.offset == 4 and len(sink.writes) == 1  # one commit: the batch minus the poison
    assert [letter["value"] for letter in dead.sent] == [
        batch[1].message.value,
        batch[3].message.value,
    ]
    for letter, offset in zip(dead.sent, (1, 3), strict=True):
        headers = dict(letter["headers"])
        assert headers[HEADER_STAGE] == b"governor-write"
        assert headers[HEADER_SOURCE] == f"{TOPIC}/0/{offset}".encode()
        assert headers[HEADER_REASON] == b'23514 _PgError: violates check constraint "test_poison"'
    assert governor.metrics.poison_records.labels("governor")._value.get() == 2
    # Decisions are sent once, by the attempt that committed; none is about a refused device.
    assert len(sent.batches) == 1
    assert not any((rid or "").startswith("POISON") for _, rid in kinds(sent))
    reference = FakeGovernanceSink()
    alone, alone_sent, _ = make_governor(tmp_path, reference)
    kept = [r for r in records if not r.resource_id.startswith("POISON")]  # type: ignore[attr-defined]
    await alone.handle_batch(events(kept))
    assert kinds(sent) == kinds(alone_sent)
    assert {k: v["state"] for k, v in sink.devices.items()} == {
        k: v["state"] for k, v in reference.devices.items()
    }
    # Writes: 1 refused + about log2(5) trials per poison + 1 more refused + the commit.
    assert sink.calls <= 1 + 2 * 4 + 2


async def test_a_merged_record_released_in_a_later_batch_is_the_one_left_out(
    tmp_path: Any,
) -> None:
    sink = RefusingGovernanceSink()
    governor, _, dead = make_governor(tmp_path, sink, on_fatal=_no_fatal)

    def merged(resource_id: str, offset: int, seconds: float) -> bytes:
        record = transition(resource_id, Health.UNHEALTHY, offset, seconds)
        key = MergeKey(T0 + timedelta(seconds=seconds), 0, offset, 0)
        return encode_input(record, key)

    def mark(partition: int, seconds: float) -> bytes:
        return encode_input(PartitionWatermark(partition, 2, T0 + timedelta(seconds=seconds)))

    first = [mark(0, 0), mark(1, 0), merged("GPU-0", 10, 1), merged("POISON-1", 11, 2)]
    first += [merged("GPU-1", 12, 3)]
    await governor.handle_batch([event(i, v) for i, v in enumerate(first)])
    assert sink.devices == {} and dead.sent == []  # held by the merge: nothing folded yet
    # Partition 1 passes them: this watermark releases all three, the poison among them.
    await governor.handle_batch([event(5, mark(1, 10))])
    assert set(sink.devices) == {("gpu-node-a", "GPU-0"), ("gpu-node-a", "GPU-1")}
    [letter] = dead.sent
    headers = dict(letter["headers"])
    assert headers[HEADER_STAGE] == b"governor-write"
    assert headers[HEADER_SOURCE] == b"unit-events/0/11"  # the health record it came from
    record, key = decode_keyed(letter["value"])
    assert key is not None and key.source == (0, 11, 0)
    assert record.resource_id == "POISON-1"  # type: ignore[attr-defined]
    # The watermark itself was not lost: a later one folds on, nothing refused any more.
    await governor.handle_batch([event(6, merged("GPU-2", 13, 11)), event(7, mark(1, 20))])
    assert ("gpu-node-a", "GPU-2") in sink.devices and sink.offset == 7
    assert governor.metrics.poison_records.labels("governor")._value.get() == 1


async def test_rows_refused_whatever_the_folds_stop_the_worker_as_before(tmp_path: Any) -> None:
    class RefuseAll(FakeGovernanceSink):
        def refuse(self, rows: BatchRows) -> None:
            raise sa_exc.DataError("INSERT", {}, _PgError("22001", "value too long"))

    failures: list[BaseException] = []
    sink = RefuseAll()
    governor, sent, dead = make_governor(tmp_path, sink, on_fatal=failures.append)
    batch = events([transition("GPU-0", Health.HEALTHY, 1, 1)])
    await governor.handle_batch(batch)
    assert [type(e).__name__ for e in failures] == ["BatchNotWritten"]
    assert all(e.message.acked for e in batch)  # withheld
    assert sent.batches == [] and dead.sent == [] and sink.writes == []
    assert governor.metrics.poison_records.labels("governor")._value.get() == 0


def _no_fatal(exc: BaseException) -> None:
    raise AssertionError(f"the worker would stop: {exc!r}")
