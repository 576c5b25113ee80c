"""Decoding any record of the device-health topic: device events or node events.

The topic carries :mod:`services.domain.events` (``DeviceHealthObserved``, ``PodDevicesReleased``)
and :mod:`services.domain.node_events` (``NodeHeartbeat``, ``NodeResourcesChanged``,
``WatcherTick``). Consumers call :func:`decode_record` and dispatch on the type.
"""

from __future__ import annotations

from typing import Final, TypeAlias

from services.domain.events import Event, decode_event, encode_event
from services.domain.node_events import (
    NodeEvent,
    NodeHeartbeat,
    NodeResourcesChanged,
    WatcherTick,
    decode_node_event,
    encode_node_event,
)

TopicRecord: TypeAlias = Event | NodeEvent

# Keys are sorted on the wire and JSON escapes quotes inside strings, so a quoted type name can
# only be the value of "type": a substring test picks the decoder without parsing twice.
_NODE_MARKERS: Final = (b'"NodeHeartbeat"', b'"NodeResourcesChanged"', b'"WatcherTick"')


def decode_record(payload: bytes) -> TopicRecord:
    """Decode one device-health topic record.

    Raises :class:`~services.domain.events.EventDecodeError` with the reason (the caller
    dead-letters the payload).
    """
    if any(marker in payload for marker in _NODE_MARKERS):
        return decode_node_event(payload)
    return decode_event(payload)


def encode_record(record: TopicRecord) -> bytes:
    """Serialise any device-health topic record (UTF-8 JSON, keys sorted)."""
    if isinstance(record, NodeHeartbeat | NodeResourcesChanged | WatcherTick):
        return encode_node_event(record)
    return encode_event(record)
