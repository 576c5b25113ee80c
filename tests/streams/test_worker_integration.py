"""The worker against the real broker and PostgreSQL, run as ``python -m streams.cli``.

Each test has its own topics, consumer group and schema (``stream_settings``). Expectations come
from the pure fold of the published log: device rows equal ``fold(log)``, and the history holds
exactly one row per change the fold makes -- nothing lost, nothing doubled.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from services.adapters.projection.reads_devices import DeviceReads
from services.domain.directory import DeviceRecord
from services.runtime.config import Settings
from tests.conftest import publish
from tests.streams.synthetic import synthetic_log

pytestmark = pytest.mark.integration

WORKER_ARGS: tuple[str, ...] = ()  # the worker migrates and ensures topics itself (idempotent)


async def history_rows(engine: AsyncEngine, schema: str) -> int:
    async with engine.connect() as conn:
        result = await conn.execute(text(f'SELECT count(*) FROM "{schema}".device_history'))
        return int(result.scalar_one())


async def projection_devices(engine: AsyncEngine, schema: str) -> dict[Any, DeviceRecord]:
    reads = DeviceReads(engine, schema)
    found: dict[Any, DeviceRecord] = {}
    after = None
    while True:
        page = await reads.list_devices(limit=1000, after=after)
        found.update((d.key, d) for d in page.items)
        if page.next_after is None:
            return found
        after = page.next_after


async def wait_until(
    check: Callable[[], Awaitable[bool]], seconds: float, what: str, log: Any = None
) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not await check():
        if log is not None and log.process.poll() is not None:
            raise AssertionError(
                f"worker exited ({log.process.returncode}) while waiting for {what}\n"
                f"--- worker log ---\n{log.log_text()[-4000:]}"
            )
        if loop.time() > deadline:
            detail = f"\n--- worker log ---\n{log.log_text()[-4000:]}" if log is not None else ""
            raise AssertionError(f"timed out after {seconds} s waiting for {what}{detail}")
        await asyncio.sleep(0.05)


async def read_topic(bootstrap: str, topic: str, count: int, seconds: float = 30.0) -> list[Any]:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        records: list[Any] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while len(records) < count and loop.time() < deadline:
            for batch in (await consumer.getmany(timeout_ms=500)).values():
                records.extend(batch)
        return records
    finally:
        await consumer.stop()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        body = response.read().decode()
    samples = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


async def test_worker_dedups_dead_letters_and_keeps_flowing(
    stream_settings: Settings, engine: AsyncEngine, kafka_bootstrap: str, worker_process: Any
) -> None:
    log = synthetic_log(3000, nodes=12, seed=11)
    records: list[tuple[bytes | None, bytes | None]] = list(log.records)
    truncated = records[5][1][:40]  # type: ignore[index]
    wrong_schema = b'{"schema": 99, "type": "DeviceHealthObserved"}'
    # Decodes, but PostgreSQL could not store it: once a poison pill that stopped the worker.
    unstorable = records[7][1].replace(b'"message":null', b'"message":"XID\\u000079"', 1)  # type: ignore[union-attr]
    assert b"\\u0000" in unstorable
    records.insert(100, (b"gpu-node-001", truncated))
    records.insert(2000, (b"gpu-node-002", wrong_schema))
    records.insert(2500, (b"gpu-node-003", unstorable))
    await publish(kafka_bootstrap, stream_settings.topic, records)
    outcomes = log.outcomes()
    assert outcomes[outcome_named("duplicate")] > 100 and outcomes[outcome_named("stale")] > 50

    port = free_port()
    settings = stream_settings.model_copy(update={"worker_metrics_port": port})
    worker = worker_process(settings, *WORKER_ARGS)
    schema = settings.database_schema
    expected_rows = log.expected_history_rows()

    async def caught_up() -> bool:
        return await history_rows(engine, schema) >= expected_rows

    await wait_until(caught_up, 90, "the projection to catch up", worker)
    await asyncio.sleep(1.0)  # anything doubled would show up now
    assert await history_rows(engine, schema) == expected_rows
    assert await projection_devices(engine, schema) == log.expected_devices()

    letters = await read_topic(kafka_bootstrap, settings.dead_letter_topic, 3)
    assert sorted(m.value for m in letters) == sorted([truncated, wrong_schema, unstorable])
    for letter in letters:
        headers = dict(letter.headers)
        assert headers["devicestate-stage"] == b"decode"
        assert headers["devicestate-source"].startswith(settings.topic.encode() + b"/")
        expected_reason = {
            truncated: b"not JSON",
            wrong_schema: b"unsupported schema 99",
            unstorable: b"cannot be stored: message contains a NUL",
        }[letter.value]
        assert headers["devicestate-reason"].startswith(expected_reason)

    metrics = scrape(port)
    assert metrics["devicestate_worker_events_consumed_total"] == len(records)
    assert metrics['devicestate_worker_events_dead_lettered_total{stage="decode"}'] == 3
    dropped = metrics['devicestate_worker_table_duplicates_dropped_total{kind="duplicate"}']
    dropped += metrics['devicestate_worker_table_duplicates_dropped_total{kind="stale"}']
    db_noops = metrics.get('devicestate_worker_db_noops_total{kind="duplicate"}', 0.0)
    db_noops += metrics.get('devicestate_worker_db_noops_total{kind="stale"}', 0.0)
    assert dropped > 0
    lags = {k: v for k, v in metrics.items() if k.startswith("devicestate_worker_consumer_lag{")}
    assert len(lags) == 3 and set(lags.values()) == {0.0}  # 3 partitions, all caught up
    # Every duplicate or stale observation was dropped by the table or refused by the guard.
    assert (
        dropped + db_noops
        == outcomes[outcome_named("duplicate")] + outcomes[outcome_named("stale")]
    )

    worker.signal(signal.SIGTERM)
    assert await worker.wait(60) == 0, worker.log_text()[-4000:]


async def test_sigkill_and_sigterm_mid_stream_lose_and_double_nothing(
    stream_settings: Settings, engine: AsyncEngine, kafka_bootstrap: str, worker_process: Any
) -> None:
    log = synthetic_log(40_000, nodes=60, seed=23)
    records = log.records
    first, second = records[:30_000], records[30_000:]
    await publish(kafka_bootstrap, stream_settings.topic, first)
    settings = stream_settings.model_copy(update={"worker_batch_size": 200})
    schema = settings.database_schema
    expected_rows = log.expected_history_rows()

    def more_than(rows: int) -> Callable[[], Awaitable[bool]]:
        async def check() -> bool:
            return await history_rows(engine, schema) > rows

        return check

    # 1. SIGKILL mid-stream: whatever was not committed is read again.
    killed = worker_process(settings, *WORKER_ARGS)
    await wait_until(more_than(0), 90, "the first batches", killed)
    killed.signal(signal.SIGKILL)
    assert await killed.wait(30) == -signal.SIGKILL
    at_kill = await history_rows(engine, schema)
    assert 0 < at_kill < expected_rows, "the worker finished before it was killed"

    # 2. More arrives while it is down; then SIGTERM mid-stream: the batch in flight finishes.
    await publish(kafka_bootstrap, settings.topic, second)
    stopped = worker_process(settings, *WORKER_ARGS)
    await wait_until(more_than(at_kill + 2000), 90, "the restarted worker to write", stopped)
    stopped.signal(signal.SIGTERM)
    assert await stopped.wait(60) == 0, stopped.log_text()[-4000:]
    at_stop = await history_rows(engine, schema)
    assert at_stop < expected_rows, "the worker finished before it was stopped"

    # 3. The last worker catches up: exactly the fold of the log, no row doubled or missing.
    final = worker_process(settings, *WORKER_ARGS)

    async def caught_up() -> bool:
        return await history_rows(engine, schema) >= expected_rows

    await wait_until(caught_up, 120, "the last worker to catch up", final)
    await asyncio.sleep(1.5)
    assert await history_rows(engine, schema) == expected_rows
    assert await projection_devices(engine, schema) == log.expected_devices()

    final.signal(signal.SIGTERM)
    assert await final.wait(60) == 0, final.log_text()[-4000:]


def outcome_named(name: str) -> Any:
    from services.domain.directory import Outcome

    return Outcome(name)


async def test_sigterm_stops_the_worker_within_its_grace_while_a_write_is_blocked(
    stream_settings: Settings, engine: AsyncEngine, kafka_bootstrap: str, worker_process: Any
) -> None:
    """A batch write that waits on a lock forever does not hold the shutdown: the worker exits
    within ``worker_shutdown_grace_seconds`` of SIGTERM, and a restarted worker writes what the
    stopped one had not committed (nothing lost, nothing doubled)."""
    log = synthetic_log(6000, nodes=20, seed=5)
    first, second = log.records[:3000], log.records[3000:]
    await publish(kafka_bootstrap, stream_settings.topic, first)
    grace = 4.0
    settings = stream_settings.model_copy(
        update={"worker_batch_size": 100, "worker_shutdown_grace_seconds": grace}
    )
    schema = settings.database_schema
    expected_rows = log.expected_history_rows()
    worker = worker_process(settings, *WORKER_ARGS)

    async def first_written() -> bool:
        return await history_rows(engine, schema) > 0

    await wait_until(first_written, 90, "the first batches", worker)
    async with engine.connect() as locker:
        # Every later write of the health agent waits on this lock, for as long as we hold it.
        await locker.execute(text(f'LOCK TABLE "{schema}".device_history IN ACCESS EXCLUSIVE MODE'))
        await publish(kafka_bootstrap, settings.topic, second)

        async def write_blocked() -> bool:
            async with engine.connect() as probe:
                waiting = await probe.execute(
                    text(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                        "AND datname = current_database() AND pid <> :pid"
                    ),
                    {"pid": (await locker.execute(text("SELECT pg_backend_pid()"))).scalar_one()},
                )
                return int(waiting.scalar_one()) > 0

        await wait_until(write_blocked, 60, "a batch write blocked on the lock", worker)
        loop = asyncio.get_running_loop()
        signalled = loop.time()
        worker.signal(signal.SIGTERM)
        code = await worker.wait(grace + 30)
        took = loop.time() - signalled
        await locker.rollback()
    assert code == 0, worker.log_text()[-4000:]
    assert took < grace + 2.0, f"worker took {took:.1f} s to stop (grace {grace} s)"

    final = worker_process(settings, *WORKER_ARGS)

    async def caught_up() -> bool:
        return await history_rows(engine, schema) >= expected_rows

    await wait_until(caught_up, 120, "the restarted worker to catch up", final)
    await asyncio.sleep(1.0)
    assert await history_rows(engine, schema) == expected_rows
    assert await projection_devices(engine, schema) == log.expected_devices()
    final.signal(signal.SIGTERM)
    assert await final.wait(60) == 0, final.log_text()[-4000:]
