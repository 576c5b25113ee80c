"""Process-level runtime choices shared by the long-running commands (worker, replay, API,
alerts, recovery, enforcement): the event loop, the collector, stop signals, the metrics port."""

from __future__ import annotations

import asyncio
import gc
import signal
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import structlog

T = TypeVar("T")

log = structlog.get_logger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

GC_GEN0_THRESHOLD = 50_000
"""Allocations between young-generation collections (CPython's default is 700). The worker and
the replay allocate many short-lived objects per event; with the default, collections of a large
heap took about a third of the client CPU in the projection benchmark (docs/benchmarks.md)."""


def tune_gc() -> None:
    """Move what start-up allocated out of the collector's view and collect less often.

    Reference cycles are still collected, only in fewer, larger passes.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_GEN0_THRESHOLD, 20, 20)


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on uvloop when it is installed (faster callbacks and sockets), else on
    the standard event loop."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency; keep working without it
        return asyncio.run(main)
    return uvloop.run(main)


def stop_on_signals(stop: asyncio.Event | None) -> tuple[asyncio.Event, Callable[[], None]]:
    """The event a long-running command stops on, and what undoes the set-up.

    ``stop`` when given (a test, or a caller that stops the command itself; nothing is installed);
    otherwise a new event that SIGTERM and SIGINT set, through handlers on the running loop. Call
    the returned function on the way out: it removes the handlers it installed, if any.
    """
    if stop is not None:
        return stop, lambda: None
    loop = asyncio.get_running_loop()
    event = asyncio.Event()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, event.set)

    def remove() -> None:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)

    return event, remove


def serve_metrics(serve: Callable[[int], object], port: int) -> None:
    """Start a process's ``/metrics`` server with ``serve(port)`` (port 0: off). A port already
    taken is logged and the process goes on without metrics: they are not worth an outage."""
    try:
        serve(port)
    except OSError as exc:
        log.warning("metrics server not started", port=port, error=str(exc))
