"""The input of the fault campaign (:mod:`bench.faults`): a seeded stream of device-health records
whose outcome is known in advance, cut into rounds.

Every device reads ``Healthy`` except the *bad* ones (``bad_share`` of them, drawn by the seed):
it reads ``Unhealthy`` from a drawn record of the stream on (uniform over the whole stream, so
quarantines are made in every round), and stays so. No ``Unknown``, no heartbeats, no releases: so the governor's only
quarantines are one system quarantine per bad device seen ``Unhealthy``, with the id
``<node>/<resourceID>@<statusVersion of its first Unhealthy observation>``, and it releases none.
Re-sends (exact duplicates and stale copies, ``dup_ratio`` of the records) must make no row.

Each round ends with a ``WatcherTick`` to every partition just after the round's newest
``observedAt``, so the governor's event-time merge folds everything the round published (as the
watcher's ticks do). Times are event times (UTC) from :data:`T0`, one millisecond per record.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from services.domain.event_codec import encode_event
from services.domain.events import ContainerRef, DeviceHealthObserved, DeviceSource, Health
from services.domain.node_events import WatcherTick, encode_node_event

T0 = datetime(2026, 11, 30, 0, 0, tzinfo=UTC)
"""Event time of the first record (in the past: the broker's clock bound never clamps it)."""
FIRST_VERSION = 5_000_000
NAMESPACE = uuid.UUID("0b7e3f9c-2f4e-4d0a-9a61-6a3c1f0e7d21")
"""uuid5 namespace of the campaign's device IDs and Pod UIDs."""

Record = tuple[bytes, bytes, int]
"""``(key, value, partition)``: the partition is explicit (ticks go to each partition)."""
ObservationKey = tuple[str, str, int]
"""``(node, resourceID, statusVersion)``: the dedup key of an observation."""


@dataclass
class Round:
    """One round's records and what the log up to its end must have produced."""

    records: list[Record]
    events: int  # device observations in this round (fresh + re-sends), ticks not counted
    observations: set[ObservationKey] = field(default_factory=set)  # fresh ones, cumulative
    quarantines: dict[str, tuple[str, str]] = field(default_factory=dict)  # id -> device, cum.


@dataclass
class CampaignInput:
    """The rounds, and the totals of the whole input."""

    rounds: list[Round]
    devices: int
    bad_devices: int
    duplicates: int
    stale: int


def partition_of(key: bytes, partitions: int) -> int:
    """The partition the watcher's producer picks for ``key`` (murmur2, as aiokafka and Java)."""
    from aiokafka.partitioner import murmur2

    return int(murmur2(key) & 0x7FFFFFFF) % partitions


def campaign_input(
    events: int,
    *,
    rounds: int,
    devices: int,
    nodes: int,
    partitions: int,
    bad_share: float = 0.02,
    dup_ratio: float = 0.1,
    seed: int = 11,
) -> CampaignInput:
    """``events`` device observations over ``devices`` GPUs (round-robin on ``nodes`` nodes, two
    per Pod), cut into ``rounds`` rounds of (nearly) equal size; see the module docstring.

    Raises ``ValueError`` when ``rounds`` is not between 1 and ``events``."""
    if not 1 <= rounds <= events:
        raise ValueError(f"rounds must be between 1 and events ({events}), got {rounds}")
    rng = random.Random(seed)
    node_names = [f"fault-node-{i + 1:04d}" for i in range(nodes)]
    node_part = [partition_of(n.encode(), partitions) for n in node_names]
    rid = [f"GPU-{uuid.uuid5(NAMESPACE, f'{seed}/gpu/{d}')}" for d in range(devices)]
    bad = rng.sample(range(devices), max(1, round(devices * bad_share)))
    # Turns spread over the whole stream: every round makes quarantines, so a fault can miss
    # one as well as make one.
    turn_at = {d: rng.randrange(events) for d in bad}
    unhealthy: set[int] = set()
    latest: dict[int, bytes] = {}
    previous: dict[int, bytes] = {}
    observed: list[int] = []
    observations: set[ObservationKey] = set()
    quarantines: dict[str, tuple[str, str]] = {}
    version = FIRST_VERSION
    duplicates = stale = 0
    out: list[Round] = []
    bounds = [events * (r + 1) // rounds for r in range(rounds)]
    records: list[Record] = []
    start = 0
    for i in range(events):
        if observed and rng.random() < dup_ratio:
            d = observed[rng.randrange(len(observed))]
            if d in previous and rng.random() < 0.5:
                payload, stale = previous[d], stale + 1
            else:
                payload, duplicates = latest[d], duplicates + 1
        else:
            d = rng.randrange(devices)
            version += 1
            node = node_names[d % nodes]
            if d in turn_at and i >= turn_at[d]:
                if d not in unhealthy:
                    quarantines[f"{node}/{rid[d]}@{version}"] = (node, rid[d])
                unhealthy.add(d)
            health = Health.UNHEALTHY if d in unhealthy else Health.HEALTHY
            slot = (d // nodes) // 2
            payload = encode_event(
                DeviceHealthObserved(
                    node=node,
                    namespace="faults",
                    pod_name=f"fault-job-{d % nodes}-{slot}",
                    pod_uid=str(uuid.uuid5(NAMESPACE, f"{seed}/pod/{d % nodes}/{slot}")),
                    containers=(ContainerRef("main"),),
                    resource_name="nvidia.com/gpu",
                    resource_id=rid[d],
                    health=health,
                    source=DeviceSource.DEVICE_PLUGIN,
                    status_version=version,
                    observed_at=T0 + timedelta(milliseconds=i),
                    message="XID 79: GPU has fallen off the bus" if d in unhealthy else None,
                )
            )
            if d in latest:
                previous[d] = latest[d]
            else:
                observed.append(d)
            latest[d] = payload
            observations.add((node, rid[d], version))
        records.append((node_names[d % nodes].encode(), payload, node_part[d % nodes]))
        if i + 1 == bounds[len(out)]:
            after = T0 + timedelta(milliseconds=i, microseconds=500)
            for p in range(partitions):
                tick = WatcherTick(partition=p, observed_at=after)
                records.append((tick.node.encode(), encode_node_event(tick), p))
            out.append(Round(records, i + 1 - start, set(observations), dict(quarantines)))
            records, start = [], i + 1
    return CampaignInput(
        rounds=out,
        devices=len(observed),
        bad_devices=len(bad),
        duplicates=duplicates,
        stale=stale,
    )
