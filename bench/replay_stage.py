"""Stage (c) of the pipeline benchmark: ``devicestate replay`` of the bench topic, in process,
into a fresh schema; then its rows are compared with the worker's.

The replay is the product's own ``services.processes.replay.run.replay`` (what ``devicestate
replay`` runs), timed by its summary; CPU over the stage from :class:`bench.cpu.CpuSampler`
(``bench``: this process).

Its figures are per observation, as the worker stage's: ``events`` are the observations the
records carry (a schema-2 record, the training and inference shapes, carries one Pod change's),
``records`` the Kafka records; ``seconds_per_million`` is per 1M observations, the issue's
target (``seconds_per_million_records`` per 1M records).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from bench.console import Reporter, console, fmt_rate
from bench.cpu import CpuSampler
from bench.processes import render_profile, session_path
from bench.stack import Run
from services.runtime.config import Settings


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
    run: Run,
    settings: Settings,
    total: int,
    *,
    batch_size: int,
    profile: Path | None,
    observations: int | None = None,
) -> dict[str, Any]:
    """Replay ``settings.topic`` into ``run.replay_schema`` (batches of ``batch_size`` records)
    and return its figures (``events_per_second`` and ``seconds_per_million`` of observations,
    ``records_per_second``, counts, ``cpu_seconds``, ``cpu_us_per_observation``) and, when the
    worker stage ran, ``compare`` (:func:`compare_schemas`). ``observations``: those the records
    carry, as the worker stage counts them (``None``: one per record read)."""
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
                max_devices_per_node=settings.max_devices_per_node,
            )
            wall = time.perf_counter() - started
            if profiler is not None and profile is not None:
                session = profiler.stop()
                session.save(str(session_path(profile)))
                render_profile(profile)
            cpu_used = cpu.stop()
        events = observations or summary.read
        elapsed = summary.elapsed
        result: dict[str, Any] = {
            "events": events,
            "records": summary.read,
            "seconds": round(elapsed, 3),
            "wall_seconds_with_migration": round(wall, 3),
            "events_per_second": round(events / elapsed, 1) if elapsed > 0 else 0.0,
            "records_per_second": round(summary.events_per_second, 1),
            "seconds_per_million": round(elapsed * 1_000_000 / max(events, 1), 2),
            "seconds_per_million_records": round(elapsed * 1_000_000 / max(summary.read, 1), 2),
            "cpu_us_per_observation": round(cpu_used["bench"] * 1e6 / max(events, 1), 1)
            if "bench" in cpu_used
            else None,
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


def print_replay_summary(r: dict[str, Any]) -> None:
    """The stage's headline line."""
    console.print(
        f"  replayed {r['events']:,} events ({r['records']:,} records) in {r['seconds']:.2f} s = "
        f"[bold]{fmt_rate(r['events_per_second'])} events/s[/bold] "
        f"({fmt_rate(r['records_per_second'])} records/s; {r['seconds_per_million']} s per 1M "
        f"events); CPU {r['cpu_us_per_observation']} us per event (this process); applied "
        f"{r['applied']:,}, duplicates {r['duplicates']:,}, stale {r['stale']:,}"
    )
