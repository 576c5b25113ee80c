"""Poison records against the real broker and PostgreSQL, the worker run as ``python -m
streams.cli`` (issue 11 item 3).

The test's own schema gets a CHECK constraint that refuses a marker value: a record carrying it
decodes, but PostgreSQL will not store it (as a value over a column's limit would be refused).
Before poison isolation such a record stopped the worker at its batch, and every restart stopped
again at the same offset. Now: the worker keeps running, the record is in the dead-letter topic
with the database's error as reason, every other record is in the projection, and a restart
after a SIGKILL goes past it.
"""

from __future__ import annotations

import dataclasses
import signal
from typing import Any
from uuid import uuid4

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from services.domain.event_codec import encode_event
from services.domain.events import DeviceHealthObserved, Health
from services.domain.governance.input_codec import decode_keyed
from services.runtime.config import Settings
from tests.conftest import publish
from tests.replay.test_replay import drop, run_replay
from tests.streams.synthetic import synthetic_log
from tests.streams.test_governor_integration import Pipeline, observation, stop
from tests.streams.test_worker_integration import (
    free_port,
    history_rows,
    projection_devices,
    read_topic,
    scrape,
    wait_until,
)

pytestmark = pytest.mark.integration

POISON = "POISON-"
"""Resource IDs the test's schema refuses (``devices`` CHECK constraint)."""


async def refuse_marker(engine: AsyncEngine, schema: str) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            text(
                f'ALTER TABLE "{schema}".devices ADD CONSTRAINT test_poison '
                f"CHECK (resource_id NOT LIKE '{POISON}%')"
            )
        )


def poisoned(event: Any, n: int) -> tuple[bytes, bytes]:
    assert isinstance(event, DeviceHealthObserved)
    bad = dataclasses.replace(event, resource_id=f"{POISON}{n}")
    return bad.node.encode(), encode_event(bad)


async def test_a_record_postgresql_refuses_is_dead_lettered_and_the_rest_written(
    stream_settings: Settings, engine: AsyncEngine, kafka_bootstrap: str, worker_process: Any
) -> None:
    log = synthetic_log(4000, nodes=12, seed=31)
    observations = [e for e in log.events if isinstance(e, DeviceHealthObserved)]
    records: list[tuple[bytes | None, bytes | None]] = list(log.records)
    first, second = records[:2000], records[2000:]
    first.insert(700, poisoned(observations[10], 1))
    second.insert(1500, poisoned(observations[20], 2))
    schema = stream_settings.database_schema
    await refuse_marker(engine, schema)
    await publish(kafka_bootstrap, stream_settings.topic, first)

    port = free_port()
    settings = stream_settings.model_copy(update={"worker_metrics_port": port})
    worker = worker_process(settings)
    expected_first = synthetic_log_rows(log.events[:2000])

    async def rows_at_least(count: int) -> Any:
        async def check() -> bool:
            return await history_rows(engine, schema) >= count

        return check

    await wait_until(await rows_at_least(expected_first), 90, "the first half", worker)
    assert worker.process.poll() is None  # still running: the poison did not stop it
    metrics = scrape(port)
    assert metrics['devicestate_worker_poison_records_total{agent="health"}'] == 1
    assert metrics['devicestate_worker_events_dead_lettered_total{stage="write"}'] == 1

    # A SIGKILL: whatever was not committed to Kafka is read again; the restart goes past it.
    worker.signal(signal.SIGKILL)
    assert await worker.wait(30) == -signal.SIGKILL
    await publish(kafka_bootstrap, settings.topic, second)
    port = free_port()
    settings = settings.model_copy(update={"worker_metrics_port": port})
    restarted = worker_process(settings)
    expected_rows = log.expected_history_rows()
    await wait_until(await rows_at_least(expected_rows), 120, "the restart to catch up", restarted)
    await wait_until(lambda: _poison_count(port, 1), 30, "the second poison record", restarted)
    assert await history_rows(engine, schema) == expected_rows
    assert await projection_devices(engine, schema) == log.expected_devices()

    letters = await read_topic(kafka_bootstrap, settings.dead_letter_topic, 3, seconds=10)
    assert sorted(m.value for m in letters) == sorted([first[700][1], second[1500][1]])
    for letter in letters:
        headers = dict(letter.headers)
        assert headers["devicestate-stage"] == b"write"
        assert headers["devicestate-source"].startswith(settings.topic.encode() + b"/")
        reason = headers["devicestate-reason"].decode()
        assert reason.startswith("23514 CheckViolationError: "), reason
        assert 'violates check constraint "test_poison"' in reason
    restarted.signal(signal.SIGTERM)
    assert await restarted.wait(60) == 0, restarted.log_text()[-4000:]

    # The replay skips the same records (read back from the dead-letter topic), though its own
    # schema would store them: it rebuilds exactly the live projection.
    replayed = f"replay_{uuid4().hex[:12]}"
    result = await run_replay(settings, "--schema", replayed, "--verify", "--drop")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"verify: {replayed} is identical to {schema}" in result.stdout
    assert "undecodable 2" in result.stdout  # the two refused records


async def _poison_count(port: int, count: int) -> bool:
    return scrape(port).get('devicestate_worker_poison_records_total{agent="health"}') == count


def synthetic_log_rows(events: list[Any]) -> int:
    return dataclasses.replace(synthetic_log(0), events=events).expected_history_rows()


async def test_a_governance_row_postgresql_refuses_is_dead_lettered_and_the_rest_governed(
    stream_settings: Settings, engine: AsyncEngine, kafka_bootstrap: str, worker_process: Any
) -> None:
    schema = stream_settings.database_schema
    async with engine.begin() as conn:  # the health projection stores it; the governance not
        await conn.execute(
            text(
                f'ALTER TABLE "{schema}".device_governance ADD CONSTRAINT test_poison '
                "CHECK (resource_id NOT LIKE 'GOVPOISON-%')"
            )
        )
    port = free_port()
    settings = stream_settings.model_copy(update={"worker_metrics_port": port})
    devices = [(f"gpu-node-{n}", f"GPU-{i}") for n in range(3) for i in range(2)]
    wave = [
        observation(node, rid, Health.HEALTHY, 10 * k + 1, 1 + k)
        for k, (node, rid) in enumerate(devices)
    ]
    wave.insert(3, observation("gpu-node-1", "GOVPOISON-1", Health.UNHEALTHY, 5, 3.5))
    async with Pipeline(settings, engine, kafka_bootstrap) as pipe:
        pipe.worker = worker_process(settings)
        await pipe.wave(wave)
        governed = await pipe.rows("SELECT node, resource_id FROM {s}.device_governance")
        assert sorted((r.node, r.resource_id) for r in governed) == sorted(devices)
        stored = await pipe.rows("SELECT resource_id FROM {s}.devices")
        assert "GOVPOISON-1" in {r.resource_id for r in stored}  # only the governance refused it
        assert not any(d.get("resourceID") == "GOVPOISON-1" for d in await pipe.decisions())
        [letter] = await read_topic(kafka_bootstrap, settings.dead_letter_topic, 2, seconds=5)
        headers = dict(letter.headers)
        assert headers["devicestate-stage"] == b"governor-write"
        assert headers["devicestate-source"].startswith(settings.topic.encode() + b"/")
        reason = headers["devicestate-reason"].decode()
        assert reason.startswith("23514 CheckViolationError: "), reason
        assert 'violates check constraint "test_poison"' in reason
        record, key = decode_keyed(letter.value)
        assert key is not None and record.resource_id == "GOVPOISON-1"  # type: ignore[attr-defined]
        metrics = scrape(port)
        assert metrics['devicestate_worker_poison_records_total{agent="governor"}'] == 1
        assert metrics['devicestate_worker_events_dead_lettered_total{stage="governor-write"}'] == 1

        # A SIGKILL and a restart: the governor goes on past it, and refuses nothing again.
        pipe.worker.signal(signal.SIGKILL)
        assert await pipe.worker.wait(30) == -signal.SIGKILL
        pipe.worker = worker_process(settings.model_copy(update={"worker_metrics_port": 0}))
        await pipe.wave([observation("gpu-node-0", "GPU-0", Health.UNHEALTHY, 100, 20)])
        [row] = await pipe.rows(
            "SELECT observed_health FROM {s}.device_governance WHERE resource_id = 'GPU-0' "
            "AND node = 'gpu-node-0'"
        )
        assert row.observed_health == "Unhealthy"
        letters = await read_topic(kafka_bootstrap, settings.dead_letter_topic, 2, seconds=3)
        assert len(letters) == 1
        await stop(pipe.worker)

    # The replay leaves out the same fold (read back from the dead-letter topic), though its
    # own schema would store it: it rebuilds exactly the live governance projection.
    replayed = f"replay_{uuid4().hex[:12]}"
    try:
        result = await run_replay(settings, "--governance", "--schema", replayed, "--verify")
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"verify: {replayed} is identical to {schema}" in result.stdout
        assert "refused 1" in result.stdout
    finally:
        await drop(engine, replayed)
