"""The shared field decoders: each accepts what the codecs accept and names the field it refuses."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from services.domain import codec
from services.domain.codec import EventDecodeError
from services.domain.events import Health


@pytest.mark.parametrize(
    ("call", "obj", "message"),
    [
        (lambda o: codec.require(o, "x"), {}, "missing field 'x'"),
        (lambda o: codec.require(o, "x"), {"x": 1}, "field 'x' has type int"),
        (lambda o: codec.str_field(o, "x"), {"x": ""}, "field 'x' must be a non-empty string"),
        (lambda o: codec.str_field(o, "x"), {}, "field 'x' must be a non-empty string"),
        (
            lambda o: codec.optional_str_field(o, "x"),
            {"x": 3},
            "field 'x' must be a string or null",
        ),
        (
            lambda o: codec.time_field(o, "t"),
            {"t": "2026-12-01T10:00:00"},
            "field 't': time without offset: '2026-12-01T10:00:00'",
        ),
        (lambda o: codec.int_field(o, "n"), {"n": -1}, "field 'n' must be an integer >= 0"),
        (lambda o: codec.int_field(o, "n", 1), {"n": True}, "field 'n' must be an integer >= 1"),
        (lambda o: codec.bool_field(o, "b"), {"b": "yes"}, "field 'b' must be true or false"),
        (lambda o: codec.enum_field(Health, o, "h"), {}, "field 'h' has unknown value None"),
        (lambda o: codec.required_enum(Health, o, "h"), {}, "missing field 'h'"),
        (
            lambda o: codec.required_enum(Health, o, "h"),
            {"h": "ok"},
            "field 'h' has unknown value 'ok'",
        ),
        (
            lambda o: codec.version_field(o, "statusVersion"),
            {"statusVersion": "007"},
            "statusVersion '007' is not a positive decimal integer string",
        ),
    ],
)
def test_a_refused_field_is_named(call: Any, obj: dict[str, Any], message: str) -> None:
    with pytest.raises(EventDecodeError) as raised:
        call(obj)
    assert str(raised.value) == message


def test_accepted_values() -> None:
    obj = {
        "s": "a",
        "e": "",
        "t": "2026-12-01T10:00:00Z",
        "n": 3,
        "b": True,
        "h": "Healthy",
        "v": "12",
    }
    assert codec.require(obj, "s") == codec.str_field(obj, "s") == "a"
    assert codec.str_field(obj, "e", empty=True) == ""
    assert codec.optional_str_field(obj, "missing") is None
    assert codec.time_field(obj, "t") == datetime(2026, 12, 1, 10, tzinfo=UTC)
    assert codec.optional_time_field(obj, "missing") is None
    assert codec.int_field(obj, "n", 3) == 3
    assert codec.bool_field(obj, "b") is True and codec.bool_field(obj, "missing") is False
    assert (
        codec.enum_field(Health, obj, "h")
        is codec.required_enum(Health, obj, "h")
        is Health.HEALTHY
    )
    assert codec.version_field(obj, "v") == 12 and codec.version_field(obj, "missing") is None


def test_the_type_mismatch_names_both_types() -> None:
    assert str(codec.type_mismatch("A", "B")) == "type header says 'A' but the body is of type 'B'"
    assert codec.body_type(b'{"type": "B"}') == "B"
    assert codec.body_type(b"[1]") is None and codec.body_type(b"{nope") is None
