"""The processes a benchmark starts (worker, API) and how: by PID, in their own session.

Every child runs with ``cwd`` = the checkout (:data:`bench.REPO_ROOT`) and the environment of
the benchmark plus its own settings, writes its output to ``<log dir>/<name>.log`` and is
stopped by its PID (SIGTERM, then SIGKILL after a timeout), never by name. ``--profile-*`` runs
a child under pyinstrument; :func:`render_profile` turns its session into text.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench import REPO_ROOT
from bench.console import console
from bench.cpu import proc_status


class StageUnavailable(RuntimeError):
    """A stage cannot run because a part it needs is not there (yet)."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Child:
    """A started child process, its log, and the peak RSS (kB) seen while sampling it."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    peak_rss_kb: int = 0

    @property
    def pid(self) -> int:
        return self.process.pid

    def sample(self) -> dict[str, int]:
        status = proc_status(self.pid)
        self.peak_rss_kb = max(self.peak_rss_kb, status.get("VmHWM", 0), status.get("VmRSS", 0))
        return status

    def alive(self) -> bool:
        return self.process.poll() is None

    def check(self) -> None:
        if not self.alive():
            raise RuntimeError(
                f"{self.name} (pid {self.pid}) exited with code {self.process.returncode}; "
                f"last log lines:\n{self.tail()}"
            )

    def tail(self, lines: int = 10) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 40.0, sig: signal.Signals = signal.SIGTERM) -> int | None:
        """``sig`` (SIGTERM) by PID, wait, SIGKILL by PID if it does not exit in time."""
        if self.process.poll() is None:
            self.sample()
            os.kill(self.pid, sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                console.print(f"  {self.name} pid {self.pid} ignored {sig.name}; SIGKILL")
                os.kill(self.pid, signal.SIGKILL)
                self.process.wait()
        return self.process.returncode


def devicestate_commands() -> set[str]:
    """Sub-commands registered on the ``devicestate`` CLI right now (others are still adding)."""
    try:
        from services.cli.main import app
    except Exception:
        return set()
    names = {c.name or (c.callback.__name__ if c.callback else "") for c in app.registered_commands}
    names |= {g.name for g in app.registered_groups if g.name}
    return names


def start_child(name: str, argv: Sequence[str], env: dict[str, str], log_dir: Path) -> Child:
    """Start ``argv`` in its own session, output appended to ``<log_dir>/<name>.log``."""
    log_path = log_dir / f"{name}.log"
    log_file = log_path.open("ab")
    try:
        process = subprocess.Popen(
            list(argv),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **env},
            cwd=REPO_ROOT,
            start_new_session=True,  # our own signals only; stopped by PID
        )
    finally:
        log_file.close()
    return Child(name, process, log_path)


def devicestate_argv(command: str) -> list[str]:
    """``devicestate <command>`` from the virtualenv, else ``python -m services.cli.main``."""
    script = Path(sys.executable).with_name("devicestate")
    if script.exists():
        return [str(script), command]
    return [sys.executable, "-m", "services.cli.main", command]


def session_path(profile: Path) -> Path:
    """Where pyinstrument saves the session of a ``--profile-*`` path."""
    return profile.with_name(profile.name + ".pyisession")


def pyinstrument_argv(profile: Path, module_argv: Sequence[str]) -> list[str]:
    """Run a Python entry point under pyinstrument (5 ms sampling), saving a session file."""
    session = session_path(profile)
    return [
        sys.executable,
        "-m",
        "pyinstrument",
        "-i",
        "0.005",
        "-r",
        "pyisession",
        "-o",
        str(session),
        *module_argv,
    ]


def render_profile(profile: Path) -> None:
    """Render ``<profile>.pyisession`` as a call tree (``profile``, library frames shown) and a
    flat list of self time (``<profile>.flat.txt``)."""
    session = session_path(profile)
    if not session.exists():
        console.print(f"  [yellow]no profile session at {session}[/yellow]")
        return
    base = [
        sys.executable,
        "-m",
        "pyinstrument",
        "--load",
        str(session),
        "-r",
        "text",
        "--no-color",
        "--unicode",
    ]
    subprocess.run(
        [*base, "--show-all", "-p", "processor_options.filter_threshold=0.01", "-o", str(profile)],
        check=False,
    )
    flat = profile.with_name(profile.stem + ".flat.txt")
    subprocess.run([*base, "--show-all", "-p", "flat", "-o", str(flat)], check=False)
    console.print(f"  profile: {profile} (tree), {flat} (flat self time), {session}")
