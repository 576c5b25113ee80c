"""The synthetic fleet of the governor benchmark: its options, its GPUs, the generated log."""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

T0 = datetime(2026, 11, 29, 0, 0, tzinfo=UTC)
BENCH_NAMESPACE = uuid.UUID("0b7f3f4e-2f7e-4d0c-9a43-7c1f4d6c9e21")
"""uuid5 namespace of the synthetic GPU UUIDs and claim UIDs (fixed: same IDs every run)."""
FIRST_VERSION = 1_000_000
PLUGIN_RESOURCE = "nvidia.com/gpu"
DRA_DRIVER = "gpu.nvidia.com"
XID = "XID 79: GPU has fallen off the bus"


@dataclass(slots=True)
class Gpu:
    """One synthetic GPU: its node, DRA or device plugin, identities and episode count."""

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
    """The generated log (encoded records in topic order) and what its closed-loop fold decided."""

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
    """The benchmark's flags (see ``python -m bench.governor --help``)."""

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
