"""The storm workload of the pipeline benchmark (issue 12, "Benchmarks"): a switch failure that
turns 10 % of a fleet Unknown.

:func:`generate_storm` makes two logs of one fleet of ``nodes`` nodes with one training Pod each
(``devices / nodes`` GPUs, 8 for the issue's 25k nodes / 200k GPUs):

- **steady**: every node's Pod reports all its GPUs Healthy, one status change per node in node
  order; published and ingested first (the worker and the governor caught up).
- **burst**: the nodes behind one failed switch (a contiguous run of ``unknown_share`` of the
  nodes, from a seeded start, wrapping) report all their GPUs Unknown in one Pod status change
  each, one after another within ``burst_seconds`` of event time, starting one second after the
  steady state's last observation.

Each status change is one schema-2 ``DeviceHealthObservations`` record of the Pod's
observations, keyed by its node, as the watcher publishes it (its default record schema,
:func:`services.domain.observations.group_pod_changes`); statusVersions increase along the log
(one cluster-wide resourceVersion per change). Nothing is a re-send: every observation is new.

What the governor must make of the burst (``docs/governance.md``, "Rules"): every Unknown device
``UnknownTolerated`` for the tolerance window (300 s of event time by default, and the burst
spans far less), one incident per node; no restriction, no quarantine, no eviction; 10 % is below
the circuit breaker's shares (20 %), so the breaker stays closed.
"""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Final

from bench.console import Reporter
from bench.load import BENCH_NAMESPACE, FIRST_VERSION, T0, Workload, compact

STORM_UNKNOWN_SHARE: Final = 0.10
"""Share of the fleet's nodes behind the failed switch (issue 12: 10 %)."""

STEADY_STEP: Final = timedelta(milliseconds=1)
"""Event time between two Pod changes of the steady state."""


@dataclass
class StormWorkload:
    """The steady log, the burst log (publish each in order) and the burst's shape."""

    steady: Workload
    burst: Workload
    burst_nodes: list[str]
    """The nodes whose GPUs turn Unknown, in publish order."""
    gpus_per_node: int
    steady_ticks: list[tuple[int, bytes, bytes]]
    """``(partition, key, value)``: the watcher's tick to every partition after the steady
    state (half a second of event time after its last change), published to that partition."""
    burst_ticks: list[tuple[int, bytes, bytes]]
    """The tick after the burst (half a second after its last change): every partition's event
    time passes the burst, so the governor's merge folds all of it (``docs/governance.md``,
    "Time comes from the log"); the watcher sends one every 15 s."""


def burst_node_indexes(nodes: int, unknown_share: float, seed: int) -> list[int]:
    """The indexes (0-based) of the nodes behind the failed switch: ``round(nodes *
    unknown_share)`` (at least 1 when the share is positive) consecutive indexes from a seeded
    start, wrapping at ``nodes``. Raises ``ValueError`` for a share outside ``[0, 1]``."""
    if not 0.0 <= unknown_share <= 1.0:
        raise ValueError(f"unknown share {unknown_share} is not in [0, 1]")
    count = round(nodes * unknown_share)
    if unknown_share > 0:
        count = max(count, 1)
    start = random.Random(seed).randrange(nodes)
    return [(start + i) % nodes for i in range(count)]


def generate_storm(
    devices: int,
    nodes: int,
    seed: int,
    *,
    unknown_share: float = STORM_UNKNOWN_SHARE,
    burst_seconds: float = 1.0,
    partitions: int = 6,
) -> StormWorkload:
    """The steady and burst logs of a fleet of ``devices`` GPUs on ``nodes`` nodes (see the
    module). Counts are observations: the steady log carries ``devices``, the burst ``len(
    burst_nodes) * devices / nodes``, each in one record per node. ``burst_seconds``: event time
    from the burst's first change to its last; ``partitions``: of the health topic (one tick
    each). Raises ``ValueError`` when ``devices`` is not a
    positive multiple of ``nodes`` or the share is outside ``[0, 1]``."""
    from services.domain.events import ContainerRef, DeviceHealthObserved, DeviceSource, Health
    from services.domain.node_events import WatcherTick
    from services.domain.observations import group_pod_changes
    from services.domain.records import encode_record

    if nodes < 1 or devices < nodes or devices % nodes:
        raise ValueError(f"--devices {devices} is not a multiple of --nodes {nodes}")
    gpus = devices // nodes
    hit = burst_node_indexes(nodes, unknown_share, seed)
    started = time.perf_counter()
    node_names = [f"bench-node-{i + 1:05d}" for i in range(nodes)]
    containers = (ContainerRef("main"),)
    version = FIRST_VERSION

    def rid(d: int) -> str:
        return f"GPU-{uuid.uuid5(BENCH_NAMESPACE, f'{seed}/gpu/{d}')}"

    rids = [rid(d) for d in range(devices)]
    pod_uids = [str(uuid.uuid5(BENCH_NAMESPACE, f"{seed}/pod/{n}")) for n in range(nodes)]

    def change(n: int, health: Health, at: timedelta) -> bytes:
        observations = [
            DeviceHealthObserved(
                node=node_names[n],
                namespace="bench",
                pod_name=f"bench-job-{n + 1:05d}-0",
                pod_uid=pod_uids[n],
                containers=containers,
                resource_name="nvidia.com/gpu",
                resource_id=rids[d],
                health=health,
                source=DeviceSource.DEVICE_PLUGIN,
                status_version=version,
                observed_at=T0 + at,
            )
            for d in range(n * gpus, (n + 1) * gpus)
        ]
        (record,) = group_pod_changes(observations, 1_000_000)
        # A copy: see bench.load.generate on orjson's buffers.
        return compact(encode_record(record))

    def log(indexes: list[int], health: Health, at: list[timedelta]) -> Workload:
        nonlocal version
        keys: list[bytes] = []
        values: list[bytes] = []
        begun = time.perf_counter()
        with Reporter(f"generate {health.value}", len(indexes), unit="records") as progress:
            for i, n in enumerate(indexes):
                version += 1
                keys.append(node_names[n].encode())
                values.append(change(n, health, at[i]))
                if i % 5_000 == 0:
                    progress.update(i)
            progress.update(len(indexes))
        return Workload(
            keys=keys,
            values=values,
            devices=sorted((node_names[n], rids[d]) for n in indexes for d in _of(n, gpus)),
            new=len(indexes) * gpus,
            duplicates=0,
            stale=0,
            bytes=sum(len(v) for v in values),
            seconds=time.perf_counter() - begun,
            observations=len(indexes) * gpus,
        )

    steady = log(list(range(nodes)), Health.HEALTHY, [STEADY_STEP * n for n in range(nodes)])
    burst_start = STEADY_STEP * (nodes - 1) + timedelta(seconds=1)
    spacing = timedelta(seconds=burst_seconds) / max(len(hit) - 1, 1)
    burst = log(hit, Health.UNKNOWN, [burst_start + spacing * i for i in range(len(hit))])
    steady.seconds = time.perf_counter() - started - burst.seconds
    burst_end = burst_start + spacing * max(len(hit) - 1, 0)

    def ticks(at: timedelta) -> list[tuple[int, bytes, bytes]]:
        out = []
        for partition in range(partitions):
            tick = WatcherTick(partition, T0 + at, watch_seen_at=T0 + at)
            out.append((partition, tick.node.encode(), compact(encode_record(tick))))
        return out

    half = timedelta(milliseconds=500)
    return StormWorkload(
        steady=steady,
        burst=burst,
        burst_nodes=[node_names[n] for n in hit],
        gpus_per_node=gpus,
        steady_ticks=ticks(STEADY_STEP * (nodes - 1) + half),
        burst_ticks=ticks(burst_end + half),
    )


def _of(node: int, gpus: int) -> range:
    """The device indexes of ``node``."""
    return range(node * gpus, (node + 1) * gpus)
