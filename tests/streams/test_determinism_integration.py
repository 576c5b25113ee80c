"""Decisions are a function of the log alone (issue 10), with the real worker, Kafka and PostgreSQL.

One generated fleet log (health observations with releases, duplicates and stale redeliveries,
node heartbeats that stop for a while, the watcher's ticks on every partition) is published to three
private topic sets and governed three ways: the test default batch size (500), batch size 1, and two
workers sharing the partitions. The shared DRA examples (a claim read after its Pod, on another
partition) are governed with batch sizes 500 and 1. The governance decisions, device governance
rows and quarantines must be identical, row for row.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import orjson
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from services.domain.codec import parse_time
from services.domain.event_codec import encode_event
from services.domain.events import Health
from services.domain.node_events import NodeHeartbeat, WatcherTick, encode_node_event
from services.runtime.config import Settings
from tests.streams.conftest import TopicSets
from tests.streams.synthetic import T0, pod_change_log, schema_2_records, synthetic_log
from tests.streams.test_governor_integration import Pipeline, Record, stop

pytestmark = pytest.mark.integration

PARTITIONS = 3
POLICY = {
    "unknown_tolerance_seconds": 3.0,
    "heartbeat_grace_seconds": 6.0,
    "recovery_stability_seconds": 8.0,
    "breaker_min_devices": 1000,  # so that quarantines and restrictions happen
    "breaker_min_nodes": 1000,
}


def fleet_log(seed: int = 29, pods: bool = False, schema: int = 1) -> list[Record]:
    """~900 records over 60 s of event time: observations 50 ms apart (in statusVersion order),
    each node's heartbeat every 2 s except while its host is "down", ticks every 2 s.
    ``pods``: the observations are whole Pod status changes (:func:`pod_change_log`), as
    schema-1 records or (``schema`` 2) one ``DeviceHealthObservations`` record per change."""
    log = (
        pod_change_log(700, nodes=9, seed=seed) if pods else synthetic_log(700, nodes=9, seed=seed)
    )
    first = min(e.status_version for e in log.events)
    timed = [
        replace(e, observed_at=T0 + timedelta(milliseconds=50 * (e.status_version - first)))
        for e in log.events
    ]
    published = (
        schema_2_records(timed)
        if schema == 2
        else [(e.node.encode(), encode_event(e)) for e in timed]
    )
    items: list[tuple[float, Record]] = [
        ((parse_time(orjson.loads(v)["observedAt"]) - T0).total_seconds(), (k, v, None))
        for k, v in published
    ]
    end = max(t for t, _ in items)
    nodes = sorted({e.node for e in timed})
    down = {nodes[1]: (10.0, 25.0), nodes[4]: (30.0, 50.0)}  # host outages
    second = 0.0
    while second <= end + 4:
        for node in nodes:
            gone = down.get(node)
            if gone is None or not gone[0] <= second < gone[1]:
                at = T0 + timedelta(seconds=second + 0.01)
                beat = NodeHeartbeat(node, renewed_at=at, observed_at=at)
                items.append((second + 0.01, (node.encode(), encode_node_event(beat), None)))
        for p in range(PARTITIONS):
            tick = WatcherTick(partition=p, observed_at=T0 + timedelta(seconds=second + 0.02))
            items.append((second + 0.02, (tick.node.encode(), encode_node_event(tick), p)))
        second += 2.0
    items.sort(key=lambda item: item[0])  # stable: the log's own order at equal times
    return [record for _, record in items]


async def govern(
    settings: Settings,
    engine: AsyncEngine,
    bootstrap: str,
    worker_process: Any,
    records: list[Record],
    workers: int = 1,
) -> dict[str, list[tuple[Any, ...]]]:
    """Publish ``records`` in four waves, wait until governed; the governance tables' rows."""
    async with Pipeline(settings, engine, bootstrap) as pipe:
        started = [
            worker_process(
                settings.model_copy(update={"worker_data_dir": f"{settings.worker_data_dir}-{i}"})
            )
            for i in range(workers)
        ]
        pipe.worker = started[0]
        quarter = len(records) // 4
        for i in range(4):
            chunk = records[i * quarter : len(records) if i == 3 else (i + 1) * quarter]
            await pipe.wave(chunk, settle=False)  # the log's own ticks move event time
        tables = {
            "decisions": await pipe.rows(
                "SELECT seq, idx, kind, at, node, resource_id, payload "
                "FROM {s}.governance_decisions ORDER BY seq, idx"
            ),
            "devices": await pipe.rows(
                "SELECT node, resource_id, state, snapshot FROM {s}.device_governance "
                "ORDER BY node, resource_id"
            ),
            "quarantines": await pipe.rows(
                "SELECT quarantine_id, status, created_at, expires_at FROM {s}.quarantines "
                "ORDER BY quarantine_id"
            ),
            "directory": await pipe.rows(
                "SELECT node, resource_id, health, status_version, last_observed_at, "
                "last_transition_at, allocations::text, flags FROM {s}.devices "
                "ORDER BY node, resource_id"
            ),
        }
        for worker in started:
            await stop(worker)
    return {name: [tuple(row) for row in rows] for name, rows in tables.items()}


async def test_batch_size_and_worker_count_change_no_decision(
    topic_sets: TopicSets,
    engine: AsyncEngine,
    kafka_bootstrap: str,
    worker_process: Any,
) -> None:
    records = fleet_log()
    default = await govern(
        await topic_sets(**POLICY), engine, kafka_bootstrap, worker_process, records
    )
    kinds = {row[2] for row in default["decisions"]}
    # The log exercises the timers: tolerance ends, heartbeat loss, quarantines, recovery.
    assert {"DeviceQuarantined", "DeviceRestricted", "NodeIncidentOpened"} <= kinds, kinds
    assert len(default["decisions"]) > 100

    single = await topic_sets(worker_batch_size=1, **POLICY)
    one = await govern(single, engine, kafka_bootstrap, worker_process, records)
    assert one == default

    two = await govern(
        await topic_sets(**POLICY), engine, kafka_bootstrap, worker_process, records, workers=2
    )
    assert two == default


async def test_pod_changes_decide_alike_as_schema_1_or_schema_2_records(
    topic_sets: TopicSets,
    engine: AsyncEngine,
    kafka_bootstrap: str,
    worker_process: Any,
) -> None:
    """Issue 12: the same observations as one schema-1 record each or as one schema-2 record
    per Pod change give the same directory and the same decisions, in batches of 500 or 1."""
    single = fleet_log(pods=True)
    grouped = fleet_log(pods=True, schema=2)
    assert len(grouped) < len(single) - 300
    default = await govern(
        await topic_sets(**POLICY), engine, kafka_bootstrap, worker_process, single
    )
    kinds = {row[2] for row in default["decisions"]}
    assert {"DeviceQuarantined", "DeviceRestricted", "NodeEscalationRecommended"} <= kinds, kinds
    two = await govern(await topic_sets(**POLICY), engine, kafka_bootstrap, worker_process, grouped)
    assert two == default
    ones = await topic_sets(worker_batch_size=1, **POLICY)
    assert await govern(ones, engine, kafka_bootstrap, worker_process, grouped) == default


def dra_examples() -> list[Record]:
    """The shared DRA examples as the DRA identity test lays them out on three partitions (the
    slice and pod-04 on the node's partition, the claim on another, read after the Pod), then
    pod-04 Healthy again; ticks move event time on every partition."""
    from tests.streams import test_dra_identity_integration as dra

    observed = [
        replace(o, health=Health.UNHEALTHY) if o.resource_id == dra.CDI_GPU_2 else o
        for o in dra.pod_04(10)
    ]
    healthy = [replace(o, status_version=51990) for o in dra.pod_04(30)]
    return [
        dra.on(dra.NODE_P, dra.slice_event(0)),
        dra.on(dra.CLASS_P, dra.class_event(0)),
        *dra.ticks(1),
        *(dra.on(dra.NODE_P, o) for o in observed),
        *dra.ticks(11),
        dra.on(dra.CLAIM_P, dra.claim(2, False)),
        dra.on(dra.CLAIM_P, dra.claim(3, True)),
        *dra.ticks(20),
        *(dra.on(dra.NODE_P, o) for o in healthy),
        *dra.ticks(31),
        *dra.ticks(40),
    ]


async def test_the_shared_dra_examples_decide_alike_in_batches_of_one(
    topic_sets: TopicSets,
    engine: AsyncEngine,
    kafka_bootstrap: str,
    worker_process: Any,
) -> None:
    records = dra_examples()
    default = await govern(await topic_sets(), engine, kafka_bootstrap, worker_process, records)
    assert "DeviceQuarantined" in {row[2] for row in default["decisions"]}
    one = await govern(
        await topic_sets(worker_batch_size=1), engine, kafka_bootstrap, worker_process, records
    )
    assert one == default


async def test_forwarded_batches_of_512_or_one_record_each_decide_alike(
    topic_sets: TopicSets,
    engine: AsyncEngine,
    kafka_bootstrap: str,
    worker_process: Any,
) -> None:
    """Issue 12, the forwarding lever: the health agent forwarding one governance record per
    input (``DEVICESTATE_WORKER_FORWARD_BATCH_RECORDS=1``, as before ``ForwardedBatch``) or up
    to 512 per record (the default) makes the same decisions, row for row, and ``replay
    --governance --verify`` finds each live projection identical to its replay."""
    from uuid import uuid4

    from tests.replay.test_replay import drop, run_replay

    records = fleet_log()
    runs: dict[int, tuple[Settings, dict[str, list[tuple[Any, ...]]], int]] = {}
    for per_record in (1, 512):
        settings = await topic_sets(worker_forward_batch_records=per_record, **POLICY)
        tables = await govern(settings, engine, kafka_bootstrap, worker_process, records)
        async with Pipeline(settings, engine, kafka_bootstrap) as pipe:
            end = await pipe.governance_end()
        runs[per_record] = (settings, tables, end)
    one, packed = runs[1], runs[512]
    assert packed[1] == one[1]
    assert len(one[1]["decisions"]) > 100
    # one record per input against about one per batch (a batch's inputs and its watermarks)
    assert packed[2] * 5 < one[2], (packed[2], one[2])
    for settings, _, _ in runs.values():
        schema = f"replay_{uuid4().hex[:12]}"
        try:
            result = await run_replay(settings, "--governance", "--schema", schema, "--verify")
            assert result.returncode == 0, result.stdout + result.stderr
            assert f"verify: {schema} is identical to {settings.database_schema}" in result.stdout
            assert "undecodable 0" in result.stdout
        finally:
            await drop(engine, schema)
