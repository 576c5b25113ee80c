"""Hand the C allocator's free memory back to the OS after the worker's batches (issue 12).

A batch decodes thousands of records, builds their rows and forwarded records, and frees them
when it is written. Buffers above pymalloc's 512 bytes (record values, encoded bodies, COPY
data, orjson output) come from glibc's ``malloc``, which keeps freed heap pages for reuse
instead of returning them: measured at 100k devices, about 100 MB of the worker's caught-up RSS
(a third of what it held above idle) was free memory ``malloc_trim(0)`` gave back.

:func:`trim_after_batches` runs beside the worker: every ``interval`` seconds, if a health or
governance batch finished since its last look, it calls ``malloc_trim(0)`` (glibc; without
glibc it does nothing). Nothing here touches what the worker decides or writes: it only changes
which free pages the process keeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
from collections.abc import Callable
from typing import Any


def _glibc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or ``None`` (musl, macOS)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        trim: Any = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim  # type: ignore[no-any-return]


_TRIM = _glibc_trim()


def release_free_memory() -> bool:
    """``malloc_trim(0)``: return the heap's free pages to the OS; ``True`` when some were
    (``False`` also without glibc)."""
    return _TRIM is not None and bool(_TRIM(0))


async def trim_after_batches(
    batches: Callable[[], int], interval: float, stop: asyncio.Event
) -> None:
    """Until ``stop`` is set: every ``interval`` seconds (> 0), :func:`release_free_memory` if
    ``batches()`` (the batches written so far) moved since the last call. An idle worker is not
    trimmed again."""
    last = batches()
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=interval)
        now = batches()
        if now != last:
            last = now
            # Off the event loop: a trim of a large heap takes milliseconds (glibc locks each
            # arena in turn; ctypes releases the GIL meanwhile), heartbeats keep going.
            await asyncio.to_thread(release_free_memory)
