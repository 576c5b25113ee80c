"""Process-level runtime choices shared by the long-running commands (worker, replay, API)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

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
