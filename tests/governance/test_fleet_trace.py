"""A week of a 64-node fleet, replayed far faster than real time (issue 10).

Before the event-time merge, a node's first renewal after an outage could reach the governor before
the fleet clock passed ``last renewal + grace`` (partitions drift hours apart while a backlog is
caught up), so most outages went unseen, and automatic quarantines were dated at clocks borrowed
from other nodes. Here the trace is forwarded as the worker would, each partition in big batches
and the partitions interleaved at random (hours of drift), and folded through the governor's intake:
every host outage is detected, at its heartbeat deadline, and every quarantine is dated at the
observation that caused it. Two different batchings decide alike.
"""

from __future__ import annotations

import random
from datetime import timedelta

from services.domain.event_time import effective_times
from services.domain.events import Health
from services.domain.governance.decisions import Decision, DecisionKind, encode_decision
from services.domain.governance.inputs import GovernanceInput, MergeKey, PartitionWatermark
from services.domain.governance.intake import take
from services.domain.governance.machine import step
from services.domain.governance.policy import GovernancePolicy
from services.domain.governance.state import GovernorState
from services.domain.log import LogPosition
from services.domain.node_events import NodeHeartbeat, WatcherTick
from tests.governance.strategies import at, transition

PARTITIONS = 6
NODES = 64
DAYS = 7
BEAT = 600.0  # the watcher's coarsened heartbeat: every 10 min of event time
GRACE = 1800.0
POLICY = GovernancePolicy(
    heartbeat_grace_seconds=GRACE,
    breaker_min_devices=100_000,  # no breaker: every decision is the node's own
    breaker_min_nodes=100_000,
    restrict_fleet_burst=100_000,
)


def partition_of(node: int) -> int:
    return node % PARTITIONS


def trace(seed: int = 5) -> tuple[list[list[GovernanceInput]], dict[str, tuple[float, float]]]:
    """Per partition, the records in offset order; and the 11 host outages ``node -> (from, to)``
    (seconds after T0): no heartbeat in between."""
    rng = random.Random(seed)
    outages: dict[str, tuple[float, float]] = {}
    for n in rng.sample(range(NODES), 11):
        start = rng.uniform(3600, (DAYS - 1) * 86400)
        outages[f"node-{n:02d}"] = (start, start + rng.uniform(2, 8) * 3600)
    logs: list[list[tuple[float, GovernanceInput]]] = [[] for _ in range(PARTITIONS)]
    version = 1
    for n in range(NODES):
        name = f"node-{n:02d}"
        log = logs[partition_of(n)]
        gone = outages.get(name)
        t = rng.uniform(0, BEAT)
        while t < DAYS * 86400:
            if gone is None or not gone[0] <= t < gone[1]:
                log.append((t, NodeHeartbeat(name, renewed_at=at(t), observed_at=at(t))))
            t += BEAT
        for _ in range(3):  # a few GPUs fail during the week
            t = rng.uniform(0, DAYS * 86400)
            version += 1
            gpu = f"GPU-{rng.randrange(8)}"
            health = rng.choice([Health.UNHEALTHY, Health.UNHEALTHY, Health.UNKNOWN])
            log.append((t, transition(name, gpu, health, version, t, partition=partition_of(n))))
    for p in range(PARTITIONS):
        t = 0.0
        while t <= DAYS * 86400:  # not past the last heartbeats + grace: no loss at the end
            logs[p].append((t, WatcherTick(p, at(t))))
            t += 900.0
        logs[p].sort(key=lambda item: item[0])
    return [[record for _, record in log] for log in logs], outages


def forward_and_govern(logs: list[list[GovernanceInput]], seed: int) -> list[Decision]:
    """Each partition forwarded in batches of 50-3000 records, partitions picked at random: a
    partition can run a day ahead of another."""
    rng = random.Random(seed)
    batches: list[list[list[tuple[GovernanceInput, MergeKey | None]]]] = []
    for p, log in enumerate(logs):
        positions = [LogPosition("health", p, i) for i in range(len(log))]
        eff = effective_times(
            ((pos, r.observed_at) for pos, r in zip(positions, log, strict=True)),  # type: ignore[union-attr]
            {},
        )
        mine = []
        i = 0
        while i < len(log):
            chunk = range(i, min(len(log), i + rng.randint(50, 3000)))
            batch: list[tuple[GovernanceInput, MergeKey | None]] = [
                (log[j], MergeKey(eff[positions[j]], p, j, 0)) for j in chunk
            ]
            batch.append((PartitionWatermark(p, PARTITIONS, eff[positions[chunk[-1]]]), None))
            mine.append(batch)
            i = chunk[-1] + 1
        batches.append(mine)
    state = GovernorState()
    decisions: list[Decision] = []
    while any(batches):
        p = rng.choice([i for i, b in enumerate(batches) if b])
        for record, key in batches[p].pop(0):
            for folded in take(state, record, key, POLICY, step):
                decisions.extend(folded.decisions)
    return decisions


def test_every_outage_of_a_week_is_detected_and_quarantines_are_dated_at_their_observation() -> (
    None
):
    logs, outages = trace()
    decisions = forward_and_govern(logs, seed=1)
    lost = {
        d.node: d.at
        for d in decisions
        if d.kind is DecisionKind.NODE_INCIDENT_OPENED
        and d.details.get("reason") == "node-heartbeat-lost"
    }
    assert set(lost) == set(outages), "every host outage is seen, and no other"
    for node, (start, _) in outages.items():
        last_beat = max(
            r.renewed_at
            for log in logs
            for r in log
            if isinstance(r, NodeHeartbeat) and r.node == node and r.renewed_at < at(start)
        )
        assert lost[node] == last_beat + timedelta(seconds=GRACE)  # exactly at its deadline
    observed = {
        (r.node, r.resource_id, r.status_version): r.observed_at
        for log in logs
        for r in log
        if r.type == "HealthTransition"  # type: ignore[union-attr]
    }
    quarantines = [
        d
        for d in decisions
        if d.kind is DecisionKind.QUARANTINED and d.details.get("reason") == "pod-status-unhealthy"
    ]
    assert quarantines
    for d in quarantines:
        version = int(d.details["statusVersion"])
        assert d.at == observed[(d.node, d.resource_id, version)], d.summary


def test_two_batchings_of_the_week_decide_alike() -> None:
    logs, _ = trace()
    a = [encode_decision(d) for d in forward_and_govern(logs, seed=1)]
    b = [encode_decision(d) for d in forward_and_govern(logs, seed=2)]
    assert a == b
