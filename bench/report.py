"""The pipeline benchmark's verdicts and results table.

:func:`verdicts` turns the stages' results into rows (figure, value, unit, ratio to the raw
consume baseline, target, PASS/MISS); the JSON report keeps them under ``table``. The targets
are the design's (see ``docs/benchmarks.md``): ingest >= 30k observations/s and >= 0.15x the baseline (issue 12),
a replay of 1M events in <= 20 s, GET p99 <= 10 ms at 1k req/s with no errors.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from bench.console import console
from bench.scale_rows import scale_rows

# Targets (see docs/benchmarks.md).
TARGET_INGEST_EPS = 30_000.0
TARGET_INGEST_RATIO = 0.15
TARGET_REPLAY_SECONDS_PER_MILLION = 20.0
TARGET_GET_P99_MS = 10.0
TARGET_GET_P99_INGEST_MS = 25.0
"""Point GET p99 while the worker ingests at full speed (issue 12)."""
TARGET_FILTER_RATE = 200.0
"""Scheduler-extender filter calls per second (100 candidate nodes) the p99 target holds at."""
TARGET_GET_RATE = 1000.0
TARGET_RSS_PER_DEVICE_BYTES = 1024
"""The worker's RSS once caught up above its idle RSS, per distinct device (issue 12)."""


def verdicts(results: dict[str, Any], events: int) -> list[dict[str, Any]]:
    """One row per figure: value, ratio to the baseline, target, PASS/MISS."""
    rows: list[dict[str, Any]] = []
    base = results.get("baseline", {}).get("events_per_second")

    def ratio(value: float | None) -> float | None:
        return None if value is None or not base else round(value / base, 3)

    pub = results.get("publish")
    if pub and "events_per_second" in pub:  # absent with --skip publish
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
        idle, held, devices = (
            worker.get("idle_rss_kb"),
            worker.get("caught_up_rss_kb"),
            worker.get("devices"),
        )
        if idle and held and devices:
            per_device = round((held - idle) * 1024 / devices)
            rows.append(
                {
                    "figure": "(b) worker RSS above idle, per device",
                    "value": per_device,
                    "unit": "bytes",
                    "ratio": None,
                    "target": f"<= {TARGET_RSS_PER_DEVICE_BYTES:,} bytes",
                    "verdict": "PASS" if per_device <= TARGET_RSS_PER_DEVICE_BYTES else "MISS",
                }
            )
    rows.extend(scale_rows(results))  # --workers N, --shape storm
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
    during = results.get("api_ingest")
    if during and "latency_ms" in during:
        p99 = during["latency_ms"]["p99"]
        not_found = during["error_kinds"].get("HTTP 404", 0)
        rows.append(
            {
                "figure": "(d') GET p99 while the worker ingests",
                "value": p99,
                "unit": "ms",
                "ratio": None,
                "target": f"<= {TARGET_GET_P99_INGEST_MS:.0f} ms at {TARGET_GET_RATE:,.0f}/s",
                "verdict": "PASS"
                if p99 <= TARGET_GET_P99_INGEST_MS
                and during["errors"] == not_found
                and during["worker_still_ingesting"]
                and during["achieved_rate"] >= 0.95 * TARGET_GET_RATE
                else "MISS",
            }
        )
        rows.append(
            {
                "figure": "(d') GET rate while ingesting (404: device not written yet)",
                "value": during["achieved_rate"],
                "unit": f"req/s, {not_found} x 404",
                "ratio": None,
                "target": "-",
                "verdict": "-",
            }
        )
    ext = (results.get("api") or {}).get("extender")
    if ext and "latency_ms" in ext:
        p99 = ext["latency_ms"]["p99"]
        rows.append(
            {
                "figure": f"(e) scheduler filter p99, {ext['candidate_nodes']} nodes",
                "value": p99,
                "unit": "ms",
                "ratio": None,
                "target": f"<= {TARGET_GET_P99_MS:.0f} ms at {TARGET_FILTER_RATE:,.0f}/s",
                "verdict": "PASS"
                if p99 <= TARGET_GET_P99_MS
                and ext["errors"] == 0
                and ext["target_rate"] >= TARGET_FILTER_RATE
                and ext["achieved_rate"] >= 0.95 * TARGET_FILTER_RATE
                else "MISS",
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
    """The rows of :func:`verdicts` as a rich table."""
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
