"""Stages 1 and (a) of the pipeline benchmark: publish the workload, then read it back raw.

Both talk to Kafka with aiokafka directly, on purpose: the publish must go as fast as the broker
allows (batches per partition) and the baseline must be a bare consumer, so that every other
rate can be compared with what Kafka alone delivers on this machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from bench.console import Reporter, console, fmt_rate
from bench.kafka_admin import topic_partitions
from bench.load import Workload
from services.runtime.config import Settings


async def publish(
    settings: Settings, workload: Workload, *, linger_ms: int, batch_bytes: int
) -> dict[str, Any]:
    """Publish the workload to ``settings.topic`` with ``create_batch``/``send_batch`` per
    partition (acks=all, lz4 when installed); returns events/s, MB/s and the producer settings.

    Partitions come from aiokafka's default partitioner (murmur2 of the key, as the watcher's
    producer and Java clients do), so a node's events land in one partition, in order.
    """
    from aiokafka import AIOKafkaProducer
    from aiokafka.partitioner import DefaultPartitioner

    compression = None
    with contextlib.suppress(ImportError):
        import lz4  # noqa: F401

        compression = "lz4"
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.kafka_bootstrap_servers,
        client_id="devicestate-bench",
        acks="all",
        linger_ms=linger_ms,
        max_batch_size=batch_bytes,
        compression_type=compression,
        max_request_size=8 * batch_bytes,
        request_timeout_ms=60_000,
    )
    await producer.start()
    try:
        all_partitions = await topic_partitions(settings.kafka_bootstrap_servers, settings.topic)
        partitioner = DefaultPartitioner()
        by_key: dict[bytes, int] = {}
        builders: dict[int, Any] = {}
        pending: list[asyncio.Future[Any]] = []
        total = len(workload.values)
        started = time.perf_counter()
        with Reporter("publish", total) as progress:
            for i, (key, value) in enumerate(zip(workload.keys, workload.values, strict=True)):
                partition = by_key.get(key)
                if partition is None:
                    partition = by_key[key] = partitioner(key, all_partitions, all_partitions)
                builder = builders.get(partition)
                if builder is None:
                    builder = builders[partition] = producer.create_batch()
                if builder.append(key=key, value=value, timestamp=None) is None:
                    pending.append(
                        await producer.send_batch(builder, settings.topic, partition=partition)
                    )
                    builder = builders[partition] = producer.create_batch()
                    builder.append(key=key, value=value, timestamp=None)
                if i % 10_000 == 0:
                    progress.update(i)
                    if len(pending) > 256:  # bound the batches waiting for their ack
                        await asyncio.gather(*pending[:-64])
                        del pending[:-64]
            for partition, builder in builders.items():
                if builder.record_count():
                    pending.append(
                        await producer.send_batch(builder, settings.topic, partition=partition)
                    )
            await asyncio.gather(*pending)
            progress.update(total)
        seconds = time.perf_counter() - started
    finally:
        await producer.stop()
    return {
        "events": total,
        "seconds": round(seconds, 3),
        "events_per_second": round(total / seconds, 1),
        "megabytes_per_second": round(workload.bytes / seconds / 1e6, 2),
        "compression": compression or "none",
        "linger_ms": linger_ms,
        "batch_bytes": batch_bytes,
    }


async def raw_consume(settings: Settings) -> dict[str, Any]:
    """(a) The baseline: read every record of the topic with a bare aiokafka consumer."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.kafka_bootstrap_servers,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=8 * 1024 * 1024,
        fetch_max_bytes=64 * 1024 * 1024,
    )
    partitions = await topic_partitions(settings.kafka_bootstrap_servers, settings.topic)
    tps = [TopicPartition(settings.topic, p) for p in partitions]
    await consumer.start()
    try:
        consumer.assign(tps)
        begin = await consumer.beginning_offsets(tps)
        end = await consumer.end_offsets(tps)
        total = sum(end[tp] - begin[tp] for tp in tps)
        remaining = {tp for tp in tps if end[tp] > begin[tp]}
        await consumer.seek_to_beginning(*tps)
        count = payload_bytes = 0
        started = time.perf_counter()
        with Reporter("baseline", total) as progress:
            while remaining:
                fetched = await consumer.getmany(timeout_ms=1000)
                for tp, messages in fetched.items():
                    count += len(messages)
                    payload_bytes += sum(len(m.value) for m in messages if m.value is not None)
                    if tp in remaining and messages and messages[-1].offset >= end[tp] - 1:
                        remaining.discard(tp)
                        consumer.pause(tp)
                progress.update(count)
        seconds = time.perf_counter() - started
    finally:
        await consumer.stop()
    return {
        "events": count,
        "seconds": round(seconds, 3),
        "events_per_second": round(count / seconds, 1),
        "megabytes_per_second": round(payload_bytes / seconds / 1e6, 2),
    }


def print_publish_summary(p: dict[str, Any]) -> None:
    """The publish stage's headline line."""
    console.print(
        f"  published {p['events']:,} events in {p['seconds']:.2f} s: "
        f"[bold]{fmt_rate(p['events_per_second'])} events/s[/bold] "
        f"({p['megabytes_per_second']} MB/s, compression {p['compression']})"
    )


def print_baseline_summary(b: dict[str, Any]) -> None:
    """The baseline stage's headline line."""
    console.print(
        f"  consumed {b['events']:,} records in {b['seconds']:.2f} s: "
        f"[bold]{fmt_rate(b['events_per_second'])} events/s[/bold] "
        f"({b['megabytes_per_second']} MB/s)"
    )
