"""What a benchmark report records about where it ran: the machine and the code measured."""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench import REPO_ROOT


def machine_info() -> dict[str, Any]:
    """CPU count and model, memory (GB), Python and platform, load average at the start."""
    info: dict[str, Any] = {
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["mem_total_gb"] = round(int(line.split()[1]) / 1024 / 1024, 1)
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(OSError):
        info["loadavg_at_start"] = Path("/proc/loadavg").read_text().split()[:3]
    return info


def code_version() -> dict[str, Any]:
    """The commit the run measured and whether the working tree had changes (others' work in
    progress is measured too)."""

    def git(*args: str) -> str:
        try:
            done = subprocess.run(
                ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.SubprocessError):
            return ""
        return done.stdout.strip()

    changed = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": git("rev-parse", "HEAD"), "modified_files": len(changed.splitlines())}


def command_line() -> str:
    """How this benchmark was started, as typed (``python -m bench.pipeline --events ...``):
    the interpreter's own argv, the interpreter's path shortened to its name."""
    argv = getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv]
    return " ".join([Path(argv[0]).name, *argv[1:]])
