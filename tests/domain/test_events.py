"""Wire format of the event model (services/domain/events.py)."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given

from services.domain.codec import EventDecodeError, parse_resource_version
from services.domain.event_codec import decode_event, encode_event
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


# Each payload is a valid event with the given fields replaced (_GONE: removed). The reasons were
# recorded from the field-by-field decoder before decode_event was optimised; several faults in one
# payload must still report the same (first) one.
_OBSERVED: dict[str, object] = {
    "schema": 1,
    "type": "DeviceHealthObserved",
    "node": "n",
    "namespace": "ns",
    "podName": "p",
    "podUID": "u",
    "statusVersion": "12",
    "observedAt": "2026-11-29T10:00:00Z",
    "containers": [{"name": "c", "kind": "regular"}],
    "resourceName": "r",
    "resourceID": "GPU-1",
    "health": "Healthy",
    "source": "dra",
}
_RELEASED: dict[str, object] = {
    "schema": 1,
    "type": "PodDevicesReleased",
    "node": "n",
    "namespace": "ns",
    "podName": "p",
    "podUID": "u",
    "statusVersion": "12",
    "observedAt": "2026-11-29T10:00:00Z",
    "reason": "deleted",
}
_GONE = object()


@pytest.mark.parametrize(
    ("base", "changes", "reason"),
    [
        (
            _OBSERVED,
            {"observedAt": None},
            "field 'observedAt': field 'observedAt' has type NoneType",
        ),
        (_OBSERVED, {"observedAt": _GONE}, "field 'observedAt': missing field 'observedAt'"),
        (_OBSERVED, {"observedAt": 5}, "field 'observedAt': field 'observedAt' has type int"),
        (
            _OBSERVED,
            {"observedAt": "2026-11-29T10:00:00"},
            "field 'observedAt': time without offset: '2026-11-29T10:00:00'",
        ),
        (
            _OBSERVED,
            {"observedAt": "yesterday"},
            "field 'observedAt': Invalid isoformat string: 'yesterday'",
        ),
        (_OBSERVED, {"node": 1}, "field 'node' has type int"),
        (_OBSERVED, {"namespace": _GONE}, "missing field 'namespace'"),
        (_OBSERVED, {"podUID": None, "statusVersion": "x"}, "field 'podUID' has type NoneType"),
        (
            _OBSERVED,
            {"statusVersion": "007"},
            "statusVersion '007' is not a positive decimal integer string",
        ),
        (
            _OBSERVED,
            {"statusVersion": 12},
            "statusVersion 12 is not a positive decimal integer string",
        ),
        (
            _OBSERVED,
            {"statusVersion": "x", "type": "Nope"},
            "statusVersion 'x' is not a positive decimal integer string",
        ),
        (_OBSERVED, {"resourceID": ""}, "field 'resourceID' is empty"),
        (_OBSERVED, {"containers": "c"}, "field 'containers' has type str"),
        (
            _OBSERVED,
            {"containers": [{"kind": "regular"}]},
            "field 'containers' holds an entry without a name",
        ),
        (_OBSERVED, {"containers": [{"name": "c"}]}, "missing field 'kind'"),
        (_OBSERVED, {"containers": [{"name": "c", "kind": 1}]}, "field 'kind' has type int"),
        (
            _OBSERVED,
            {"containers": [{"name": "c", "kind": "sidecar"}]},
            "field 'kind' has unknown value 'sidecar'",
        ),
        (_OBSERVED, {"claim": []}, "field 'claim' must be an object or null"),
        (_OBSERVED, {"claim": {"request": "r"}}, "missing field 'podClaimName'"),
        (
            _OBSERVED,
            {"claim": {"podClaimName": "pc", "request": 1}},
            "field 'request' must be a string or null",
        ),
        (_OBSERVED, {"flags": ["a", 1]}, "field 'flags' must be a list of strings"),
        (_OBSERVED, {"flags": "a", "health": "x"}, "field 'flags' must be a list of strings"),
        (
            _OBSERVED,
            {"resourceName": None, "health": "x"},
            "field 'resourceName' has type NoneType",
        ),
        (
            _OBSERVED,
            {"health": "healthy", "source": "x"},
            "field 'health' has unknown value 'healthy'",
        ),
        (_OBSERVED, {"source": "plugin"}, "field 'source' has unknown value 'plugin'"),
        (_OBSERVED, {"message": 1, "rawHealth": 2}, "field 'message' must be a string or null"),
        (_OBSERVED, {"rawHealth": ["x"]}, "field 'rawHealth' must be a string or null"),
        (_RELEASED, {"resourceIDs": [1]}, "field 'resourceIDs' must be a list of strings"),
        (_RELEASED, {"reason": "gone"}, "field 'reason' has unknown value 'gone'"),
        (_RELEASED, {"reason": _GONE}, "missing field 'reason'"),
        (_RELEASED, {"schema": 2}, "unsupported schema 2 (this build reads 1)"),
    ],
)
def test_the_first_fault_is_reported_word_for_word(
    base: dict[str, object], changes: dict[str, object], reason: str
) -> None:
    payload = {**base, **changes}
    payload = {k: v for k, v in payload.items() if v is not _GONE}
    with pytest.raises(EventDecodeError) as caught:
        decode_event(orjson.dumps(payload))
    assert str(caught.value) == reason


def test_values_that_compare_equal_but_are_not_the_schema_number_still_decode() -> None:
    """``schema`` is compared with ``==``, as it always was: ``1.0`` and ``true`` pass."""
    wire = orjson.loads(encode_event(OBS))
    for schema in (1.0, True):
        assert decode_event(orjson.dumps({**wire, "schema": schema})) == OBS
