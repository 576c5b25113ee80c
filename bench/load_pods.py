"""Pod-shaped workloads of the pipeline benchmark (issue 12): what a fleet's Pod status changes
put on the health topic.

:func:`generate_pods` makes the log of ``--shape training`` (one 8-GPU Pod per node) and
``--shape inference`` (eight 1-GPU Pods per node). Each Pod status change is one new
resourceVersion and one observation per device of the Pod, keyed by the node, as the watcher
publishes them: with ``--record-schema 2`` (the watcher's default, issue 12) a training Pod's
change is one ``DeviceHealthObservations`` record of eight observations; with 1, eight
``DeviceHealthObserved`` records in a row. An inference Pod's change is one observation (one
schema-1 record either way).
``--shape synthetic`` (:func:`bench.load.generate`) is the older one: single observations of
random devices.

Counts are in observations (``events``), so the shapes compare per observation. A re-send (with
probability ``dup_ratio`` per Pod change) repeats a Pod's latest change (exact duplicates) or,
when it has one, its previous one (stale), half and half, all its devices.
"""

from __future__ import annotations

import random
import time
import uuid
from datetime import timedelta
from typing import Final

from bench.console import Reporter
from bench.load import BENCH_NAMESPACE, FIRST_VERSION, T0, Workload, compact

SHAPES: Final = {"synthetic": 0, "training": 8, "inference": 1}
"""``--shape`` -> GPUs per Pod (0: the synthetic log of single observations)."""

XID_MESSAGE: Final = "XID 79: GPU has fallen off the bus"


def generate_pods(
    events: int,
    devices: int,
    nodes: int,
    gpus_per_pod: int,
    dup_ratio: float,
    seed: int,
    record_schema: int = 2,
) -> Workload:
    """About ``events`` observations (whole Pod changes: up to ``gpus_per_pod - 1`` more) of
    ``devices`` GPUs in Pods of ``gpus_per_pod`` GPUs each, Pods spread round-robin on ``nodes``.

    A fresh change picks a random Pod and the next cluster-wide resourceVersion; each of its
    devices keeps its health with probability 0.97, else draws Healthy 95 %, Unhealthy 4 %
    (with an XID message), Unknown 1 % (a status change mostly carries its other devices
    unchanged, as kubelet's does). With ``record_schema`` 2 (the watcher's default) a change
    of several devices is one schema-2 ``DeviceHealthObservations`` record, as the watcher
    publishes it (:func:`services.domain.observations.group_pod_changes`); a change of one
    device, and every change with 1, one record per observation. Raises ``ValueError`` when
    ``devices`` is not a multiple of ``gpus_per_pod``.
    """
    from services.domain.event_codec import encode_event
    from services.domain.events import ContainerRef, DeviceHealthObserved, DeviceSource, Health
    from services.domain.observations import group_pod_changes
    from services.domain.records import encode_record

    if gpus_per_pod < 1 or devices % gpus_per_pod:
        raise ValueError(f"--devices {devices} is not a multiple of {gpus_per_pod} GPUs per Pod")
    started = time.perf_counter()
    rng = random.Random(seed)
    node_names = [f"bench-node-{i + 1:05d}" for i in range(nodes)]
    node_keys = [name.encode() for name in node_names]
    pods = devices // gpus_per_pod
    pod_node = [p % nodes for p in range(pods)]
    pod_name = [f"bench-job-{p % nodes + 1:05d}-{p // nodes}" for p in range(pods)]
    pod_uid = [str(uuid.uuid5(BENCH_NAMESPACE, f"{seed}/pod/{p}")) for p in range(pods)]
    rids = [f"GPU-{uuid.uuid5(BENCH_NAMESPACE, f'{seed}/gpu/{d}')}" for d in range(devices)]
    health = [Health.HEALTHY] * devices
    containers = (ContainerRef("main"),)
    latest: list[tuple[list[bytes], int] | None] = [None] * pods  # (records, observations)
    previous: list[tuple[list[bytes], int] | None] = [None] * pods
    observed: list[int] = []
    keys: list[bytes] = []
    values: list[bytes] = []
    version = FIRST_VERSION
    new = dup = stale = size = 0
    step = 0
    count = 0  # observations so far
    with Reporter("generate", events) as progress:
        while count < events:
            step += 1
            if observed and rng.random() < dup_ratio:
                p = observed[rng.randrange(len(observed))]
                older = previous[p]
                if older is not None and rng.random() < 0.5:
                    (payloads, carried), stale = older, stale + older[1]
                else:
                    payloads, carried = latest[p]  # type: ignore[misc]
                    dup += carried
            else:
                p = rng.randrange(pods)
                version += 1
                change = []
                for d in range(p * gpus_per_pod, (p + 1) * gpus_per_pod):
                    if rng.random() >= 0.97:
                        roll = rng.random()
                        health[d] = (
                            Health.HEALTHY
                            if roll < 0.95
                            else Health.UNHEALTHY
                            if roll < 0.99
                            else Health.UNKNOWN
                        )
                    observation = DeviceHealthObserved(
                        node=node_names[pod_node[p]],
                        namespace="bench",
                        pod_name=pod_name[p],
                        pod_uid=pod_uid[p],
                        containers=containers,
                        resource_name="nvidia.com/gpu",
                        resource_id=rids[d],
                        health=health[d],
                        source=DeviceSource.DEVICE_PLUGIN,
                        status_version=version,
                        observed_at=T0 + timedelta(milliseconds=step),
                        message=XID_MESSAGE if health[d] is Health.UNHEALTHY else None,
                    )
                    change.append(observation)
                # A copy: see bench.load.generate on orjson's buffers.
                if record_schema == 2:
                    payloads = [
                        compact(encode_record(r)) for r in group_pod_changes(change, 1_000_000)
                    ]
                else:
                    payloads = [compact(encode_event(o)) for o in change]
                carried = len(change)
                if latest[p] is None:
                    observed.append(p)
                else:
                    previous[p] = latest[p]
                latest[p] = (payloads, carried)
                new += carried
            key = node_keys[pod_node[p]]
            count += carried
            for payload in payloads:
                keys.append(key)
                values.append(payload)
                size += len(payload)
            if step % 5_000 == 0:
                progress.update(count)
        progress.update(count)
    return Workload(
        keys=keys,
        values=values,
        devices=sorted(
            (node_names[pod_node[p]], rids[d])
            for p in observed
            for d in range(p * gpus_per_pod, (p + 1) * gpus_per_pod)
        ),
        new=new,
        duplicates=dup,
        stale=stale,
        bytes=size,
        seconds=time.perf_counter() - started,
        observations=count,
    )
