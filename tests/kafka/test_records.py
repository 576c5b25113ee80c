"""The wire form of what the producer writes on the device-health topic (no broker needed):
device events and node events share the topic, and ``decode_record`` tells them apart."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
import pytest

from services.domain.events import (
    ContainerRef,
    DeviceHealthObserved,
    DeviceSource,
    EventDecodeError,
    Health,
)
from services.domain.node_events import NodeHeartbeat, NodeResourcesChanged, WatcherTick
from services.domain.records import TopicRecord, decode_record, encode_record

T0 = datetime(2026, 11, 29, 11, 0, 0, 123456, tzinfo=UTC)


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
