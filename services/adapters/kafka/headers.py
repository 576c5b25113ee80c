"""Kafka record headers devicestate writes and reads (names and values UTF-8).

- :data:`HEADER_TYPE` (``devicestate-type``): the record's type, the ``type`` its JSON body
  carries (``DeviceHealthObserved``, ``NodeHeartbeat``, ``HealthTransition``, ``OperatorCommand``,
  a decision's kind...). Every producer writes it on the health, governance and decisions topics,
  so a consumer picks the decoder without looking into the body
  (:func:`services.domain.records.decode_typed_record`,
  :func:`services.domain.governance.input_codec.decode_input`). Records written before it existed
  have no such header; their consumers fall back to the body.
- :data:`HEADER_REASON`, :data:`HEADER_STAGE`, :data:`HEADER_SOURCE`: why, where and from which
  ``topic/partition/offset`` a dead letter was written (the dead letter keeps the original
  record's bytes as its value, without a type header).
- :data:`HEADER_ORIGINAL_SIZE` (``devicestate-original-size``): on a dead letter whose original
  was larger than a record may be, the original's size; the value holds its first bytes.
- :data:`HEADER_RECORDS` (``devicestate-records``): on a dead letter that holds several originals
  (the observations of one node over the device ceiling, ``streams.ceiling``), how many; its
  value is a JSON envelope listing each original with its source and reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, TypeAlias

HEADER_TYPE: Final = "devicestate-type"
HEADER_REASON: Final = "devicestate-reason"
HEADER_STAGE: Final = "devicestate-stage"
HEADER_SOURCE: Final = "devicestate-source"
HEADER_ORIGINAL_SIZE: Final = "devicestate-original-size"
"""On a dead letter whose value was cut to fit the topic: the original's size in bytes (decimal)."""
HEADER_RECORDS: Final = "devicestate-records"
"""On a dead letter holding several originals: how many (decimal)."""

Headers: TypeAlias = list[tuple[str, bytes]]
"""Headers as aiokafka and faust send them: ``(name, value)`` pairs."""

_TYPE_HEADER_BYTES: Final = HEADER_TYPE.encode()


def type_headers(record_type: str) -> Headers:
    """The headers of a record of type ``record_type``."""
    return [(HEADER_TYPE, record_type.encode())]


def record_type(headers: Iterable[tuple[Any, Any]] | Mapping[Any, Any] | None) -> str | None:
    """The :data:`HEADER_TYPE` value of a received record (``None``: no such header, a record
    written before producers set it). ``headers`` as aiokafka gives them (``(str, bytes)``
    pairs) or as faust may (a mapping, names as ``str`` or ``bytes``). A value that is not UTF-8
    is returned with the bad bytes replaced, so the decoder refuses it as an unknown type."""
    if not headers:
        return None
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    for name, value in pairs:
        if name in (HEADER_TYPE, _TYPE_HEADER_BYTES):
            if isinstance(value, bytes | bytearray | memoryview):
                return bytes(value).decode("utf-8", "replace")
            return None if value is None else str(value)
    return None
