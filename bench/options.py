"""The pipeline benchmark's options (:mod:`bench.pipeline`) and the workload they ask for."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.load import Workload, generate
from bench.load_pods import SHAPES, generate_pods

STAGES = ("publish", "baseline", "worker", "replay", "api")


@dataclass
class Options:
    """The benchmark's flags (see ``python -m bench.pipeline --help``)."""

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
    api_during_ingest: float | None = None
    extender_calls: int = 0
    extender_rate: float = 200.0
    shape: str = "synthetic"
    record_schema: int = 2
    memory_probe_worker: Path | None = None


def make_workload(opts: Options) -> Workload:
    """The log of ``--shape`` (:mod:`bench.load_pods`)."""
    gpus_per_pod = SHAPES[opts.shape]
    if not gpus_per_pod:
        return generate(opts.events, opts.devices, opts.nodes, opts.dup_ratio, opts.seed)
    return generate_pods(
        opts.events,
        opts.devices,
        opts.nodes,
        gpus_per_pod,
        opts.dup_ratio,
        opts.seed,
        opts.record_schema,
    )
