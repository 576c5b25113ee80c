"""Console output of the benchmarks: one rich console and a progress reporter per stage.

On a terminal a stage shows a rich progress bar; otherwise (a log file, the A/B driver) it prints
at most one progress line every 2 s, so logs stay readable.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

console = Console(highlight=False, width=None if sys.stdout.isatty() else 150)


def fmt_rate(value: float | None) -> str:
    """``12,345`` (no decimals), ``-`` for ``None``."""
    return "-" if value is None else f"{value:,.0f}"


class Reporter:
    """Progress of one stage: a rich progress bar on a terminal, periodic lines otherwise."""

    def __init__(self, label: str, total: int | None, unit: str = "events") -> None:
        self.label = label
        self.total = total
        self.unit = unit
        self.done = 0
        self.extra = ""
        self.started = time.monotonic()
        self._last_line = 0.0
        self._progress: Progress | None = None
        self._task: Any = None

    def __enter__(self) -> Reporter:
        self.started = time.monotonic()
        if console.is_terminal:
            self._progress = Progress(
                TextColumn(f"[bold]{self.label:<9}[/bold]"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[rate]} {task.fields[unit]}/s {task.fields[extra]}"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=console,
                transient=False,
            )
            self._progress.start()
            self._task = self._progress.add_task(
                self.label, total=self.total, rate="-", unit=self.unit, extra=""
            )
        return self

    def update(self, done: int, total: int | None = None, extra: str = "") -> None:
        self.done = done
        if total is not None:
            self.total = total
        self.extra = extra
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = f"{done / elapsed:,.0f}"
        if self._progress is not None:
            self._progress.update(
                self._task, completed=done, total=self.total, rate=rate, extra=extra
            )
            return
        now = time.monotonic()
        if now - self._last_line >= 2.0:
            self._last_line = now
            total_text = f"/{self.total:,}" if self.total else ""
            console.print(
                f"  [{self.label}] {done:,}{total_text} {self.unit} "
                f"({rate} {self.unit}/s, {elapsed:.1f} s) {extra}".rstrip()
            )

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()


class ProgressLines:
    """Progress lines (at most one per 2 s, and the last one) for a long loop."""

    def __init__(self, label: str, total: int, unit: str = "records") -> None:
        self.label, self.total, self.unit = label, total, unit
        self.started = time.perf_counter()
        self._last = 0.0

    def update(self, done: int, extra: str = "", *, force: bool = False) -> None:
        now = time.perf_counter()
        if not force and now - self._last < 2.0:
            return
        self._last = now
        elapsed = max(now - self.started, 1e-9)
        console.print(
            f"  [{self.label}] {done:,}/{self.total:,} {self.unit} ({done / elapsed:,.0f}/s, "
            f"{elapsed:.1f} s) {extra}".rstrip()
        )
