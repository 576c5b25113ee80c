"""Field decoders shared by the hand-written JSON codecs of the domain.

Every record devicestate reads is a JSON object (orjson gives plain ``dict``/``list``/``str``/
``int``/``bool`` values) decoded field by field into a frozen dataclass: device events
(:mod:`~services.domain.events`), node events (:mod:`~services.domain.node_events`), DRA
inventory records (:mod:`~services.domain.inventory.events`), governance inputs
(:mod:`~services.domain.governance.inputs`) and topic records (:mod:`~services.domain.records`).
The checks they share live here, each raising :class:`EventDecodeError` with a message that names
the field (the message the worker puts on a dead letter, and that tests pin):

- :func:`require`: present and of a type: ``missing field 'x'`` / ``field 'x' has type int``;
- :func:`str_field`: a non-empty (or, ``empty=True``, any) string: ``field 'x' must be a
  non-empty string``; :func:`optional_str_field`: a string or null: ``field 'x' must be a string
  or null``;
- :func:`time_field` / :func:`optional_time_field`: an RFC 3339 time with an offset:
  ``field 'x': <why>``;
- :func:`int_field`: an integer at least ``minimum`` (not a bool): ``field 'x' must be an integer
  >= 0``; :func:`bool_field`: ``field 'x' must be true or false`` (absent: false);
- :func:`enum_field` (absent reads as ``None``) / :func:`required_enum` (must be a string):
  ``field 'x' has unknown value 'y'``;
- :func:`version_field`: a comparable resourceVersion or null: ``x 'y' is not a positive decimal
  integer string``.

:func:`type_mismatch` is the error for a record whose type, named outside its body (the Kafka
type header), disagrees with the body's ``type``. :func:`parse_time` and
:func:`parse_resource_version` are the text parsers under the field decoders (also used on
Kubernetes objects). Pure: the standard library and orjson only.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Final, TypeVar

import orjson

E = TypeVar("E", bound=StrEnum)

RESOURCE_VERSION_MAX_DIGITS: Final = 39
"""Longest resourceVersion read as comparable: uint128 fits, and so does the projection's
``NUMERIC(39,0)`` column."""

_MISSING: Final = object()


class EventDecodeError(ValueError):
    """A payload could not be decoded into an event; the message says why."""


# --- text parsers -------------------------------------------------------------------------------


def parse_time(text: str) -> datetime:
    """Parse an RFC 3339 time (``Z`` or an offset) into an aware UTC datetime.

    Raises ``ValueError`` when the text is not such a time or has no offset.
    """
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if value.tzinfo is None:
        raise ValueError(f"time without offset: {text!r}")
    return value.astimezone(UTC)


def parse_resource_version(raw: object) -> int | None:
    """Parse a Kubernetes ``metadata.resourceVersion`` into an integer, or ``None``.

    Follows KEP-5504 (``k8s.io/apimachinery/pkg/util/resourceversion``): a comparable
    resourceVersion is a decimal string of digits without leading zeros and not ``"0"``. Anything
    else (missing, empty, ``"v2-abc"``, ``"007"``) is not comparable and gives ``None``. Python ints
    are arbitrary-precision, so values above 2**63 are kept exactly; more than
    :data:`RESOURCE_VERSION_MAX_DIGITS` digits (no real server sends that many) is not comparable.
    """
    if not isinstance(raw, str) or not raw.isascii() or not raw.isdigit():
        return None
    if raw[0] == "0" or len(raw) > RESOURCE_VERSION_MAX_DIGITS:
        return None
    return int(raw)


# --- field decoders -----------------------------------------------------------------------------


def require(obj: dict[str, Any], name: str, kind: type | tuple[type, ...] = str) -> Any:
    """``obj[name]``, which must be present and an instance of ``kind``."""
    value = obj.get(name, _MISSING)
    if value is _MISSING:
        raise EventDecodeError(f"missing field {name!r}")
    if not isinstance(value, kind):
        raise EventDecodeError(f"field {name!r} has type {type(value).__name__}")
    return value


def str_field(obj: dict[str, Any], name: str, *, empty: bool = False) -> str:
    """A string, non-empty unless ``empty``; absent or null is refused."""
    value = obj.get(name)
    if not isinstance(value, str) or (not empty and not value):
        raise EventDecodeError(f"field {name!r} must be a non-empty string")
    return value


def optional_str_field(obj: dict[str, Any], name: str) -> str | None:
    """A string, or ``None`` when absent or null."""
    value = obj.get(name)
    if value is not None and not isinstance(value, str):
        raise EventDecodeError(f"field {name!r} must be a string or null")
    return value


def time_field(obj: dict[str, Any], name: str) -> datetime:
    """An RFC 3339 time with an offset (:func:`parse_time`), as an aware UTC datetime."""
    try:
        return parse_time(str_field(obj, name))
    except ValueError as exc:  # EventDecodeError included: its message gets the field prefix
        raise EventDecodeError(f"field {name!r}: {exc}") from None


EVENT_TIME_EARLIEST: Final = datetime(1970, 1, 1, tzinfo=UTC)
"""The earliest event time a record may carry (``observedAt``, ``watchSeenAt``): the Unix epoch."""
EVENT_TIME_LATEST: Final = datetime(9000, 1, 1, tzinfo=UTC)
"""The first event time a record may not carry: far past any clock, far enough from
``datetime.max`` that the governor's windows and retentions (days) can be added to it."""


def check_event_time(value: datetime) -> datetime:
    """``value`` (UTC), or ``ValueError`` when it lies outside ``[EVENT_TIME_EARLIEST,
    EVENT_TIME_LATEST)``: a record dated in year 1 overflowed the governor's arithmetic
    (``observedAt - flap window``) and stopped it for good."""
    if not EVENT_TIME_EARLIEST <= value < EVENT_TIME_LATEST:
        raise ValueError(
            f"time {value.isoformat()} is out of range (from 1970-01-01 up to 9000-01-01)"
        )
    return value


def event_time_field(obj: dict[str, Any], name: str) -> datetime:
    """:func:`time_field` of an event time, checked by :func:`check_event_time`."""
    value = time_field(obj, name)
    try:
        return check_event_time(value)
    except ValueError as exc:
        raise EventDecodeError(f"field {name!r}: {exc}") from None


def optional_time_field(obj: dict[str, Any], name: str) -> datetime | None:
    """:func:`time_field`, or ``None`` when absent or null."""
    return None if obj.get(name) is None else time_field(obj, name)


def int_field(obj: dict[str, Any], name: str, minimum: int = 0) -> int:
    """An integer (a JSON number without fraction, not a boolean) at least ``minimum``."""
    value = obj.get(name)
    if type(value) is not int or value < minimum:
        raise EventDecodeError(f"field {name!r} must be an integer >= {minimum}")
    return value


def bool_field(obj: dict[str, Any], name: str) -> bool:
    """``true`` or ``false``; absent reads as ``false``."""
    value = obj.get(name, False)
    if type(value) is not bool:
        raise EventDecodeError(f"field {name!r} must be true or false")
    return value


def enum_field(enum: type[E], obj: dict[str, Any], name: str) -> E:
    """A member of ``enum`` by value; absent or null is an unknown value (``None``)."""
    raw = obj.get(name)
    try:
        return enum(str(raw)) if isinstance(raw, str) else enum(raw)  # type: ignore[arg-type]
    except ValueError:
        raise EventDecodeError(f"field {name!r} has unknown value {raw!r}") from None


def required_enum(enum: type[E], obj: dict[str, Any], name: str) -> E:
    """A member of ``enum`` by value; the field must be a string (:func:`require`)."""
    raw = require(obj, name)
    try:
        return enum(raw)
    except ValueError:
        raise EventDecodeError(f"field {name!r} has unknown value {raw!r}") from None


def version_field(obj: dict[str, Any], name: str) -> int | None:
    """A comparable resourceVersion (:func:`parse_resource_version`), or ``None`` when absent or
    null; anything else is refused."""
    raw = obj.get(name)
    if raw is None:
        return None
    version = parse_resource_version(raw)
    if version is None:
        raise EventDecodeError(f"{name} {raw!r} is not a positive decimal integer string")
    return version


# --- the record's type ----------------------------------------------------------------------------


def json_fault(payload: bytes, exc: Exception) -> str:
    """The dead-letter reason of ``payload`` that orjson could not parse: the first byte that is
    not UTF-8 (orjson says "surrogates not allowed" of any invalid UTF-8), else its JSON error."""
    try:
        payload.decode("utf-8")
    except UnicodeDecodeError as bad:
        return (
            f"not UTF-8 text: byte 0x{payload[bad.start]:02x} at offset {bad.start} "
            f"({bad.reason}); a record is a UTF-8 JSON object"
        )
    return f"not JSON: {exc}"


def type_mismatch(declared: str, body_type: object) -> EventDecodeError:
    """The error for a record whose type header says ``declared`` and whose body says
    ``body_type``."""
    return EventDecodeError(f"type header says {declared!r} but the body is of type {body_type!r}")


def body_type(payload: bytes) -> object:
    """The ``type`` field of a JSON object (``None`` when absent, or not a JSON object). Parses
    the payload: for explaining an error, not on the way to a decoded record."""
    try:
        obj = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None
    return obj.get("type") if isinstance(obj, dict) else None


def decode_record(
    payload: bytes, schema: int, event_type: str, max_version: int
) -> tuple[dict[str, Any], datetime]:
    """The envelope of a versioned record of the health topic (``PodWorkloadObserved``,
    ``PodLifecycleObserved``, ``DRAFailureObserved``): its JSON object, checked to be of
    ``schema``, of ``type`` ``event_type`` and of a ``version`` in ``[1, max_version]``, and its
    ``observedAt`` (UTC, an event time: :func:`check_event_time`). Raises
    :class:`EventDecodeError` with the reason."""
    try:
        obj = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise EventDecodeError(json_fault(payload, exc)) from None
    if not isinstance(obj, dict):
        raise EventDecodeError("not a JSON object")
    if obj.get("schema") != schema:
        raise EventDecodeError(
            f"unsupported schema {obj.get('schema')!r} (this build reads {schema})"
        )
    if obj.get("type") != event_type:
        raise EventDecodeError(f"not a {event_type}: type {obj.get('type')!r}")
    version = obj.get("version")
    if type(version) is not int or not 1 <= version <= max_version:
        raise EventDecodeError(
            f"unsupported {event_type} version {version!r} (this build reads 1 to {max_version})"
        )
    try:
        observed_at = check_event_time(parse_time(require(obj, "observedAt")))
    except ValueError as exc:
        raise EventDecodeError(f"field 'observedAt': {exc}") from None
    return obj, observed_at
