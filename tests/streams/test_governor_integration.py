"""Health governance end to end against the real broker and PostgreSQL: the worker (``python -m
streams.cli``) forwards the health topic to the governance topic and its governor folds that into
the governance projection.

Each test has its own topics (health, dead letters, governance, decisions), consumer group and
schema (``stream_settings``, extended in ``tests/streams/conftest.py``). Records are published in
*waves*, each waited for until the governor has folded everything it caused, so that two runs of
the same story put the same records on their governance topics (same batch boundaries).
"""

from __future__ import annotations

import asyncio
import random
import signal
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from services.domain.codec import parse_time
from services.domain.event_codec import encode_event
from services.domain.events import ContainerRef, DeviceHealthObserved, DeviceSource, Health
from services.domain.governance.input_batch import decode_records
from services.domain.governance.input_codec import encode_input
from services.domain.governance.inputs import (
    GovernanceInput,
    HealthTransition,
    RecoveryLeaseRequested,
)
from services.domain.node_events import NodeHeartbeat, WatcherTick, encode_node_event
from services.runtime.config import Settings
from tests.streams.conftest import TopicSets
from tests.streams.test_worker_integration import free_port, read_topic, scrape

pytestmark = pytest.mark.integration

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
PARTITIONS = 3

Record = tuple[bytes, bytes, int | None]
"""``(key, value, partition)``; ``None``: by key."""


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def observation(
    node: str, resource_id: str, health: Health, version: int, seconds: float
) -> Record:
    event = DeviceHealthObserved(
        node=node,
        namespace="ml",
        pod_name=f"train-{node}",
        pod_uid=f"uid-{node}",
        containers=(ContainerRef("main"),),
        resource_name="nvidia.com/gpu",
        resource_id=resource_id,
        health=health,
        source=DeviceSource.DEVICE_PLUGIN,
        status_version=version,
        observed_at=at(seconds),
        message="XID 79" if health is Health.UNHEALTHY else None,
    )
    return (node.encode(), encode_event(event), None)


def tick(partition: int, seconds: float) -> Record:
    event = WatcherTick(partition=partition, observed_at=at(seconds))
    return (event.node.encode(), encode_node_event(event), partition)


def heartbeat(node: str, seconds: float) -> Record:
    event = NodeHeartbeat(node, renewed_at=at(seconds), observed_at=at(seconds))
    return (node.encode(), encode_node_event(event), None)


def governance(record: GovernanceInput) -> Record:
    return (b"test", encode_input(record), None)


class Pipeline:
    """Publishes waves and waits until the worker has forwarded and governed them."""

    def __init__(self, settings: Settings, engine: AsyncEngine, bootstrap: str) -> None:
        self.settings = settings
        self.engine = engine
        self.bootstrap = bootstrap
        self.producer: Any = None
        self.worker: Any = None

    async def __aenter__(self) -> Pipeline:
        from aiokafka import AIOKafkaProducer

        self.producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap, enable_idempotence=True, linger_ms=2
        )
        await self.producer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.producer.stop()

    async def send(self, topic: str, records: Sequence[Record]) -> list[Any]:
        futures = [
            await self.producer.send(topic, value=v, key=k, partition=p) for k, v, p in records
        ]
        return [await f for f in futures]

    async def progress(self, topic: str, partition: int) -> int | None:
        async with self.engine.connect() as conn:
            result = await conn.execute(
                text(
                    f'SELECT "offset" FROM "{self.settings.database_schema}".partition_progress '
                    'WHERE topic = :t AND "partition" = :p'
                ),
                {"t": topic, "p": partition},
            )
            value = result.scalar()
            return None if value is None else int(value)

    async def until(self, check: Any, what: str, seconds: float = 60.0) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while not await check():
            if self.worker is not None and self.worker.process.poll() is not None:
                raise AssertionError(
                    f"worker exited while waiting for {what}:\n{self.worker.log_text()[-4000:]}"
                )
            if loop.time() > deadline:
                log = self.worker.log_text()[-4000:] if self.worker is not None else ""
                raise AssertionError(f"timed out waiting for {what}\n{log}")
            await asyncio.sleep(0.05)

    async def governance_end(self) -> int:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None)
        await consumer.start()
        try:
            tp = TopicPartition(self.settings.governance_topic, 0)
            return int((await consumer.end_offsets([tp]))[tp])
        finally:
            await consumer.stop()

    async def governed(self) -> None:
        """Wait until the governor folded everything on the governance topic."""
        end = await self.governance_end()
        if end == 0:
            return

        async def done() -> bool:
            offset = await self.progress(self.settings.governance_topic, 0)
            return offset is not None and offset >= end - 1

        await self.until(done, f"the governor to reach offset {end - 1}")

    async def wave(self, records: Sequence[Record], settle: bool = True) -> None:
        """Publish health-topic records, wait until the worker committed them (so forwarded
        them), then until the governor folded what they caused.

        The governor folds a record only once every partition's event time has passed it (the
        event-time merge), which the watcher's ticks do in the product: with ``settle``, a wave
        without ticks is followed by a tick to every partition just after its newest record."""
        if settle and not any(b'"WatcherTick"' in (v or b"") for _, v, _ in records):
            newest = max(orjson.loads(v)["observedAt"] for _, v, _ in records if v)
            after = (parse_time(newest) - T0).total_seconds() + 0.001
            records = [*records, *(tick(p, after) for p in range(PARTITIONS))]
        sent = await self.send(self.settings.topic, records)
        for meta in sent:

            async def committed(meta: Any = meta) -> bool:
                offset = await self.progress(meta.topic, meta.partition)
                return offset is not None and offset >= meta.offset

            await self.until(committed, f"{meta.topic}/{meta.partition}/{meta.offset}")
        await self.governed()

    async def append(self, records: Sequence[Record]) -> None:
        """Append records to the governance topic directly (as executors and the API do)."""
        await self.send(self.settings.governance_topic, records)
        await self.governed()

    async def rows(self, sql: str) -> list[Any]:
        schema = self.settings.database_schema
        async with self.engine.connect() as conn:
            return list(await conn.execute(text(sql.replace("{s}", f'"{schema}"'))))

    async def decisions(self) -> list[dict[str, Any]]:
        rows = await self.rows("SELECT payload FROM {s}.governance_decisions ORDER BY seq, idx")
        return [r.payload for r in rows]

    async def kinds(self) -> list[str]:
        return [d["type"] for d in await self.decisions()]


def governed_settings(settings: Settings, **policy: Any) -> Settings:
    return settings.model_copy(update=policy)


async def stop(worker: Any) -> None:
    worker.signal(signal.SIGTERM)
    assert await worker.wait(60) == 0, worker.log_text()[-4000:]


# --- (a) forwarding and the governance projection ---------------------------------------------


async def test_health_events_are_forwarded_and_governed(
    stream_settings: Settings, engine: AsyncEngine, kafka_bootstrap: str, worker_process: Any
) -> None:
    port = free_port()
    settings = stream_settings.model_copy(update={"worker_metrics_port": port})
    async with Pipeline(settings, engine, kafka_bootstrap) as pipe:
        pipe.worker = worker_process(settings)
        await pipe.wave(
            [
                observation("gpu-node-a", "GPU-0", Health.HEALTHY, 10, 0),
                observation("gpu-node-a", "GPU-1", Health.UNHEALTHY, 11, 1),
                observation("gpu-node-a", "GPU-1", Health.UNHEALTHY, 11, 1),  # duplicate
                heartbeat("gpu-node-a", 2),
                *(tick(p, 3) for p in range(PARTITIONS)),
            ]
        )
        await pipe.append([(b"junk", b"{not a governance record", None)])

        end = await pipe.governance_end()
        forwarded = await read_topic(kafka_bootstrap, settings.governance_topic, end, 30)
        decoded = [r for m in forwarded[:-1] for r, _ in decode_records(m.value)]
        types = [r.type for r in decoded]
        assert types.count("HealthTransition") == 2
        assert types.count("NodeHeartbeat") == 1
        assert types.count("WatcherTick") == PARTITIONS  # clock records of the event-time merge
        marks = [r for r in decoded if r.type == "PartitionWatermark"]
        assert {m.partition for m in marks} == set(range(PARTITIONS))  # type: ignore[union-attr]
        assert all(m.partitions == PARTITIONS for m in marks)  # type: ignore[union-attr]
        [unhealthy] = [
            r for r in decoded if isinstance(r, HealthTransition) and r.resource_id == "GPU-1"
        ]
        assert unhealthy.health is Health.UNHEALTHY and unhealthy.status_version == 11
        assert unhealthy.pods == ("ml/train-gpu-node-a",)
        position = (
            await pipe.rows(
                'SELECT "partition", "offset" FROM {s}.device_history WHERE resource_id = \'GPU-1\''
            )
        )[0]
        assert (unhealthy.partition, unhealthy.offset) == tuple(position)

        devices = await pipe.rows(
            "SELECT resource_id, state, observed_health FROM {s}.device_governance "
            "ORDER BY resource_id"
        )
        assert [tuple(r) for r in devices] == [
            ("GPU-0", "Available", "Healthy"),
            ("GPU-1", "Quarantined", "Unhealthy"),
        ]
        quarantines = await pipe.rows("SELECT quarantine_id, status FROM {s}.quarantines")
        assert [tuple(r) for r in quarantines] == [("gpu-node-a/GPU-1@11", "active")]
        [node] = await pipe.rows("SELECT node, last_heartbeat_at FROM {s}.governor_nodes")
        assert tuple(node) == ("gpu-node-a", at(2))
        [fleet] = await pipe.rows("SELECT watermark FROM {s}.governor_fleet")
        assert fleet.watermark == at(3)

        stored = await pipe.decisions()
        published = await read_topic(kafka_bootstrap, settings.decisions_topic, len(stored), 30)
        assert sorted(m.key.decode() for m in published) == sorted(d["id"] for d in stored)
        assert "DeviceQuarantined" in [d["type"] for d in stored]

        [letter] = await read_topic(kafka_bootstrap, settings.dead_letter_topic, 1, 30)
        headers = dict(letter.headers)
        assert letter.value == b"{not a governance record"
        assert headers["devicestate-stage"] == b"governor-decode"
        assert headers["devicestate-source"] == f"{settings.governance_topic}/0/{end - 1}".encode()

        metrics = scrape(port)
        assert metrics["devicestate_governor_active_quarantines"] == 1
        assert metrics['devicestate_governor_decisions_total{kind="DeviceQuarantined"}'] == 1
        assert metrics['devicestate_governor_devices{state="Quarantined"}'] == 1
        assert metrics["devicestate_governor_watermark_seconds"] == at(3).timestamp()
        assert (
            metrics['devicestate_worker_governance_forwarded_total{type="HealthTransition"}'] == 2
        )
        assert (
            metrics['devicestate_worker_events_dead_lettered_total{stage="governor-decode"}'] == 1
        )
        await stop(pipe.worker)


# --- (b) a restart inside an Unknown tolerance window changes no decision -----------------------


def story_waves() -> list[list[Record]]:
    """One record per wave: each is its own batch, in both runs."""
    waves: list[list[Record]] = [
        [observation("gpu-node-a", "GPU-0", Health.UNKNOWN, 100, 0)],  # tolerated until 60
        [observation("gpu-node-b", "GPU-5", Health.UNHEALTHY, 101, 1)],  # quarantined
        [heartbeat("gpu-node-c", 5)],  # lost at 5 + 50 (grace) if never renewed
        *([tick(p, 10)] for p in range(PARTITIONS)),
        # <- the restart happens here, inside GPU-0's tolerance window
        *([tick(p, 30)] for p in range(PARTITIONS)),
        *([tick(p, 70)] for p in range(PARTITIONS)),  # GPU-0 restricted, gpu-node-c lost
        [observation("gpu-node-a", "GPU-0", Health.HEALTHY, 102, 80)],
        [observation("gpu-node-b", "GPU-5", Health.HEALTHY, 103, 85)],  # recovery starts
        *([tick(p, 100)] for p in range(PARTITIONS)),
    ]
    return waves


RESTART_AFTER = 6
POLICY = {
    "unknown_tolerance_seconds": 60.0,
    "heartbeat_grace_seconds": 50.0,
    "breaker_min_nodes": 10,  # three nodes with a bad signal would open the breaker
}


async def run_story(
    settings: Settings,
    engine: AsyncEngine,
    bootstrap: str,
    worker_process: Any,
    restart: bool,
) -> list[dict[str, Any]]:
    async with Pipeline(settings, engine, bootstrap) as pipe:
        pipe.worker = worker_process(settings)
        for index, wave in enumerate(story_waves()):
            if restart and index == RESTART_AFTER:
                pipe.worker.signal(signal.SIGKILL)
                await pipe.worker.wait(30)
                pipe.worker = worker_process(settings)
            await pipe.wave(wave)
        decisions = await pipe.decisions()
        await stop(pipe.worker)
        return decisions


@pytest.fixture
async def second_settings(topic_sets: TopicSets) -> Settings:
    """Another private set of topics, group and schema (like ``stream_settings``)."""
    return await topic_sets(topic_partitions=PARTITIONS)


async def test_a_restart_in_a_tolerance_window_makes_the_same_decisions(
    stream_settings: Settings,
    second_settings: Settings,
    engine: AsyncEngine,
    kafka_bootstrap: str,
    worker_process: Any,
) -> None:
    uninterrupted = await run_story(
        governed_settings(stream_settings, **POLICY),
        engine,
        kafka_bootstrap,
        worker_process,
        restart=False,
    )
    restarted = await run_story(
        governed_settings(second_settings, **POLICY),
        engine,
        kafka_bootstrap,
        worker_process,
        restart=True,
    )
    kinds = [d["type"] for d in uninterrupted]
    for kind in (
        "UnknownToleranceStarted",
        "DeviceQuarantined",
        "DeviceRestricted",  # the tolerance window ended after the restart
        "NodeIncidentOpened",  # gpu-node-c's heartbeat timer, rebuilt from the snapshot
        "RestrictionLifted",
        "RecoveryStageStarted",
    ):
        assert kind in kinds, kinds
    assert restarted == uninterrupted


# --- (c) a flood of one Unhealthy observation makes one quarantine ------------------------------


async def test_a_duplicate_and_reordered_flood_makes_one_quarantine(
    stream_settings: Settings, engine: AsyncEngine, kafka_bootstrap: str, worker_process: Any
) -> None:
    rng = random.Random(5)
    settings = stream_settings
    async with Pipeline(settings, engine, kafka_bootstrap) as pipe:
        pipe.worker = worker_process(settings)
        await pipe.wave([observation("gpu-node-c", "GPU-9", Health.UNHEALTHY, 200, 0)])
        flood = (
            [observation("gpu-node-c", "GPU-9", Health.UNHEALTHY, 200, 0)] * 30
            + [observation("gpu-node-c", "GPU-9", Health.UNHEALTHY, 150, -5)] * 10
            + [observation("gpu-node-c", "GPU-9", Health.HEALTHY, 190, -1)] * 10
        )
        rng.shuffle(flood)
        await pipe.wave(flood)

        # Re-forwarded copies (a worker crashed after forwarding, before its commit), reordered.
        def forwarded(health: Health, version: int) -> Record:
            return governance(
                HealthTransition(
                    node="gpu-node-c",
                    resource_id="GPU-9",
                    resource_name="nvidia.com/gpu",
                    source=DeviceSource.DEVICE_PLUGIN,
                    health=health,
                    status_version=version,
                    observed_at=at(0),
                    partition=0,
                    offset=0,
                    pods=("ml/train-gpu-node-c",),
                )
            )

        copies = (
            [forwarded(Health.UNHEALTHY, 200)] * 10
            + [forwarded(Health.UNHEALTHY, 150)] * 5
            + [forwarded(Health.HEALTHY, 190)] * 5
        )
        rng.shuffle(copies)
        await pipe.append(copies)

        quarantines = await pipe.rows("SELECT quarantine_id, status FROM {s}.quarantines")
        assert [tuple(r) for r in quarantines] == [("gpu-node-c/GPU-9@200", "active")]
        assert (await pipe.kinds()).count("DeviceQuarantined") == 1
        [device] = await pipe.rows("SELECT state, status_version FROM {s}.device_governance")
        assert (device.state, int(device.status_version)) == ("Quarantined", 200)
        await stop(pipe.worker)


# --- (d) two executors asking for one device's lease: one gets it --------------------------------


async def test_two_executors_one_lease(
    stream_settings: Settings, engine: AsyncEngine, kafka_bootstrap: str, worker_process: Any
) -> None:
    settings = stream_settings
    async with Pipeline(settings, engine, kafka_bootstrap) as pipe:
        pipe.worker = worker_process(settings)
        await pipe.wave([observation("gpu-node-d", "GPU-3", Health.UNHEALTHY, 300, 0)])
        await pipe.wave([observation("gpu-node-d", "GPU-3", Health.HEALTHY, 301, 10)])
        assert "RecoveryStageStarted" in await pipe.kinds()
        await pipe.append(
            [
                governance(RecoveryLeaseRequested("gpu-node-d", "GPU-3", holder, at(11)))
                for holder in ("executor-a", "executor-b")
            ]
        )
        decisions = await pipe.decisions()
        granted = [d for d in decisions if d["type"] == "RecoveryLeaseGranted"]
        denied = [d for d in decisions if d["type"] == "RecoveryLeaseDenied"]
        assert len(granted) == 1 and len(denied) == 1
        winner = granted[0]["details"]["holder"]
        assert denied[0]["details"]["heldBy"] == winner
        [quarantine] = await pipe.rows("SELECT lease_holder, fencing_token FROM {s}.quarantines")
        assert (quarantine.lease_holder, quarantine.fencing_token) == (winner, 1)
        await stop(pipe.worker)
