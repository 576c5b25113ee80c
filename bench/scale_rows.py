"""The verdict rows of the pipeline benchmark's scale figures (issue 12): ``--shape storm``
(:mod:`bench.storm_stage`) and ``--workers N`` (:mod:`bench.worker_stage`); called by
:func:`bench.report.verdicts`, rows in its format.
"""

from __future__ import annotations

from typing import Any, Final

TARGET_STORM_CLEARED_SECONDS: Final = 5.0
"""The storm's backlog cleared within this many seconds of its last record (issue 12)."""
TARGET_GOVERNOR_LAG_SECONDS: Final = 2.0
"""The governor caught up within this many seconds of the health topic's last commit."""


def _row(
    figure: str, value: Any, unit: str, target: str = "-", verdict: str = "-"
) -> dict[str, Any]:
    return {
        "figure": figure,
        "value": value,
        "unit": unit,
        "ratio": None,
        "target": target,
        "verdict": verdict,
    }


def _pass(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def scale_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows of the storm (``results["storm"]``) and of a worker stage of several processes
    (``results["worker"]["workers"] > 1``); none for other runs."""
    rows: list[dict[str, Any]] = []
    worker = results.get("worker") or {}
    count = worker.get("workers", 1)
    if count > 1 and "governance" in worker:
        lag = worker["governance"]["after_ingest_seconds"]
        rows.append(
            _row(
                f"(b) {count} workers: governor caught up after the health topic",
                lag,
                "s",
                f"<= {TARGET_GOVERNOR_LAG_SECONDS:.0f} s",
                _pass(lag <= TARGET_GOVERNOR_LAG_SECONDS),
            )
        )
        shares = worker.get("per_worker", [])
        rows.append(
            _row(
                f"(b) {count} workers: records consumed each",
                " / ".join(f"{w['consumed']:,.0f}" for w in shares),
                "records",
            )
        )
        rows.append(
            _row(
                f"(b) {count} workers: CPU each (ingest window)",
                " / ".join(str(w["cpu_seconds"]) for w in shares),
                "s",
            )
        )
        governors = [w["name"] for w in shares if w["governor_records"] > 0]
        rows.append(
            _row(
                f"(b) {count} workers: the governor ran in",
                ", ".join(governors) or "none",
                "",
                "exactly one",
                _pass(len(governors) == 1),
            )
        )
    storm = results.get("storm")
    if not storm or "backlog_cleared_seconds" not in storm:
        return rows
    cleared = storm["backlog_cleared_seconds"]
    unknown = storm["burst_observations"]
    rows.append(
        _row(
            f"(s) storm: backlog cleared after its last record ({unknown:,} GPUs Unknown)",
            cleared,
            "s",
            f"<= {TARGET_STORM_CLEARED_SECONDS:.0f} s",
            _pass(cleared <= TARGET_STORM_CLEARED_SECONDS),
        )
    )
    rows.append(
        _row("(s) storm: health topic committed after it", storm["health_committed_seconds"], "s")
    )
    rows.append(_row("(s) storm: burst ingest", storm["ingest_observations_per_second"], "obs/s"))
    evicting = storm["evicting_decisions"]
    rows.append(
        _row(
            "(s) storm: restrict/quarantine/evict/breaker decisions",
            evicting,
            "",
            "0 (Unknown is tolerated)",
            _pass(evicting == 0),
        )
    )
    started = storm["unknown_tolerance_started"]
    rows.append(
        _row(
            "(s) storm: UnknownToleranceStarted decisions",
            started,
            "",
            f"= {unknown:,} (each Unknown GPU)",
            _pass(started == unknown),
        )
    )
    projection = storm.get("projection") or {}
    read_unknown = (projection.get("devices_by_health") or {}).get("Unknown", 0)
    tolerated = (projection.get("governance_by_state") or {}).get("UnknownTolerated", 0)
    rows.append(
        _row(
            "(s) storm: projection Unknown / UnknownTolerated devices",
            f"{read_unknown:,} / {tolerated:,}",
            "",
            f"{unknown:,} / {unknown:,}",
            _pass(read_unknown == unknown == tolerated),
        )
    )
    return rows
