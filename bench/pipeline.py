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
   (:mod:`bench.worker_stage`).
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

Run from the repository root: ``.venv/bin/python -m bench.pipeline --help``.
"""

from __future__ import annotations

import asyncio
import json
import signal
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from bench.api_stage import api_during_ingest, run_api_stage
from bench.console import console
from bench.kafka_admin import create_topic, end_offsets
from bench.kafka_io import print_baseline_summary, print_publish_summary, publish, raw_consume
from bench.load import Workload
from bench.load_pods import SHAPES
from bench.machine import code_version, command_line, machine_info
from bench.options import STAGES, Options, make_workload
from bench.processes import StageUnavailable
from bench.replay_stage import print_replay_summary, run_replay_stage
from bench.report import print_table, verdicts
from bench.stack import (
    StackUnreachable,
    check_stack,
    cleanup,
    new_run,
    run_settings,
    stack_settings,
)
from bench.worker_stage import print_worker_summary, run_worker_stage


async def main_async(opts: Options) -> int:
    """Run the stages, clean up, print the table, write the JSON; returns the exit code."""
    run = new_run(opts.topic)
    skip = set(opts.skip)
    settings = run_settings(stack_settings(), run, opts.partitions)
    from services.runtime.logs import configure_logging

    configure_logging(settings)
    try:
        await check_stack(settings)
    except StackUnreachable as exc:
        console.print(f"[red]{exc}[/red]")
        return 1
    results: dict[str, Any] = {}
    report: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "run_id": run.run_id,
        "command": command_line(),
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
        workload = make_workload(opts)
        observations = workload.observations or len(workload.values)
        results["generate"] = {
            "events": observations,
            "records": len(workload.values),
            "record_schema": opts.record_schema,
            "shape": opts.shape,
            "seconds": round(workload.seconds, 2),
            "new_observations": workload.new,
            "exact_duplicates": workload.duplicates,
            "stale_resends": workload.stale,
            "devices_observed": len(workload.devices),
            "mean_event_bytes": round(workload.bytes / max(len(workload.values), 1), 1),
        }
        console.print(
            f"  generated {observations:,} events in {len(workload.values):,} records "
            f"({opts.shape}, schema {opts.record_schema}) in {workload.seconds:.1f} s: "
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
            print_publish_summary(results["publish"])
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
            # Records carry several observations (schema 2): the substrate's rate of them too.
            results["baseline"]["observations_per_second"] = round(
                results["baseline"]["events_per_second"] * observations / max(total, 1), 1
            )
            print_baseline_summary(results["baseline"])
            run.done.add("baseline")

        # ---- 3. worker --------------------------------------------------------------------
        console.rule("3/5 (b) worker ingest")
        if "worker" in skip:
            results["worker"] = {"status": "skipped"}
        else:
            run.created_schemas.append(run.worker_schema)
            during = None
            if opts.api_during_ingest is not None:
                during = asyncio.create_task(
                    api_during_ingest(run, settings, api_devices, opts, opts.api_during_ingest)
                )
            try:
                w = results["worker"] = await run_worker_stage(
                    run,
                    settings,
                    total,
                    batch_size=opts.worker_batch_size,
                    profile=opts.profile_worker,
                    observations=observations,
                )
                if during is not None:
                    results["api_ingest"] = await during
                run.done.add("worker")
                print_worker_summary(w, workload)
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
                print_replay_summary(r)
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
                    extender_calls=opts.extender_calls,
                    extender_rate=opts.extender_rate,
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
            "(one 8-GPU Pod per node: a status change is 8 observations of one node) or "
            "inference (eight 1-GPU Pods per node); bench/load_pods.py."
        ),
    ] = "synthetic",
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

    Stages: publish -> (a) raw consume baseline -> (b) worker ingest -> (c) replay -> (d) API point GETs; then a table with ratios to (a) and the targets (ingest >= 30k events/s and >= 0.15x (a); replay of 1M <= 20 s; GET p99 <= 10 ms at 1k req/s). Exit code 1 when a stage failed (a MISS alone does not fail the run).
    """
    if not api_client or set(api_client.split(",")) - {"httpx", "raw"}:
        raise typer.BadParameter("--api-client must be httpx, raw, or both (httpx,raw)")
    if shape not in SHAPES:
        raise typer.BadParameter(f"--shape must be one of {', '.join(SHAPES)}")
    if SHAPES[shape] and devices % SHAPES[shape]:
        raise typer.BadParameter(
            f"--shape {shape}: --devices must be a multiple of {SHAPES[shape]}"
        )
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
        api_during_ingest=api_during_ingest,
        extender_calls=extender_calls,
        extender_rate=extender_rate,
        shape=shape,
        record_schema=record_schema,
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
