"""The storm of the pipeline benchmark (``--shape storm``, issue 12): a switch failure turns 10 %
of a caught-up fleet Unknown; how long until the backlog is cleared, and what the governor did.

The steady state (:mod:`bench.load_storm`) is published and ingested by the worker stage as any
workload; once the worker(s) and the governor have caught up, :func:`storm_burst` (the stage's
``then``) publishes the burst and the watcher's next tick on every partition, and times:

- ``produced``: the burst's last record acknowledged (``acks=all``) by the broker; the clock of
  every figure below starts there.
- ``health_committed``: the consumer group's committed offsets reach the health topic's end.
- ``governor_caught_up`` (**backlog cleared**): then the governor's committed offset reaches the
  governance topic's end as it was at ``health_committed`` (the health agent forwards before it
  commits, so that end holds every forwarded record of the burst). Target: <= 5 s.

Also: the burst's ingest rate (its observations over first burst record consumed ->
``health_committed``), CPU seconds of the window per process group, the decisions by kind the
burst caused (the difference of the governor's counters), and the worker's projection read back
(devices per health, devices per governance state). Polls: committed offsets every 50 ms, the
workers' ``/metrics`` every 100 ms.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, Final

from bench.console import console, fmt_rate
from bench.cpu import CpuSampler
from bench.kafka_admin import committed_offsets, end_offsets
from bench.kafka_io import publish
from bench.load_storm import StormWorkload
from bench.stack import Run
from bench.worker_group import RunningWorkers, decisions_by_kind, merged_metrics, metric_sum
from services.runtime.config import Settings

COMMIT_POLL: Final = 0.05
METRICS_POLL: Final = 0.1

EVICTING_KINDS: Final = (
    "DeviceQuarantined",
    "DeviceRestricted",
    "RestrictionDeferred",
    "NodeEscalationRecommended",
    "BreakerOpened",
    "MigrationPlanned",
    "MigrationEvictionRequested",
)
"""Decisions that restrict, quarantine or evict (or stop automation): none may follow an
Unknown burst inside the tolerance window."""


async def publish_ticks(settings: Settings, ticks: list[tuple[int, bytes, bytes]]) -> None:
    """Send each ``(partition, key, value)`` to its partition of ``settings.topic`` (the
    watcher's ticks name their partition), acknowledged by all replicas."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(
        bootstrap_servers=settings.kafka_bootstrap_servers,
        client_id="devicestate-bench-ticks",
        acks="all",
    )
    await producer.start()
    try:
        sent = [
            await producer.send(settings.topic, value, key=key, partition=partition)
            for partition, key, value in ticks
        ]
        await asyncio.gather(*sent)
    finally:
        await producer.stop()


async def _wait_committed(
    running: RunningWorkers, group: str, topic: str, ends: dict[int, int], deadline: float
) -> float:
    """Poll until ``group``'s committed offsets of ``topic`` reach ``ends``; the time then."""
    while True:
        running.check()
        committed: dict[int, int] = {}
        with contextlib.suppress(Exception):
            committed = await committed_offsets(running.admin, group, topic)
        if all(e == 0 or committed.get(p, -1) >= e for p, e in ends.items()):
            return time.monotonic()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{group} did not commit the end of {topic}: {committed} < {ends}")
        await asyncio.sleep(COMMIT_POLL)


async def projection_counts(settings: Settings, schema: str) -> dict[str, dict[str, int]]:
    """The worker's projection: devices per ``health``, and per governance ``state``."""
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    from services.adapters.projection.tables import quoted_schema

    engine = create_async_engine(settings.database_url)
    s = quoted_schema(schema)
    try:
        async with engine.connect() as conn:
            health = await conn.execute(
                text(f"SELECT health, count(*) FROM {s}.devices GROUP BY health")
            )
            states = await conn.execute(
                text(f"SELECT state, count(*) FROM {s}.device_governance GROUP BY state")
            )
            return {
                "devices_by_health": {str(k): int(v) for k, v in health},
                "governance_by_state": {str(k): int(v) for k, v in states},
            }
    finally:
        await engine.dispose()


async def storm_burst(
    running: RunningWorkers,
    run: Run,
    settings: Settings,
    storm: StormWorkload,
    *,
    linger_ms: int,
    batch_bytes: int,
    seconds: float = 300.0,
) -> dict[str, Any]:
    """Publish the burst and its ticks to the caught-up workers and time the backlog (module
    doc), for at most ``seconds``. Returns the figures (seconds from ``produced``), ``decisions`` by kind,
    ``evicting_decisions``, ``cpu_seconds`` and ``projection``. Raises ``TimeoutError`` after
    ``seconds``, ``RuntimeError`` when a worker exits."""
    before = merged_metrics(await running.scrape())
    consumed_before = metric_sum(before, "devicestate_worker_events_consumed_total")
    cpu = CpuSampler()
    cpu.groups["worker"] = [c.pid for c in running.children]
    first_consumed: float | None = None

    async def watch_first() -> None:
        nonlocal first_consumed
        while first_consumed is None:
            now = time.monotonic()
            values = merged_metrics(await running.scrape())
            if metric_sum(values, "devicestate_worker_events_consumed_total") > consumed_before:
                first_consumed = now  # the scrape before: a first consume no later than this
            await asyncio.sleep(METRICS_POLL)

    cpu.start()
    started = time.monotonic()
    deadline = started + seconds
    watcher = asyncio.create_task(watch_first())
    try:
        pub = await publish(settings, storm.burst, linger_ms=linger_ms, batch_bytes=batch_bytes)
        await publish_ticks(settings, storm.burst_ticks)
        produced = time.monotonic()
        ends = await end_offsets(settings.kafka_bootstrap_servers, settings.topic)
        health_committed = await _wait_committed(
            running, settings.consumer_group, settings.topic, ends, deadline
        )
        gov_ends = await end_offsets(settings.kafka_bootstrap_servers, settings.governance_topic)
        governor_caught_up = await _wait_committed(
            running, settings.consumer_group, settings.governance_topic, gov_ends, deadline
        )
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    cpu_used = cpu.stop()
    after = merged_metrics(await running.scrape())
    decided = {
        kind: round(count - decisions_by_kind(before).get(kind, 0.0))
        for kind, count in sorted(decisions_by_kind(after).items())
        if count - decisions_by_kind(before).get(kind, 0.0) > 0
    }
    ingest_from = first_consumed if first_consumed is not None else started
    observations = storm.burst.observations or len(storm.burst.keys)
    return {
        "burst_nodes": len(storm.burst_nodes),
        "burst_records": pub["events"],
        "burst_observations": observations,
        "ticks": len(storm.burst_ticks),
        "publish_seconds": round(produced - started, 3),
        "health_committed_seconds": round(health_committed - produced, 3),
        "backlog_cleared_seconds": round(governor_caught_up - produced, 3),
        "ingest_seconds": round(health_committed - ingest_from, 3),
        "ingest_observations_per_second": round(
            observations / max(health_committed - ingest_from, 1e-9), 1
        ),
        "governance_records": sum(gov_ends.values()),
        "consumed": round(
            metric_sum(after, "devicestate_worker_events_consumed_total") - consumed_before
        ),
        # Where the window went: seconds inside the health agent's and the governor's batches.
        "batches": {
            name: {
                "count": round(
                    metric_sum(after, f"{metric}_count") - metric_sum(before, f"{metric}_count")
                ),
                "seconds": round(
                    metric_sum(after, f"{metric}_sum") - metric_sum(before, f"{metric}_sum"), 3
                ),
            }
            for name, metric in (
                ("health", "devicestate_worker_batch_seconds"),
                ("governor", "devicestate_governor_batch_seconds"),
            )
        },
        "decisions": decided,
        "evicting_decisions": sum(decided.get(kind, 0) for kind in EVICTING_KINDS),
        "unknown_tolerance_started": decided.get("UnknownToleranceStarted", 0),
        "cpu_seconds": cpu_used,
        "projection": await projection_counts(settings, run.worker_schema),
    }


def print_storm_summary(s: dict[str, Any]) -> None:
    """The storm's headline lines."""
    console.print(
        f"  storm: {s['burst_observations']:,} observations Unknown on {s['burst_nodes']:,} nodes "
        f"({s['burst_records']:,} records + {s['ticks']} ticks) published in "
        f"{s['publish_seconds']} s; health topic committed {s['health_committed_seconds']} s "
        f"and [bold]backlog cleared {s['backlog_cleared_seconds']} s[/bold] after its last "
        f"record; burst ingest {fmt_rate(s['ingest_observations_per_second'])} obs/s; "
        f"CPU s {s['cpu_seconds']}"
    )
    console.print(
        f"  storm batches {s['batches']}; decisions {s['decisions']}; evicting {s['evicting_decisions']}; "
        f"projection {s['projection']}"
    )
