"""End-to-end benchmark of the devicestate pipeline, in ONE run against the local stack.

Stages (each prints progress and its figures):

1. ``publish``  -- generate N synthetic ``DeviceHealthObserved`` events (deterministic seed) and
   publish them, keyed by node, to a fresh topic ``bench.<run id>`` with a batched aiokafka
   producer (:mod:`bench.load`, :mod:`bench.kafka_io`).
2. ``baseline`` -- (a) raw aiokafka consume of the whole topic (no group, every partition
   assigned, from the beginning up to the end offsets), nothing decoded. Every ratio is against
   this rate.
3. ``worker``   -- (b) ``devicestate worker`` as a subprocess on the fresh topic, a fresh consumer
   group, a fresh schema and data dir; events/s from its first consumed record until the group's
   committed offsets reach the end offsets; peak RSS from ``/proc/<pid>/status``
   (:mod:`bench.worker_stage`). ``--workers N``: N worker processes in the one consumer group
   (figures summed, each one's share in ``per_worker``). ``--shape storm``: once caught up on
   the steady state, the burst of Unknown nodes is published and the backlog timed
   (:mod:`bench.storm_stage`, :mod:`bench.load_storm`).
4. ``replay``   -- (c) ``services.processes.replay.run.replay`` (in this process) of the topic into
   another fresh schema; then its rows are compared with the worker's (:mod:`bench.replay_stage`).
5. ``api``      -- (d) ``devicestate api`` as a subprocess on the worker's schema; open-loop
   point GETs of random existing devices at a fixed rate (httpx or a raw HTTP/1.1 client,
   keep-alive, bounded connections, 127.0.0.1 only, bounded in count and time)
   (:mod:`bench.api_stage`).

Then a table of all figures with ratios to the baseline and the targets (PASS/MISS,
:mod:`bench.report`), optionally written as JSON (``--json-out``). The topics, consumer group
offsets and schemas are removed at the end unless ``--keep`` (:mod:`bench.stack`); every process
the benchmark started is stopped by its PID.

The stages themselves run in :mod:`bench.run`. Run from the repository root:
``.venv/bin/python -m bench.pipeline --help``.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Annotated

import typer

from bench.console import console
from bench.options import STAGES, Options, check_shape
from bench.run import main_async


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
    api_during_ingest: Annotated[
        float | None,
        typer.Option(
            "--api-during-ingest",
            min=0,
            help="Also run the GET load on the worker's schema while the worker ingests, this "
            "many seconds after it starts (GETs of devices not written yet are 404s).",
        ),
    ] = None,
    extender_calls: Annotated[
        int,
        typer.Option(
            min=0,
            help="After the GETs of stage (d), this many scheduler-extender filter calls of 100 "
            "random candidate nodes (0: none).",
        ),
    ] = 0,
    extender_rate: Annotated[
        float, typer.Option(min=1.0, help="Open-loop rate of the extender calls (req/s).")
    ] = 200.0,
    json_out: Annotated[
        Path | None, typer.Option("--json-out", help="Write all results as JSON to this path.")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the synthetic workload.")] = 20261129,
    record_schema: Annotated[
        int,
        typer.Option(
            min=1,
            max=2,
            help="Records of the Pod shapes: 2 (the watcher's default) one "
            "DeviceHealthObservations record per Pod status change, 1 one record per "
            "observation (issue 12).",
        ),
    ] = 2,
    shape: Annotated[
        str,
        typer.Option(
            help="Workload: synthetic (single observations of random devices), training "
            "(one 8-GPU Pod per node: a status change is 8 observations of one node), "
            "inference (eight 1-GPU Pods per node; bench/load_pods.py) or storm (one Pod per "
            "node of --devices/--nodes GPUs reported Healthy and ingested, then "
            "--storm-unknown-share of the nodes Unknown at once; bench/load_storm.py; the "
            "issue's size: --nodes 25000 --devices 200000; --events does not apply)."
        ),
    ] = "synthetic",
    storm_unknown_share: Annotated[
        float,
        typer.Option(
            min=0.0, max=1.0, help="--shape storm: share of the nodes whose GPUs turn Unknown."
        ),
    ] = 0.10,
    workers: Annotated[
        int,
        typer.Option(
            min=1,
            max=6,
            help="Worker processes in the one consumer group (issue 12, scale out); the "
            "governance topic's one partition goes to one of them.",
        ),
    ] = 1,
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
    memory_probe_worker: Annotated[
        Path | None,
        typer.Option(
            help="Run the worker with tracemalloc (bench/memory_probe.py) and, once caught up, "
            "write where its memory is (top allocation sites, malloc_trim's effect) here "
            "(frames per site: $BENCH_TRACEMALLOC_FRAMES, 1). "
            "Slows the worker down; its RSS figures include tracemalloc's own."
        ),
    ] = None,
    profile_replay: Annotated[
        Path | None,
        typer.Option(help="Profile the in-process replay with pyinstrument; text profile here."),
    ] = None,
    profile_api: Annotated[
        Path | None,
        typer.Option(
            help="Run the API under pyinstrument; text profile here (the load during the "
            "ingest, --api-during-ingest, in NAME-during.SUFFIX). Slows it down."
        ),
    ] = None,
) -> None:
    """Benchmark the devicestate pipeline end to end on the local stack (Kafka 127.0.0.1:9092, PostgreSQL 127.0.0.1:55432; start it with `devicestate-dev stack up`).

    Stages: publish -> (a) raw consume baseline -> (b) worker ingest -> (c) replay -> (d) API point GETs; then a table with ratios to (a) and the targets (ingest >= 30k events/s and >= 0.15x (a); replay of 1M observations <= 20 s; GET p99 <= 10 ms at 1k req/s). Exit code 1 when a stage failed (a MISS alone does not fail the run).
    """
    if not api_client or set(api_client.split(",")) - {"httpx", "raw"}:
        raise typer.BadParameter("--api-client must be httpx, raw, or both (httpx,raw)")
    problem = check_shape(shape, devices, nodes)
    if problem is not None:
        raise typer.BadParameter(problem)
    if shape == "storm" and "publish" in (skip or ()):
        raise typer.BadParameter("--shape storm publishes its burst: it cannot --skip publish")
    if workers > 1 and profile_worker is not None:
        raise typer.BadParameter("--profile-worker profiles one worker: use --workers 1")
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
        memory_probe_worker=memory_probe_worker,
        profile_replay=profile_replay,
        profile_api=profile_api,
        api_during_ingest=api_during_ingest,
        extender_calls=extender_calls,
        extender_rate=extender_rate,
        shape=shape,
        record_schema=record_schema,
        workers=workers,
        storm_unknown_share=storm_unknown_share,
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
    """Entry point of ``python -m bench.pipeline`` (``argv``: default ``sys.argv``)."""
    app = typer.Typer(add_completion=False, pretty_exceptions_show_locals=False)
    app.command()(cli)
    app(argv)


if __name__ == "__main__":
    main()
