"""Schema-2 records in the health agent (issue 12): one record, several observations of one Pod.

The agent files them as their observations, each at ``(topic, partition, offset, index)``, the
dedup stays per device, a bad entry is dead-lettered alone, and the forwarder gives each
observation merge keys of its own.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import orjson

from services.adapters.kafka.headers import HEADER_REASON, HEADER_SOURCE, HEADER_STAGE, type_headers
from services.domain.batch import PendingCommit
from services.domain.device_ceiling import OverCeiling
from services.domain.event_codec import encode_event
from services.domain.events import Health
from services.domain.log import LoggedEvent, LogPosition
from services.domain.observations import DeviceHealthObservations, encode_observations
from streams.app import build_worker_app
from streams.ceiling import dead_lettering_over_ceiling
from streams.deadletter import Letter
from streams.dedup_table import device_ranks, table_key
from streams.forward import governance_records
from tests.conftest import TOPIC
from tests.fakes.batch_sink import FakeSink
from tests.streams.test_dedup_unit import (
    FakeDeadLetters,
    _run_agent,
    _unit_settings,
    _wait_for,
)
from tests.streams.test_forward_unit import at, commit, key, transition_of, view


def change(observation: Any, version: int, *healths: Health) -> DeviceHealthObservations:
    return DeviceHealthObservations.of(
        [observation(version, h, resource_id=f"GPU-{i}") for i, h in enumerate(healths)]
    )


async def test_a_record_of_a_pod_change_is_its_observations(
    tmp_path: Any, observation: Any
) -> None:
    first = change(observation, 5, Health.HEALTHY, Health.UNHEALTHY, Health.HEALTHY)
    again = change(observation, 5, Health.HEALTHY, Health.UNHEALTHY, Health.HEALTHY)
    newer = change(observation, 6, Health.HEALTHY, Health.HEALTHY)
    payloads = [
        encode_observations(first),
        encode_event(observation(4, resource_id="GPU-2")),  # schema 1, older: dropped
        encode_observations(again),  # an exact re-send: dropped device by device
        encode_observations(newer),
    ]
    sink = FakeSink(run_hooks=False)
    built, dead = await _run_agent(tmp_path, payloads, sink, expected_calls=1)
    [written] = sink.batches
    assert [(r.position.offset, r.position.index) for r in written] == [
        (0, 0),
        (0, 1),
        (0, 2),
        (3, 0),
        (3, 1),
    ]
    assert [r.event for r in written] == [*first.observations, *newer.observations]
    assert dead.sent == []
    assert device_ranks(built.dedup.table.items()) == {
        table_key("gpu-node-a", "GPU-0"): "6",
        table_key("gpu-node-a", "GPU-1"): "6",
        table_key("gpu-node-a", "GPU-2"): "5",
    }
    metrics = built.metrics
    assert metrics.consumed._value.get() == 4  # Kafka records
    assert metrics.table_duplicates.labels("duplicate")._value.get() == 3
    assert metrics.table_duplicates.labels("stale")._value.get() == 1
    [logged] = sink.logged
    assert logged.consumed_through == {("unit-events", 0): 3}


async def test_a_bad_observation_is_dead_lettered_alone(tmp_path: Any, observation: Any) -> None:
    record = change(observation, 5, Health.HEALTHY, Health.UNKNOWN)
    obj = orjson.loads(encode_observations(record))
    obj["observations"].insert(1, {**obj["observations"][0], "health": 7, "resourceID": "GPU-9"})
    sink = FakeSink(run_hooks=False)
    built = build_worker_app(_unit_settings(tmp_path), sink=sink)
    app = built.app
    app.finalize()
    app.flow_control.resume()
    sink.table = built.dedup.table
    dead = FakeDeadLetters()
    built.dedup.dead_letter_topic = dead
    async with built.dedup.agent.test_context() as agent:
        await agent.put(
            orjson.dumps(obj),
            key=b"gpu-node-a",
            headers=type_headers("DeviceHealthObservations"),
            wait=False,
        )
        await _wait_for(lambda: sink.calls >= 1)
        await asyncio.sleep(0.1)
    [written] = sink.batches
    assert [(r.position.index, r.event) for r in written] == [
        (0, record.observations[0]),
        (2, record.observations[1]),
    ]
    [letter] = dead.sent
    headers = dict(letter["headers"])
    assert headers[HEADER_STAGE] == b"decode"
    assert headers[HEADER_SOURCE] == b"unit-events/0/0"
    assert headers[HEADER_REASON].startswith(b"observation 1 of 3: ")
    alone = orjson.loads(letter["value"])
    assert [o["resourceID"] for o in alone["observations"]] == ["GPU-9"]
    assert alone["podUID"] == "uid-1" and alone["statusVersion"] == "5"


def test_each_observation_of_a_record_has_merge_keys_of_its_own(observation: Any) -> None:
    record = change(observation, 5, Health.UNHEALTHY, Health.UNKNOWN, Health.UNHEALTHY)
    logged = [
        LoggedEvent(LogPosition(TOPIC, 0, 10, i), o) for i, o in enumerate(record.observations)
    ]
    batch = view([(r.position, at(3)) for r in logged])
    out = governance_records(batch, commit([transition_of(r) for r in logged]), partitions=1)
    keys = [k for _, k in out if k is not None]
    assert keys == [key(3, 0, 10, 0), key(3, 0, 10, 1), key(3, 0, 10, 2)]


async def test_observations_over_the_ceiling_are_dead_lettered_as_themselves(
    observation: Any,
) -> None:
    """Two observations of one schema-2 record over the device ceiling: each letter entry holds
    the observation alone (its schema-1 bytes), not the whole record, at the record's source."""
    record = change(observation, 5, Health.HEALTHY, Health.UNHEALTHY, Health.HEALTHY)
    value = encode_observations(record)
    message = SimpleNamespace(
        topic="health", partition=2, offset=7, key=b"gpu-node-a", value=value, headers=None
    )
    over = [
        OverCeiling(LoggedEvent(LogPosition("health", 2, 7, i), record.observations[i]), f"r{i}")
        for i in (1, 2)
    ]
    sent: list[Letter] = []

    async def send(letter: Letter) -> Any:
        sent.append(letter)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    hook = dead_lettering_over_ceiling(
        None, [SimpleNamespace(message=message)], send, set(), 1_000_000
    )
    await hook(PendingCommit([], {}, {}, over_ceiling=over))
    [letter] = sent
    body = orjson.loads(letter.value)
    assert [r["source"] for r in body["records"]] == ["health/2/7", "health/2/7"]
    assert [orjson.dumps(r["value"]) for r in body["records"]] == [
        orjson.dumps(orjson.loads(encode_event(record.observations[i]))) for i in (1, 2)
    ]
