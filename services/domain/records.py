"""Decoding any record of the device-health topic: device, node or inventory events.

The topic carries :mod:`services.domain.events` (``DeviceHealthObserved``, ``PodDevicesReleased``),
:mod:`services.domain.node_events` (``NodeHeartbeat``, ``NodeResourcesChanged``, ``WatcherTick``)
and :mod:`services.domain.inventory.events` (``InventoryObserved``: DRA ResourceSlices,
ResourceClaims and DeviceClasses). Consumers call :func:`decode_record` and dispatch on the type.

Inventory records are opt-in for a consumer, like the extra kinds of
``watch_lines.decode_watch_line``: ``decode_record(payload, inventory=True)`` decodes them (and
its type says so, so the type checker makes the consumer handle them); without it an
``InventoryObserved`` raises :class:`~services.domain.events.EventDecodeError`, which a consumer
that predates them (the stream worker, the replay) dead-letters or counts as undecodable instead
of mistaking it for a device event.
"""

from __future__ import annotations

from typing import Final, Literal, TypeAlias, overload

import orjson

from services.domain.event_codec import decode_event, encode_event
from services.domain.events import Event, EventDecodeError
from services.domain.inventory.events import InventoryObserved, decode_inventory, encode_inventory
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

TopicRecord: TypeAlias = Event | NodeEvent | InventoryObserved
"""Every record of the topic (what the watcher publishes)."""

DeviceOrNodeRecord: TypeAlias = Event | NodeEvent
"""What :func:`decode_record` returns without ``inventory=True``."""

INVENTORY_EVENT_TYPE: Final = "InventoryObserved"

# The compact form orjson writes. Inside a JSON string every quote is escaped, so `"type":"X"`
# (an unescaped quote right after `type`) can only be a "type" key and its value; no other key of
# a device event (or of an inventory event's object) is called "type". A bare `"WatcherTick"` would
# not do: a message ending in `"WatcherTick` is encoded `\"WatcherTick"`. The substring test picks
# the decoder without parsing twice.
_NODE_MARKERS: Final = tuple(b'"type":"%s"' % name.encode() for name in sorted(NODE_EVENT_TYPES))
_INVENTORY_MARKER: Final = b'"type":"%s"' % INVENTORY_EVENT_TYPE.encode()


@overload
def decode_record(payload: bytes, *, inventory: Literal[False] = False) -> DeviceOrNodeRecord: ...


@overload
def decode_record(payload: bytes, *, inventory: Literal[True]) -> TopicRecord: ...


@overload
def decode_record(payload: bytes, *, inventory: bool) -> TopicRecord: ...


def decode_record(payload: bytes, *, inventory: bool = False) -> TopicRecord:
    """Decode one device-health topic record; ``inventory``: also ``InventoryObserved``.

    Raises :class:`~services.domain.events.EventDecodeError` with the reason (the caller
    dead-letters the payload); for an ``InventoryObserved`` when ``inventory`` is false.
    """
    if _INVENTORY_MARKER in payload:
        return _inventory(payload, inventory)
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
        if isinstance(obj, dict) and obj.get("type") == INVENTORY_EVENT_TYPE:
            return _inventory(payload, inventory)
        raise


def _inventory(payload: bytes, inventory: bool) -> InventoryObserved:
    if not inventory:
        raise EventDecodeError(
            "InventoryObserved record: this consumer does not read inventory records"
        )
    return decode_inventory(payload)


def encode_record(record: TopicRecord) -> bytes:
    """Serialise any device-health topic record (UTF-8 JSON, keys sorted)."""
    if isinstance(record, InventoryObserved):
        return encode_inventory(record)
    if isinstance(record, NodeHeartbeat | NodeResourcesChanged | WatcherTick):
        return encode_node_event(record)
    return encode_event(record)
