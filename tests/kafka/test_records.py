"""The wire form of what the producer writes on the device-health topic (no broker needed):
device, node and inventory events share the topic, and ``decode_record`` tells them apart
(inventory records only for a consumer that asks for them)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from services.domain.codec import EventDecodeError
from services.domain.events import ContainerRef, DeviceHealthObserved, DeviceSource, Health
from services.domain.inventory.events import InventoryObserved, encode_inventory, record_key
from services.domain.inventory.objects import (
    parse_device_class,
    parse_resource_claim,
    parse_resource_slice,
)
from services.domain.node_events import NodeHeartbeat, NodeResourcesChanged, WatcherTick
from services.domain.records import TopicRecord, decode_record, encode_record

T0 = datetime(2026, 11, 29, 11, 0, 0, 123456, tzinfo=UTC)
EXAMPLES = Path(__file__).parents[2].parent / "shared" / "examples"


def example(name: str) -> Any:
    return json.loads((EXAMPLES / name).read_text())


def inventory_events() -> list[InventoryObserved]:
    objects = [
        parse_resource_slice(example("dra-resourceslice-gpu-node-a.json")),
        parse_resource_claim(example("dra-resourceclaim-allocated.json")),
        parse_device_class(example("dra-deviceclass-gpu.json")),
    ]
    return [
        InventoryObserved(record_key(obj), obj, deleted, T0)
        for obj in objects
        for deleted in (False, True)
    ]


def observation(message: str | None = None, resource_id: str = "GPU-0") -> DeviceHealthObserved:
    return DeviceHealthObserved(
        node="gpu-node-a",
        namespace="ml",
        pod_name="train-0",
        pod_uid="uid-1",
        containers=(ContainerRef("main"),),
        resource_name="nvidia.com/gpu",
        resource_id=resource_id,
        health=Health.UNHEALTHY,
        source=DeviceSource.DEVICE_PLUGIN,
        status_version=42,
        observed_at=T0,
        message=message,
    )


@pytest.mark.parametrize(
    "record",
    [
        observation(),
        NodeHeartbeat("gpu-node-a", T0, T0, lease_version=12345678901234567890),
        NodeHeartbeat("gpu-node-a", T0, T0),
        NodeResourcesChanged(
            "gpu-node-a", (("example.com/nic", 2), ("nvidia.com/gpu", 8)), (), None, T0
        ),
        WatcherTick(partition=5, observed_at=T0),
    ],
    ids=lambda r: r.type,
)
def test_round_trip(record: TopicRecord) -> None:
    assert decode_record(encode_record(record)) == record


@pytest.mark.parametrize(
    "text", ['ends in "WatcherTick', '"NodeHeartbeat"', 'x"type":"WatcherTick"', "WatcherTick"]
)
def test_a_device_event_mentioning_a_node_event_type_is_still_a_device_event(text: str) -> None:
    for event in (observation(message=text), observation(resource_id=text)):
        assert decode_record(encode_record(event)) == event


def test_node_events_with_other_spacing_are_read_too() -> None:
    tick = WatcherTick(partition=1, observed_at=T0)
    spaced = orjson.dumps(orjson.loads(encode_record(tick)), option=orjson.OPT_INDENT_2)
    assert b'"type": "WatcherTick"' in spaced
    assert decode_record(spaced) == tick


@pytest.mark.parametrize(
    "payload",
    [b"not json", b"[]", b'{"schema":1,"type":"Nope","observedAt":"2026-11-29T11:00:00Z"}'],
)
def test_undecodable_records_raise_event_decode_error(payload: bytes) -> None:
    with pytest.raises(EventDecodeError):
        decode_record(payload)


@pytest.mark.parametrize("event", inventory_events(), ids=lambda e: f"{e.kind}-{e.deleted}")
def test_inventory_round_trip_for_a_consumer_that_reads_them(event: InventoryObserved) -> None:
    payload = encode_record(event)
    assert payload == encode_inventory(event)
    assert decode_record(payload, inventory=True) == event
    assert event.node == event.key  # the producer keys every record by .node


@pytest.mark.parametrize("spaced", [False, True])
def test_inventory_records_are_not_decoded_for_a_consumer_that_does_not_ask(spaced: bool) -> None:
    payload = encode_record(inventory_events()[0])
    if spaced:
        payload = orjson.dumps(orjson.loads(payload), option=orjson.OPT_INDENT_2)
        assert decode_record(payload, inventory=True) == inventory_events()[0]
    with pytest.raises(EventDecodeError, match="does not read inventory records"):
        decode_record(payload)


def test_a_device_event_mentioning_the_inventory_type_is_still_a_device_event() -> None:
    for text in ('"type":"InventoryObserved"', 'x"InventoryObserved'):
        event = observation(message=text)
        assert decode_record(encode_record(event), inventory=True) == event
        assert decode_record(encode_record(event)) == event


def test_a_broken_inventory_record_raises_event_decode_error() -> None:
    payload = encode_record(inventory_events()[0]).replace(b'"kind":"ResourceSlice"', b'"kind":"X"')
    with pytest.raises(EventDecodeError):
        decode_record(payload, inventory=True)
