"""``ForwardedBatch`` (issue 12, the forwarding lever): its wire form, read back entry by entry,
and the single records of before it, which still read as one entry each."""

from __future__ import annotations

import orjson
import pytest

from services.domain.codec import EventDecodeError
from services.domain.events import Health
from services.domain.governance.input_batch import (
    ENVELOPE_BYTES,
    RECORD_TYPE,
    Entry,
    batch_size,
    decode_records,
    encode_batch,
    unpack,
)
from services.domain.governance.input_codec import encode_input
from services.domain.governance.inputs import (
    CommandAction,
    MergeKey,
    OperatorCommand,
    PartitionWatermark,
    Role,
)
from services.domain.node_events import NodeHeartbeat, WatcherTick
from tests.governance.strategies import at, transition


def entries() -> list[Entry]:
    return [
        (transition("n0", "GPU-0", Health.UNHEALTHY, 3, 1), MergeKey(at(1), 0, 3, 0)),
        (transition("n0", "GPU-1", Health.HEALTHY, 4, 1), MergeKey(at(1), 0, 3, 1, clamped=True)),
        (NodeHeartbeat("n0", renewed_at=at(2), observed_at=at(2)), MergeKey(at(2), 0, 4, 0)),
        (WatcherTick(1, at(2)), MergeKey(at(2), 1, 9, 0)),
        (PartitionWatermark(0, 2, at(2)), None),
        (PartitionWatermark(1, 2, at(2)), None),
    ]


def test_a_batch_reads_back_as_its_entries_in_order() -> None:
    encoded = [encode_input(r, k) for r, k in entries()]
    payload = encode_batch(encoded)
    assert len(payload) == batch_size([len(e) for e in encoded])
    obj = orjson.loads(payload)
    assert (obj["schema"], obj["type"], obj["version"]) == (1, RECORD_TYPE, 1)
    assert payload == orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)  # sorted keys, as the others
    assert decode_records(payload, RECORD_TYPE) == entries()
    assert decode_records(payload) == entries()  # no type header: the body says
    unpacked = unpack(payload, RECORD_TYPE)
    assert unpacked.batch and not unpacked.bad
    assert len(encode_batch([])) == ENVELOPE_BYTES


def test_single_records_still_read_as_one_entry() -> None:
    for record, key in entries():
        payload = encode_input(record, key)
        assert decode_records(payload, record.type) == [(record, key)]
        assert decode_records(payload) == [(record, key)]
        assert not unpack(payload, record.type).batch
    command = OperatorCommand("c-1", CommandAction.QUARANTINE, "alice", Role.OPERATOR, at(3))
    assert decode_records(encode_input(command), "OperatorCommand") == [(command, None)]


def test_an_entry_that_does_not_decode_is_set_apart_and_the_others_read() -> None:
    good = [encode_input(r, k) for r, k in entries()]
    future = orjson.dumps({"schema": 1, "type": "FromTheFuture", "order": {}})
    payload = encode_batch([good[0], future, good[1]])
    unpacked = unpack(payload, RECORD_TYPE)
    assert unpacked.entries == entries()[:2]
    [bad] = unpacked.bad
    assert bad.index == 1
    assert orjson.loads(bad.value) == orjson.loads(future)
    assert "entry 1 of ForwardedBatch" in bad.reason and "FromTheFuture" in bad.reason
    with pytest.raises(EventDecodeError, match="FromTheFuture"):
        decode_records(payload, RECORD_TYPE)


def test_an_entry_outside_the_merge_other_than_a_progress_mark_is_refused() -> None:
    beat = NodeHeartbeat("n0", renewed_at=at(2), observed_at=at(2))
    [bad] = unpack(encode_batch([encode_input(beat)]), RECORD_TYPE).bad
    assert "without its merge key" in bad.reason


@pytest.mark.parametrize(
    ("payload", "header", "reason"),
    [
        (b"{not json", RECORD_TYPE, "not JSON"),
        (b"[]", RECORD_TYPE, "not a JSON object"),
        (b'{"entries":[],"schema":1,"type":"ForwardedBatch","version":1}', None, "non-empty"),
        (b'{"entries":[{}],"schema":1,"type":"ForwardedBatch","version":2}', None, "version 2"),
        (b'{"entries":[{}],"schema":9,"type":"ForwardedBatch","version":1}', None, "schema 9"),
        (b'{"entries":{},"schema":1,"type":"ForwardedBatch","version":1}', None, "entries"),
        (b'{"entries":[{}],"schema":1,"type":"ForwardedBatch","version":1}', "Tick", "header"),
        (encode_input(WatcherTick(0, at(0))), RECORD_TYPE, "header says"),
    ],
)
def test_a_batch_whose_envelope_does_not_decode_is_refused_whole(
    payload: bytes, header: str | None, reason: str
) -> None:
    with pytest.raises(EventDecodeError, match=reason):
        unpack(payload, header)


def test_a_nul_in_an_entry_sets_that_entry_apart_with_its_merge_key() -> None:
    """The batch is checked for unstorable strings once (only a ``\\u0000`` escape can make one);
    an entry holding a NUL is still refused alone, its dead letter the entry as it came."""
    good = [encode_input(r, k) for r, k in entries()]
    raw = orjson.loads(good[1])
    raw["message"] = "bad \x00 byte"
    payload = encode_batch([good[0], orjson.dumps(raw, option=orjson.OPT_SORT_KEYS), good[2]])
    unpacked = unpack(payload, RECORD_TYPE)
    assert unpacked.entries == [entries()[0], entries()[2]]
    [bad] = unpacked.bad
    assert "NUL" in bad.reason and bad.index == 1
    assert orjson.loads(bad.value) == raw  # with its "order"


def test_a_backslash_before_u0000_is_text_not_a_nul() -> None:
    raw = orjson.loads(encode_input(*entries()[0]))
    raw["message"] = "path C:\\u0000"  # a backslash, then the letters: no NUL
    payload = encode_batch([orjson.dumps(raw, option=orjson.OPT_SORT_KEYS)])
    assert b"\\\\u0000" in payload
    [(record, _)] = decode_records(payload, RECORD_TYPE)
    assert getattr(record, "message", None) == "path C:\\u0000"
