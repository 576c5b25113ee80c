"""Several worker processes of one pipeline-benchmark stage (issue 12, "Scale out"): their
metrics read and summed, each one's share, and what runs while they are up (:class:`RunningWorkers`).

Metrics are the Prometheus text each worker serves (``DEVICESTATE_WORKER_METRICS_PORT``).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from dataclasses import dataclass
from typing import Any

from bench.processes import Child

_METRIC_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text -> ``{name{labels}: value}`` (labels kept verbatim)."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _METRIC_LINE.match(line)
        if match:
            with contextlib.suppress(ValueError):
                values[match.group(1) + (match.group(2) or "")] = float(match.group(3))
    return values


def metric_sum(values: dict[str, float], name: str) -> float:
    """Sum of metric ``name`` over all its label sets."""
    return sum(v for k, v in values.items() if k == name or k.startswith(name + "{"))


def merged_metrics(scrapes: list[dict[str, float]]) -> dict[str, float]:
    """The metrics of several workers as one: each series summed over the workers (counters,
    histogram sums and counts; a gauge's sum is the fleet's)."""
    merged: dict[str, float] = {}
    for values in scrapes:
        for key, value in values.items():
            merged[key] = merged.get(key, 0.0) + value
    return merged


def decisions_by_kind(values: dict[str, float]) -> dict[str, float]:
    """``devicestate_governor_decisions_total`` per ``kind`` label."""
    prefix = "devicestate_governor_decisions_total{"
    out: dict[str, float] = {}
    for key, value in values.items():
        if key.startswith(prefix) and 'kind="' in key:
            kind = key.split('kind="', 1)[1].split('"', 1)[0]
            out[kind] = out.get(kind, 0.0) + value
    return out


@dataclass
class RunningWorkers:
    """The worker processes of a stage, caught up, for what runs before they are stopped
    (:mod:`bench.storm_stage`): their children, metrics ports, an HTTP client and the Kafka
    admin client of the stage."""

    children: list[Child]
    ports: list[int]
    http: Any  # httpx.AsyncClient
    admin: Any  # aiokafka admin client

    async def scrape(self) -> list[dict[str, float]]:
        """Each worker's ``/metrics`` now (``{}`` for one that does not answer)."""
        import httpx

        async def one(port: int) -> dict[str, float]:
            with contextlib.suppress(httpx.HTTPError):
                response = await self.http.get(f"http://127.0.0.1:{port}/metrics")
                return parse_metrics(response.text)
            return {}

        return list(await asyncio.gather(*(one(port) for port in self.ports)))

    def check(self) -> None:
        """Raise ``RuntimeError`` (with its last log lines) when a worker exited."""
        for child in self.children:
            child.check()


def per_worker(child: Child, values: dict[str, float], cpu_seconds: float | None) -> dict[str, Any]:
    """One worker's share of a stage of several: records consumed, CPU over the ingest window,
    peak RSS, and whether it ran the governor (it consumed governance records)."""
    governed = metric_sum(values, "devicestate_governor_records_consumed_total")
    return {
        "name": child.name,
        "pid": child.pid,
        "consumed": metric_sum(values, "devicestate_worker_events_consumed_total"),
        "applied": metric_sum(values, "devicestate_worker_events_applied_total"),
        "governor_records": governed,
        "decisions": metric_sum(values, "devicestate_governor_decisions_total"),
        "cpu_seconds": cpu_seconds,
        "peak_rss_mb": round(child.peak_rss_kb / 1024, 1),
    }
