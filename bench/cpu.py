"""CPU and memory of processes, read from ``/proc`` (Linux only), and the stage CPU sampler.

Figures are CPU seconds (user + system, from ``/proc/<pid>/stat`` in clock ticks) and kB of
resident memory (``/proc/<pid>/status``). Reading ``/proc`` only: nothing is signalled.
"""

from __future__ import annotations

import os
import time
from pathlib import Path


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS / VmHWM (kB) of a process, from ``/proc/<pid>/status``; empty when it is gone."""
    values: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    name, rest = line.split(":", 1)
                    values[name] = int(rest.split()[0])
    except (FileNotFoundError, ProcessLookupError, ValueError):
        pass
    return values


CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process (``/proc/<pid>/stat``), ``None`` when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
        return None


def pids_of(pattern: str, *, comm: bool = False) -> list[int]:
    """PIDs whose command line contains ``pattern`` (or, with ``comm``, whose command name is
    ``pattern``), to sample Kafka/PostgreSQL CPU; read-only."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if comm:
                found = (entry / "comm").read_text(errors="replace").strip() == pattern
            else:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
                found = pattern in cmdline.decode(errors="replace")
        except OSError:
            continue
        if found:
            pids.append(int(entry.name))
    return pids


def machine_busy_seconds() -> float:
    """CPU seconds all cores spent busy since boot (``/proc/stat``: all but idle and iowait)."""
    with open("/proc/stat", encoding="ascii") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / CLK_TCK


class CpuSampler:
    """CPU seconds used by groups of processes between :meth:`start` and :meth:`stop`, the whole
    machine's busy CPU seconds and what no tracked process used (``other``: contention)."""

    def __init__(self) -> None:
        self.groups: dict[str, list[int]] = {
            "kafka": pids_of("kafka.Kafka"),
            "postgres": [],
        }
        self._start: dict[str, float] = {}
        self._pg_start: dict[int, float] = {}
        self._busy = 0.0
        self._wall = 0.0

    def _totals(self) -> dict[str, float]:
        return {
            name: sum(proc_cpu_seconds(pid) or 0.0 for pid in pids)
            for name, pids in self.groups.items()
        }

    def _backends(self) -> dict[int, float]:
        """CPU seconds of every PostgreSQL process now (backends come and go)."""
        return {
            pid: cpu
            for pid in pids_of("postgres", comm=True)
            if pid != os.getpid() and (cpu := proc_cpu_seconds(pid)) is not None
        }

    def add(self, name: str, pid: int) -> None:
        self.groups[name] = [pid]

    def start(self) -> None:
        self._start = self._totals()
        self._start["bench"] = time.process_time()
        self._pg_start = self._backends()
        self._busy = machine_busy_seconds()
        self._wall = time.monotonic()

    def stop(self) -> dict[str, float]:
        """CPU seconds per group and ``wall`` seconds since :meth:`start`."""
        totals = self._totals()
        totals["bench"] = time.process_time()
        # PostgreSQL: processes alive at both ends count their difference, new ones their whole
        # life; backends that exited meanwhile are missed (an undercount).
        pg_now = self._backends()
        totals["postgres"] = sum(cpu - self._pg_start.get(pid, 0.0) for pid, cpu in pg_now.items())
        self._start["postgres"] = 0.0
        used = {k: round(totals[k] - self._start.get(k, 0.0), 2) for k in totals}
        # Everything else on the machine (other engineers' jobs...): a contention warning.
        busy = machine_busy_seconds() - self._busy
        used["other"] = round(max(busy - sum(used.values()), 0.0), 2)
        used["machine_busy"] = round(busy, 2)
        used["wall"] = round(time.monotonic() - self._wall, 2)
        return used
