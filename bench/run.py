"""One run of :mod:`bench.pipeline`'s stages (publish, baseline, worker, replay, api) against the
local stack: the stages in order, the clean-up, the verdict table and the JSON report. The
command line is :mod:`bench.pipeline`.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

import typer

from bench.api_stage import api_during_ingest, run_api_stage
from bench.console import console
from bench.kafka_admin import create_topic, end_offsets
from bench.kafka_io import print_baseline_summary, print_publish_summary, publish, raw_consume
from bench.load import Workload
from bench.machine import code_version, command_line, machine_info
from bench.options import Options, make_storm, make_workload
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
from bench.storm_stage import print_storm_summary, publish_ticks, storm_burst
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
    size = "storm" if opts.shape == "storm" else f"events {opts.events:,}"
    console.print(
        f"{size}, workers {opts.workers}, devices {opts.devices:,}, nodes {opts.nodes:,}, dup-ratio "
        f"{opts.dup_ratio}, partitions {opts.partitions}, seed {opts.seed}; topic {run.topic}; "
        f"skip {', '.join(sorted(skip)) or 'nothing'}"
    )
    workload: Workload | None = None
    exit_code = 0
    try:
        # ---- 1. publish -------------------------------------------------------------------
        console.rule("1/5 publish")
        storm = make_storm(opts) if opts.shape == "storm" else None
        workload = make_workload(opts) if storm is None else storm.steady
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
            if storm is not None:  # the watcher's tick after the steady state, every partition
                await publish_ticks(settings, storm.steady_ticks)
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
                    memory_probe=opts.memory_probe_worker,
                    workers=opts.workers,
                    then=None
                    if storm is None
                    else lambda running: storm_burst(
                        running,
                        run,
                        settings,
                        storm,
                        linger_ms=opts.linger_ms,
                        batch_bytes=opts.batch_bytes,
                    ),
                )
                w["devices"] = opts.devices
                if storm is not None:
                    results["storm"] = w.pop("then")
                    print_storm_summary(results["storm"])
                    storm.burst.keys.clear()
                    storm.burst.values.clear()
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
        if storm is not None:  # the burst is on the topic now too
            total = sum((await end_offsets(settings.kafka_bootstrap_servers, run.topic)).values())
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
                    observations=observations,
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

    # The storm's log is its fleet's, not --events: its replay row says "scaled to 1M".
    rows = verdicts(results, opts.events if opts.shape != "storm" else 0)
    report["table"] = rows
    console.rule("results")
    print_table(rows)
    if opts.json_out is not None:
        opts.json_out.parent.mkdir(parents=True, exist_ok=True)
        opts.json_out.write_text(json.dumps(report, indent=2, default=str) + "\n")
        console.print(f"results written to {opts.json_out}")
    return exit_code
