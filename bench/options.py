"""The pipeline benchmark's options (:mod:`bench.pipeline`) and the workload they ask for."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.load import Workload, generate
from bench.load_pods import SHAPES, generate_pods
from bench.load_storm import STORM_UNKNOWN_SHARE, StormWorkload, generate_storm

STAGES = ("publish", "baseline", "worker", "replay", "api")
SHAPE_NAMES = (*SHAPES, "storm")
"""``--shape``: the Pod shapes of :mod:`bench.load_pods` and the storm of :mod:`bench.load_storm`."""


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
    workers: int = 1
    storm_unknown_share: float = STORM_UNKNOWN_SHARE
    memory_probe_worker: Path | None = None


def check_shape(shape: str, devices: int, nodes: int) -> str | None:
    """Why ``--shape``, ``--devices`` and ``--nodes`` do not go together, or ``None``."""
    if shape not in SHAPE_NAMES:
        return f"--shape must be one of {', '.join(SHAPE_NAMES)}"
    if shape == "storm":
        if devices % nodes or devices < nodes:
            return "--shape storm: --devices must be a multiple of --nodes (one Pod per node)"
        return None
    if SHAPES[shape] and devices % SHAPES[shape]:
        return f"--shape {shape}: --devices must be a multiple of {SHAPES[shape]}"
    return None


def make_storm(opts: Options) -> StormWorkload:
    """The steady and burst logs of ``--shape storm`` (:mod:`bench.load_storm`); ``--events``
    and ``--dup-ratio`` do not apply (the fleet's size makes the log)."""
    return generate_storm(
        opts.devices,
        opts.nodes,
        opts.seed,
        unknown_share=opts.storm_unknown_share,
        partitions=opts.partitions,
    )


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
