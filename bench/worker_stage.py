"""Stage (b) of the pipeline benchmark: ``devicestate worker`` ingesting the bench topic.

The worker runs as a child process on the run's topics, consumer group, schema and data dir.
Ingest is timed from its first consumed record (its Prometheus counter) until the group's
committed offsets reach the topic's end offsets; then the stage waits for the governor agent
(same process) to commit the end of the governance topic. CPU over the ingest window comes from
:class:`bench.cpu.CpuSampler`, peak RSS from ``/proc``, counts from the worker's ``/metrics``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.console import Reporter, console, fmt_rate
from bench.cpu import CpuSampler, proc_cpu_seconds
from bench.kafka_admin import admin_client, committed_offsets, end_offsets
from bench.load import Workload
from bench.processes import (
    Child,
    devicestate_argv,
    devicestate_commands,
    free_port,
    pyinstrument_argv,
    render_profile,
    start_child,
)
from bench.stack import Run
from bench.worker_group import (
    RunningWorkers,
    decisions_by_kind,
    merged_metrics,
    metric_sum,
    per_worker,
)
from services.runtime.config import Settings


def worker_env(run: Run, settings: Settings, port: int, batch_size: int | None) -> dict[str, str]:
    """The worker's environment for ``run``: its topics, group, schema, data dir, metrics port."""
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
    return env


def worker_command() -> tuple[list[str], str, list[str]]:
    """``(argv, description, module argv)`` of the worker: ``devicestate worker``, or the module's
    own entry point when the sub-command is not wired into the CLI."""
    if "worker" in devicestate_commands():
        return (
            devicestate_argv("worker"),
            "devicestate worker",
            ["-m", "services.cli.main", "worker"],
        )
    return (
        [sys.executable, "-m", "streams.cli"],
        "python -m streams.cli (no `devicestate worker` sub-command registered)",
        ["-m", "streams.cli"],
    )


async def run_worker_stage(
    run: Run,
    settings: Settings,
    total: int,
    *,
    batch_size: int | None,
    profile: Path | None,
    observations: int | None = None,
    workers: int = 1,
    then: Callable[[RunningWorkers], Awaitable[dict[str, Any]]] | None = None,
    memory_probe: Path | None = None,
) -> dict[str, Any]:
    """Run the worker until it has committed all ``total`` records of ``settings.topic`` and the
    governor the whole governance topic; stop it (by PID) and return the stage's figures
    (``events_per_second``, ``cpu_seconds`` of the ingest window, RSS, worker and governor
    metrics). ``events`` are the ``observations`` the records carry (``None``: one per record,
    ``total``; schema-2 records carry several), ``records`` the Kafka records. Raises ``TimeoutError`` after 300 s + 1 ms per event (x5 under the profiler),
    ``RuntimeError`` when the worker exits early (with its last log lines).

    ``workers``: worker processes in the one consumer group (each its own data dir and metrics
    port; the figures are their sums, ``per_worker`` each one's; the single-partition
    governance topic goes to one of them). ``then``: run once all caught up, before the workers
    are stopped; its result is ``result["then"]``.

    ``memory_probe``: run the (first) worker under :mod:`bench.memory_probe` and, once caught up
    (after the RSS figures are sampled), have it write its memory report to this path."""
    import httpx

    ports = [free_port() for _ in range(workers)]
    argv, how, module_argv = worker_command()
    if profile is not None:
        argv = pyinstrument_argv(profile, module_argv)
        how += f" under pyinstrument -> {profile}"
    elif memory_probe is not None:
        frames = os.environ.get("BENCH_TRACEMALLOC_FRAMES", "1")
        argv = [sys.executable, "-m", "bench.memory_probe", str(memory_probe), frames, *module_argv]
        how += f" under tracemalloc -> {memory_probe}"
    names = ["worker"] if workers == 1 else [f"worker-{i + 1}" for i in range(workers)]
    console.print(
        f"  starting {workers} x {how}; metrics on 127.0.0.1:{', '.join(map(str, ports))}, "
        f"logs {run.log_dir}/{names[0]}.log"
    )
    spawned = time.monotonic()
    children: list[Child] = []
    for i, (name, port) in enumerate(zip(names, ports, strict=True)):
        env = worker_env(run, settings, port, batch_size)
        if workers > 1:  # a data dir (table store) per process, under the run's
            data_dir = run.worker_data_dir / f"worker-{i + 1}"
            data_dir.mkdir(parents=True, exist_ok=True)
            env["DEVICESTATE_WORKER_DATA_DIR"] = str(data_dir)
        children.append(start_child(name, argv, env, run.log_dir))
    run.children.extend(children)
    child = children[0]
    cpu = CpuSampler()
    cpu.groups["worker"] = [c.pid for c in children]
    own_cpu: dict[int, float] = {}

    closing = contextlib.AsyncExitStack()
    admin = await closing.enter_async_context(admin_client(settings.kafka_bootstrap_servers))
    ends = await end_offsets(settings.kafka_bootstrap_servers, settings.topic)
    # Generous: 300 s + 1 ms per event (x5 under the profiler); the stage fails after it.
    deadline = spawned + (300 + total / 1000) * (5 if profile is not None else 1)
    first_consumed: float | None = None
    consumed_all: float | None = None
    caught_up: float | None = None
    consumed = 0.0
    last_metrics: dict[str, float] = {}
    rss_samples: list[int] = []
    idle_rss_kb: int | None = None
    last_commit_poll = 0.0
    committed: dict[int, int] = {}
    then_result: dict[str, Any] | None = None
    try:
        async with httpx.AsyncClient(timeout=2.0) as http:
            running = RunningWorkers(children, ports, http, admin)
            with Reporter("worker", total) as progress:
                while True:
                    for each in children:
                        each.check()
                    now = time.monotonic()
                    if now > deadline:
                        raise TimeoutError(
                            f"worker did not catch up within {deadline - spawned:.0f} s "
                            f"(consumed {consumed:,.0f} of {total:,})"
                        )
                    scrapes = await running.scrape()
                    if all(scrapes):
                        last_metrics = merged_metrics(scrapes)
                        consumed = metric_sum(
                            last_metrics, "devicestate_worker_events_consumed_total"
                        )
                    now = time.monotonic()
                    status = child.sample()
                    for other in children[1:]:
                        other.sample()
                    if consumed > 0 and first_consumed is None:
                        first_consumed = now
                        cpu.start()
                        own_cpu = {c.pid: proc_cpu_seconds(c.pid) or 0.0 for c in children}
                    elif first_consumed is None and "VmRSS" in status:
                        idle_rss_kb = status["VmRSS"]  # started, nothing consumed yet
                    if consumed >= total and consumed_all is None:
                        consumed_all = now
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
            own_cpu = {
                c.pid: round((proc_cpu_seconds(c.pid) or 0.0) - own_cpu.get(c.pid, 0.0), 2)
                for c in children
            }
            # The health agent forwards before it commits, so the governance topic is complete
            # now; the governor agent (same process) may still be folding it.
            gov_ends = await end_offsets(
                settings.kafka_bootstrap_servers, settings.governance_topic
            )
            gov_total = sum(gov_ends.values())
            governor_caught_up: float | None = None
            with Reporter("governor", gov_total, unit="records") as progress:
                while True:
                    running.check()
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
            scrapes = await running.scrape()
            if all(scrapes):
                last_metrics = merged_metrics(scrapes)
            if then is not None:
                then_result = await then(running)
                scrapes = await running.scrape()
    finally:
        await closing.aclose()
    assert first_consumed is not None and caught_up is not None
    assert governor_caught_up is not None
    status = child.sample()
    if memory_probe is not None:
        await probe_memory(child, memory_probe)
    child_stop_started = time.monotonic()
    codes = [c.stop() for c in children]
    code = codes[0] if workers == 1 else max((c or 0 for c in codes), default=0)
    if profile is not None:
        render_profile(profile)
    stop_seconds = time.monotonic() - child_stop_started
    ingest_seconds = caught_up - first_consumed
    result: dict[str, Any] = {
        "command": how,
        "pid": child.pid,
        "workers": workers,
        "events": observations or total,
        "records": total,
        "startup_seconds": round(first_consumed - spawned, 2),
        "seconds": round(ingest_seconds, 3),
        "events_per_second": round((observations or total) / ingest_seconds, 1),
        "records_per_second": round(total / ingest_seconds, 1),
        "consumed_all_seconds": None
        if consumed_all is None
        else round(consumed_all - first_consumed, 3),
        "peak_rss_mb": round(
            max(c.peak_rss_kb for c in children) / 1024
            if workers > 1
            else max(child.peak_rss_kb, status.get("VmHWM", 0)) / 1024,
            1,
        ),
        "median_rss_mb": round(sorted(rss_samples)[len(rss_samples) // 2] / 1024, 1)
        if rss_samples
        else None,
        # The memory figure: what the worker holds once caught up above what it held
        # started and idle (before its first record), in kB as /proc gives them.
        "idle_rss_kb": idle_rss_kb if workers == 1 else None,  # per process: not a sum
        "caught_up_rss_kb": status.get("VmRSS"),
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
            "decisions_by_kind": decisions_by_kind(last_metrics),
            "governor_batches": metric_sum(
                last_metrics, "devicestate_governor_batch_seconds_count"
            ),
            "governor_batch_seconds_sum": round(
                metric_sum(last_metrics, "devicestate_governor_batch_seconds_sum"), 2
            ),
        },
    }
    if workers > 1:
        result["per_worker"] = [
            per_worker(c, values, own_cpu.get(c.pid))
            for c, values in zip(children, scrapes, strict=True)
        ]
    if then_result is not None:
        result["then"] = then_result
    return result


async def probe_memory(child: Any, out: Path) -> None:
    """Have the worker under :mod:`bench.memory_probe` write its report to ``out``; wait for it."""
    done = out.with_name(out.name + ".done")
    done.unlink(missing_ok=True)
    out.with_name(out.name + ".trigger").write_text("now\n")
    deadline = time.monotonic() + 300.0
    while not done.exists():
        child.check()
        if time.monotonic() > deadline:
            raise TimeoutError(f"the worker's memory report {out} did not come")
        await asyncio.sleep(0.5)
    out.with_name(out.name + ".trigger").unlink(missing_ok=True)
    console.print(f"  worker memory report: {out}")


def print_worker_summary(w: dict[str, Any], workload: Workload) -> None:
    """The stage's figures, and the worker's counts against what the workload must produce."""
    m = w["metrics"]
    console.print(
        f"  worker caught up: {w['events']:,} events ({w['records']:,} records) in "
        f"{w['seconds']:.2f} s = [bold]{fmt_rate(w['events_per_second'])} events/s[/bold] "
        f"({fmt_rate(w['records_per_second'])} records/s; start-up "
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
