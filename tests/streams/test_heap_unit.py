"""The worker's heap trimming (:mod:`streams.heap`): the allocator's free memory goes back to
the OS after batches, and an idle worker is left alone."""

from __future__ import annotations

import asyncio
import ctypes
import sys
from pathlib import Path

import pytest

from streams import heap


def _rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc and /proc")
def test_release_free_memory_gives_freed_buffers_back() -> None:
    # 64 MiB of 4 KiB buffers (malloc'd, not mmap'd), all but every 64th freed: the freed ones
    # stay in the heap, between live ones, until trimmed.
    malloc = ctypes.CDLL("libc.so.6").malloc
    free = ctypes.CDLL("libc.so.6").free
    malloc.restype = ctypes.c_void_p
    free.argtypes = [ctypes.c_void_p]
    buffers = [malloc(4096) for _ in range(16384)]
    for address in buffers:  # touch every page: resident
        ctypes.memset(address, 1, 4096)
    kept = buffers[::64]
    for address in buffers:
        if address not in kept:
            free(address)
    before = _rss_kb()
    assert heap.release_free_memory()
    assert before - _rss_kb() > 32 * 1024  # most of the 63 MiB freed came back
    for address in kept:
        free(address)


def test_trims_after_batches_only(monkeypatch: pytest.MonkeyPatch) -> None:
    trims: list[int] = []
    batches = [0]
    trimmed = asyncio.Event()

    def release() -> bool:
        trims.append(batches[0])
        trimmed.set()
        return True

    monkeypatch.setattr(heap, "release_free_memory", release)

    async def run() -> None:
        stop = asyncio.Event()
        task = asyncio.ensure_future(heap.trim_after_batches(lambda: batches[0], 0.01, stop))
        await asyncio.sleep(0.05)  # idle: nothing written, nothing to trim
        assert trims == []
        batches[0] = 3
        await asyncio.wait_for(trimmed.wait(), 5)
        assert trims == [3]
        await asyncio.sleep(0.05)  # idle again
        assert trims == [3]
        stop.set()
        await asyncio.wait_for(task, 5)

    asyncio.run(run())
