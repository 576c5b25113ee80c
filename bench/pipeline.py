#!/usr/bin/env python
"""End-to-end benchmark of the devicestate pipeline, in ONE run against the local stack.

Stages (each prints progress and its figures):

1. ``publish``  -- generate N synthetic ``DeviceHealthObserved`` events (deterministic seed) and
   publish them, keyed by node, to a fresh topic ``bench.<run id>`` with a batched aiokafka
   producer.
2. ``baseline`` -- (a) raw aiokafka consume of the whole topic (no group, every partition
   assigned, from the beginning up to the end offsets), nothing decoded. Every ratio is against
   this rate.
3. ``worker``   -- (b) ``devicestate worker`` as a subprocess on the fresh topic, a fresh consumer
   group, a fresh schema and data dir; events/s from its first consumed record until the group's
   committed offsets reach the end offsets; peak RSS from ``/proc/<pid>/status``.
4. ``replay``   -- (c) ``services.processes.replay.run.replay`` (in this process) of the topic into another
   fresh schema; then its rows are compared with the worker's.
5. ``api``      -- (d) ``devicestate api`` as a subprocess on the worker's schema; open-loop
   point GETs of random existing devices at a fixed rate (httpx, keep-alive, bounded
   connections, 127.0.0.1 only, bounded in count and time).

Then a table of all figures with ratios to the baseline and the targets (PASS/MISS), optionally
written as JSON (``--json-out``). The topics, consumer group offsets and schemas are removed at
the end unless ``--keep``; every process the benchmark started is stopped by its PID.

Run from the repository root: ``.venv/bin/python bench/pipeline.py --help``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import platform
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run as a script: make `services` importable without install
    sys.path.insert(0, str(REPO_ROOT))

from services.runtime.config import Settings  # noqa: E402

STAGES = ("publish", "baseline", "worker", "replay", "api")

# Targets (see docs/benchmarks.md).
TARGET_INGEST_EPS = 25_000.0
TARGET_INGEST_RATIO = 0.25
TARGET_REPLAY_SECONDS_PER_MILLION = 60.0
TARGET_GET_P99_MS = 10.0
TARGET_GET_RATE = 1000.0

BENCH_NAMESPACE = uuid.UUID("5d1c7a8e-4b0b-4f7e-9d55-0d3e5b1c2a90")
"""uuid5 namespace of the synthetic device IDs and Pod UIDs (fixed: same IDs every run)."""
T0 = datetime(2026, 11, 29, 0, 0, tzinfo=UTC)
FIRST_VERSION = 1_000_000

console = Console(highlight=False, width=None if sys.stdout.isatty() else 150)


# --- small helpers ---------------------------------------------------------------------------


def _fmt_rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _proc_status(pid: int) -> dict[str, int]:
    """VmRSS / VmHWM (kB) of a process, from ``/proc/<pid>/status``; empty when it is gone."""
    values: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    name, rest = line.split(":", 1)
                    values[name] = int(rest.split()[0])
    except (FileNotFoundError, ProcessLookupError, ValueError):
        pass
    return values


_CLK_TCK = os.sysconf("SC_CLK_TCK")


def _proc_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process (``/proc/<pid>/stat``), ``None`` when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _CLK_TCK
    except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
        return None


def _pids_of(pattern: str, *, comm: bool = False) -> list[int]:
    """PIDs whose command line contains ``pattern`` (or, with ``comm``, whose command name is
    ``pattern``), to sample Kafka/PostgreSQL CPU; read-only."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if comm:
                found = (entry / "comm").read_text(errors="replace").strip() == pattern
            else:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
                found = pattern in cmdline.decode(errors="replace")
        except OSError:
            continue
        if found:
            pids.append(int(entry.name))
    return pids


def _machine_busy_seconds() -> float:
    """CPU seconds all cores spent busy since boot (``/proc/stat``: all but idle and iowait)."""
    with open("/proc/stat", encoding="ascii") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / _CLK_TCK


class CpuSampler:
    """CPU seconds used by groups of processes between :meth:`start` and :meth:`stop`, the whole
    machine's busy CPU seconds and what no tracked process used (``other``: contention)."""

    def __init__(self) -> None:
        self.groups: dict[str, list[int]] = {
            "kafka": _pids_of("kafka.Kafka"),
            "postgres": [],
        }
        self._start: dict[str, float] = {}
        self._pg_start: dict[int, float] = {}
        self._busy = 0.0
        self._wall = 0.0

    def _totals(self) -> dict[str, float]:
        return {
            name: sum(_proc_cpu_seconds(pid) or 0.0 for pid in pids)
            for name, pids in self.groups.items()
        }

    def _backends(self) -> dict[int, float]:
        """CPU seconds of every PostgreSQL process now (backends come and go)."""
        return {
            pid: cpu
            for pid in _pids_of("postgres", comm=True)
            if pid != os.getpid() and (cpu := _proc_cpu_seconds(pid)) is not None
        }

    def add(self, name: str, pid: int) -> None:
        self.groups[name] = [pid]

    def start(self) -> None:
        self._start = self._totals()
        self._start["bench"] = time.process_time()
        self._pg_start = self._backends()
        self._busy = _machine_busy_seconds()
        self._wall = time.monotonic()

    def stop(self) -> dict[str, float]:
        """CPU seconds per group and ``wall`` seconds since :meth:`start`."""
        totals = self._totals()
        totals["bench"] = time.process_time()
        # PostgreSQL: processes alive at both ends count their difference, new ones their whole
        # life; backends that exited meanwhile are missed (an undercount).
        pg_now = self._backends()
        totals["postgres"] = sum(cpu - self._pg_start.get(pid, 0.0) for pid, cpu in pg_now.items())
        self._start["postgres"] = 0.0
        used = {k: round(totals[k] - self._start.get(k, 0.0), 2) for k in totals}
        # Everything else on the machine (other engineers' jobs...): a contention warning.
        busy = _machine_busy_seconds() - self._busy
        used["other"] = round(max(busy - sum(used.values()), 0.0), 2)
        used["machine_busy"] = round(busy, 2)
        used["wall"] = round(time.monotonic() - self._wall, 2)
        return used


class Reporter:
    """Progress of one stage: a rich progress bar on a terminal, periodic lines otherwise."""

    def __init__(self, label: str, total: int | None, unit: str = "events") -> None:
        self.label = label
        self.total = total
        self.unit = unit
        self.done = 0
        self.extra = ""
        self.started = time.monotonic()
        self._last_line = 0.0
        self._progress: Progress | None = None
        self._task: Any = None

    def __enter__(self) -> Reporter:
        self.started = time.monotonic()
        if console.is_terminal:
            self._progress = Progress(
                TextColumn(f"[bold]{self.label:<9}[/bold]"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[rate]} {task.fields[unit]}/s {task.fields[extra]}"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=console,
                transient=False,
            )
            self._progress.start()
            self._task = self._progress.add_task(
                self.label, total=self.total, rate="-", unit=self.unit, extra=""
            )
        return self

    def update(self, done: int, total: int | None = None, extra: str = "") -> None:
        self.done = done
        if total is not None:
            self.total = total
        self.extra = extra
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = f"{done / elapsed:,.0f}"
        if self._progress is not None:
            self._progress.update(
                self._task, completed=done, total=self.total, rate=rate, extra=extra
            )
            return
        now = time.monotonic()
        if now - self._last_line >= 2.0:
            self._last_line = now
            total_text = f"/{self.total:,}" if self.total else ""
            console.print(
                f"  [{self.label}] {done:,}{total_text} {self.unit} "
                f"({rate} {self.unit}/s, {elapsed:.1f} s) {extra}".rstrip()
            )

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()


# --- synthetic events -------------------------------------------------------------------------


def _compact(payload: bytes) -> bytes:
    return memoryview(payload).tobytes()


@dataclass
class Workload:
    """The generated log, as ``(key, value)`` pairs in publish order, and what it must produce."""

    keys: list[bytes]
    values: list[bytes]
    devices: list[tuple[str, str]]  # (node, resourceID) of every device observed at least once
    new: int  # ordered observations with a higher statusVersion than the device's last (applied)
    duplicates: int  # exact re-sends of a device's latest observation
    stale: int  # re-sends of an older observation of the device
    bytes: int
    seconds: float


def generate(events: int, devices: int, nodes: int, dup_ratio: float, seed: int) -> Workload:
    """N observations over ``devices`` GPUs spread round-robin on ``nodes`` nodes.

    A fresh observation picks a random device and gets the next cluster-wide statusVersion (so
    each device's versions increase along the log); with probability ``dup_ratio`` an event is
    instead a re-send of a random already-observed device's latest observation (exact duplicate)
    or, when it has one, of its previous one (stale), half and half. Health: 95 % Healthy,
    4 % Unhealthy (with an XID message), 1 % Unknown.
    """
    from services.domain.event_codec import encode_event
    from services.domain.events import ContainerRef, DeviceHealthObserved, DeviceSource, Health

    started = time.perf_counter()
    rng = random.Random(seed)
    node_names = [f"bench-node-{i + 1:05d}" for i in range(nodes)]
    node_keys = [name.encode() for name in node_names]
    containers = (ContainerRef("main"),)
    device_node: list[int] = []
    device_rid: list[str] = []
    device_pod: list[tuple[str, str]] = []
    for d in range(devices):
        n, local = d % nodes, d // nodes
        slot = local // 2  # two GPUs per Pod
        pod_name = f"bench-job-{n + 1:05d}-{slot}"
        device_node.append(n)
        device_rid.append(f"GPU-{uuid.uuid5(BENCH_NAMESPACE, f'{seed}/gpu/{d}')}")
        device_pod.append((pod_name, str(uuid.uuid5(BENCH_NAMESPACE, f"{seed}/pod/{n}/{slot}"))))

    latest: list[bytes | None] = [None] * devices
    previous: list[bytes | None] = [None] * devices
    observed: list[int] = []
    keys: list[bytes] = []
    values: list[bytes] = []
    version = FIRST_VERSION
    new = dup = stale = size = 0
    healthy, unhealthy, unknown = Health.HEALTHY, Health.UNHEALTHY, Health.UNKNOWN
    plugin = DeviceSource.DEVICE_PLUGIN
    xid = "XID 79: GPU has fallen off the bus"
    with Reporter("generate", events) as progress:
        for i in range(events):
            if observed and rng.random() < dup_ratio:
                d = observed[rng.randrange(len(observed))]
                older = previous[d]
                if older is not None and rng.random() < 0.5:
                    payload = older
                    stale += 1
                else:
                    payload = latest[d]  # type: ignore[assignment]
                    dup += 1
            else:
                d = rng.randrange(devices)
                version += 1
                roll = rng.random()
                health = healthy if roll < 0.95 else unhealthy if roll < 0.99 else unknown
                pod_name, pod_uid = device_pod[d]
                # A copy: orjson's result keeps the ~4 KB buffer it was built in (realloc'ed
                # down in place), so holding a million of them would take ~4 GB of RSS.
                payload = _compact(
                    encode_event(
                        DeviceHealthObserved(
                            node=node_names[device_node[d]],
                            namespace="bench",
                            pod_name=pod_name,
                            pod_uid=pod_uid,
                            containers=containers,
                            resource_name="nvidia.com/gpu",
                            resource_id=device_rid[d],
                            health=health,
                            source=plugin,
                            status_version=version,
                            observed_at=T0 + timedelta(milliseconds=i),
                            message=xid if health is unhealthy else None,
                        )
                    )
                )
                if latest[d] is None:
                    observed.append(d)
                else:
                    previous[d] = latest[d]
                latest[d] = payload
                new += 1
            keys.append(node_keys[device_node[d]])
            values.append(payload)
            size += len(payload)
            if i % 20_000 == 0:
                progress.update(i)
        progress.update(events)
    return Workload(
        keys=keys,
        values=values,
        devices=sorted((node_names[device_node[d]], device_rid[d]) for d in observed),
        new=new,
        duplicates=dup,
        stale=stale,
        bytes=size,
        seconds=time.perf_counter() - started,
    )


# --- Kafka ------------------------------------------------------------------------------------


async def create_topic(settings: Settings) -> None:
    """Create the bench topic and its dead-letter topic (the project's own ``ensure_topics``)."""
    from services.adapters.kafka.topics import TopicState, ensure_topics

    states = await ensure_topics(settings)
    if states.get(settings.topic) is not TopicState.CREATED:
        raise RuntimeError(f"topic {settings.topic!r} already existed: refusing to reuse it")


async def topic_partitions(bootstrap: str, topic: str) -> list[int]:
    """Partition ids of ``topic`` (admin DescribeTopics). A fresh consumer knows no topic's
    partitions until it subscribes, and ``consumer.topics()`` does not fill its metadata."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        [described] = await admin.describe_topics([topic])
    finally:
        await admin.close()
    if described.get("error_code") or not described.get("partitions"):
        raise RuntimeError(f"topic {topic!r} not found (error {described.get('error_code')})")
    return sorted(p["partition"] for p in described["partitions"])


async def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    tps = [TopicPartition(topic, p) for p in await topic_partitions(bootstrap, topic)]
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        ends = await consumer.end_offsets(tps)
        return {tp.partition: ends[tp] for tp in tps}
    finally:
        await consumer.stop()


async def publish(
    settings: Settings, workload: Workload, *, linger_ms: int, batch_bytes: int
) -> dict[str, Any]:
    """Publish the workload with ``create_batch``/``send_batch`` per partition.

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


async def committed_offsets(admin: Any, group: str, topic: str) -> dict[int, int]:
    offsets = await admin.list_consumer_group_offsets(group)
    return {tp.partition: meta.offset for tp, meta in offsets.items() if tp.topic == topic}


async def delete_consumer_group(admin: Any, group: str) -> None:
    """DeleteGroups (aiokafka's admin client has no method for it)."""
    from aiokafka.protocol.admin import DeleteGroupsRequest

    coordinator = await admin.find_coordinator(group)
    await admin._send_request_to_node(coordinator, DeleteGroupsRequest([group]))


# --- child processes --------------------------------------------------------------------------


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    peak_rss_kb: int = 0

    @property
    def pid(self) -> int:
        return self.process.pid

    def sample(self) -> dict[str, int]:
        status = _proc_status(self.pid)
        self.peak_rss_kb = max(self.peak_rss_kb, status.get("VmHWM", 0), status.get("VmRSS", 0))
        return status

    def alive(self) -> bool:
        return self.process.poll() is None

    def check(self) -> None:
        if not self.alive():
            raise RuntimeError(
                f"{self.name} (pid {self.pid}) exited with code {self.process.returncode}; "
                f"last log lines:\n{self.tail()}"
            )

    def tail(self, lines: int = 10) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 40.0, sig: signal.Signals = signal.SIGTERM) -> int | None:
        """``sig`` (SIGTERM) by PID, wait, SIGKILL by PID if it does not exit in time."""
        if self.process.poll() is None:
            self.sample()
            os.kill(self.pid, sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                console.print(f"  {self.name} pid {self.pid} ignored {sig.name}; SIGKILL")
                os.kill(self.pid, signal.SIGKILL)
                self.process.wait()
        return self.process.returncode


def devicestate_commands() -> set[str]:
    """Sub-commands registered on the ``devicestate`` CLI right now (others are still adding)."""
    try:
        from services.cli.main import app
    except Exception:
        return set()
    names = {c.name or (c.callback.__name__ if c.callback else "") for c in app.registered_commands}
    names |= {g.name for g in app.registered_groups if g.name}
    return names


def start_child(name: str, argv: Sequence[str], env: dict[str, str], log_dir: Path) -> Child:
    log_path = log_dir / f"{name}.log"
    log_file = log_path.open("ab")
    try:
        process = subprocess.Popen(
            list(argv),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **env},
            cwd=REPO_ROOT,
            start_new_session=True,  # our own signals only; stopped by PID
        )
    finally:
        log_file.close()
    return Child(name, process, log_path)


def _devicestate_argv(command: str) -> list[str]:
    script = Path(sys.executable).with_name("devicestate")
    if script.exists():
        return [str(script), command]
    return [sys.executable, "-m", "services.cli.main", command]


def _session_path(profile: Path) -> Path:
    return profile.with_name(profile.name + ".pyisession")


def _pyinstrument_argv(profile: Path, module_argv: Sequence[str]) -> list[str]:
    """Run a Python entry point under pyinstrument (5 ms sampling), saving a session file."""
    session = _session_path(profile)
    return [
        sys.executable,
        "-m",
        "pyinstrument",
        "-i",
        "0.005",
        "-r",
        "pyisession",
        "-o",
        str(session),
        *module_argv,
    ]


def render_profile(profile: Path) -> None:
    """Render ``<profile>.pyisession`` as a call tree (``profile``, library frames shown) and a
    flat list of self time (``<profile>.flat.txt``)."""
    session = _session_path(profile)
    if not session.exists():
        console.print(f"  [yellow]no profile session at {session}[/yellow]")
        return
    base = [
        sys.executable,
        "-m",
        "pyinstrument",
        "--load",
        str(session),
        "-r",
        "text",
        "--no-color",
        "--unicode",
    ]
    subprocess.run(
        [*base, "--show-all", "-p", "processor_options.filter_threshold=0.01", "-o", str(profile)],
        check=False,
    )
    flat = profile.with_name(profile.stem + ".flat.txt")
    subprocess.run([*base, "--show-all", "-p", "flat", "-o", str(flat)], check=False)
    console.print(f"  profile: {profile} (tree), {flat} (flat self time), {session}")


_METRIC_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text -> ``{name{labels}: value}`` (labels kept verbatim)."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _METRIC_LINE.match(line)
        if match:
            with contextlib.suppress(ValueError):
                values[match.group(1) + (match.group(2) or "")] = float(match.group(3))
    return values


def metric_sum(values: dict[str, float], name: str) -> float:
    return sum(v for k, v in values.items() if k == name or k.startswith(name + "{"))


# --- stage (b): the worker ---------------------------------------------------------------------


async def run_worker_stage(
    run: Run, settings: Settings, total: int, *, batch_size: int | None, profile: Path | None
) -> dict[str, Any]:
    import httpx
    from aiokafka.admin import AIOKafkaAdminClient

    port = _free_port()
    env = {
        "DEVICESTATE_KAFKA_BOOTSTRAP_SERVERS": settings.kafka_bootstrap_servers,
        "DEVICESTATE_TOPIC": settings.topic,
        "DEVICESTATE_DEAD_LETTER_TOPIC": settings.dead_letter_topic,
        # The worker forwards to the governance topic and its governor agent folds it: fresh
        # per-run topics, or a second run would fold the first run's governance records too.
        "DEVICESTATE_GOVERNANCE_TOPIC": settings.governance_topic,
        "DEVICESTATE_DECISIONS_TOPIC": settings.decisions_topic,
        "DEVICESTATE_TOPIC_PARTITIONS": str(settings.topic_partitions),
        "DEVICESTATE_CONSUMER_GROUP": settings.consumer_group,
        "DEVICESTATE_DATABASE_URL": settings.database_url,
        "DEVICESTATE_DATABASE_SCHEMA": run.worker_schema,
        "DEVICESTATE_WORKER_DATA_DIR": str(run.worker_data_dir),
        "DEVICESTATE_WORKER_METRICS_PORT": str(port),
        "DEVICESTATE_LOG_FORMAT": "json",
        "DEVICESTATE_LOG_LEVEL": "INFO",
    }
    if batch_size is not None:
        env["DEVICESTATE_WORKER_BATCH_SIZE"] = str(batch_size)
    if "worker" in devicestate_commands():
        argv = _devicestate_argv("worker")
        how = "devicestate worker"
        module_argv = ["-m", "services.cli.main", "worker"]
    else:  # the sub-command is not wired into the CLI yet: the module's own entry point
        argv = [sys.executable, "-m", "streams.cli"]
        how = "python -m streams.cli (no `devicestate worker` sub-command registered)"
        module_argv = ["-m", "streams.cli"]
    if profile is not None:
        argv = _pyinstrument_argv(profile, module_argv)
        how += f" under pyinstrument -> {profile}"
    console.print(f"  starting {how}; metrics on 127.0.0.1:{port}, log {run.log_dir}/worker.log")
    spawned = time.monotonic()
    child = start_child("worker", argv, env, run.log_dir)
    run.children.append(child)
    cpu = CpuSampler()
    cpu.add("worker", child.pid)

    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap_servers)
    await admin.start()
    ends = await end_offsets(settings.kafka_bootstrap_servers, settings.topic)
    # Generous: 300 s + 1 ms per event (x5 under the profiler); the stage fails after it.
    deadline = spawned + (300 + total / 1000) * (5 if profile is not None else 1)
    first_consumed: float | None = None
    consumed_all: float | None = None
    caught_up: float | None = None
    consumed = 0.0
    last_metrics: dict[str, float] = {}
    rss_samples: list[int] = []
    last_commit_poll = 0.0
    committed: dict[int, int] = {}
    try:
        async with httpx.AsyncClient(timeout=2.0) as http:
            with Reporter("worker", total) as progress:
                while True:
                    child.check()
                    now = time.monotonic()
                    if now > deadline:
                        raise TimeoutError(
                            f"worker did not catch up within {deadline - spawned:.0f} s "
                            f"(consumed {consumed:,.0f} of {total:,})"
                        )
                    with contextlib.suppress(httpx.HTTPError):
                        response = await http.get(f"http://127.0.0.1:{port}/metrics")
                        last_metrics = parse_metrics(response.text)
                        consumed = metric_sum(
                            last_metrics, "devicestate_worker_events_consumed_total"
                        )
                    now = time.monotonic()
                    if consumed > 0 and first_consumed is None:
                        first_consumed = now
                        cpu.start()
                    if consumed >= total and consumed_all is None:
                        consumed_all = now
                    status = child.sample()
                    if "VmRSS" in status:
                        rss_samples.append(status["VmRSS"])
                    if first_consumed is not None and now - last_commit_poll >= 0.25:
                        last_commit_poll = now
                        with contextlib.suppress(Exception):
                            committed = await committed_offsets(
                                admin, settings.consumer_group, settings.topic
                            )
                        if all(committed.get(p, -1) >= end for p, end in ends.items()):
                            caught_up = time.monotonic()
                            progress.update(int(consumed), extra="committed: caught up")
                            break
                    lag = sum(max(end - committed.get(p, 0), 0) for p, end in ends.items())
                    progress.update(int(consumed), extra=f"commit lag {lag:,}")
                    await asyncio.sleep(0.1)
            cpu_used = cpu.stop()  # the ingest window, as before the governor existed
            # The health agent forwards before it commits, so the governance topic is complete
            # now; the governor agent (same process) may still be folding it.
            gov_ends = await end_offsets(
                settings.kafka_bootstrap_servers, settings.governance_topic
            )
            gov_total = sum(gov_ends.values())
            governor_caught_up: float | None = None
            with Reporter("governor", gov_total, unit="records") as progress:
                while True:
                    child.check()
                    if time.monotonic() > deadline:
                        raise TimeoutError("the governor did not catch up with its topic")
                    gov_committed: dict[int, int] = {}
                    with contextlib.suppress(Exception):
                        gov_committed = await committed_offsets(
                            admin, settings.consumer_group, settings.governance_topic
                        )
                    done = sum(min(max(gov_committed.get(p, 0), 0), e) for p, e in gov_ends.items())
                    progress.update(done)
                    if all(e == 0 or gov_committed.get(p, -1) >= e for p, e in gov_ends.items()):
                        governor_caught_up = time.monotonic()
                        break
                    await asyncio.sleep(0.25)
            with contextlib.suppress(httpx.HTTPError):
                response = await http.get(f"http://127.0.0.1:{port}/metrics")
                last_metrics = parse_metrics(response.text)
    finally:
        await admin.close()
    assert first_consumed is not None and caught_up is not None
    assert governor_caught_up is not None
    status = child.sample()
    child_stop_started = time.monotonic()
    code = child.stop()
    if profile is not None:
        render_profile(profile)
    stop_seconds = time.monotonic() - child_stop_started
    ingest_seconds = caught_up - first_consumed
    result: dict[str, Any] = {
        "command": how,
        "pid": child.pid,
        "events": total,
        "startup_seconds": round(first_consumed - spawned, 2),
        "seconds": round(ingest_seconds, 3),
        "events_per_second": round(total / ingest_seconds, 1),
        "consumed_all_seconds": None
        if consumed_all is None
        else round(consumed_all - first_consumed, 3),
        "peak_rss_mb": round(max(child.peak_rss_kb, status.get("VmHWM", 0)) / 1024, 1),
        "median_rss_mb": round(sorted(rss_samples)[len(rss_samples) // 2] / 1024, 1)
        if rss_samples
        else None,
        "cpu_seconds": cpu_used,
        "exit_code": code,
        "stop_seconds": round(stop_seconds, 2),
        "metrics": {
            "consumed": metric_sum(last_metrics, "devicestate_worker_events_consumed_total"),
            "table_duplicates": metric_sum(
                last_metrics, "devicestate_worker_table_duplicates_dropped_total"
            ),
            "db_noops": metric_sum(last_metrics, "devicestate_worker_db_noops_total"),
            "applied": metric_sum(last_metrics, "devicestate_worker_events_applied_total"),
            "dead_lettered": metric_sum(
                last_metrics, "devicestate_worker_events_dead_lettered_total"
            ),
            "db_retries": metric_sum(last_metrics, "devicestate_worker_db_retries_total"),
            "batches": metric_sum(last_metrics, "devicestate_worker_batch_seconds_count"),
            "batch_seconds_sum": round(
                metric_sum(last_metrics, "devicestate_worker_batch_seconds_sum"), 2
            ),
        },
        "governance": {
            "topic_records": gov_total,
            "caught_up_seconds": round(governor_caught_up - first_consumed, 3),
            "after_ingest_seconds": round(governor_caught_up - caught_up, 3),
            "forwarded": {
                key.split('"')[1]: value
                for key, value in last_metrics.items()
                if key.startswith("devicestate_worker_governance_forwarded_total{")
            },
            "governor_records": metric_sum(
                last_metrics, "devicestate_governor_records_consumed_total"
            ),
            "decisions": metric_sum(last_metrics, "devicestate_governor_decisions_total"),
            "governor_batches": metric_sum(
                last_metrics, "devicestate_governor_batch_seconds_count"
            ),
            "governor_batch_seconds_sum": round(
                metric_sum(last_metrics, "devicestate_governor_batch_seconds_sum"), 2
            ),
        },
    }
    return result


# --- stage (c): replay -------------------------------------------------------------------------


async def compare_schemas(engine: Any, live: str, other: str) -> dict[str, Any]:
    """Rows of ``devices`` and ``device_history`` in one schema and not the other (both ways).

    Uses ``services/adapters/projection/compare.py``'s ``diff_projections`` when it exists; otherwise
    ``EXCEPT ALL`` on the two tables.
    """
    from sqlalchemy import text

    from services.adapters.projection.tables import quoted_schema

    counts: dict[str, Any] = {}
    a, b = quoted_schema(live), quoted_schema(other)
    async with engine.connect() as conn:
        for table in ("devices", "device_history"):
            rows_a = (await conn.execute(text(f"SELECT count(*) FROM {a}.{table}"))).scalar_one()
            rows_b = (await conn.execute(text(f"SELECT count(*) FROM {b}.{table}"))).scalar_one()
            only_a = (
                await conn.execute(
                    text(
                        f"SELECT count(*) FROM (SELECT * FROM {a}.{table} EXCEPT ALL "
                        f"SELECT * FROM {b}.{table}) x"
                    )
                )
            ).scalar_one()
            only_b = (
                await conn.execute(
                    text(
                        f"SELECT count(*) FROM (SELECT * FROM {b}.{table} EXCEPT ALL "
                        f"SELECT * FROM {a}.{table}) x"
                    )
                )
            ).scalar_one()
            counts[table] = {
                "rows_worker": rows_a,
                "rows_replay": rows_b,
                "only_worker": only_a,
                "only_replay": only_b,
            }
    try:
        from services.adapters.projection.compare import diff_projections
    except ImportError:
        method = "EXCEPT ALL (services/adapters/projection/compare.py not present)"
        differences = [
            f"{table}: {c['only_worker']} row(s) only in worker, {c['only_replay']} only in replay"
            for table, c in counts.items()
            if c["only_worker"] or c["only_replay"]
        ]
    else:
        method = "services.adapters.projection.compare.diff_projections"
        differences = list(await diff_projections(engine, live, other))
        if any(c["only_worker"] or c["only_replay"] for c in counts.values()) and not differences:
            differences.append("diff_projections found nothing but EXCEPT ALL counts differ")
    return {
        "method": method,
        "tables": counts,
        "differences": differences[:20],
        "difference_count": len(differences),
        "identical": not differences,
    }


async def run_replay_stage(
    run: Run, settings: Settings, total: int, *, batch_size: int, profile: Path | None
) -> dict[str, Any]:
    from services.processes.replay.run import make_engine, replay

    engine = make_engine(settings.database_url)
    profiler = None
    if profile is not None:
        from pyinstrument import Profiler

        profiler = Profiler(async_mode="enabled")
    cpu = CpuSampler()
    try:
        with Reporter("replay", total) as progress:
            started = time.perf_counter()
            cpu.start()
            if profiler is not None:
                profiler.start()
            run.created_schemas.append(run.replay_schema)
            summary = await replay(
                settings,
                engine=engine,
                database_url=settings.database_url,
                schema=run.replay_schema,
                batch_size=batch_size,
                progress=lambda done, count: progress.update(done, count or None),
            )
            wall = time.perf_counter() - started
            if profiler is not None and profile is not None:
                session = profiler.stop()
                session.save(str(_session_path(profile)))
                render_profile(profile)
            cpu_used = cpu.stop()
        result: dict[str, Any] = {
            "events": summary.read,
            "seconds": round(summary.elapsed, 3),
            "wall_seconds_with_migration": round(wall, 3),
            "events_per_second": round(summary.events_per_second, 1),
            "seconds_per_million": round(summary.elapsed * 1_000_000 / max(summary.read, 1), 2),
            "batch_size": batch_size,
            "batches": summary.batches,
            "applied": summary.applied,
            "duplicates": summary.duplicates,
            "stale": summary.stale,
            "undecodable": summary.undecodable,
            "cpu_seconds": cpu_used,
        }
        if "worker" in run.done:
            compared = await compare_schemas(engine, run.worker_schema, run.replay_schema)
            result["compare"] = compared
            verdict = "OK" if compared["identical"] else "DIFF"
            console.print(
                f"  compare worker {run.worker_schema} vs replay {run.replay_schema}: "
                f"[bold]{verdict}[/bold] ({compared['method']})"
            )
            for table, c in compared["tables"].items():
                console.print(
                    f"    {table}: worker {c['rows_worker']:,} rows, replay "
                    f"{c['rows_replay']:,}; only-worker {c['only_worker']}, "
                    f"only-replay {c['only_replay']}"
                )
            for line in compared["differences"]:
                console.print(f"    {line}")
        return result
    finally:
        await engine.dispose()


# --- stage (d): API point GETs --------------------------------------------------------------


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    if not sorted_values:
        return math.nan
    index = min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[index]


async def wait_api_ready(base: str, child: Child, probe: str, limit: float = 90.0) -> str:
    import httpx

    deadline = time.monotonic() + limit
    async with httpx.AsyncClient(timeout=2.0) as http:
        while time.monotonic() < deadline:
            child.check()
            for path in ("/healthz", probe):
                with contextlib.suppress(httpx.HTTPError):
                    response = await http.get(base + path)
                    if response.status_code == 200:
                        return path
            await asyncio.sleep(0.3)
    raise TimeoutError(f"API at {base} not ready within {limit:.0f} s; log:\n{child.tail()}")


class RawHttpClient:
    """A bare HTTP/1.1 keep-alive GET client on asyncio streams (``--api-client raw``).

    Costs a small fraction of httpx's CPU per request, to tell the server's latency apart from
    the load generator's on a small machine. Handles ``Content-Length`` responses only (what
    uvicorn sends for JSON); anything else counts as an error.
    """

    def __init__(self, base: str, connections: int) -> None:
        from urllib.parse import urlsplit

        url = urlsplit(base)
        self.host, self.port = url.hostname or "127.0.0.1", url.port or 80
        self.host_header = f"{self.host}:{self.port}".encode()
        self.idle: asyncio.LifoQueue[tuple[asyncio.StreamReader, asyncio.StreamWriter] | None]
        self.idle = asyncio.LifoQueue()
        for _ in range(connections):
            self.idle.put_nowait(None)  # a slot: connect lazily

    async def get(self, path: str) -> int:
        conn = await self.idle.get()
        try:
            if conn is None:
                conn = await asyncio.open_connection(self.host, self.port)
            reader, writer = conn
            writer.write(
                b"GET " + path.encode() + b" HTTP/1.1\r\nHost: " + self.host_header + b"\r\n\r\n"
            )
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            lower = head.lower()
            at = lower.find(b"content-length:")
            if at < 0:
                raise RuntimeError("response without Content-Length")
            length = int(lower[at + 15 : lower.find(b"\r\n", at)])
            await reader.readexactly(length)
        except BaseException:
            if conn is not None:
                conn[1].close()
            self.idle.put_nowait(None)
            raise
        self.idle.put_nowait(conn)
        return status

    async def aclose(self) -> None:
        while not self.idle.empty():
            conn = self.idle.get_nowait()
            if conn is not None:
                conn[1].close()


async def load_gets(
    base: str,
    paths: Sequence[str],
    *,
    rate: float,
    count: int,
    connections: int,
    time_limit: float,
    client_kind: str = "httpx",
) -> dict[str, Any]:
    """Open loop: request i is due at ``start + i / rate`` whatever earlier responses do.

    ``latency`` runs from the request's due time to its response (includes any wait for a free
    connection or a late client: no coordinated omission); ``service`` from the moment the HTTP
    client was called. At most ``connections`` connections; nothing is sent after ``time_limit``
    seconds. ``client_kind``: ``httpx`` (httpx.AsyncClient, keep-alive) or ``raw``
    (:class:`RawHttpClient`).
    """
    import httpx

    loop = asyncio.get_running_loop()
    latency: list[float] = []
    service: list[float] = []
    errors: dict[str, int] = {}
    fetch: Callable[[str], Any]
    if client_kind == "httpx":
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        client: Any = httpx.AsyncClient(base_url=base, limits=limits, timeout=10.0)

        async def fetch(path: str) -> int:
            return (await client.get(path)).status_code
    else:
        client = RawHttpClient(base, connections)

        async def fetch(path: str) -> int:
            return await asyncio.wait_for(client.get(path), 10.0)

    # At most `connections` requests are handed to the client at once: httpx's pool hands
    # connections to queued requests in O(queue) per release, so a long queue there costs the
    # client more CPU the further it falls behind. Waiting here is O(1) and still counted in
    # `latency` (from the due time).
    gate = asyncio.Semaphore(connections)

    async def one(path: str, due: float) -> None:
        async with gate:
            sent = loop.time()
            try:
                status = await fetch(path)
            except Exception as exc:  # timeouts, resets
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                return
            done = loop.time()
            if status != 200:
                errors[f"HTTP {status}"] = errors.get(f"HTTP {status}", 0) + 1
                return
            latency.append(done - due)
            service.append(done - sent)

    try:
        # Warm-up (not counted): open the connections, warm the server's pools.
        warm = [asyncio.create_task(fetch(paths[i % len(paths)])) for i in range(connections)]
        await asyncio.gather(*warm, return_exceptions=True)

        tasks: list[asyncio.Task[None]] = []
        start = loop.time() + 0.01
        hard_stop = start + time_limit
        sent = 0
        last_update = 0.0
        with Reporter("api", count, unit="req") as progress:
            while sent < count:
                now = loop.time()
                if now > hard_stop:
                    break
                due_count = min(count, int((now - start) * rate) + 1)
                while sent < due_count:
                    due = start + sent / rate
                    tasks.append(asyncio.create_task(one(paths[sent], due)))
                    sent += 1
                if now - last_update >= 0.25:
                    last_update = now
                    progress.update(
                        len(latency), extra=f"sent {sent:,} errors {sum(errors.values())}"
                    )
                await asyncio.sleep(max(0.0, min(0.002, start + sent / rate - loop.time())))
            remaining = max(1.0, hard_stop + 10.0 - loop.time())
            _, pending = await asyncio.wait(tasks, timeout=remaining) if tasks else (set(), set())
            for task in pending:
                task.cancel()
            if pending:
                errors["not finished in time"] = len(pending)
                await asyncio.gather(*pending, return_exceptions=True)
            finished = loop.time()
            progress.update(len(latency), extra=f"sent {sent:,} errors {sum(errors.values())}")
    finally:
        await client.aclose()
    latency.sort()
    service.sort()
    elapsed = finished - start

    def ms(values: Sequence[float], q: float) -> float:
        return round(_percentile(values, q) * 1000, 2)

    return {
        "requests": count,
        "sent": sent,
        "ok": len(latency),
        "errors": sum(errors.values()),
        "error_kinds": errors,
        "target_rate": rate,
        "achieved_rate": round(len(latency) / elapsed, 1) if elapsed > 0 else 0.0,
        "send_rate": round(sent / max(min(elapsed, time_limit), 1e-9), 1),
        "seconds": round(elapsed, 2),
        "connections": connections,
        "client": client_kind,
        "latency_ms": {
            q: ms(latency, p) for q, p in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0))
        },
        "service_ms": {
            q: ms(service, p) for q, p in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0))
        },
    }


async def run_api_stage(
    run: Run,
    settings: Settings,
    devices: Sequence[tuple[str, str]],
    *,
    rate: float,
    count: int,
    connections: int,
    seed: int,
    schema: str,
    client_kinds: list[str],
    profile: Path | None,
) -> dict[str, Any]:
    from urllib.parse import quote

    if "api" in devicestate_commands():
        argv = _devicestate_argv("api")
        module_argv = ["-m", "services.cli.main", "api"]
        how = "devicestate api"
    elif (REPO_ROOT / "services" / "processes" / "api" / "cli.py").exists():
        # The sub-command is not wired into the CLI yet: run its typer function directly.
        code = "import typer; from services.processes.api.cli import api; typer.run(api)"
        argv = [sys.executable, "-c", code]
        module_argv = ["-c", code]
        how = "services.processes.api.cli.api via typer.run (no `devicestate api` sub-command registered)"
    else:
        raise StageUnavailable("no `devicestate api` command and no services/processes/api/cli.py yet")
    if profile is not None:
        if module_argv[0] == "-c":
            script = run.log_dir / "api_main.py"
            script.write_text(module_argv[1] + "\n")
            module_argv = [str(script)]
        argv = _pyinstrument_argv(profile, module_argv)
        how += f" under pyinstrument -> {profile}"
    port = _free_port()
    env = {
        "DEVICESTATE_DATABASE_URL": settings.database_url,
        "DEVICESTATE_DATABASE_SCHEMA": schema,
        "DEVICESTATE_API_HOST": "127.0.0.1",
        "DEVICESTATE_API_PORT": str(port),
        "DEVICESTATE_LOG_FORMAT": "json",
        "DEVICESTATE_LOG_LEVEL": "WARNING",
    }
    child = start_child("api", argv, env, run.log_dir)
    run.children.append(child)
    base = f"http://127.0.0.1:{port}"
    rng = random.Random(seed + 1)
    paths = []
    for _ in range(count):
        node, rid = devices[rng.randrange(len(devices))]
        paths.append(f"/v1/nodes/{quote(node, safe='')}/devices/{quote(rid, safe='/')}")
    console.print(f"  starting {how} (pid {child.pid}) on {base}, schema {schema}")
    ready_path = await wait_api_ready(base, child, paths[0])
    console.print(f"  API ready ({ready_path} answered 200)")
    by_client: dict[str, dict[str, Any]] = {}
    for kind in client_kinds:
        cpu = CpuSampler()
        cpu.add("api", child.pid)
        cpu.start()
        console.print(
            f"  load: {count:,} GETs at {rate:,.0f}/s, client {kind}, {connections} connections"
        )
        outcome = await load_gets(
            base,
            paths,
            rate=rate,
            count=count,
            connections=connections,
            time_limit=count / rate * 2 + 30,
            client_kind=kind,
        )
        outcome["cpu_seconds"] = cpu.stop()
        by_client[kind] = outcome
        lat = outcome["latency_ms"]
        console.print(
            f"  [{kind}] {outcome['ok']:,}/{count:,} OK at {outcome['achieved_rate']:,.0f} req/s; "
            f"latency ms p50 {lat['p50']} p90 {lat['p90']} p99 {lat['p99']} max {lat['max']}; "
            f"errors {outcome['errors']}; CPU s {outcome['cpu_seconds']}"
        )
        child.check()
        await asyncio.sleep(2.0)  # let a backlog drain before the next client
    result = dict(by_client[client_kinds[0]])
    result["other_clients"] = {k: v for k, v in by_client.items() if k != client_kinds[0]}
    result["peak_rss_mb"] = round(child.sample().get("VmHWM", 0) / 1024, 1)
    result["pid"] = child.pid
    # uvicorn re-raises SIGTERM after its graceful shutdown, which kills pyinstrument before it
    # writes; SIGINT ends the same shutdown with a KeyboardInterrupt pyinstrument survives.
    child.stop(sig=signal.SIGINT if profile is not None else signal.SIGTERM)
    if profile is not None:
        render_profile(profile)
    return result


# --- the run ----------------------------------------------------------------------------------


class StageUnavailable(RuntimeError):
    """A stage cannot run because a part it needs is not there (yet)."""


@dataclass
class Run:
    run_id: str
    topic: str
    group: str
    worker_schema: str
    replay_schema: str
    worker_data_dir: Path
    log_dir: Path
    children: list[Child] = field(default_factory=list)
    created_schemas: list[str] = field(default_factory=list)
    created_topic: bool = False
    done: set[str] = field(default_factory=set)


def new_run(topic: str | None) -> Run:
    stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S")
    run_id = f"{stamp}_{uuid.uuid4().hex[:4]}"
    work = Path(tempfile.gettempdir()) / f"devicestate-bench-{run_id}"
    (work / "logs").mkdir(parents=True, exist_ok=True)
    return Run(
        run_id=run_id,
        topic=topic or f"bench.{run_id}",
        group=f"bench-{run_id}",
        worker_schema=f"bench_{run_id}",
        replay_schema=f"bench_{run_id}_replay",
        worker_data_dir=work / "worker-data",
        log_dir=work / "logs",
    )


async def cleanup(run: Run, settings: Settings, keep: bool) -> None:
    for child in run.children:
        if child.alive():
            console.print(f"  stopping {child.name} pid {child.pid}")
            child.stop()
    if keep:
        console.print(
            f"  --keep: topic {run.topic}, group {run.group}, schemas "
            f"{', '.join(run.created_schemas) or '-'}, data {run.worker_data_dir.parent} kept"
        )
        return
    from aiokafka.admin import AIOKafkaAdminClient
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    from services.adapters.projection.tables import quoted_schema

    try:
        admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap_servers)
        await admin.start()
        try:
            names = await admin.list_topics()
            doomed = [
                t
                for t in names
                if (run.created_topic and t in (run.topic, settings.dead_letter_topic))
                or t in (settings.governance_topic, settings.decisions_topic)  # this run's
                or t.startswith(f"{run.group}-")
            ]
            if doomed:
                await admin.delete_topics(doomed)
                console.print(f"  deleted topics: {', '.join(sorted(doomed))}")
            if "worker" in run.done or any(c.name == "worker" for c in run.children):
                with contextlib.suppress(Exception):
                    await delete_consumer_group(admin, run.group)
                    console.print(f"  deleted consumer group {run.group}")
        finally:
            await admin.close()
    except Exception as exc:
        console.print(f"  [red]topic clean-up failed:[/red] {exc!r}")
    if run.created_schemas:
        engine = create_async_engine(settings.database_url)
        try:
            async with engine.begin() as conn:
                for schema in run.created_schemas:
                    await conn.execute(
                        text(f"DROP SCHEMA IF EXISTS {quoted_schema(schema)} CASCADE")
                    )
            console.print(f"  dropped schemas: {', '.join(run.created_schemas)}")
        except Exception as exc:
            console.print(f"  [red]schema clean-up failed:[/red] {exc!r}")
        finally:
            await engine.dispose()
    shutil.rmtree(run.worker_data_dir, ignore_errors=True)
    console.print(f"  logs kept in {run.log_dir}")


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["mem_total_gb"] = round(int(line.split()[1]) / 1024 / 1024, 1)
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(OSError):
        info["loadavg_at_start"] = Path("/proc/loadavg").read_text().split()[:3]
    return info


def code_version() -> dict[str, Any]:
    """The commit the run measured and whether the working tree had changes (others' work in
    progress is measured too)."""

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


def verdicts(results: dict[str, Any], events: int) -> list[dict[str, Any]]:
    """One row per figure: value, ratio to the baseline, target, PASS/MISS."""
    rows: list[dict[str, Any]] = []
    base = results.get("baseline", {}).get("events_per_second")

    def ratio(value: float | None) -> float | None:
        return None if value is None or not base else round(value / base, 3)

    pub = results.get("publish")
    if pub:
        rows.append(
            {
                "figure": "publish (aiokafka producer)",
                "value": pub["events_per_second"],
                "unit": "events/s",
                "ratio": ratio(pub["events_per_second"]),
                "target": "-",
                "verdict": "-",
            }
        )
    if base:
        rows.append(
            {
                "figure": "(a) raw consume baseline",
                "value": base,
                "unit": "events/s",
                "ratio": 1.0,
                "target": "-",
                "verdict": "-",
            }
        )
    worker = results.get("worker")
    if worker and "events_per_second" in worker:
        eps = worker["events_per_second"]
        r = ratio(eps)
        ok = eps >= TARGET_INGEST_EPS and (r is None or r >= TARGET_INGEST_RATIO)
        rows.append(
            {
                "figure": "(b) worker ingest",
                "value": eps,
                "unit": "events/s",
                "ratio": r,
                "target": f">= {TARGET_INGEST_EPS:,.0f}/s and >= {TARGET_INGEST_RATIO}x (a)",
                "verdict": "PASS" if ok else "MISS",
            }
        )
        rows.append(
            {
                "figure": "(b) worker peak RSS",
                "value": worker["peak_rss_mb"],
                "unit": "MB",
                "ratio": None,
                "target": "-",
                "verdict": "-",
            }
        )
    replay = results.get("replay")
    if replay and "events_per_second" in replay:
        rows.append(
            {
                "figure": "(c) replay",
                "value": replay["events_per_second"],
                "unit": "events/s",
                "ratio": ratio(replay["events_per_second"]),
                "target": "-",
                "verdict": "-",
            }
        )
        per_million = replay["seconds_per_million"]
        projected = "" if events == 1_000_000 else " (scaled to 1M)"
        rows.append(
            {
                "figure": f"(c) replay seconds per 1M{projected}",
                "value": per_million,
                "unit": "s",
                "ratio": None,
                "target": f"<= {TARGET_REPLAY_SECONDS_PER_MILLION:.0f} s",
                "verdict": "PASS" if per_million <= TARGET_REPLAY_SECONDS_PER_MILLION else "MISS",
            }
        )
        if "compare" in replay:
            rows.append(
                {
                    "figure": "(c) replay rows == worker rows",
                    "value": "OK" if replay["compare"]["identical"] else "DIFF",
                    "unit": "",
                    "ratio": None,
                    "target": "OK",
                    "verdict": "PASS" if replay["compare"]["identical"] else "MISS",
                }
            )
    api = results.get("api")
    if api and "latency_ms" in api:
        p99 = api["latency_ms"]["p99"]
        rate_ok = api["achieved_rate"] >= 0.95 * min(api["target_rate"], TARGET_GET_RATE)
        ok = (
            p99 <= TARGET_GET_P99_MS
            and rate_ok
            and api["errors"] == 0
            and (api["target_rate"] >= TARGET_GET_RATE)
        )
        rows.append(
            {
                "figure": "(d) GET achieved rate",
                "value": api["achieved_rate"],
                "unit": "req/s",
                "ratio": None,
                "target": f">= {TARGET_GET_RATE:,.0f}",
                "verdict": "PASS" if api["achieved_rate"] >= 0.95 * TARGET_GET_RATE else "MISS",
            }
        )
        for q in ("p50", "p90"):
            rows.append(
                {
                    "figure": f"(d) GET {q}",
                    "value": api["latency_ms"][q],
                    "unit": "ms",
                    "ratio": None,
                    "target": "-",
                    "verdict": "-",
                }
            )
        rows.append(
            {
                "figure": "(d) GET p99",
                "value": p99,
                "unit": "ms",
                "ratio": None,
                "target": f"<= {TARGET_GET_P99_MS:.0f} ms at {TARGET_GET_RATE:,.0f}/s, 0 errors",
                "verdict": "PASS" if ok else "MISS",
            }
        )
        rows.append(
            {
                "figure": "(d) GET max",
                "value": api["latency_ms"]["max"],
                "unit": "ms",
                "ratio": None,
                "target": "-",
                "verdict": "-",
            }
        )
        rows.append(
            {
                "figure": "(d) GET errors",
                "value": api["errors"],
                "unit": "",
                "ratio": None,
                "target": "0",
                "verdict": "PASS" if api["errors"] == 0 else "MISS",
            }
        )
    for kind, other in (api or {}).get("other_clients", {}).items():
        lat = other["latency_ms"]
        rows.append(
            {
                "figure": f"(d) GET p50/p99 with the {kind} client",
                "value": f"{lat['p50']} / {lat['p99']}",
                "unit": f"ms at {other['achieved_rate']:,.0f} req/s",
                "ratio": None,
                "target": "(information)",
                "verdict": "-",
            }
        )
    for stage, result in results.items():
        if isinstance(result, dict) and result.get("status") in (
            "skipped",
            "unavailable",
            "failed",
        ):
            rows.append(
                {
                    "figure": f"{stage}",
                    "value": result["status"],
                    "unit": "",
                    "ratio": None,
                    "target": "-",
                    "verdict": "MISS" if result["status"] == "failed" else "-",
                }
            )
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    table = Table(title="devicestate pipeline benchmark", show_lines=False)
    for name, justify in (
        ("figure", "left"),
        ("value", "right"),
        ("unit", "left"),
        ("x baseline", "right"),
        ("target", "left"),
        ("", "center"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for row in rows:
        value = row["value"]
        text = (
            f"{value:,.1f}"
            if isinstance(value, float)
            else (f"{value:,}" if isinstance(value, int) else str(value))
        )
        verdict = row["verdict"]
        style = {"PASS": "[green]PASS[/green]", "MISS": "[red]MISS[/red]"}.get(verdict, verdict)
        table.add_row(
            row["figure"],
            text,
            row["unit"],
            "-" if row["ratio"] is None else f"{row['ratio']:.3f}x",
            row["target"],
            style,
        )
    console.print(table)


async def main_async(opts: Options) -> int:
    base_settings = Settings()
    run = new_run(opts.topic)
    skip = set(opts.skip)
    settings = base_settings.model_copy(
        update={
            "topic": run.topic,
            "dead_letter_topic": f"{run.topic}.dead-letter",
            # Per run even with --topic (an earlier run's governance records must not be folded).
            "governance_topic": f"bench.{run.run_id}.governance",
            "decisions_topic": f"bench.{run.run_id}.decisions",
            "consumer_group": run.group,
            "topic_partitions": opts.partitions,
            "log_level": "WARNING",
        }
    )
    from services.runtime.logs import configure_logging

    configure_logging(settings)
    results: dict[str, Any] = {}
    report: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "run_id": run.run_id,
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "options": asdict(opts),
        "machine": machine_info(),
        "code": code_version(),
        "topic": run.topic,
        "results": results,
    }
    console.rule(f"devicestate pipeline benchmark {run.run_id}")
    console.print(
        f"events {opts.events:,}, devices {opts.devices:,}, nodes {opts.nodes:,}, dup-ratio "
        f"{opts.dup_ratio}, partitions {opts.partitions}, seed {opts.seed}; topic {run.topic}; "
        f"skip {', '.join(sorted(skip)) or 'nothing'}"
    )
    workload: Workload | None = None
    exit_code = 0
    try:
        # ---- 1. publish -------------------------------------------------------------------
        console.rule("1/5 publish")
        workload = generate(opts.events, opts.devices, opts.nodes, opts.dup_ratio, opts.seed)
        results["generate"] = {
            "events": opts.events,
            "seconds": round(workload.seconds, 2),
            "new_observations": workload.new,
            "exact_duplicates": workload.duplicates,
            "stale_resends": workload.stale,
            "devices_observed": len(workload.devices),
            "mean_event_bytes": round(workload.bytes / max(opts.events, 1), 1),
        }
        console.print(
            f"  generated {opts.events:,} events in {workload.seconds:.1f} s: "
            f"{workload.new:,} new, {workload.duplicates:,} duplicates, {workload.stale:,} stale; "
            f"{len(workload.devices):,} devices, {results['generate']['mean_event_bytes']} B/event"
        )
        if "publish" in skip:
            if opts.topic is None:
                raise typer.BadParameter("--skip publish needs --topic (an existing bench topic)")
            results["publish"] = {"status": "skipped"}
        else:
            await create_topic(settings)
            run.created_topic = True
            results["publish"] = await publish(
                settings, workload, linger_ms=opts.linger_ms, batch_bytes=opts.batch_bytes
            )
            p = results["publish"]
            console.print(
                f"  published {p['events']:,} events in {p['seconds']:.2f} s: "
                f"[bold]{_fmt_rate(p['events_per_second'])} events/s[/bold] "
                f"({p['megabytes_per_second']} MB/s, compression {p['compression']})"
            )
        run.done.add("publish")
        total = sum((await end_offsets(settings.kafka_bootstrap_servers, run.topic)).values())
        api_devices = workload.devices
        # Free the payloads: the worker and replay stages should not share the box with a 1 GB
        # heap the benchmark no longer needs.
        workload.keys.clear()
        workload.values.clear()

        # ---- 2. baseline ------------------------------------------------------------------
        console.rule("2/5 (a) baseline: raw aiokafka consume")
        if "baseline" in skip:
            results["baseline"] = {"status": "skipped"}
        else:
            results["baseline"] = await raw_consume(settings)
            b = results["baseline"]
            console.print(
                f"  consumed {b['events']:,} records in {b['seconds']:.2f} s: "
                f"[bold]{_fmt_rate(b['events_per_second'])} events/s[/bold] "
                f"({b['megabytes_per_second']} MB/s)"
            )
            run.done.add("baseline")

        # ---- 3. worker --------------------------------------------------------------------
        console.rule("3/5 (b) worker ingest")
        if "worker" in skip:
            results["worker"] = {"status": "skipped"}
        else:
            run.created_schemas.append(run.worker_schema)
            try:
                w = results["worker"] = await run_worker_stage(
                    run,
                    settings,
                    total,
                    batch_size=opts.worker_batch_size,
                    profile=opts.profile_worker,
                )
                run.done.add("worker")
                m = w["metrics"]
                console.print(
                    f"  worker caught up: {w['events']:,} events in {w['seconds']:.2f} s = "
                    f"[bold]{_fmt_rate(w['events_per_second'])} events/s[/bold] (start-up "
                    f"{w['startup_seconds']} s not counted); peak RSS {w['peak_rss_mb']} MB; "
                    f"CPU s {w['cpu_seconds']}"
                )
                console.print(
                    f"  worker metrics: consumed {m['consumed']:,.0f}, applied {m['applied']:,.0f}"
                    f" (expected {workload.new:,}), table-dropped {m['table_duplicates']:,.0f}, "
                    f"db no-ops {m['db_noops']:,.0f} (expected {workload.duplicates + workload.stale:,}), "
                    f"dead-lettered {m['dead_lettered']:,.0f}, batches {m['batches']:,.0f}"
                )
                g = w["governance"]
                console.print(
                    f"  governance: {g['topic_records']:,} records forwarded {g['forwarded']}; "
                    f"governor caught up {g['after_ingest_seconds']} s after ingest "
                    f"({g['governor_records']:,.0f} records, {g['decisions']:,.0f} decisions, "
                    f"{g['governor_batch_seconds_sum']} s in its batches)"
                )
            except Exception as exc:
                console.print(f"  [red]worker stage failed:[/red] {exc}")
                results["worker"] = {"status": "failed", "error": str(exc)}
                exit_code = 1

        # ---- 4. replay --------------------------------------------------------------------
        console.rule("4/5 (c) replay")
        if "replay" in skip:
            results["replay"] = {"status": "skipped"}
        else:
            try:
                r = results["replay"] = await run_replay_stage(
                    run,
                    settings,
                    total,
                    batch_size=opts.replay_batch_size,
                    profile=opts.profile_replay,
                )
                run.done.add("replay")
                console.print(
                    f"  replayed {r['events']:,} events in {r['seconds']:.2f} s = "
                    f"[bold]{_fmt_rate(r['events_per_second'])} events/s[/bold] "
                    f"({r['seconds_per_million']} s per 1M); applied {r['applied']:,}, "
                    f"duplicates {r['duplicates']:,}, stale {r['stale']:,}"
                )
            except Exception as exc:
                console.print(f"  [red]replay stage failed:[/red] {exc!r}")
                results["replay"] = {"status": "failed", "error": repr(exc)}
                exit_code = 1

        # ---- 5. API -----------------------------------------------------------------------
        console.rule("5/5 (d) API point GETs")
        schema = (
            run.worker_schema
            if "worker" in run.done
            else (run.replay_schema if "replay" in run.done else None)
        )
        if "api" in skip:
            results["api"] = {"status": "skipped"}
        elif schema is None:
            results["api"] = {"status": "unavailable", "error": "no projection to serve"}
        else:
            try:
                a = results["api"] = await run_api_stage(
                    run,
                    settings,
                    api_devices,
                    rate=opts.api_rate,
                    count=opts.api_requests,
                    connections=opts.api_connections,
                    seed=opts.seed,
                    schema=schema,
                    client_kinds=opts.api_client.split(","),
                    profile=opts.profile_api,
                )
                run.done.add("api")
                if a["error_kinds"]:
                    console.print(f"  errors: {a['error_kinds']}")
            except StageUnavailable as exc:
                console.print(f"  [yellow]API stage not run:[/yellow] {exc}")
                results["api"] = {"status": "unavailable", "error": str(exc)}
            except Exception as exc:
                console.print(f"  [red]API stage failed:[/red] {exc!r}")
                results["api"] = {"status": "failed", "error": repr(exc)}
                exit_code = 1
    finally:
        console.rule("clean-up")
        await cleanup(run, settings, opts.keep)

    rows = verdicts(results, opts.events)
    report["table"] = rows
    console.rule("results")
    print_table(rows)
    if opts.json_out is not None:
        opts.json_out.parent.mkdir(parents=True, exist_ok=True)
        opts.json_out.write_text(json.dumps(report, indent=2, default=str) + "\n")
        console.print(f"results written to {opts.json_out}")
    return exit_code


@dataclass
class Options:
    events: int
    devices: int
    nodes: int
    dup_ratio: float
    partitions: int
    api_requests: int
    api_rate: float
    api_connections: int
    api_client: str
    skip: list[str]
    keep: bool
    json_out: Path | None
    seed: int
    topic: str | None
    worker_batch_size: int | None
    replay_batch_size: int
    linger_ms: int
    batch_bytes: int
    profile_worker: Path | None
    profile_replay: Path | None
    profile_api: Path | None


def cli(
    events: Annotated[int, typer.Option(min=1, help="Events to generate and publish.")] = 1_000_000,
    devices: Annotated[
        int, typer.Option(min=1, help="Distinct GPUs (spread over the nodes).")
    ] = 100_000,
    nodes: Annotated[int, typer.Option(min=1, help="Nodes (Kafka keys).")] = 12_500,
    dup_ratio: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=0.9,
            help="Share of events that re-send an earlier observation "
            "(half exact duplicates, half older versions).",
        ),
    ] = 0.10,
    partitions: Annotated[int, typer.Option(min=1, help="Partitions of the fresh topic.")] = 6,
    api_requests: Annotated[int, typer.Option(min=1, help="GET requests in stage (d).")] = 20_000,
    api_rate: Annotated[float, typer.Option(min=1.0, help="Open-loop GET rate (req/s).")] = 1000.0,
    api_connections: Annotated[
        int, typer.Option(min=1, max=256, help="Most HTTP connections of the load generator.")
    ] = 16,
    api_client: Annotated[
        str,
        typer.Option(
            help="Load generator: httpx (httpx.AsyncClient) or raw (a minimal asyncio "
            "HTTP/1.1 keep-alive client, ~10x less client CPU per request: tells the "
            "server's latency apart from the client's on a small machine). 'httpx,raw' runs "
            "the load once with each; the first one is judged against the target."
        ),
    ] = "httpx",
    skip: Annotated[
        list[str] | None,
        typer.Option(
            help=f"Stage to skip, repeatable: {', '.join(STAGES)}. Skipping publish needs --topic."
        ),
    ] = None,
    keep: Annotated[
        bool, typer.Option("--keep", help="Keep the topic, consumer group and schemas.")
    ] = False,
    json_out: Annotated[
        Path | None, typer.Option("--json-out", help="Write all results as JSON to this path.")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the synthetic workload.")] = 20261129,
    topic: Annotated[
        str | None,
        typer.Option(
            help="Topic name (default bench.<run id>); with --skip publish, an existing "
            "topic holding this same workload (--keep of an earlier run)."
        ),
    ] = None,
    worker_batch_size: Annotated[
        int | None,
        typer.Option(help="DEVICESTATE_WORKER_BATCH_SIZE for the worker (default: its own)."),
    ] = None,
    replay_batch_size: Annotated[
        int, typer.Option(min=1, help="Batch size of the replay (the CLI's default).")
    ] = 5000,
    linger_ms: Annotated[int, typer.Option(min=0, help="Producer linger (ms).")] = 20,
    batch_bytes: Annotated[
        int, typer.Option(min=16_384, help="Producer batch size (bytes).")
    ] = 524_288,
    profile_worker: Annotated[
        Path | None,
        typer.Option(
            help="Run the worker under pyinstrument (must be installed) and write its "
            "text profile here. Slows the worker down."
        ),
    ] = None,
    profile_replay: Annotated[
        Path | None,
        typer.Option(help="Profile the in-process replay with pyinstrument; text profile here."),
    ] = None,
    profile_api: Annotated[
        Path | None,
        typer.Option(help="Run the API under pyinstrument; text profile here. Slows it down."),
    ] = None,
) -> None:
    """Benchmark the devicestate pipeline end to end on the local stack (Kafka 127.0.0.1:9092, PostgreSQL 127.0.0.1:55432; start it with `devicestate-dev stack up`).

    Stages: publish -> (a) raw consume baseline -> (b) worker ingest -> (c) replay -> (d) API point GETs; then a table with ratios to (a) and the targets (ingest >= 25k events/s and >= 0.25x (a); replay of 1M <= 60 s; GET p99 <= 10 ms at 1k req/s). Exit code 1 when a stage failed (a MISS alone does not fail the run).
    """
    if not api_client or set(api_client.split(",")) - {"httpx", "raw"}:
        raise typer.BadParameter("--api-client must be httpx, raw, or both (httpx,raw)")
    bad = set(skip or ()) - set(STAGES)
    if bad:
        raise typer.BadParameter(f"unknown stage(s) {', '.join(sorted(bad))}; use {STAGES}")
    opts = Options(
        events=events,
        devices=devices,
        nodes=nodes,
        dup_ratio=dup_ratio,
        partitions=partitions,
        api_requests=api_requests,
        api_rate=api_rate,
        api_connections=api_connections,
        api_client=api_client,
        skip=list(skip or ()),
        keep=keep,
        json_out=json_out,
        seed=seed,
        topic=topic,
        worker_batch_size=worker_batch_size,
        replay_batch_size=replay_batch_size,
        linger_ms=linger_ms,
        batch_bytes=batch_bytes,
        profile_worker=profile_worker,
        profile_replay=profile_replay,
        profile_api=profile_api,
    )
    code = _run_with_signals(opts)
    raise typer.Exit(code)


def _run_with_signals(opts: Options) -> int:
    """Run :func:`main_async`; SIGTERM cancels it like Ctrl-C, so clean-up still runs."""

    async def runner() -> int:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        assert task is not None
        loop.add_signal_handler(signal.SIGTERM, task.cancel)
        return await main_async(opts)

    try:
        return asyncio.run(runner())
    except (KeyboardInterrupt, asyncio.CancelledError):
        console.print("[red]interrupted[/red]")
        return 130


def main(argv: list[str] | None = None) -> None:
    app = typer.Typer(add_completion=False, pretty_exceptions_show_locals=False)
    app.command()(cli)
    app(argv)


if __name__ == "__main__":
    main()
