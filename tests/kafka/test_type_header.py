"""The record type in the ``devicestate-type`` header (no broker needed): a record with the header
is decoded by its type's decoder, one without it by the byte markers as before, and a header that
disagrees with the body is a decode error (the worker dead-letters it)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from services.adapters.kafka.headers import HEADER_TYPE, record_type, type_headers
from services.domain import records
from services.domain.codec import EventDecodeError
from services.domain.events import PodDevicesReleased, ReleaseReason
from services.domain.governance.input_codec import decode_input, encode_input
from services.domain.governance.inputs import WatermarkAdvanced
from services.domain.node_events import NodeHeartbeat, WatcherTick
from services.domain.records import TopicRecord, decode_typed_record, encode_record
from tests.kafka.test_records import T0, inventory_events, observation

RELEASE = PodDevicesReleased("gpu-node-a", "ml", "train-0", "uid-1", ReleaseReason.DELETED, 7, T0)
RECORDS: list[TopicRecord] = [
    observation(),
    RELEASE,
    NodeHeartbeat("gpu-node-a", T0, T0, lease_version=5),
    WatcherTick(partition=2, observed_at=T0),
    inventory_events()[0],
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.type)
def test_a_record_with_the_type_header_is_decoded_by_its_type(
    record: TopicRecord, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_sniffing(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the byte markers were consulted although the header names the type")

    monkeypatch.setattr(records, "decode_record", no_sniffing)
    payload = encode_record(record)
    assert decode_typed_record(payload, record.type, inventory=True) == record


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.type)
def test_a_record_without_the_header_is_decoded_from_its_bytes(record: TopicRecord) -> None:
    assert decode_typed_record(encode_record(record), None, inventory=True) == record


def test_a_record_without_the_header_in_another_spacing_still_decodes() -> None:
    beat = NodeHeartbeat("gpu-node-a", T0, T0)
    spaced = orjson.loads(encode_record(beat))
    payload = b'{"type": "NodeHeartbeat", ' + orjson.dumps(spaced)[1:]
    assert decode_typed_record(payload, None) == beat


@pytest.mark.parametrize(
    ("header", "record"),
    [
        ("DeviceHealthObserved", RELEASE),  # decodes with the same decoder, but is another type
        ("PodDevicesReleased", observation()),
        ("DeviceHealthObserved", NodeHeartbeat("gpu-node-a", T0, T0)),  # the decoder refuses it
        ("NodeHeartbeat", WatcherTick(partition=1, observed_at=T0)),
        ("WatcherTick", observation()),
        ("InventoryObserved", observation()),
        ("DeviceHealthObserved", inventory_events()[0]),
    ],
    ids=lambda v: v if isinstance(v, str) else v.type,
)
def test_a_header_that_disagrees_with_the_body_is_a_clear_error(
    header: str, record: TopicRecord
) -> None:
    with pytest.raises(EventDecodeError) as raised:
        decode_typed_record(encode_record(record), header, inventory=True)
    assert (
        str(raised.value) == f"type header says {header!r} but the body is of type {record.type!r}"
    )


def test_an_unknown_header_type_is_an_error() -> None:
    with pytest.raises(EventDecodeError, match="unknown record type 'Nope' in the type header"):
        decode_typed_record(encode_record(observation()), "Nope")


def test_a_broken_body_with_the_right_header_keeps_its_own_reason() -> None:
    with pytest.raises(EventDecodeError, match="not JSON"):
        decode_typed_record(b"{not json", "DeviceHealthObserved")
    body = orjson.loads(encode_record(observation()))
    del body["resourceID"]
    with pytest.raises(EventDecodeError, match="missing field 'resourceID'"):
        decode_typed_record(orjson.dumps(body), "DeviceHealthObserved")


def test_an_inventory_header_for_a_consumer_that_does_not_read_them_is_refused() -> None:
    event = inventory_events()[0]
    with pytest.raises(EventDecodeError, match="does not read inventory records"):
        decode_typed_record(encode_record(event), event.type)


def test_governance_records_with_a_header_are_checked_against_it() -> None:
    mark = WatermarkAdvanced(partition=0, partitions=1, event_time=T0)
    payload = encode_input(mark)
    assert decode_input(payload, "WatermarkAdvanced") == mark
    assert decode_input(payload) == mark  # written before the header: the body's type decides
    with pytest.raises(EventDecodeError) as raised:
        decode_input(payload, "HealthTransition")
    assert str(raised.value) == (
        "type header says 'HealthTransition' but the body is of type 'WatermarkAdvanced'"
    )


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        (type_headers("NodeHeartbeat"), "NodeHeartbeat"),
        ([("devicestate-reason", b"x"), (HEADER_TYPE, b"WatcherTick")], "WatcherTick"),
        ({HEADER_TYPE.encode(): b"OperatorCommand"}, "OperatorCommand"),  # faust may give a dict
        ((), None),
        (None, None),
        ([("other", b"DeviceHealthObserved")], None),
        ([(HEADER_TYPE, b"\xff")], "\ufffd"),  # not UTF-8: an unknown type, refused by the decoder
    ],
)
def test_record_type_reads_the_header(headers: Any, expected: str | None) -> None:
    assert record_type(headers) == expected
