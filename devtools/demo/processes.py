"""Child processes the demo starts (worker, API), stopped by the PID it recorded."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import httpx


@dataclass
class Child:
    """A started ``devicestate <command>`` process and its log file."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    log_file: IO[bytes]

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM, wait up to ``timeout`` seconds, then SIGKILL. Returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log_file.close()
        return self.process.returncode

    def check_alive(self) -> None:
        """Raise ``RuntimeError`` with the log's tail if the process has exited."""
        if self.process.poll() is not None:
            tail = self.log_path.read_text(errors="replace").splitlines()[-30:]
            raise RuntimeError(
                f"{self.name} exited with code {self.process.returncode}; last log lines:\n"
                + "\n".join(tail)
            )


def start_child(command: str, log_dir: Path, env: dict[str, str] | None = None) -> Child:
    """Start ``devicestate <command>`` with this interpreter; output goes to ``<log_dir>/<command>.log``."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{command}.log"
    log_file = log_path.open("ab")
    process = subprocess.Popen(
        [sys.executable, "-m", "services.cli.main", command],
        stdout=log_file,
        stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {})},
    )
    return Child(command, process, log_path, log_file)


def require_free_port(host: str, port: int, setting: str) -> None:
    """Raise ``RuntimeError`` naming ``setting`` when ``host:port`` is taken: a process already
    listening there would answer the demo's health check for it and serve another directory."""
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise RuntimeError(
                f"{host}:{port} is already in use ({exc.strerror}): the demo's API cannot listen "
                f"there; stop what holds it, or set {setting} to a free port"
            ) from None


def wait_http_ok(url: str, child: Child, timeout: float) -> None:
    """Poll ``url`` until it answers 2xx; raise ``TimeoutError`` or the child's failure."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        child.check_alive()
        try:
            if httpx.get(url, timeout=2.0).is_success:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise TimeoutError(f"{url} did not answer within {timeout:.0f} s (log: {child.log_path})")
