"""A reproducible, realistic event log for worker and replay tests and the ingest benchmark.

Nodes with 8 devices each, two devices per Pod. Most events are new observations (a cluster-wide
increasing resourceVersion); the rest are redeliveries of the device's latest observation
(duplicates), of an older one (stale), and Pod releases (after which the devices get a new Pod).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from services.domain.directory import DeviceKey, DeviceRecord, Outcome, apply_event, fold
from services.domain.event_codec import encode_event
from services.domain.events import (
    ContainerRef,
    DeviceHealthObserved,
    DeviceSource,
    Event,
    Health,
    PodDevicesReleased,
    ReleaseReason,
)

T0 = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)
DEVICES_PER_NODE = 8


@dataclass(frozen=True, slots=True)
class SyntheticLog:
    events: list[Event]

    @property
    def records(self) -> list[tuple[bytes, bytes]]:
        """``(key, value)`` as the watcher publishes them: keyed by node."""
        return [(e.node.encode(), encode_event(e)) for e in self.events]

    def expected_devices(self) -> dict[DeviceKey, DeviceRecord]:
        return dict(fold(list(self.events)))

    def expected_history_rows(self) -> int:
        """Changes the fold makes (one history row each): applied observations and released
        allocations."""
        state: dict[DeviceKey, DeviceRecord] = {}
        rows = 0
        for event in self.events:
            for change in apply_event(state, event):
                if change.changed:
                    rows += 1
                    state[change.key] = change.record
        return rows

    def outcomes(self) -> dict[Outcome, int]:
        state: dict[DeviceKey, DeviceRecord] = {}
        counts = dict.fromkeys(Outcome, 0)
        for event in self.events:
            for change in apply_event(state, event):
                counts[change.outcome] += 1
                if change.changed:
                    state[change.key] = change.record
        return counts


def synthetic_log(count: int, *, nodes: int = 40, seed: int = 7) -> SyntheticLog:
    rng = random.Random(seed)
    version = 10_000
    generation: dict[tuple[int, int], int] = {}  # (node, pod slot) -> pod generation
    sent: dict[tuple[int, int], list[DeviceHealthObserved]] = {}
    events: list[Event] = []

    def pod(node: int, slot: int) -> tuple[str, str]:
        gen = generation.get((node, slot), 0)
        return f"job-{node}-{slot}-{gen}", f"uid-{node}-{slot}-{gen}"

    while len(events) < count:
        node, device = rng.randrange(nodes), rng.randrange(DEVICES_PER_NODE)
        history = sent.get((node, device))
        roll = rng.random()
        if history and roll < 0.12:
            events.append(history[-1])  # duplicate delivery
            continue
        if history and len(history) > 1 and roll < 0.20:
            events.append(rng.choice(history[:-1]))  # stale (older) delivery
            continue
        version += 1
        slot = device // 2
        name, uid = pod(node, slot)
        if history and roll < 0.25:
            events.append(
                PodDevicesReleased(
                    node=f"gpu-node-{node:03d}",
                    namespace="ml",
                    pod_name=name,
                    pod_uid=uid,
                    reason=ReleaseReason.DELETED,
                    status_version=version,
                    observed_at=T0 + timedelta(milliseconds=version),
                    resource_ids=(f"GPU-{node:03d}-{2 * slot}", f"GPU-{node:03d}-{2 * slot + 1}"),
                )
            )
            generation[(node, slot)] = generation.get((node, slot), 0) + 1
            continue
        health = rng.choices(
            (Health.HEALTHY, Health.UNHEALTHY, Health.UNKNOWN), weights=(85, 10, 5)
        )[0]
        observation = DeviceHealthObserved(
            node=f"gpu-node-{node:03d}",
            namespace="ml",
            pod_name=name,
            pod_uid=uid,
            containers=(ContainerRef("trainer"),),
            resource_name="nvidia.com/gpu",
            resource_id=f"GPU-{node:03d}-{device}",
            health=health,
            source=DeviceSource.DEVICE_PLUGIN,
            status_version=version,
            observed_at=T0 + timedelta(milliseconds=version),
            message="XID 79" if health is Health.UNHEALTHY else None,
        )
        sent.setdefault((node, device), []).append(observation)
        events.append(observation)
    return SyntheticLog(events)


def pod_change_log(count: int, *, nodes: int = 12, gpus: int = 4, seed: int = 7) -> SyntheticLog:
    """About ``count`` observations in whole Pod status changes (issue 12): two Pods of ``gpus``
    devices per node; a change is one new resourceVersion and an observation of each of the
    Pod's devices, consecutive in the log (what one schema-2 record carries). Also whole-change
    re-sends of the latest (duplicates) or an older change (stale), and Pod releases (the slot's
    next Pod gets the devices)."""
    rng = random.Random(seed)
    version = 10_000
    generation: dict[tuple[int, int], int] = {}
    sent: dict[tuple[int, int], list[list[DeviceHealthObserved]]] = {}
    health: dict[str, Health] = {}
    events: list[Event] = []
    while len(events) < count:
        node, slot = rng.randrange(nodes), rng.randrange(2)
        history = sent.get((node, slot))
        roll = rng.random()
        if history and roll < 0.10:
            events.extend(history[-1])
            continue
        if history and len(history) > 1 and roll < 0.16:
            events.extend(rng.choice(history[:-1]))
            continue
        version += 1
        gen = generation.get((node, slot), 0)
        name, uid = f"job-{node}-{slot}-{gen}", f"uid-{node}-{slot}-{gen}"
        ids = [f"GPU-{node:03d}-{slot * gpus + d}" for d in range(gpus)]
        at = T0 + timedelta(milliseconds=version)
        if history and roll < 0.20:
            events.append(
                PodDevicesReleased(
                    node=f"gpu-node-{node:03d}",
                    namespace="ml",
                    pod_name=name,
                    pod_uid=uid,
                    reason=ReleaseReason.DELETED,
                    status_version=version,
                    observed_at=at,
                    resource_ids=tuple(ids),
                )
            )
            generation[(node, slot)] = gen + 1
            sent.pop((node, slot))
            continue
        change = []
        for rid in ids:
            if rid not in health or rng.random() < 0.2:
                health[rid] = rng.choices(
                    (Health.HEALTHY, Health.UNHEALTHY, Health.UNKNOWN), weights=(85, 10, 5)
                )[0]
            change.append(
                DeviceHealthObserved(
                    node=f"gpu-node-{node:03d}",
                    namespace="ml",
                    pod_name=name,
                    pod_uid=uid,
                    containers=(ContainerRef("trainer"),),
                    resource_name="nvidia.com/gpu",
                    resource_id=rid,
                    health=health[rid],
                    source=DeviceSource.DEVICE_PLUGIN,
                    status_version=version,
                    observed_at=at,
                    message="XID 79" if health[rid] is Health.UNHEALTHY else None,
                )
            )
        sent.setdefault((node, slot), []).append(change)
        events.extend(change)
    return SyntheticLog(events)


def schema_2_records(events: list[Event]) -> list[tuple[bytes, bytes]]:
    """``(key, value)`` of ``events`` as a schema-2 watcher publishes them: each Pod change's
    observations in one ``DeviceHealthObservations`` record, every other event as before."""
    from services.domain.observations import group_pod_changes
    from services.domain.records import encode_record

    return [(r.node.encode(), encode_record(r)) for r in group_pod_changes(events, 1_000_000)]
