"""The figures the A/B driver (:mod:`bench.ab`) compares, read from pipeline reports, and their
summary over rounds: median, min-max, ratio head/base.

A figure is read from the JSON report a pipeline run writes (``--json-out``); the fields exist
since the 2026-11-29 runs (the single-file ``bench/pipeline.py``) and are kept by the package, so
old and new revisions are read alike. A figure a run lacks (stage skipped or failed) is ``None``
and left out of the median.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.table import Table

from bench.console import console

Report = dict[str, Any]


def _get(report: Report, *path: str) -> Any:
    value: Any = report.get("results", {})
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _per(numerator: float | None, denominator: float | None, scale: float) -> float | None:
    if numerator is None or not denominator:
        return None
    return round(float(numerator) / float(denominator) * scale, 2)


def _rss_per_device(report: Report) -> float | None:
    """The worker's RSS caught up above its idle RSS, bytes per ``--devices`` (issue 12)."""
    idle = _get(report, "worker", "idle_rss_kb")
    held = _get(report, "worker", "caught_up_rss_kb")
    devices = report.get("options", {}).get("devices")
    if idle is None or held is None:
        return None
    return _per((held - idle) * 1024, devices, 1)


@dataclass(frozen=True)
class Figure:
    """One compared figure: ``read`` gets it from a report; ``higher_is_better`` says which way
    a ratio head/base above 1 goes; ``headline`` figures are the ones the issue asks about, the
    others say how quiet the machine and the stack were."""

    name: str
    unit: str
    higher_is_better: bool
    read: Callable[[Report], float | None]
    headline: bool = True


FIGURES: tuple[Figure, ...] = (
    Figure("ingest", "events/s", True, lambda r: _get(r, "worker", "events_per_second")),
    Figure(
        "worker CPU per event",
        "us",
        False,
        lambda r: _per(
            _get(r, "worker", "cpu_seconds", "worker"), _get(r, "worker", "events"), 1e6
        ),
    ),
    Figure(
        "worker RSS above idle, per device",
        "bytes",
        False,
        _rss_per_device,
    ),
    # The replay's figures from the workload's observations and the replay's seconds, not from
    # its ``events_per_second``: revisions before 2026-12-04 counted records there.
    Figure(
        "replay",
        "observations/s",
        True,
        lambda r: _per(_get(r, "generate", "events"), _get(r, "replay", "seconds"), 1),
    ),
    Figure("replay seconds", "s", False, lambda r: _get(r, "replay", "seconds")),
    Figure(
        "replay CPU per observation (this process)",
        "us",
        False,
        lambda r: _per(
            _get(r, "replay", "cpu_seconds", "bench"), _get(r, "generate", "events"), 1e6
        ),
    ),
    Figure("GET p50", "ms", False, lambda r: _get(r, "api", "latency_ms", "p50")),
    Figure("GET p99", "ms", False, lambda r: _get(r, "api", "latency_ms", "p99")),
    Figure("GET achieved rate", "req/s", True, lambda r: _get(r, "api", "achieved_rate")),
    Figure(
        "GET p99 while ingesting",
        "ms",
        False,
        lambda r: _get(r, "api_ingest", "latency_ms", "p99"),
    ),
    Figure(
        "GET service p99 while ingesting",
        "ms",
        False,
        lambda r: _get(r, "api_ingest", "service_ms", "p99"),
    ),
    Figure(
        "GET rate while ingesting",
        "req/s",
        True,
        lambda r: _get(r, "api_ingest", "achieved_rate"),
    ),
    Figure(
        "API CPU per GET while ingesting",
        "ms",
        False,
        lambda r: _per(
            _get(r, "api_ingest", "cpu_seconds", "api"), _get(r, "api_ingest", "requests"), 1e3
        ),
        headline=False,
    ),
    Figure(
        "API CPU per GET",
        "ms",
        False,
        lambda r: _per(_get(r, "api", "cpu_seconds", "api"), _get(r, "api", "ok"), 1e3),
        headline=False,
    ),
    Figure(
        "replay CPU (this process)",
        "s",
        False,
        lambda r: _get(r, "replay", "cpu_seconds", "bench"),
        headline=False,
    ),
    Figure(
        "(a) raw consume baseline",
        "events/s",
        True,
        lambda r: _get(r, "baseline", "events_per_second"),
        headline=False,
    ),
    Figure(
        "others during ingest",
        "cores",
        False,
        lambda r: _per(
            _get(r, "worker", "cpu_seconds", "other"), _get(r, "worker", "cpu_seconds", "wall"), 1
        ),
        headline=False,
    ),
)


def read_figures(report: Report) -> dict[str, float | None]:
    """``{figure name: value}`` of one pipeline report, plus ``replay == worker`` (1.0 when the
    replay's rows equalled the worker's, 0.0 when they differed, ``None`` when not compared)."""
    values: dict[str, float | None] = {}
    for figure in FIGURES:
        value = figure.read(report)
        values[figure.name] = None if value is None else float(value)
    identical = _get(report, "replay", "compare", "identical")
    values["replay == worker"] = None if identical is None else float(bool(identical))
    return values


def spread(values: Sequence[float | None]) -> dict[str, Any]:
    """Median, min, max of the values present (``None`` when there are none), and all values."""
    present = [v for v in values if v is not None]
    if not present:
        return {"values": list(values), "median": None, "min": None, "max": None}
    return {
        "values": list(values),
        "median": round(statistics.median(present), 3),
        "min": min(present),
        "max": max(present),
    }


def summarise(
    base: Sequence[Mapping[str, float | None]], head: Sequence[Mapping[str, float | None]]
) -> dict[str, dict[str, Any]]:
    """Per figure: each side's :func:`spread`, ``ratio`` = head median / base median, and
    ``ranges``: ``overlap`` when the two min-max ranges overlap (within the noise of these
    rounds), else ``head better`` or ``head worse`` (by the figure's direction)."""
    summary: dict[str, dict[str, Any]] = {}
    for figure in FIGURES:
        a = spread([run.get(figure.name) for run in base])
        b = spread([run.get(figure.name) for run in head])
        ratio = ranges = None
        if a["median"] and b["median"] is not None:
            ratio = round(b["median"] / a["median"], 3)
        if a["median"] is not None and b["median"] is not None:
            if b["min"] > a["max"]:
                ranges = "head better" if figure.higher_is_better else "head worse"
            elif b["max"] < a["min"]:
                ranges = "head worse" if figure.higher_is_better else "head better"
            else:
                ranges = "overlap"
        summary[figure.name] = {
            "unit": figure.unit,
            "better": "higher" if figure.higher_is_better else "lower",
            "headline": figure.headline,
            "base": a,
            "head": b,
            "ratio": ratio,
            "ranges": ranges,
        }
    checks = [run.get("replay == worker") for run in [*base, *head]]
    summary["replay == worker"] = {
        "unit": "",
        "better": "OK",
        "headline": True,
        "runs_ok": sum(1 for c in checks if c == 1.0),
        "runs_diff": sum(1 for c in checks if c == 0.0),
        "runs_not_compared": sum(1 for c in checks if c is None),
    }
    return summary


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.2f}"


def print_summary(summary: dict[str, dict[str, Any]], base_label: str, head_label: str) -> None:
    """The A/B table: median [min-max] per side, ratio head/base, the ranges' verdict."""
    table = Table(title=f"pipeline A/B: head {head_label} vs base {base_label}")
    for name, justify in (
        ("figure", "left"),
        ("unit", "left"),
        (f"base {base_label}", "right"),
        (f"head {head_label}", "right"),
        ("head/base", "right"),
        ("better", "left"),
        ("ranges", "left"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for figure in FIGURES:
        row = summary[figure.name]
        cells = []
        for side in ("base", "head"):
            s = row[side]
            cells.append(
                "-"
                if s["median"] is None
                else f"{_fmt(s['median'])} [{_fmt(s['min'])}-{_fmt(s['max'])}]"
            )
        ratio = "-" if row["ratio"] is None else f"{row['ratio']:.3f}x"
        name = figure.name if figure.headline else f"[dim]{figure.name}[/dim]"
        table.add_row(name, figure.unit, *cells, ratio, row["better"], row["ranges"] or "-")
    check = summary["replay == worker"]
    table.add_row(
        "replay == worker",
        "",
        "",
        "",
        "",
        "OK",
        f"{check['runs_ok']} OK, {check['runs_diff']} DIFF, {check['runs_not_compared']} n/a",
    )
    console.print(table)
