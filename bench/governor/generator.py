"""The writer of the governor benchmark's synthetic governance log (:class:`Generator`).

The log is in the order the governance topic would hold it; it is folded through ``step`` as it
is written, because the recovery executors and the operator (:mod:`bench.governor.actors`) react
to the decisions.
"""

from __future__ import annotations

import hashlib
import heapq
import random
import time
import uuid
from collections import Counter
from datetime import timedelta
from typing import Any

from bench.console import ProgressLines
from bench.governor.actors import command, react
from bench.governor.fleet import (
    BENCH_NAMESPACE,
    DRA_DRIVER,
    FIRST_VERSION,
    PLUGIN_RESOURCE,
    T0,
    XID,
    GeneratedLog,
    Gpu,
    Options,
)
from services.domain.events import DeviceSource, Health
from services.domain.governance.decisions import encode_decision
from services.domain.governance.device_state import GovState
from services.domain.governance.input_codec import encode_input
from services.domain.governance.inputs import (
    GovernanceInput,
    HealthTransition,
    InventoryConflict,
    OperatorCommand,
    RecoveryLeaseRequested,
    RecoveryReport,
    RecoveryStage,
    WatermarkAdvanced,
)
from services.domain.governance.machine import step
from services.domain.governance.policy import GovernancePolicy
from services.domain.governance.state import GovernorState
from services.domain.node_events import NodeHeartbeat, NodeResourcesChanged


class Generator:
    """Writes the log record by record, folding it through ``step`` to drive the executor model.

    Event time advances by ``duration / records`` per record. Scheduled records (heartbeats,
    episode steps, executor actions, commands...) are emitted when due; watermarks every
    ``watermark_every`` records; every other slot is a background transition (first sightings,
    then DRA claim churn).
    """

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.rng = random.Random(opts.seed)
        self.policy = GovernancePolicy()
        self.state = GovernorState()
        self.dt = opts.duration / opts.records
        self.version = FIRST_VERSION
        self.offsets = [0] * opts.partitions
        self.heap: list[tuple[float, int, str, tuple[Any, ...]]] = []
        self.order = 0
        self.payloads: list[bytes] = []
        self.kinds: Counter[str] = Counter()
        self.transitions: Counter[str] = Counter()
        self.decision_kinds: Counter[str] = Counter()
        self.hash = hashlib.blake2b(digest_size=16)
        self.decisions = 0
        self.late_max = 0.0
        self.payload_bytes = 0
        self.nodes = [f"gpu-node-{i + 1:05d}" for i in range(opts.nodes)]
        self.node_devices: list[list[int]] = [[] for _ in range(opts.nodes)]
        self.gpus: list[Gpu] = []
        for d in range(opts.devices):
            n, local = d % opts.nodes, d // opts.nodes
            gpu_uuid = f"GPU-{uuid.uuid5(BENCH_NAMESPACE, f'{opts.seed}/gpu/{d}')}"
            dra = local % 2 == 1
            node = self.nodes[n]
            key = f"{DRA_DRIVER}/{node}/gpu-{local}" if dra else gpu_uuid
            self.gpus.append(Gpu(d, n, node, local, dra, gpu_uuid, key))
            self.node_devices[n].append(d)
        self.dra_devices = [g.index for g in self.gpus if g.dra] or list(range(opts.devices))
        self.unseen = list(range(opts.devices))
        self.rng.shuffle(self.unseen)
        self.unseen.reverse()  # pop() from the end
        self.outages: dict[int, tuple[float, float]] = {}
        self.commands: list[OperatorCommand] = []
        self.manual: list[tuple[str, str]] = []
        self.command_script: tuple[str, ...] = (
            "quarantine",
            "viewer",
            "extend",
            "release-system",
            "quarantine",
            "release-manual",
            "pause",
            "resume",
            "break-glass",
            "reset-breaker",
            "retry",
            "unknown-device",
        )

    # -- scheduling --------------------------------------------------------------------------

    def at(self, seconds: float, kind: str, *args: Any) -> None:
        self.order += 1
        heapq.heappush(self.heap, (seconds, self.order, kind, args))

    def plan(self) -> None:
        opts, rng = self.opts, self.rng
        for n in range(opts.nodes):
            self.at((n + 0.5) * opts.heartbeat_interval / opts.nodes, "heartbeat", n)
        # Episodes start once most devices were seen (the first sightings take the first part of
        # the log) and end before its end, most of them.
        lo, hi = 0.25 * opts.duration, 0.85 * opts.duration
        pool = list(range(opts.devices))
        rng.shuffle(pool)
        n_unhealthy = round(opts.unhealthy_share * opts.devices)
        n_unknown = round(opts.unknown_share * opts.devices)
        n_flapping = round(opts.flapping_share * n_unhealthy)
        unhealthy, pool = pool[:n_unhealthy], pool[n_unhealthy:]
        unknown, pool = pool[:n_unknown], pool[n_unknown:]
        for i, d in enumerate(unhealthy):
            start = rng.uniform(lo, hi)
            if i < n_flapping:  # three Unhealthy transitions within the flap window
                for k in range(3):
                    self.at(start + 180 * k, "health", d, Health.UNHEALTHY, 1 if k == 0 else 0)
                    self.at(start + 180 * k + 90, "health", d, Health.HEALTHY, -1 if k == 2 else 0)
            else:
                self.at(start, "health", d, Health.UNHEALTHY, 1)
                self.at(start + rng.uniform(60, 300), "health", d, Health.HEALTHY, -1)
        for d in unknown:
            start = rng.uniform(lo, hi)
            length = rng.uniform(30, 250) if rng.random() < 0.5 else rng.uniform(350, 900)
            self.at(start, "health", d, Health.UNKNOWN, 1)
            self.at(start + length, "health", d, Health.HEALTHY, -1)
        busy = set(unhealthy) | set(unknown)
        nodes = list(range(opts.nodes))
        rng.shuffle(nodes)
        for n in nodes[: opts.bad_nodes]:
            start = rng.uniform(lo, hi)
            members = [d for d in self.node_devices[n] if d not in busy]
            for k, d in enumerate(members[: max(2, (len(members) * 5 + 7) // 8)]):
                self.at(start + 2 * k, "health", d, Health.UNHEALTHY, 1)
                self.at(start + 600 + 2 * k, "health", d, Health.HEALTHY, -1)
        rest = nodes[opts.bad_nodes :]
        for n in rest[: opts.heartbeat_outages]:
            start = rng.uniform(lo, hi)
            self.outages[n] = (start, start + 300.0)
        rest = rest[opts.heartbeat_outages :]
        for n in rest[: opts.plugin_losses]:
            start = rng.uniform(lo, hi)
            self.at(start, "resources", n, 1)
            self.at(start + 200, "resources", n, 0)
        for _ in range(opts.conflicts):
            start = rng.uniform(lo, hi)
            d = rng.randrange(opts.devices)
            self.at(start, "conflict", d, True)
            self.at(start + 300, "conflict", d, False)
        for j in range(opts.commands):
            self.at(0.3 * opts.duration + 0.6 * opts.duration * j / max(opts.commands, 1), "cmd", j)

    # -- records ------------------------------------------------------------------------------

    def now(self) -> float:
        return len(self.payloads) * self.dt

    def emit(self, record: GovernanceInput, label: str) -> None:
        seq = len(self.payloads)
        # A copy: orjson's result keeps the ~4 KB buffer it was built in (realloc'ed down in
        # place), so holding 200k of them would take ~1 GB of RSS (see bench/load.py).
        payload = memoryview(encode_input(record)).tobytes()
        self.payloads.append(payload)
        self.payload_bytes += len(payload)
        self.kinds[record.type] += 1
        if isinstance(record, HealthTransition):
            self.transitions[label] += 1
        decisions = step(self.state, record, seq, self.policy)
        if (seq + 1) % self.opts.batch == 0:
            self.state.clear_dirty()
        if decisions:
            self.decisions += len(decisions)
            for decision in decisions:
                self.decision_kinds[decision.kind.value] += 1
                self.hash.update(encode_decision(decision))
                self.hash.update(b"\n")
            react(self, decisions)

    def transition(self, d: int, health: Health, label: str, *, new_claim: bool = False) -> None:
        g = self.gpus[d]
        now = self.now()
        self.version += 1
        partition = g.node_index % self.opts.partitions
        self.offsets[partition] += 1 + self.rng.randrange(8)  # other records in between
        if g.dra:
            if new_claim or g.claim == 0:
                g.claim += 1
            claim_uid = uuid.uuid5(BENCH_NAMESPACE, f"{self.opts.seed}/claim/{d}/{g.claim}")
            resource_id = f"k8s.{DRA_DRIVER}/claim={claim_uid}-gpu-{g.local}"
            resource_name = "claim:bench/gpu"
            claim: str | None = f"job-{g.node_index + 1}-{g.local}-{g.claim}-gpu"
            pods: tuple[str, ...] = (f"bench/job-{g.node_index + 1}-{g.local}-{g.claim}",)
            identity = "resolved"
        else:
            resource_id, resource_name, claim = g.uuid, PLUGIN_RESOURCE, None
            pods = (f"bench/job-{g.node_index + 1}-{g.local // 2}",)
            identity = "as-reported"
        g.seen = True
        self.emit(
            HealthTransition(
                node=g.node,
                resource_id=resource_id,
                resource_name=resource_name,
                source=DeviceSource.DRA if g.dra else DeviceSource.DEVICE_PLUGIN,
                health=health,
                status_version=self.version,
                observed_at=T0 + timedelta(seconds=now),
                partition=partition,
                offset=self.offsets[partition],
                message=XID if health is Health.UNHEALTHY else None,
                resource_claim=claim,
                pods=pods,
                device_id=g.key,
                identity=identity,
                uuid=g.uuid,
            ),
            label,
        )

    def background(self) -> None:
        """First sightings, then DRA claim churn on devices that are Available and not in an
        episode (a quarantined GPU gets no new claims)."""
        while self.unseen:
            d = self.unseen.pop()
            if not self.gpus[d].seen:
                self.transition(d, Health.HEALTHY, "first seen")
                return
        rng = self.rng
        d = self.dra_devices[0]
        for _ in range(20):
            d = self.dra_devices[rng.randrange(len(self.dra_devices))]
            g = self.gpus[d]
            if g.episodes:
                continue
            device = self.state.devices.get((g.node, g.key))
            if device is None or device.state is GovState.AVAILABLE:
                break
        self.transition(d, Health.HEALTHY, "claim churn (Healthy -> Healthy)", new_claim=True)

    def watermarks(self) -> None:
        now = self.now()
        for p in range(self.opts.partitions):
            if len(self.payloads) >= self.opts.records:
                return
            lag = 0.2 * (p % 3)  # partitions a little apart: the minimum matters
            self.emit(
                WatermarkAdvanced(p, self.opts.partitions, T0 + timedelta(seconds=now - lag)), ""
            )

    def scheduled(self, due: float, kind: str, args: tuple[Any, ...]) -> None:
        now = self.now()
        self.late_max = max(self.late_max, now - due)
        at = T0 + timedelta(seconds=now)
        if kind == "heartbeat":
            (n,) = args
            self.at(due + self.opts.heartbeat_interval, "heartbeat", n)
            window = self.outages.get(n)
            if window is not None and window[0] <= due < window[1]:
                return  # the node's Lease is not renewed: no heartbeat
            self.version += 1
            self.emit(
                NodeHeartbeat(
                    node=self.nodes[n],
                    renewed_at=T0 + timedelta(seconds=due),
                    observed_at=at,
                    lease_version=self.version,
                ),
                "",
            )
        elif kind == "health":
            d, health, episode = args
            g = self.gpus[d]
            if episode > 0:
                g.episodes += 1
            label = {
                Health.UNHEALTHY: "Unhealthy",
                Health.UNKNOWN: "Unknown",
                Health.HEALTHY: "back to Healthy",
            }[health]
            self.transition(d, health, label)
            if episode < 0:
                g.episodes -= 1
        elif kind == "resources":
            n, missing = args
            count = sum(1 for d in self.node_devices[n] if not self.gpus[d].dra)
            self.version += 1
            self.emit(
                NodeResourcesChanged(
                    node=self.nodes[n],
                    capacity=((PLUGIN_RESOURCE, count),),
                    allocatable=((PLUGIN_RESOURCE, count - missing),),
                    status_version=self.version,
                    observed_at=at,
                ),
                "",
            )
        elif kind == "conflict":
            d, active = args
            g = self.gpus[d]
            self.emit(
                InventoryConflict(
                    kind="plugin-and-dra",
                    node=g.node,
                    subject=g.uuid,
                    detail="published by the device plugin and by a ResourceSlice",
                    active=active,
                    observed_at=at,
                ),
                "",
            )
        elif kind == "cmd":
            command(self, args[0], at)
        elif kind == "lease":
            node, resource_id, holder = args
            self.emit(RecoveryLeaseRequested(node, resource_id, holder, at), "")
        elif kind == "report":
            node, resource_id, stage, holder, token, passed = args
            self.emit(
                RecoveryReport(
                    node=node,
                    resource_id=resource_id,
                    stage=RecoveryStage(stage),
                    passed=passed,
                    holder=holder,
                    fencing_token=token,
                    reported_at=at,
                    detail="ok" if passed else "dcgmi diag: memory test failed",
                ),
                "",
            )
        else:  # pragma: no cover
            raise AssertionError(kind)

    def run(self) -> GeneratedLog:
        opts = self.opts
        started = time.perf_counter()
        self.plan()
        progress = ProgressLines("generate", opts.records)
        next_watermark = opts.watermark_every
        while len(self.payloads) < opts.records:
            count = len(self.payloads)
            if count >= next_watermark:
                next_watermark += opts.watermark_every
                self.watermarks()
            elif self.heap and self.heap[0][0] <= self.now():
                due, _, kind, args = heapq.heappop(self.heap)
                self.scheduled(due, kind, args)
            else:
                self.background()
            progress.update(count, f"{self.decisions:,} decisions")
        progress.update(len(self.payloads), f"{self.decisions:,} decisions", force=True)
        return GeneratedLog(
            payloads=self.payloads,
            kinds=self.kinds,
            transitions=self.transitions,
            decisions=self.decisions,
            decision_kinds=self.decision_kinds,
            digest=self.hash.hexdigest(),
            seconds=time.perf_counter() - started,
            event_seconds=opts.duration,
            late_seconds_max=round(self.late_max, 3),
            payload_bytes=self.payload_bytes,
        )
