"""Wire format of the event model (services/domain/events.py)."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given

from services.domain.events import (
    EventDecodeError,
    decode_event,
    encode_event,
    parse_resource_version,
)
from tests.domain.strategies import events
from tests.domain.test_directory import OBS


@given(events)
def test_encode_decode_round_trip(event) -> None:  # type: ignore[no-untyped-def]
    assert decode_event(encode_event(event)) == event


@given(events)
def test_encoding_is_stable_bytes(event) -> None:  # type: ignore[no-untyped-def]
    assert encode_event(decode_event(encode_event(event))) == encode_event(event)


def test_big_resource_versions_stay_exact_strings_on_the_wire() -> None:
    assert parse_resource_version("1776286634735007008") == 1776286634735007008
    assert parse_resource_version(str(2**70)) == 2**70


@pytest.mark.parametrize("raw", [None, "", "0", "007", "v2-abc", "12a", "-5", 12, "\uff11\uff12"])
def test_non_comparable_resource_versions_are_none(raw: object) -> None:
    assert parse_resource_version(raw) is None


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"{not json", "not JSON"),
        (b"[1]", "not a JSON object"),
        (b'{"schema": 9, "type": "DeviceHealthObserved"}', "unsupported schema 9"),
        (
            b'{"schema": 1, "type": "Nope", "observedAt": "2026-11-29T10:00:00Z", "node": "n",'
            b' "namespace": "a", "podName": "p", "podUID": "u"}',
            "unknown event type 'Nope'",
        ),
        (
            b'{"schema": 1, "type": "PodDevicesReleased", "observedAt": "2026-11-29T10:00:00Z",'
            b' "node": "", "namespace": "a", "podName": "p", "podUID": "u"}',
            "field 'node' is empty",
        ),
    ],
)
def test_bad_payloads_raise_with_a_reason(payload: bytes, reason: str) -> None:
    with pytest.raises(EventDecodeError, match=reason):
        decode_event(payload)


def test_unknown_health_value_on_the_wire_is_rejected() -> None:
    good = orjson.loads(encode_event(OBS))
    good["health"] = "Degraded"
    with pytest.raises(EventDecodeError, match="unknown value 'Degraded'"):
        decode_event(orjson.dumps(good))


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"message": "XID\u000079"}, "message contains a NUL character"),
        ({"resourceID": "GPU-a\u001fb"}, "resourceID contains a control character"),
        ({"node": "gpu-node\u0000"}, "node contains a control character"),
        ({"resourceID": "G" * 1025}, "resourceID is longer than 1024 bytes"),
        ({"resourceName": "r" * 2000}, "resourceName is longer than 1024 bytes"),
        ({"statusVersion": "1" * 40}, "statusVersion .1111"),
        ({"statusVersion": "1" * 5000}, "is not a positive decimal integer string"),
    ],
)
def test_values_the_projection_cannot_store_are_refused(
    change: dict[str, str], reason: str
) -> None:
    wire = orjson.loads(encode_event(OBS))
    wire.update(change)
    with pytest.raises(EventDecodeError, match=reason):
        decode_event(orjson.dumps(wire))


def test_resource_versions_longer_than_39_digits_are_not_comparable() -> None:
    assert parse_resource_version("9" * 39) == int("9" * 39)
    assert parse_resource_version("9" * 40) is None
    assert parse_resource_version("9" * 5000) is None  # beyond int()'s digit limit: no crash
