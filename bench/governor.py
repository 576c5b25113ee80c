#!/usr/bin/env python
"""Benchmark of the pure governor: ``services.domain.governance.machine.step`` over a synthetic
governance log, no Kafka, no PostgreSQL, no I/O.

1. ``generate`` -- a deterministic (seeded) governance log of N records for a fleet of D GPUs on
   M nodes (half device-plugin, half DRA), in the order the governance topic would hold them:

   - ``HealthTransition``: every device first seen (Healthy), then DRA claim churn (the same
     physical GPU under a new claim: a new CDI-form resourceID, Healthy -> Healthy for the
     governor), Unhealthy episodes (quarantine -> recovery), flapping devices, Unknown episodes
     (short ones end tolerated, long ones are restricted), a few "bad nodes" (most of their devices
     Unhealthy at once: escalation);
   - ``NodeHeartbeat``: one per node per ``--heartbeat-interval`` seconds of event time (the
     watcher's coarsening), with a few nodes losing theirs for a while (node incidents);
   - ``WatermarkAdvanced``: every ``--watermark-every`` records, one per health-topic partition;
   - ``NodeResourcesChanged`` (a device plugin losing a device, then back), ``InventoryConflict``
     raised and cleared, ``OperatorCommand``\\ s (manual quarantine, extend, release, break-glass,
     pause/resume, breaker reset, a viewer's command, a retried command, an unknown device);
   - ``RecoveryLeaseRequested`` / ``RecoveryReport``: an executor model reacting to the decisions
     (a lease request a few seconds after each probe/canary starts, sometimes a competing one; a
     report after each grant, mostly passed, sometimes a stale token).

   The executor reacts to decisions, so the generator folds the log through ``step`` as it writes
   it (closed loop); the timed passes then fold the finished log open loop, like a replay of the
   topic, and must make the same decisions (a check).
2. ``baseline`` -- ``decode_input`` of every record's encoded bytes (``encode_input``): the cost of
   just reading the log. Ratios are against it.
3. ``step`` -- a fresh ``GovernorState`` and ``step(state, record, offset, policy)`` over the decoded
   records, ``state.clear_dirty()`` every ``--batch`` records (the agent's batch); decisions kept.
   Decode and step are repeated ``--repeat`` times, interleaved; the best time counts (the machine
   is shared), the median is reported too.
4. ``snapshot`` -- the final state: ``orjson.dumps(state.snapshot())`` (size, time),
   ``orjson.loads`` + ``GovernorState.restore`` (time), round trip checked.
5. ``restart`` -- fold the first half, snapshot, restore from the bytes, fold the second half:
   decisions and final snapshot byte-identical to the uninterrupted fold (OK/FAIL); this pass also
   times ``step`` per record type.

Run from the repository root: ``.venv/bin/python bench/governor.py --help``.
"""

from __future__ import annotations

import gc
import hashlib
import heapq
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console
from rich.table import Table

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run as a script: make `services` importable without install
    sys.path.insert(0, str(REPO_ROOT))

from services.domain.events import DeviceSource, Health  # noqa: E402
from services.domain.governance.decisions import Decision, DecisionKind, encode_decision  # noqa: E402
from services.domain.governance.device_state import GovState, QuarantineKind  # noqa: E402
from services.domain.governance.input_codec import decode_input, encode_input  # noqa: E402
from services.domain.governance.inputs import (  # noqa: E402
    CommandAction,
    GovernanceInput,
    HealthTransition,
    InventoryConflict,
    OperatorCommand,
    RecoveryLeaseRequested,
    RecoveryReport,
    RecoveryStage,
    Role,
    WatermarkAdvanced,
)
from services.domain.governance.machine import step  # noqa: E402
from services.domain.governance.policy import GovernancePolicy  # noqa: E402
from services.domain.governance.state import GovernorState  # noqa: E402
from services.domain.node_events import NodeHeartbeat, NodeResourcesChanged  # noqa: E402

T0 = datetime(2026, 11, 29, 0, 0, tzinfo=UTC)
BENCH_NAMESPACE = uuid.UUID("0b7f3f4e-2f7e-4d0c-9a43-7c1f4d6c9e21")
"""uuid5 namespace of the synthetic GPU UUIDs and claim UIDs (fixed: same IDs every run)."""
FIRST_VERSION = 1_000_000
PLUGIN_RESOURCE = "nvidia.com/gpu"
DRA_DRIVER = "gpu.nvidia.com"
XID = "XID 79: GPU has fallen off the bus"

console = Console(highlight=False, width=None if sys.stdout.isatty() else 150)


# --- small helpers ---------------------------------------------------------------------------


def _proc_status() -> dict[str, int]:
    """VmRSS / VmHWM (kB) of this process."""
    values: dict[str, int] = {}
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    name, rest = line.split(":", 1)
                    values[name] = int(rest.split()[0])
    except (OSError, ValueError):
        pass
    return values


def _rss_mb() -> float:
    return round(_proc_status().get("VmRSS", 0) / 1024, 1)


def _peak_rss_mb() -> float:
    hwm = _proc_status().get("VmHWM")
    if hwm is None:  # not Linux: ru_maxrss is kB on Linux, bytes on macOS
        hwm = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(hwm / 1024, 1)


class Progress:
    """Progress lines (at most one per 2 s, and the last one) for a long loop."""

    def __init__(self, label: str, total: int, unit: str = "records") -> None:
        self.label, self.total, self.unit = label, total, unit
        self.started = time.perf_counter()
        self._last = 0.0

    def update(self, done: int, extra: str = "", *, force: bool = False) -> None:
        now = time.perf_counter()
        if not force and now - self._last < 2.0:
            return
        self._last = now
        elapsed = max(now - self.started, 1e-9)
        console.print(
            f"  [{self.label}] {done:,}/{self.total:,} {self.unit} ({done / elapsed:,.0f}/s, "
            f"{elapsed:.1f} s) {extra}".rstrip()
        )


def _digest(decisions: Sequence[Decision]) -> tuple[str, int]:
    """blake2b of the decisions' wire bytes (in order) and their total size."""
    h = hashlib.blake2b(digest_size=16)
    size = 0
    for decision in decisions:
        data = encode_decision(decision)
        size += len(data)
        h.update(data)
        h.update(b"\n")
    return h.hexdigest(), size


# --- the synthetic fleet and its log ------------------------------------------------------------


@dataclass(slots=True)
class Gpu:
    index: int
    node_index: int
    node: str
    local: int
    dra: bool
    uuid: str
    key: str
    """The governor's key: ``driver/pool/device`` for DRA, the GPU UUID (the resourceID) for the
    device plugin."""
    claim: int = 0
    seen: bool = False
    episodes: int = 0
    """Episodes in progress (the churn leaves such a device alone)."""


@dataclass
class GeneratedLog:
    payloads: list[bytes]
    kinds: Counter[str]
    transitions: Counter[str]
    decisions: int
    decision_kinds: Counter[str]
    digest: str
    seconds: float
    event_seconds: float
    late_seconds_max: float
    """Most event time a scheduled record (heartbeat, episode step...) was emitted after its due
    time because the log had no room for it: 0 means the log's rate kept up with the schedule."""
    payload_bytes: int


@dataclass
class Options:
    records: int
    devices: int
    nodes: int
    partitions: int
    duration: float
    heartbeat_interval: float
    watermark_every: int
    unhealthy_share: float
    unknown_share: float
    flapping_share: float
    bad_nodes: int
    heartbeat_outages: int
    plugin_losses: int
    conflicts: int
    commands: int
    executors: int
    batch: int
    repeat: int
    seed: int
    tune_gc: bool
    json_out: Path | None


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
        self.command_script = (
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
        # place), so holding 200k of them would take ~1 GB of RSS (see bench/pipeline.py).
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
            self.react(decisions)

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
            self.command(args[0], at)
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

    def react(self, decisions: Sequence[Decision]) -> None:
        """The recovery executors: lease requests after a probe/canary starts, reports after a
        grant; sometimes a competing request or a stale report."""
        rng, now, executors = self.rng, self.now(), self.opts.executors
        for decision in decisions:
            if decision.kind is DecisionKind.RECOVERY_STAGE_STARTED:
                if decision.details.get("stage") not in ("probe", "canary"):
                    continue
                holder = rng.randrange(executors)
                when = now + rng.uniform(1, 10)
                self.at(when, "lease", decision.node, decision.resource_id, f"executor-{holder}")
                if rng.random() < 0.05:
                    other = f"executor-{(holder + 1) % executors}"
                    self.at(when + 0.5, "lease", decision.node, decision.resource_id, other)
            elif decision.kind is DecisionKind.LEASE_GRANTED:
                d = decision.details
                token = int(d["fencingToken"])
                self.at(
                    now + rng.uniform(5, 45),
                    "report",
                    decision.node,
                    decision.resource_id,
                    d["stage"],
                    d["holder"],
                    token,
                    rng.random() < 0.93,
                )
                if token > 1 and rng.random() < 0.05:
                    self.at(
                        now + rng.uniform(5, 45),
                        "report",
                        decision.node,
                        decision.resource_id,
                        d["stage"],
                        d["holder"],
                        token - 1,
                        True,
                    )

    def pick(self, want: Callable[[Any], bool]) -> tuple[str, str] | None:
        """A device key (node, key) whose governance state satisfies ``want`` (random tries, then
        a scan in key order)."""
        devices = self.state.devices
        if not devices:
            return None
        for _ in range(50):
            g = self.gpus[self.rng.randrange(len(self.gpus))]
            device = devices.get((g.node, g.key))
            if device is not None and want(device):
                return device.key
        for key in sorted(devices):
            if want(devices[key]):
                return key
        return None

    def command(self, j: int, at: datetime) -> None:
        kind = self.command_script[j % len(self.command_script)]
        rng = self.rng

        def cmd(action: CommandAction, role: Role, key: tuple[str, str] | None, **kw: Any) -> None:
            command = OperatorCommand(
                command_id=f"cmd-{j:04d}",
                action=action,
                actor={Role.VIEWER: "victor", Role.OPERATOR: "olga", Role.ADMIN: "ada"}[role],
                role=role,
                requested_at=at,
                node=None if key is None else key[0],
                resource_id=None if key is None else key[1],
                **kw,
            )
            self.commands.append(command)
            self.emit(command, "")

        def available(device: Any) -> bool:
            return device.state is GovState.AVAILABLE

        def manual(device: Any) -> bool:
            q = device.quarantine
            return q is not None and q.kind is QuarantineKind.MANUAL

        def system(device: Any) -> bool:
            q = device.quarantine
            return q is not None and q.kind is QuarantineKind.SYSTEM

        expires = at + timedelta(seconds=rng.uniform(300, 1200))
        if kind in ("quarantine", "viewer"):
            role = Role.VIEWER if kind == "viewer" else Role.OPERATOR
            key = self.pick(available)
            cmd(
                CommandAction.QUARANTINE,
                role,
                key,
                reason="ECC errors reported",
                expires_at=expires,
            )
        elif kind == "extend":
            key = self.pick(manual)
            until = at + timedelta(seconds=2400)
            cmd(
                CommandAction.EXTEND, Role.OPERATOR, key, reason="waiting for RMA", expires_at=until
            )
        elif kind == "release-manual":
            cmd(CommandAction.RELEASE, Role.OPERATOR, self.pick(manual), reason="replaced")
        elif kind == "release-system":  # rejected unless it passed probe and canary
            cmd(CommandAction.RELEASE, Role.OPERATOR, self.pick(system), reason="looks fine")
        elif kind == "break-glass":
            key = self.pick(system)
            cmd(
                CommandAction.RELEASE, Role.ADMIN, key, reason="vendor cleared it", break_glass=True
            )
        elif kind == "pause":
            cmd(CommandAction.PAUSE, Role.ADMIN, None, reason="maintenance window")
        elif kind == "resume":
            cmd(CommandAction.RESUME, Role.ADMIN, None, reason="maintenance over")
        elif kind == "reset-breaker":
            cmd(CommandAction.RESET_BREAKER, Role.ADMIN, None, reason="false alarm")
        elif kind == "retry" and self.commands:
            previous = self.commands[-1]  # a client retry: the same command id again
            self.emit(previous, "")
        else:
            cmd(
                CommandAction.QUARANTINE,
                Role.OPERATOR,
                ("gpu-node-99999", "GPU-00000000-0000-0000-0000-000000000000"),
                reason="typo",
            )

    # -- the loop -----------------------------------------------------------------------------

    def run(self) -> GeneratedLog:
        opts = self.opts
        started = time.perf_counter()
        self.plan()
        progress = Progress("generate", opts.records)
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


# --- timed passes ----------------------------------------------------------------------------


def decode_pass(payloads: Sequence[bytes], label: str) -> tuple[list[GovernanceInput], float]:
    progress = Progress(label, len(payloads))
    out: list[GovernanceInput] = []
    append = out.append
    chunk = 20_000
    started = time.perf_counter()
    for start in range(0, len(payloads), chunk):
        for payload in payloads[start : start + chunk]:
            append(decode_input(payload))
        progress.update(len(out))
    seconds = time.perf_counter() - started
    progress.update(len(out), force=True)
    return out, seconds


@dataclass
class Fold:
    state: GovernorState
    decisions: list[Decision]
    seconds: float
    by_kind_seconds: dict[str, float] = field(default_factory=dict)


def fold(
    records: Sequence[GovernanceInput],
    policy: GovernancePolicy,
    *,
    batch: int,
    label: str,
    state: GovernorState | None = None,
    first_seq: int = 0,
    per_kind: dict[str, float] | None = None,
) -> Fold:
    """``step`` over ``records`` (offsets from ``first_seq``), ``clear_dirty`` every ``batch``
    records. With ``per_kind``, also the time of each record type (perf_counter per record: a
    little slower; used by the restart pass, not the headline)."""
    state = GovernorState() if state is None else state
    decisions: list[Decision] = []
    extend = decisions.extend
    progress = Progress(label, len(records))
    perf = time.perf_counter
    started = perf()
    seq = first_seq
    for start in range(0, len(records), batch):
        chunk = records[start : start + batch]
        if per_kind is None:
            for record in chunk:
                extend(step(state, record, seq, policy))
                seq += 1
        else:
            for record in chunk:
                t = perf()
                extend(step(state, record, seq, policy))
                per_kind[record.type] = per_kind.get(record.type, 0.0) + perf() - t
                seq += 1
        state.clear_dirty()
        progress.update(start + len(chunk), f"{len(decisions):,} decisions")
    seconds = perf() - started
    progress.update(len(records), f"{len(decisions):,} decisions", force=True)
    return Fold(state, decisions, seconds)


def snapshot_bytes(state: GovernorState) -> tuple[bytes, float]:
    started = time.perf_counter()
    data = orjson.dumps(state.snapshot())
    return data, time.perf_counter() - started


def restore(data: bytes, policy: GovernancePolicy) -> tuple[GovernorState, float, float]:
    """(state, seconds of orjson.loads, seconds of GovernorState.restore)."""
    started = time.perf_counter()
    obj = orjson.loads(data)
    parsed = time.perf_counter()
    state = GovernorState.restore(
        obj["devices"], obj["nodes"], obj["fleet"], policy.heartbeat_grace_seconds
    )
    return state, parsed - started, time.perf_counter() - parsed


# --- the run -----------------------------------------------------------------------------------


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        info["loadavg_at_start"] = Path("/proc/loadavg").read_text().split()[:3]
    except OSError:
        pass
    return info


def code_version() -> dict[str, Any]:
    def git(*args: str) -> str:
        try:
            done = subprocess.run(
                ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.SubprocessError):
            return ""
        return done.stdout.strip()

    changed = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": git("rev-parse", "HEAD"), "modified_files": len(changed.splitlines())}


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run(opts: Options) -> int:
    policy = GovernancePolicy()
    report: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(opts).items()},
        "machine": machine_info(),
        "code": code_version(),
        "policy": asdict(policy),
    }
    console.rule("devicestate governor benchmark (pure step, no I/O)")
    console.print(
        f"records {opts.records:,}, devices {opts.devices:,}, nodes {opts.nodes:,}, "
        f"partitions {opts.partitions}, event time {opts.duration:,.0f} s, heartbeat every "
        f"{opts.heartbeat_interval:g} s, watermarks every {opts.watermark_every} records, "
        f"Unhealthy {opts.unhealthy_share:.1%} / Unknown {opts.unknown_share:.1%} of devices, "
        f"batch {opts.batch}, repeat {opts.repeat}, seed {opts.seed}"
    )

    # ---- 1. generate ---------------------------------------------------------------------
    console.rule("1/5 generate (closed loop: the executors react to the decisions)")
    log = Generator(opts).run()
    payloads = log.payloads
    n = len(payloads)
    composition = dict(sorted(log.kinds.items(), key=lambda kv: -kv[1]))
    report["log"] = {
        "records": n,
        "by_type": composition,
        "transitions": dict(sorted(log.transitions.items(), key=lambda kv: -kv[1])),
        "mean_record_bytes": round(log.payload_bytes / max(n, 1), 1),
        "event_seconds": log.event_seconds,
        "late_seconds_max": log.late_seconds_max,
        "generation_seconds": round(log.seconds, 2),
        "generation_decisions": log.decisions,
        "decisions_by_kind": dict(sorted(log.decision_kinds.items(), key=lambda kv: -kv[1])),
    }
    console.print(
        f"  {n:,} records in {log.seconds:.1f} s; {log.payload_bytes / n:.0f} B/record; "
        f"scheduled records at most {log.late_seconds_max:g} s of event time late"
    )
    console.print(f"  by type: {composition}")
    console.print(f"  transitions: {report['log']['transitions']}")
    console.print(f"  {log.decisions:,} decisions: {report['log']['decisions_by_kind']}")
    if log.late_seconds_max > 5:
        console.print(
            f"  [yellow]scheduled records ran up to {log.late_seconds_max:.0f} s of event time "
            "late: the log is too short for the schedule (raise --records or --duration)[/yellow]"
        )
    rss_after_generate = _rss_mb()

    if opts.tune_gc:
        from services.runtime.loop import tune_gc

        tune_gc()  # what the worker does at start-up (streams/cli.py)

    # ---- 2+3. baseline and step, interleaved ------------------------------------------------
    decode_times: list[float] = []
    step_times: list[float] = []
    step_cpu: list[float] = []
    first: Fold | None = None
    records: list[GovernanceInput] = []
    rss_before_fold = rss_after_fold = 0.0
    for r in range(opts.repeat):
        console.rule(f"2/5 (a) baseline: decode_input, pass {r + 1}/{opts.repeat}")
        records = []  # free the previous pass's records first
        records, seconds = decode_pass(payloads, "decode")
        decode_times.append(seconds)
        console.print(f"  decoded {n:,} records in {seconds:.3f} s = {n / seconds:,.0f} records/s")
        console.rule(f"3/5 (b) step, pass {r + 1}/{opts.repeat}")
        gc.collect()
        rss_before = _rss_mb()
        cpu0 = _cpu()
        result = fold(records, policy, batch=opts.batch, label="step")
        step_cpu.append(_cpu() - cpu0)
        step_times.append(result.seconds)
        console.print(
            f"  folded {n:,} records in {result.seconds:.3f} s = "
            f"{n / result.seconds:,.0f} records/s, {len(result.decisions):,} decisions "
            f"({len(result.decisions) / result.seconds:,.0f}/s); CPU {step_cpu[-1]:.2f} s"
        )
        if first is None:
            first = result
            rss_before_fold, rss_after_fold = rss_before, _rss_mb()
        else:
            del result
    assert first is not None

    digest, decision_bytes = _digest(first.decisions)
    started = time.perf_counter()
    for decision in first.decisions:
        encode_decision(decision)
    encode_seconds = time.perf_counter() - started
    same_as_generation = digest == log.digest and len(first.decisions) == log.decisions

    # ---- 4. snapshot / restore of the final state ------------------------------------------
    console.rule("4/5 snapshot and restore (final state)")
    final_bytes, snap_seconds = snapshot_bytes(first.state)
    restored, loads_seconds, restore_seconds = restore(final_bytes, policy)
    round_trip = orjson.dumps(restored.snapshot()) == final_bytes
    console.print(
        f"  snapshot {len(final_bytes) / 1e6:,.2f} MB ({len(first.state.devices):,} devices, "
        f"{len(first.state.nodes):,} nodes) in {snap_seconds:.3f} s; orjson.loads "
        f"{loads_seconds:.3f} s + restore {restore_seconds:.3f} s; round trip "
        f"{'OK' if round_trip else 'FAIL'}"
    )
    del restored

    # ---- 5. restart at half -------------------------------------------------------------
    console.rule("5/5 restart: fold half, snapshot, restore, fold the rest")
    half = n // 2
    per_kind: dict[str, float] = {}
    a = fold(records[:half], policy, batch=opts.batch, label="step 1st half", per_kind=per_kind)
    half_bytes, half_snap_seconds = snapshot_bytes(a.state)
    state_b, half_loads, half_restore = restore(half_bytes, policy)
    b = fold(
        records[half:],
        policy,
        batch=opts.batch,
        label="step 2nd half",
        state=state_b,
        first_seq=half,
        per_kind=per_kind,
    )
    restarted = a.decisions + b.decisions
    same_decisions = len(restarted) == len(first.decisions) and all(
        encode_decision(x) == encode_decision(y)
        for x, y in zip(restarted, first.decisions, strict=True)
    )
    same_state = orjson.dumps(b.state.snapshot()) == final_bytes
    restart_ok = same_decisions and same_state
    console.print(
        f"  at record {half:,}: snapshot {len(half_bytes) / 1e6:,.2f} MB in "
        f"{half_snap_seconds:.3f} s, loads {half_loads:.3f} s + restore {half_restore:.3f} s; "
        f"decisions {'identical' if same_decisions else 'DIFFERENT'} ({len(restarted):,}), "
        f"final state {'identical' if same_state else 'DIFFERENT'}: "
        f"[bold]{'OK' if restart_ok else 'FAIL'}[/bold]"
    )
    kinds_count = Counter(type(r).__name__ for r in records)
    by_kind = {
        kind: {
            "records": kinds_count[kind],
            "seconds": round(seconds, 3),
            "us_per_record": round(seconds / max(kinds_count[kind], 1) * 1e6, 1),
            "share": round(seconds / max(sum(per_kind.values()), 1e-9), 3),
        }
        for kind, seconds in sorted(per_kind.items(), key=lambda kv: -kv[1])
    }

    # ---- results ------------------------------------------------------------------------
    best_decode, best_step = min(decode_times), min(step_times)
    med_decode, med_step = statistics.median(decode_times), statistics.median(step_times)
    decode_rate, step_rate = n / best_decode, n / best_step
    decisions = len(first.decisions)
    results: dict[str, Any] = {
        "decode": {
            "seconds_best": round(best_decode, 3),
            "seconds_all": [round(t, 3) for t in decode_times],
            "records_per_second": round(decode_rate, 1),
            "records_per_second_median": round(n / med_decode, 1),
            "us_per_record": round(best_decode / n * 1e6, 2),
        },
        "step": {
            "seconds_best": round(best_step, 3),
            "seconds_all": [round(t, 3) for t in step_times],
            "cpu_seconds_all": [round(t, 3) for t in step_cpu],
            "records_per_second": round(step_rate, 1),
            "records_per_second_median": round(n / med_step, 1),
            "us_per_record": round(best_step / n * 1e6, 2),
            "ratio_to_decode": round(step_rate / decode_rate, 3),
            "decisions": decisions,
            "decisions_per_second": round(decisions / best_step, 1),
            "decode_plus_step_records_per_second": round(n / (best_decode + best_step), 1),
            "by_record_type": by_kind,
        },
        "encode_decisions": {
            "seconds": round(encode_seconds, 3),
            "decisions_per_second": round(decisions / max(encode_seconds, 1e-9), 1),
            "bytes": decision_bytes,
        },
        "snapshot": {
            "bytes": len(final_bytes),
            "devices": len(first.state.devices),
            "nodes": len(first.state.nodes),
            "snapshot_seconds": round(snap_seconds, 3),
            "loads_seconds": round(loads_seconds, 3),
            "restore_seconds": round(restore_seconds, 3),
            "round_trip": "OK" if round_trip else "FAIL",
        },
        "restart": {
            "at_record": half,
            "snapshot_bytes": len(half_bytes),
            "snapshot_seconds": round(half_snap_seconds, 3),
            "loads_seconds": round(half_loads, 3),
            "restore_seconds": round(half_restore, 3),
            "first_half_seconds": round(a.seconds, 3),
            "second_half_seconds": round(b.seconds, 3),
            "identical_decisions": same_decisions,
            "identical_final_state": same_state,
            "verdict": "OK" if restart_ok else "FAIL",
        },
        "replay_equals_generation": "OK" if same_as_generation else "FAIL",
        "memory": {
            "peak_rss_mb": _peak_rss_mb(),
            "rss_after_generate_mb": rss_after_generate,
            "rss_before_fold_mb": rss_before_fold,
            "rss_after_fold_mb": rss_after_fold,
            "fold_growth_mb": round(rss_after_fold - rss_before_fold, 1),
        },
    }
    report["results"] = results

    console.rule("results")
    table = Table(title="devicestate governor benchmark", show_lines=False)
    for name, justify in (("figure", "left"), ("value", "right"), ("x decode", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    table.add_row("(a) decode_input (baseline)", f"{decode_rate:,.0f} records/s", "1.00x")
    table.add_row(
        "(b) step",
        f"{step_rate:,.0f} records/s ({best_step / n * 1e6:.1f} us)",
        f"{step_rate / decode_rate:.2f}x",
    )
    table.add_row("(b) decisions", f"{decisions / best_step:,.0f} decisions/s ({decisions:,})", "")
    table.add_row(
        "decode + step (the agent's CPU per record)",
        f"{n / (best_decode + best_step):,.0f} records/s",
        f"{best_decode / (best_decode + best_step):.2f}x",
    )
    table.add_row(
        "medians (decode / step)", f"{n / med_decode:,.0f} / {n / med_step:,.0f} records/s", ""
    )
    table.add_row(
        "encode_decision", f"{decisions / max(encode_seconds, 1e-9):,.0f} decisions/s", ""
    )
    table.add_row("peak RSS (whole process)", f"{results['memory']['peak_rss_mb']} MB", "")
    table.add_row("RSS growth of the fold", f"{results['memory']['fold_growth_mb']} MB", "")
    table.add_row(
        "snapshot (final state)",
        f"{len(final_bytes) / 1e6:.2f} MB, {snap_seconds * 1000:.0f} ms",
        "",
    )
    table.add_row(
        "restore (loads + restore)",
        f"{loads_seconds * 1000:.0f} + {restore_seconds * 1000:.0f} ms",
        "",
    )
    table.add_row("restart at half == uninterrupted", "OK" if restart_ok else "FAIL", "")
    table.add_row(
        "replayed log == generation (decisions)", "OK" if same_as_generation else "FAIL", ""
    )
    console.print(table)
    breakdown = Table(title="step time by record type (restart pass, timed per record)")
    for name in ("type", "records", "s", "us/record", "share"):
        breakdown.add_column(name, justify="left" if name == "type" else "right")
    for kind, row in by_kind.items():
        breakdown.add_row(
            kind,
            f"{row['records']:,}",
            f"{row['seconds']:.2f}",
            f"{row['us_per_record']:.1f}",
            f"{row['share']:.0%}",
        )
    console.print(breakdown)
    if opts.json_out is not None:
        opts.json_out.parent.mkdir(parents=True, exist_ok=True)
        opts.json_out.write_text(json.dumps(report, indent=2, default=str) + "\n")
        console.print(f"results written to {opts.json_out}")
    return 0 if restart_ok and same_as_generation and round_trip else 1


def cli(
    records: Annotated[int, typer.Option(min=100, help="Records of the governance log.")] = 200_000,
    devices: Annotated[
        int, typer.Option(min=1, help="GPUs (spread round-robin over nodes).")
    ] = 20_000,
    nodes: Annotated[int, typer.Option(min=1, help="Nodes.")] = 2_500,
    partitions: Annotated[
        int, typer.Option(min=1, help="Partitions of the health topic (watermark sources).")
    ] = 6,
    duration: Annotated[
        float,
        typer.Option(min=1.0, help="Event time the log spans (seconds); sets its record rate."),
    ] = 1800.0,
    heartbeat_interval: Annotated[
        float, typer.Option(min=1.0, help="One NodeHeartbeat per node per this many seconds.")
    ] = 60.0,
    watermark_every: Annotated[
        int,
        typer.Option(min=1, help="Records between watermark bursts (one per partition)."),
    ] = 100,
    unhealthy_share: Annotated[
        float, typer.Option(min=0.0, max=0.5, help="Share of devices with an Unhealthy episode.")
    ] = 0.01,
    unknown_share: Annotated[
        float, typer.Option(min=0.0, max=0.5, help="Share of devices with an Unknown episode.")
    ] = 0.01,
    flapping_share: Annotated[
        float,
        typer.Option(min=0.0, max=1.0, help="Share of the Unhealthy ones that flap (3 episodes)."),
    ] = 0.1,
    bad_nodes: Annotated[
        int, typer.Option(min=0, help="Nodes with most of their devices Unhealthy at once.")
    ] = 2,
    heartbeat_outages: Annotated[
        int, typer.Option(min=0, help="Nodes whose heartbeat stops for 300 s.")
    ] = 3,
    plugin_losses: Annotated[
        int, typer.Option(min=0, help="Nodes whose device plugin loses a device for 200 s.")
    ] = 2,
    conflicts: Annotated[
        int, typer.Option(min=0, help="Inventory conflicts raised (and cleared 300 s later).")
    ] = 4,
    commands: Annotated[int, typer.Option(min=0, help="Operator commands.")] = 24,
    executors: Annotated[int, typer.Option(min=2, help="Recovery executors (lease holders).")] = 3,
    batch: Annotated[
        int, typer.Option(min=1, help="Records per batch (clear_dirty), as the agent's batch.")
    ] = 2000,
    repeat: Annotated[
        int, typer.Option(min=1, help="Timed passes of decode and of step (best one counts).")
    ] = 3,
    seed: Annotated[int, typer.Option(help="Seed of the synthetic log.")] = 20261129,
    tune_gc: Annotated[
        bool,
        typer.Option(
            "--tune-gc/--no-tune-gc",
            help="Apply the worker's GC tuning (services.runtime.loop.tune_gc) before timing.",
        ),
    ] = True,
    json_out: Annotated[
        Path | None, typer.Option("--json-out", help="Write all results as JSON to this path.")
    ] = None,
) -> None:
    """Benchmark the pure governor (services/domain/governance/machine.py:step) on a synthetic
    governance log: records/s of step against decode_input of the same records (the baseline),
    decisions/s, peak RSS, snapshot size and restore time, and a restart check (snapshot at half,
    restore, continue: identical decisions). No Kafka, no database. Exit code 1 when a check
    fails.
    """
    opts = Options(
        records=records,
        devices=devices,
        nodes=nodes,
        partitions=partitions,
        duration=duration,
        heartbeat_interval=heartbeat_interval,
        watermark_every=watermark_every,
        unhealthy_share=unhealthy_share,
        unknown_share=unknown_share,
        flapping_share=flapping_share,
        bad_nodes=bad_nodes,
        heartbeat_outages=heartbeat_outages,
        plugin_losses=plugin_losses,
        conflicts=conflicts,
        commands=commands,
        executors=executors,
        batch=batch,
        repeat=repeat,
        seed=seed,
        tune_gc=tune_gc,
        json_out=json_out,
    )
    raise typer.Exit(run(opts))


def main(argv: list[str] | None = None) -> None:
    app = typer.Typer(add_completion=False, pretty_exceptions_show_locals=False)
    app.command()(cli)
    app(argv)


if __name__ == "__main__":
    main()
