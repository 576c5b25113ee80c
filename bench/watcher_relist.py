"""The watcher's re-LIST (issue 12, "Watcher"): a LIST of ``--pods`` Pods of ``--gpus`` GPUs
each (one Pod per node by default: the training shape), translated and published as the watcher
does after a restart or a 410, on the local stack's Kafka.

    .venv/bin/python -m bench.watcher_relist --pods 20000 --gpus 8

Stages, in this process, on a fresh topic (deleted at the end unless ``--keep``):

1. **baseline**: the records the watcher publishes for that LIST, already encoded, sent by a
   bare aiokafka producer (same linger and batch size as the watcher's publisher, no await per
   record). Every ratio is against its observations/s.
2. **translate**: :meth:`WatchProcessor.relisted` alone on a fresh tracker (no I/O): CPU seconds
   of this process, observations per CPU second.
3. **relist**: a fresh :class:`WatchSession` (every tracker the watcher keeps) handles the LIST
   with the real :class:`EventPublisher`, flushed: wall and CPU seconds, observations/s and
   observations per CPU second ("per core": the watcher is one asyncio thread).
4. **again**: the same LIST again on that session (a second 410 that finds nothing new): CPU
   seconds and the records it publishes (a LIST re-emits every listed Pod's devices, then the
   per-node ``PodsListed`` snapshots).
5. **retained**: a fresh session handles the LIST with a publisher that drops everything,
   under ``tracemalloc``: bytes the session holds afterwards, per Pod (target <= 2 KiB).

CPU seconds are ``time.process_time()`` of this process, which also counts aiokafka's and the
event loop's work: the watcher's own cost, whatever else runs on the machine.
"""

from __future__ import annotations

import asyncio
import gc
import time
import tracemalloc
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import typer

from bench.console import console
from bench.machine import code_version, machine_info
from bench.stack import stack_settings
from services.adapters.kafka.producer import EventPublisher
from services.domain.observations import DeviceHealthObservations
from services.domain.records import TopicRecord, encode_record
from services.processes.watcher.metrics import WatcherMetrics
from services.processes.watcher.processor import WatchProcessor
from services.processes.watcher.session import WatchSession
from services.processes.watcher.summary import WatchSummary
from services.processes.watcher.watch_loop import Relisted
from services.runtime.config import Settings

T0 = datetime(2026, 12, 1, 12, tzinfo=UTC)
RETAINED_TARGET_BYTES = 2048


def pods(count: int, gpus: int, per_node: int) -> list[dict[str, Any]]:
    """``count`` Running Pods shaped as the API server lists them (``../shared/examples``
    ``pod-01``), each with ``gpus`` Healthy devices in ``allocatedResourcesStatus``."""
    out = []
    for i in range(count):
        node = f"bench-node-{i // per_node:05d}"
        ids = [f"GPU-{uuid.UUID(int=i * gpus + g + 1)}" for g in range(gpus)]
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"train-{i:06d}",
                    "namespace": "bench",
                    "uid": str(uuid.UUID(int=(1 << 64) + i)),
                    "resourceVersion": str(1000 + i),
                    "creationTimestamp": "2026-12-01T11:00:00Z",
                    "ownerReferences": [
                        {
                            "apiVersion": "batch/v1",
                            "kind": "Job",
                            "name": f"train-{i:06d}",
                            "uid": str(uuid.UUID(int=(2 << 64) + i)),
                            "controller": True,
                        }
                    ],
                },
                "spec": {
                    "nodeName": node,
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "registry.example.com/ml/trainer:2.1",
                            "resources": {
                                "limits": {"nvidia.com/gpu": str(gpus)},
                                "requests": {"nvidia.com/gpu": str(gpus)},
                            },
                        }
                    ],
                },
                "status": {
                    "phase": "Running",
                    "conditions": [
                        {"type": "PodScheduled", "status": "True",
                         "lastTransitionTime": "2026-12-01T11:00:01Z"},
                        {"type": "Ready", "status": "True",
                         "lastTransitionTime": "2026-12-01T11:00:30Z"},
                    ],
                    "containerStatuses": [
                        {
                            "name": "trainer",
                            "ready": True,
                            "restartCount": 0,
                            "state": {"running": {"startedAt": "2026-12-01T11:00:29Z"}},
                            "allocatedResourcesStatus": [
                                {
                                    "name": "nvidia.com/gpu",
                                    "resources": [
                                        {"resourceID": r, "health": "Healthy"} for r in ids
                                    ],
                                }
                            ],
                        }
                    ],
                },
            }
        )  # fmt: skip
    return out


class Dropped:
    """A publisher that keeps nothing (the retained-bytes stage measures the session alone)."""

    async def publish(self, record: TopicRecord) -> None:
        return None

    async def publish_tick(self, observed_at: datetime, seen: Any = None) -> int:
        return 0

    async def dead_letter(self, original: bytes, reason: str, stage: str, source: str) -> None:
        return None


class Collected(Dropped):
    """Keeps what would be published (the baseline's records)."""

    def __init__(self) -> None:
        self.records: list[TopicRecord] = []

    async def publish(self, record: TopicRecord) -> None:
        self.records.append(record)


def session(publisher: Any, settings: Settings) -> WatchSession:
    processor = WatchProcessor(
        max_message_bytes=settings.max_message_bytes, record_schema=settings.watcher_record_schema
    )
    s = WatchSession(publisher, WatcherMetrics(), WatchSummary("bench"), processor=processor)
    s.clock.set(T0)
    return s


def observations(records: list[TopicRecord]) -> int:
    return sum(
        len(r.observations) if isinstance(r, DeviceHealthObservations) else 1
        for r in records
        if r.type in ("DeviceHealthObserved", "DeviceHealthObservations")
    )


@dataclass
class Figures:
    rows: list[tuple[str, str, str]]

    def add(self, name: str, value: str, ratio: str = "-") -> None:
        self.rows.append((name, value, ratio))
        console.print(f"  {name}: {value}  ({ratio})")


async def baseline(settings: Settings, records: list[TopicRecord]) -> float:
    """Seconds for a bare aiokafka producer to send ``records`` (encoded beforehand)."""
    from aiokafka import AIOKafkaProducer

    encoded = [(r.node.encode(), encode_record(r)) for r in records]
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.kafka_bootstrap_servers,
        linger_ms=20,
        max_batch_size=min(256 * 1024, settings.max_message_bytes),
        max_request_size=settings.max_message_bytes,
        acks="all",
    )
    await producer.start()
    try:
        start = time.perf_counter()
        futures = [await producer.send(settings.topic, value, key=key) for key, value in encoded]
        await producer.flush()
        await asyncio.gather(*futures)
        return time.perf_counter() - start
    finally:
        await producer.stop()


async def main_async(count: int, gpus: int, per_node: int, keep: bool) -> int:
    from services.adapters.kafka.topics import ensure_topics

    base = stack_settings()
    run = datetime.now(UTC).strftime("%Y%m%d%H%M%S") + "_" + uuid.uuid4().hex[:4]
    settings = base.model_copy(
        update={"topic": f"bench.relist.{run}", "dead_letter_topic": f"bench.relist.{run}.dlt",
                "log_level": "WARNING"}
    )  # fmt: skip
    console.print(f"machine: {machine_info()}; code {code_version()}; topic {settings.topic}")
    listed = pods(count, gpus, per_node)
    item = Relisted(listed, str(10_000_000))
    figures = Figures([])
    try:
        await ensure_topics(settings)
        collected = Collected()
        await session(collected, settings).handle(item, "bench")
        obs = observations(collected.records)
        console.rule("baseline: bare aiokafka producer")
        seconds = await baseline(settings, collected.records)
        base_rate = obs / seconds
        figures.add("records of the LIST", f"{len(collected.records):,} ({obs:,} observations)")
        figures.add("(a) bare producer", f"{base_rate:,.0f} observations/s", "1.000x")

        console.rule("translate: WatchProcessor.relisted alone")
        processor = WatchProcessor(
            max_message_bytes=settings.max_message_bytes,
            record_schema=settings.watcher_record_schema,
        )
        cpu = time.process_time()
        processor.relisted(listed, "10000000", "bench", T0)
        translate = time.process_time() - cpu
        figures.add(
            "(b) translate, CPU", f"{translate:.2f} s = {obs / translate:,.0f} observations/s/core"
        )

        console.rule("relist: a fresh session, the real publisher")
        publisher = EventPublisher(settings)
        await publisher.start()
        try:
            live = session(publisher, settings)
            wall, cpu = time.perf_counter(), time.process_time()
            await live.handle(item, "bench")
            await publisher.flush()
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            rate = obs / wall
            figures.add(
                "(c) re-LIST published, wall", f"{wall:.2f} s = {rate:,.0f} observations/s",
                f"{rate / base_rate:.3f}x",
            )  # fmt: skip
            figures.add(
                "(c) re-LIST published, CPU", f"{cpu:.2f} s = {obs / cpu:,.0f} observations/s/core"
            )
            console.rule("again: the same LIST on the same session")
            before = sum(live.summary.events_published.values())
            live.clock.set(T0 + timedelta(minutes=5))
            again = time.process_time()
            await live.handle(Relisted(listed, "10000001"), "bench")
            await publisher.flush()
            again = time.process_time() - again
            sent = sum(live.summary.events_published.values()) - before
            figures.add(
                "(d) the same LIST again, CPU",
                f"{again:.2f} s, {sent:,} observations and snapshots",
            )
        finally:
            await publisher.close(10.0)

        console.rule("retained: the session's memory after the LIST")
        gc.collect()
        tracemalloc.start()
        held = session(Dropped(), settings)
        start = tracemalloc.get_traced_memory()[0]
        await held.handle(item, "bench")
        gc.collect()
        retained = tracemalloc.get_traced_memory()[0] - start
        tracemalloc.stop()
        per_pod = retained / count
        verdict = "PASS" if per_pod <= RETAINED_TARGET_BYTES else "MISS"
        figures.add(
            "(e) retained per Pod", f"{per_pod:,.0f} bytes ({retained / 2**20:.1f} MiB in all)",
            f"target <= {RETAINED_TARGET_BYTES} bytes: {verdict}",
        )  # fmt: skip
        del held
    finally:
        if not keep:
            await delete_topics(settings)
    console.rule("results")
    for name, value, ratio in figures.rows:
        console.print(f"| {name} | {value} | {ratio} |")
    return 0


async def delete_topics(settings: Settings) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap_servers)
    await admin.start()
    try:
        await admin.delete_topics([settings.topic, settings.dead_letter_topic])
    except Exception as exc:  # clean-up: say it, do not hide the figures
        console.print(f"[yellow]topics not deleted: {exc!r}[/yellow]")
    finally:
        await admin.close()


def cli(
    pods_: Annotated[int, typer.Option("--pods", min=1, help="Pods in the LIST.")] = 20_000,
    gpus: Annotated[int, typer.Option(min=1, max=64, help="GPUs per Pod.")] = 8,
    pods_per_node: Annotated[int, typer.Option(min=1, help="Pods per node.")] = 1,
    keep: Annotated[bool, typer.Option("--keep", help="Keep the topic.")] = False,
) -> None:
    """Benchmark the watcher's re-LIST: translate and publish a LIST of Pods with GPUs."""
    raise typer.Exit(asyncio.run(main_async(pods_, gpus, pods_per_node, keep)))


def main(argv: list[str] | None = None) -> None:
    app = typer.Typer(add_completion=False, pretty_exceptions_show_locals=False)
    app.command()(cli)
    app(argv)


if __name__ == "__main__":
    main()
