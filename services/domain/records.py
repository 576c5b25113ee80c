"""Decoding any record of the device-health topic: device, node or inventory events.

The topic carries :mod:`services.domain.events` (``DeviceHealthObserved``, ``PodDevicesReleased``,
``PodsListed``), :mod:`services.domain.observations` (``DeviceHealthObservations``, schema 2,
issue 12: the observations of one Pod status change in one record; a consumer that predates it
dead-letters it as an unsupported schema or unknown type),
:mod:`services.domain.workloads.events` (``PodWorkloadObserved``, issue 13: a Pod's controller
chain and migration class; a consumer that predates it dead-letters it as an unknown type),
:mod:`services.domain.adoption.failure_events` (``DRAFailureObserved``, issue 16 item 3: a
classified driver or claim failure; likewise unknown to a consumer that predates it),
:mod:`services.domain.lifecycle_events` (``PodLifecycleObserved``, issue 16: a Pod's claim
lifecycle stages; the same for a consumer that predates it),
:mod:`services.domain.node_events` (``NodeHeartbeat``, ``NodeResourcesChanged``, ``WatcherTick``)
and :mod:`services.domain.inventory.events` (``InventoryObserved``: DRA ResourceSlices,
ResourceClaims and DeviceClasses). Consumers call :func:`decode_record` and dispatch on the type.

A record's type travels beside it (the producers' ``devicestate-type`` Kafka header, see
:mod:`services.adapters.kafka.headers`): :func:`decode_typed_record` takes it and calls that
type's decoder directly, so the record is parsed once and never searched. Records written before
the header existed come with no type; for them :func:`decode_record` picks the decoder from the
bytes (the ``"type":"X"`` markers below), which stays only as that fallback.

Inventory records are opt-in for a consumer, like the extra kinds of
``watch_lines.decode_watch_line``: ``decode_record(payload, inventory=True)`` decodes them (and
its type says so, so the type checker makes the consumer handle them); without it an
``InventoryObserved`` raises :class:`~services.domain.codec.EventDecodeError`, which a consumer
that predates them (the stream worker, the replay) dead-letters or counts as undecodable instead
of mistaking it for a device event.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Literal, TypeAlias, overload

import orjson

from services.domain.adoption.failure_events import (
    FAILURE_EVENT_TYPE,
    DRAFailureObserved,
    decode_failure,
    encode_failure,
)
from services.domain.codec import EventDecodeError, body_type, type_mismatch
from services.domain.event_codec import decode_event, encode_event
from services.domain.events import DeviceHealthObserved, Event, PodDevicesReleased
from services.domain.inventory.events import InventoryObserved, decode_inventory, encode_inventory
from services.domain.lifecycle_events import (
    LIFECYCLE_EVENT_TYPE,
    PodLifecycleObserved,
    decode_lifecycle,
    encode_lifecycle,
)
from services.domain.node_events import (
    NODE_EVENT_TYPES,
    NodeEvent,
    NodeHeartbeat,
    NodeLabelsChanged,
    NodeResourcesChanged,
    WatcherTick,
    decode_node_event,
    encode_node_event,
    node_event_from_dict,
)
from services.domain.observations import (
    OBSERVATIONS_TYPE,
    DeviceHealthObservations,
    decode_observations,
    encode_observations,
)
from services.domain.workloads.codec import decode_workload, encode_workload
from services.domain.workloads.events import WORKLOAD_EVENT_TYPE, PodWorkloadObserved

TopicRecord: TypeAlias = (
    Event
    | DeviceHealthObservations
    | NodeEvent
    | InventoryObserved
    | PodWorkloadObserved
    | DRAFailureObserved
    | PodLifecycleObserved
)
"""Every record of the topic (what the watcher publishes)."""

DeviceOrNodeRecord: TypeAlias = (
    Event
    | DeviceHealthObservations
    | NodeEvent
    | PodWorkloadObserved
    | DRAFailureObserved
    | PodLifecycleObserved
)
"""What :func:`decode_record` returns without ``inventory=True``."""

INVENTORY_EVENT_TYPE: Final = "InventoryObserved"

# The compact form orjson writes. Inside a JSON string every quote is escaped, so `"type":"X"`
# (an unescaped quote right after `type`) can only be a "type" key and its value; no other key of
# a device event (or of an inventory event's object) is called "type". A bare `"WatcherTick"` would
# not do: a message ending in `"WatcherTick` is encoded `\"WatcherTick"`. The substring test picks
# the decoder without parsing twice.
_NODE_MARKERS: Final = tuple(b'"type":"%s"' % name.encode() for name in sorted(NODE_EVENT_TYPES))
_INVENTORY_MARKER: Final = b'"type":"%s"' % INVENTORY_EVENT_TYPE.encode()
_WORKLOAD_MARKER: Final = b'"type":"%s"' % WORKLOAD_EVENT_TYPE.encode()
_FAILURE_MARKER: Final = b'"type":"%s"' % FAILURE_EVENT_TYPE.encode()
_LIFECYCLE_MARKER: Final = b'"type":"%s"' % LIFECYCLE_EVENT_TYPE.encode()
_OBSERVATIONS_MARKER: Final = b'"type":"%s"' % OBSERVATIONS_TYPE.encode()


@overload
def decode_record(payload: bytes, *, inventory: Literal[False] = False) -> DeviceOrNodeRecord: ...


@overload
def decode_record(payload: bytes, *, inventory: Literal[True]) -> TopicRecord: ...


@overload
def decode_record(payload: bytes, *, inventory: bool) -> TopicRecord: ...


def decode_record(payload: bytes, *, inventory: bool = False) -> TopicRecord:
    """Decode one device-health topic record; ``inventory``: also ``InventoryObserved``.

    Raises :class:`~services.domain.codec.EventDecodeError` with the reason (the caller
    dead-letters the payload); for an ``InventoryObserved`` when ``inventory`` is false.
    """
    if _INVENTORY_MARKER in payload:
        return _inventory(payload, inventory)
    if _OBSERVATIONS_MARKER in payload:
        return decode_observations(payload)
    if _WORKLOAD_MARKER in payload:
        return decode_workload(payload)
    if _FAILURE_MARKER in payload:
        return decode_failure(payload)
    if _LIFECYCLE_MARKER in payload:
        return decode_lifecycle(payload)
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
        if isinstance(obj, dict) and obj.get("type") == WORKLOAD_EVENT_TYPE:
            return decode_workload(payload)
        if isinstance(obj, dict) and obj.get("type") == FAILURE_EVENT_TYPE:
            return decode_failure(payload)
        if isinstance(obj, dict) and obj.get("type") == LIFECYCLE_EVENT_TYPE:
            return decode_lifecycle(payload)
        if isinstance(obj, dict) and obj.get("type") == OBSERVATIONS_TYPE:
            return decode_observations(payload)
        raise


def decode_typed_record(
    payload: bytes, record_type: str | None, *, inventory: bool = False
) -> TopicRecord:
    """Decode one record whose type is known from outside its body (``record_type``, the type
    header; ``None``: unknown, then this is :func:`decode_record`). ``inventory`` as there.

    Raises :class:`~services.domain.codec.EventDecodeError` for an unknown ``record_type``, a
    body that does not decode, and a body of another type than ``record_type`` (the message
    names both).
    """
    if record_type is None:
        return decode_record(payload, inventory=inventory)
    if record_type == INVENTORY_EVENT_TYPE:
        decoded: TopicRecord = _inventory_typed(payload, inventory)
    else:
        decoder = _DECODERS.get(record_type)
        if decoder is None:
            raise EventDecodeError(f"unknown record type {record_type!r} in the type header")
        try:
            decoded = decoder(payload)
        except EventDecodeError:
            _check_body_type(payload, record_type)
            raise
    if decoded.type != record_type:
        raise type_mismatch(record_type, decoded.type)
    return decoded


def _check_body_type(payload: bytes, record_type: str) -> None:
    """After a failed decode: the body's own type, if it names another one, is the reason."""
    found = body_type(payload)
    if found is not None and found != record_type:
        raise type_mismatch(record_type, found) from None


def _inventory_typed(payload: bytes, inventory: bool) -> InventoryObserved:
    try:
        return _inventory(payload, inventory)
    except EventDecodeError:
        if inventory:
            _check_body_type(payload, INVENTORY_EVENT_TYPE)
        raise


_DECODERS: Final[dict[str, Callable[[bytes], TopicRecord]]] = {
    "DeviceHealthObserved": decode_event,
    "PodDevicesReleased": decode_event,
    "PodsListed": decode_event,
    OBSERVATIONS_TYPE: decode_observations,
    **{name: decode_node_event for name in NODE_EVENT_TYPES},
    WORKLOAD_EVENT_TYPE: decode_workload,
    FAILURE_EVENT_TYPE: decode_failure,
    LIFECYCLE_EVENT_TYPE: decode_lifecycle,
}
"""Type header value -> decoder (``InventoryObserved`` apart: it depends on ``inventory``)."""


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
    if isinstance(record, PodWorkloadObserved):
        return encode_workload(record)
    if isinstance(record, DRAFailureObserved):
        return encode_failure(record)
    if isinstance(record, PodLifecycleObserved):
        return encode_lifecycle(record)
    if isinstance(record, DeviceHealthObservations):
        return encode_observations(record)
    if isinstance(record, NodeHeartbeat | NodeResourcesChanged | WatcherTick | NodeLabelsChanged):
        return encode_node_event(record)
    return encode_event(record)


def check_key(record: TopicRecord, key: bytes | None) -> TopicRecord:
    """``record`` unless it is a device event (an observation or a release) whose record key is
    not its node: the watcher keys them by node, the key picks the partition, and a device's
    events are ordered (and deduplicated) within its node's partition, so one keyed by another
    node would be ordered with that node's records. ``None`` (a producer that sets no key)
    passes; node, tick and inventory records have keys of their own. Raises
    :class:`EventDecodeError` naming both otherwise: the event is dead-lettered, not applied
    under the body's node."""
    if not isinstance(record, DeviceHealthObserved | PodDevicesReleased | DeviceHealthObservations):
        return record
    if key is None or key == record.node.encode("utf-8"):
        return record
    shown = key.decode("utf-8", "backslashreplace")
    shown = shown if len(shown) <= 300 else shown[:300] + "..."
    raise EventDecodeError(
        f"record key {shown!r} differs from the body's node {record.node!r} "
        "(a record is keyed by its node)"
    )
