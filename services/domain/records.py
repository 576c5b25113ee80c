"""Decoding any record of the device-health topic: device events or node events.

The topic carries :mod:`services.domain.events` (``DeviceHealthObserved``, ``PodDevicesReleased``)
and :mod:`services.domain.node_events` (``NodeHeartbeat``, ``NodeResourcesChanged``,
``WatcherTick``). Consumers call :func:`decode_record` and dispatch on the type.
"""

from __future__ import annotations

from typing import Final, TypeAlias

import orjson

from services.domain.events import Event, EventDecodeError, decode_event, encode_event
from services.domain.node_events import (
    NODE_EVENT_TYPES,
    NodeEvent,
    NodeHeartbeat,
    NodeResourcesChanged,
    WatcherTick,
    decode_node_event,
    encode_node_event,
    node_event_from_dict,
)

TopicRecord: TypeAlias = Event | NodeEvent

# The compact form orjson writes. Inside a JSON string every quote is escaped, so `"type":"X"`
# (an unescaped quote right after `type`) can only be a "type" key and its value; no other key of
# a device event is called "type". A bare `"WatcherTick"` would not do: a message ending in
# `"WatcherTick` is encoded `\"WatcherTick"`. The substring test picks the decoder without
# parsing twice.
_NODE_MARKERS: Final = tuple(b'"type":"%s"' % name.encode() for name in sorted(NODE_EVENT_TYPES))


def decode_record(payload: bytes) -> TopicRecord:
    """Decode one device-health topic record.

    Raises :class:`~services.domain.events.EventDecodeError` with the reason (the caller
    dead-letters the payload).
    """
    if any(marker in payload for marker in _NODE_MARKERS):
        return decode_node_event(payload)
    try:
        return decode_event(payload)
    except EventDecodeError:
        # Not in the compact form (another producer's spacing)? Then parse and dispatch.
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            obj = None
        if isinstance(obj, dict) and obj.get("type") in NODE_EVENT_TYPES:
            return node_event_from_dict(obj)
        raise


def encode_record(record: TopicRecord) -> bytes:
    """Serialise any device-health topic record (UTF-8 JSON, keys sorted)."""
    if isinstance(record, NodeHeartbeat | NodeResourcesChanged | WatcherTick):
        return encode_node_event(record)
    return encode_event(record)
