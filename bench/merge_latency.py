"""What the governor's event-time order costs in latency (issue 10), measured on the local stack.

    .venv/bin/python -m bench.merge_latency --tick-interval 1 --tick-interval 5 --seconds 60

Per ``--tick-interval`` one run with fresh topics, consumer group and schema (:mod:`bench.stack`):
``devicestate worker`` as a child process (:mod:`bench.worker_stage`), and in this process

- a ticker: a ``WatcherTick`` to every partition every tick interval, at the wall clock (the
  watcher's job), through the product's own ``EventPublisher``;
- a load: ``DeviceHealthObserved`` at ``--rate`` per second on ``--nodes`` nodes of
  ``--devices-per-node`` GPUs, each observation flipping its device's health (Healthy <->
  Unhealthy) so the governor decides something, ``observedAt`` = now. The nodes' keys land on a
  few of the partitions: the other partitions move only with the ticks, as in a quiet fleet;
- two readers (no consumer group) of the governance and the decisions topic.

Figures, per observation (matched on node and time; see :func:`latencies`):

- **forwarding** (the baseline): its ``HealthTransition`` read on the governance topic minus its
  ``observedAt``: the health agent's batch and the forward, what every record paid before the merge;
- **decision**: the first decision dated at it (``at`` = its merge key's event time) read on the
  decisions topic minus its ``observedAt``: forwarding + waiting in the merge until every
  partition's watermark passed it + the governor's batch.

p50/p95/max of both and decision/forwarding. Observations published before the first decision was
read (the worker starting) are left out. A healthy-again flip of a quarantined device may decide
nothing at once; ``decided`` counts the observations that got a decision.

``--hot-devices N`` (issue 11: one hot node beside a normal fleet) adds, once the first decision
was read, a burst of N observations of one node, ``hot-node``, each of another resourceID, as fast
as the producer takes them, while the load goes on. Repeat the flag (``--hot-devices 0
--hot-devices 100000``) for a baseline from the same run: the fleet's decision latency during the
burst against the one without. Reported: when the burst was published, how many of its
``HealthTransition``s were read (those over the device ceiling are not forwarded) and when the
worker had committed the whole health topic as it stood once the burst was published.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from bench.console import console
from bench.kafka_admin import admin_client, committed_offsets, create_topic, end_offsets
from bench.load import percentile
from bench.machine import code_version, command_line, machine_info
from bench.processes import Child, free_port, start_child
from bench.stack import check_stack, cleanup, new_run, run_settings, stack_settings
from bench.worker_stage import worker_command, worker_env
from services.domain.governance.decisions import Decision
from services.domain.governance.inputs import HealthTransition, MergeKey
from services.runtime.config import Settings

Sample = tuple[str, datetime]
"""An observation: ``(node, observedAt)`` (unique: one node's observations are sequential)."""


@dataclass
class Seen:
    """What one run published and read (wall-clock seconds since the epoch)."""

    published: dict[Sample, float] = field(default_factory=dict)
    forwarded: list[tuple[float, HealthTransition, MergeKey | None]] = field(default_factory=list)
    decisions: list[tuple[float, Decision]] = field(default_factory=list)
    hot_forwarded: int = 0


def latencies(seen: Seen, since: float) -> tuple[list[float], list[float], dict[str, int]]:
    """``(forwarding, decision, kinds)``: latencies in seconds, sorted, of the observations published at
    or after ``since``. A decision belongs to an observation when it names the observation's node
    and is dated at the merge key's event time of the observation's ``HealthTransition`` (that
    time is the ``observedAt``, or a partition's newer time when the log was ahead of it);
    ``kinds`` counts the kinds of those first decisions."""
    keyed: dict[Sample, Sample] = {}
    forwarding: list[float] = []
    for read_at, transition, key in seen.forwarded:
        sample = (transition.node, transition.observed_at)
        published = seen.published.get(sample)
        if published is None or published < since:
            continue
        forwarding.append(read_at - published)
        keyed[(transition.node, key.event_time if key else transition.observed_at)] = sample
    first: dict[Sample, float] = {}
    kinds: Counter[str] = Counter()
    for read_at, decision in seen.decisions:
        matched = keyed.get((decision.node or "", decision.at))
        if matched is not None and matched not in first:
            first[matched] = read_at - seen.published[matched]
            kinds[decision.kind.value] += 1
    return sorted(forwarding), sorted(first.values()), dict(sorted(kinds.items()))


def summary(values: Sequence[float]) -> dict[str, float | int | None]:
    """``count`` and p50/p95/max in seconds (``None`` when empty) of sorted values."""
    if not values:
        return {"count": 0, "p50": None, "p95": None, "max": None}
    return {
        "count": len(values),
        "p50": round(percentile(values, 0.5), 3),
        "p95": round(percentile(values, 0.95), 3),
        "max": round(values[-1], 3),
    }


def ratios(decision: dict[str, Any], forwarding: dict[str, Any]) -> dict[str, float | None]:
    """decision / forwarding per figure (p50, p95, max)."""
    out: dict[str, float | None] = {}
    for name in ("p50", "p95", "max"):
        d, f = decision.get(name), forwarding.get(name)
        out[name] = round(d / f, 1) if d is not None and f else None
    return out


async def tick_loop(publisher: Any, interval: float, stop: asyncio.Event) -> None:
    """A ``WatcherTick`` to every partition now and then every ``interval`` s (wall clock)."""
    while not stop.is_set():
        await publisher.publish_tick(datetime.now(UTC))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)


async def load_loop(
    publisher: Any, seen: Seen, nodes: int, per_node: int, rate: float, stop: asyncio.Event
) -> None:
    """Observations at ``rate`` per second, round-robin over the devices, health flipping."""
    from services.domain.events import ContainerRef, DeviceHealthObserved, DeviceSource, Health

    devices = [
        (f"latency-node-{n}", f"GPU-latency-{n}-{d}") for n in range(nodes) for d in range(per_node)
    ]
    flips = [0] * len(devices)
    version = 0
    due = time.monotonic()
    while not stop.is_set():
        i = version % len(devices)
        node, rid = devices[i]
        version += 1
        health = Health.UNHEALTHY if flips[i] % 2 else Health.HEALTHY
        flips[i] += 1
        observed = datetime.now(UTC)
        await publisher.publish(
            DeviceHealthObserved(
                node=node,
                namespace="bench",
                pod_name=f"latency-job-{node}",
                pod_uid=f"00000000-0000-4000-8000-{i:012d}",
                containers=(ContainerRef("main"),),
                resource_name="nvidia.com/gpu",
                resource_id=rid,
                health=health,
                source=DeviceSource.DEVICE_PLUGIN,
                status_version=version,
                observed_at=observed,
                message="XID 79: GPU has fallen off the bus"
                if health is Health.UNHEALTHY
                else None,
            )
        )
        seen.published[(node, observed)] = observed.timestamp()
        due += 1 / rate
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), max(due - time.monotonic(), 0))


HOT_NODE = "hot-node"


async def hot_burst(settings: Settings, devices: int) -> tuple[float, float | None]:
    """Publish ``devices`` Healthy observations of :data:`HOT_NODE`, one per resourceID; returns
    the wall-clock times (epoch seconds) the last one was acknowledged and the worker's consumer
    group had committed every partition up to the end offsets of that moment (``None``: not
    within 300 s)."""
    from services.adapters.kafka.producer import EventPublisher
    from services.domain.events import ContainerRef, DeviceHealthObserved, DeviceSource, Health

    async with EventPublisher(settings, client_id="bench-hot-node") as publisher:
        for i in range(devices):
            await publisher.publish(
                DeviceHealthObserved(
                    node=HOT_NODE,
                    namespace="bench",
                    pod_name=f"hot-job-{i // 8}",
                    pod_uid=f"00000000-0000-4000-9000-{i // 8:012d}",
                    containers=(ContainerRef("main"),),
                    resource_name="example.com/vdev",
                    resource_id=f"VDEV-hot-{i}",
                    health=Health.HEALTHY,
                    source=DeviceSource.DEVICE_PLUGIN,
                    status_version=i + 1,
                    observed_at=datetime.now(UTC),
                )
            )
    published = time.time()
    ends = await end_offsets(settings.kafka_bootstrap_servers, settings.topic)
    async with admin_client(settings.kafka_bootstrap_servers) as admin:
        while time.time() - published < 300:
            done = await committed_offsets(admin, settings.consumer_group, settings.topic)
            if all(done.get(p, 0) >= end for p, end in ends.items()):
                return published, time.time()
            await asyncio.sleep(0.5)
    return published, None


async def read_loop(settings: Settings, seen: Seen, stop: asyncio.Event) -> None:
    """Read the governance and decisions topics from the beginning until ``stop``."""
    from aiokafka import TopicPartition

    from services.adapters.kafka.clients import make_consumer
    from services.domain.governance.decisions import decode_decision
    from services.domain.governance.input_batch import decode_records

    consumer = make_consumer(settings, client_id="bench-merge-latency", fetch_max_wait_ms=20)
    await consumer.start()
    try:
        tps = [
            TopicPartition(settings.governance_topic, 0),
            TopicPartition(settings.decisions_topic, 0),
        ]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=50)
            read_at = time.time()
            for tp, messages in batches.items():
                for message in messages:
                    if tp.topic == settings.decisions_topic:
                        seen.decisions.append((read_at, decode_decision(message.value)))
                        continue
                    headers = dict(message.headers or ())
                    kind = headers.get("devicestate-type")
                    if kind not in (b"HealthTransition", b"ForwardedBatch"):
                        continue
                    for record, key in decode_records(message.value, kind.decode()):
                        if not isinstance(record, HealthTransition):
                            continue
                        if record.node == HOT_NODE:
                            seen.hot_forwarded += 1
                            continue
                        seen.forwarded.append((read_at, record, key))
    finally:
        await consumer.stop()


@dataclass(frozen=True)
class Options:
    seconds: float
    rate: float
    nodes: int
    devices_per_node: int
    partitions: int
    warmup_timeout: float


async def measure(base: Settings, tick: float, hot: int, opts: Options) -> dict[str, Any]:
    """One run at tick interval ``tick`` (with a burst of ``hot`` observations of one node):
    start the worker, tick, load, drain, clean up."""
    from services.adapters.kafka.producer import EventPublisher

    run = new_run(None)
    settings = run_settings(base, run, opts.partitions)
    console.rule(f"tick interval {tick:g} s, hot node {hot} devices (run {run.run_id})")
    seen = Seen()
    stop_load, stop_ticks, stop_read = asyncio.Event(), asyncio.Event(), asyncio.Event()
    publisher = EventPublisher(settings, linger_ms=0)
    tasks: list[asyncio.Task[None]] = []
    try:
        await create_topic(settings)
        run.created_topic = True
        run.created_schemas.append(run.worker_schema)
        argv, how, _ = worker_command()
        env = worker_env(run, settings, free_port(), None)
        worker: Child = start_child("worker", argv, env, run.log_dir)
        run.children.append(worker)
        console.print(f"  {how} pid {worker.pid}, log {run.log_dir}/worker.log")
        await publisher.start()
        tasks = [
            asyncio.create_task(read_loop(settings, seen, stop_read)),
            asyncio.create_task(tick_loop(publisher, tick, stop_ticks)),
            asyncio.create_task(
                load_loop(publisher, seen, opts.nodes, opts.devices_per_node, opts.rate, stop_load)
            ),
        ]
        started = time.monotonic()
        while not seen.decisions:  # warm-up: the worker and its governor are folding
            worker.check()
            if time.monotonic() - started > opts.warmup_timeout:
                raise TimeoutError(f"no decision within {opts.warmup_timeout:.0f} s")
            await asyncio.sleep(0.2)
        since = time.time()
        console.print(f"  first decision after {time.monotonic() - started:.1f} s; measuring")
        burst = asyncio.create_task(hot_burst(settings, hot)) if hot else None
        await asyncio.sleep(opts.seconds)
        hot_published, hot_drained = await burst if burst is not None else (None, None)
        stop_load.set()
        await asyncio.sleep(2 * tick + 3)  # ticks go on: the last observations are released
        worker.check()
    finally:
        stop_load.set()
        stop_ticks.set()
        stop_read.set()
        for task in tasks:
            with contextlib.suppress(Exception):
                await task
        await publisher.close()
        await cleanup(run, settings, keep=False)
    forwarding, decision, kinds = latencies(seen, since)
    fwd, dec = summary(forwarding), summary(decision)
    published = sum(1 for at in seen.published.values() if at >= since)
    result = {
        "tick_interval_seconds": tick,
        "hot_devices": hot,
        "hot_published_after_seconds": round(hot_published - since, 1) if hot_published else None,
        "hot_forwarded": seen.hot_forwarded,
        "hot_drained_after_seconds": round(hot_drained - since, 1) if hot_drained else None,
        "observations": published,
        "forwarding": fwd,
        "decision": dec,
        "decision_over_forwarding": ratios(dec, fwd),
        "decisions_read": len(seen.decisions),
        "first_decision_kinds": kinds,
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
    }
    print_result(result)
    return result


def print_result(r: dict[str, Any]) -> None:
    f, d, x = r["forwarding"], r["decision"], r["decision_over_forwarding"]
    if r["hot_devices"]:
        console.print(
            f"  hot node: {r['hot_devices']} published by +{r['hot_published_after_seconds']} s,"
            f" {r['hot_forwarded']} forwarded, drained by +{r['hot_drained_after_seconds']} s"
        )
    console.print(
        f"  {r['observations']} observations; forwarded {f['count']}, decided {d['count']}"
        f" ({r['decisions_read']} decisions read; first decisions {r['first_decision_kinds']})"
    )
    for name in ("p50", "p95", "max"):
        console.print(
            f"  {name}: forwarding (baseline) {f[name]} s, decision {d[name]} s = {x[name]}x"
        )


def cli(
    tick_interval: Annotated[
        list[float] | None, typer.Option(help="Tick interval (s); repeat for several runs.")
    ] = None,
    seconds: Annotated[float, typer.Option(min=1, help="Measured seconds per run.")] = 60.0,
    rate: Annotated[float, typer.Option(min=0.1, help="Observations per second.")] = 4.0,
    nodes: Annotated[int, typer.Option(min=1, help="Nodes the observations are on.")] = 3,
    devices_per_node: Annotated[int, typer.Option(min=1, help="GPUs per node.")] = 2,
    partitions: Annotated[int, typer.Option(min=1, help="Partitions of the topic.")] = 6,
    hot_devices: Annotated[
        list[int] | None,
        typer.Option(help="Devices of a hot node published in a burst; repeat for several runs."),
    ] = None,
    warmup_timeout: Annotated[
        float, typer.Option(help="Longest wait for a first decision.")
    ] = 120.0,
    json_out: Annotated[Path | None, typer.Option("--json-out", help="Write JSON here.")] = None,
) -> None:
    """Latency of a governance decision with the event-time merge, against the forwarding's."""
    ticks = tick_interval or [1.0, 5.0]
    hots = hot_devices or [0]
    opts = Options(seconds, rate, nodes, devices_per_node, partitions, warmup_timeout)
    base = stack_settings()
    machine = machine_info()  # its load average at the start

    async def main() -> list[dict[str, Any]]:
        await check_stack(base)
        return [await measure(base, tick, hot, opts) for tick in ticks for hot in hots]

    results = asyncio.run(main())
    console.rule("results (seconds; decision / forwarding)")
    for r in results:
        f, d, x = r["forwarding"], r["decision"], r["decision_over_forwarding"]
        console.print(
            f"  tick {r['tick_interval_seconds']:>4g} s, hot {r['hot_devices']}: forwarding p50/p95/max {f['p50']}/{f['p95']}"
            f"/{f['max']}; decision {d['p50']}/{d['p95']}/{d['max']} = "
            f"{x['p50']}x/{x['p95']}x/{x['max']}x ({d['count']} of {r['observations']} decided)"
        )
    if json_out is not None:
        report = {
            "command": command_line(),
            "code": code_version(),
            "machine": machine,
            "options": {**opts.__dict__, "tick_intervals": ticks, "hot_devices": hots},
            "at": datetime.now(UTC).isoformat(),
            "results": results,
        }
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(report, indent=2, default=str) + "\n")
        console.print(f"results written to {json_out}")


def main() -> None:
    typer.run(cli)


if __name__ == "__main__":
    main()
