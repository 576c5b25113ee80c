"""Run a Python entry point with ``tracemalloc`` on, and dump where its memory is on request.

``python -m bench.memory_probe OUT FRAMES -m module [args...]`` starts ``tracemalloc`` with
``FRAMES`` frames per allocation, starts a daemon thread that waits for the file ``OUT.trigger``,
then runs ``module`` as ``__main__`` (as ``python -m`` would). When the trigger appears (the
pipeline benchmark creates it once the worker has caught up: ``--memory-probe-worker``) the
thread writes ``OUT``:

- RSS (``/proc/self/status``), RSS again after ``malloc_trim(0)`` (what glibc's arenas held
  free but not returned), the bytes ``tracemalloc`` traces (Python objects and buffers allocated
  through Python's allocators; RocksDB's own C allocations are not);
- the top allocation sites grouped by line and by traceback (``FRAMES`` frames);
- the live objects per type (``gc.get_objects()``, counts only: containers the GC tracks).

``FRAMES`` 0: no ``tracemalloc`` (the worker at its own speed and size); the report is RSS,
``malloc_trim``'s effect and pymalloc's arenas against the bytes in their allocated blocks
(the difference: free blocks held in partly used arenas).

then ``OUT.done``. Bench-only: tracemalloc slows the process down and its own bookkeeping adds
to RSS, so a probed run's RSS is not the figure; run it once without the probe for that.
"""

from __future__ import annotations

import collections
import ctypes
import gc
import os
import runpy
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path


def rss_kb() -> int:
    """``VmRSS`` of this process in kB (0 when ``/proc`` does not say)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def trim() -> int:
    """``malloc_trim(0)`` (glibc); returns its result, or -1 when glibc is not there."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return -1
    return int(libc.malloc_trim(0))


def pymalloc_use() -> tuple[int, int]:
    """``(bytes in allocated blocks, arenas of 1 MiB)`` of Python's small-object allocator, from
    ``sys._debugmallocstats`` (which says nothing while ``tracemalloc`` traces: ``(0, 0)``)."""
    blocks = arenas = 0
    with tempfile.TemporaryFile() as out:
        saved = os.dup(2)
        try:
            os.dup2(out.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        for line in out.read().decode(errors="replace").splitlines():
            if line.startswith("# bytes in allocated blocks"):
                blocks = int(line.split("=")[1].replace(",", ""))
            elif line.startswith("# arenas allocated current"):
                arenas = int(line.split("=")[1].replace(",", ""))
    return blocks, arenas


def report(top: int = 40) -> str:
    """The memory report described in the module's docstring."""
    lines: list[str] = []
    rss_before = rss_kb()
    trimmed = trim()  # before the snapshot, whose own allocations would blur it
    rss_after = rss_kb()
    lines.append(f"rss_kb {rss_before}")
    lines.append(
        f"malloc_trim {trimmed}: rss_kb after {rss_after} ({rss_before - rss_after} freed)"
    )
    if not tracemalloc.is_tracing():  # FRAMES 0: the allocators' figures only
        blocks, arenas = pymalloc_use()
        lines.append(
            f"pymalloc {arenas} arenas (MiB), {blocks / 2**20:.1f} MiB in allocated blocks"
        )
        return "\n".join(lines) + "\n"
    snapshot = tracemalloc.take_snapshot()
    snapshot = snapshot.filter_traces(
        [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<unknown>")]
    )
    traced = sum(stat.size for stat in snapshot.statistics("filename"))
    counts = collections.Counter(type(obj).__qualname__ for obj in gc.get_objects())
    lines.append(f"tracemalloc_traced_bytes {traced} ({traced / 1e6:.1f} MB)")
    lines.append(f"tracemalloc_overhead_bytes {tracemalloc.get_tracemalloc_memory()}")
    lines.append("")
    lines.append(f"== top {top} by file ==")
    for stat in snapshot.statistics("filename")[:top]:
        lines.append(f"{stat.size / 1e6:9.2f} MB {stat.count:9d}  {stat.traceback[0].filename}")
    lines.append("")
    lines.append(f"== top {top} by line ==")
    for stat in snapshot.statistics("lineno")[:top]:
        frame = stat.traceback[0]
        lines.append(f"{stat.size / 1e6:9.2f} MB {stat.count:9d}  {frame.filename}:{frame.lineno}")
    lines.append("")
    lines.append(f"== top {top} by traceback ==")
    for stat in snapshot.statistics("traceback")[:top]:
        lines.append(f"{stat.size / 1e6:9.2f} MB {stat.count:9d}")
        lines.extend(f"      {line}" for line in stat.traceback.format(most_recent_first=True))
    lines.append("")
    lines.append("== live objects by type (gc-tracked), top 40 ==")
    for name, count in counts.most_common(40):
        lines.append(f"{count:9d}  {name}")
    return "\n".join(lines) + "\n"


def watch(out: Path) -> None:
    """Wait for ``out.trigger``; write the report to ``out``, then ``out.done``."""
    trigger = out.with_name(out.name + ".trigger")
    while not trigger.exists():
        time.sleep(0.2)
    out.write_text(report())
    out.with_name(out.name + ".done").write_text("done\n")


def main() -> None:
    out, frames, flag, module, *rest = sys.argv[1:]
    if flag != "-m":
        raise SystemExit("usage: python -m bench.memory_probe OUT FRAMES -m module [args...]")
    if int(frames) > 0:
        tracemalloc.start(int(frames))
    threading.Thread(target=watch, args=(Path(out),), daemon=True, name="memory-probe").start()
    sys.argv = [module, *rest]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
