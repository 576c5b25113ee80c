"""The test servers' processes: started in their own session with their output in a log, waited
for over HTTP, stopped by PID (checked against the start time), never by name.

Used by the test API server (:mod:`devtools.testenv.kubeapi`) and the monitoring servers
(:mod:`devtools.testenv.monitoring_servers`).
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from devtools.stack.supervisor import HOST, Reporter, process_start_ticks, tail, terminate
from devtools.testenv.errors import KubeAPIError


@dataclass(frozen=True)
class ProcessRef:
    name: str
    pid: int
    start_ticks: int | None
    log: str

    def alive(self) -> bool:
        ticks = process_start_ticks(self.pid)
        return ticks is not None and (self.start_ticks is None or ticks == self.start_ticks)


_children: dict[int, subprocess.Popen[bytes]] = {}


def spawn(name: str, command: list[str], log: Path) -> ProcessRef:
    """Start ``command`` in its own session, stdout and stderr appended to ``log``."""
    with log.open("ab") as out:
        out.write(("$ " + " ".join(command) + "\n").encode())
        out.flush()
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # outlives `devicestate-dev testenv up`; no terminal signals
        )
    _children[process.pid] = process
    return ProcessRef(name, process.pid, process_start_ticks(process.pid), str(log))


def stop_process(ref: ProcessRef, report: Reporter) -> None:
    """End ``ref`` by its PID if it is still the process started (SIGTERM, SIGKILL after 30 s)."""
    if ref.alive():
        terminate(ref.pid, ref.name, report, timeout=30.0)
    child = _children.pop(ref.pid, None)
    if child is not None:
        with contextlib.suppress(Exception):
            child.wait(timeout=5)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports on 127.0.0.1."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


def http_get(
    url: str, token: str | None = None, context: ssl.SSLContext | None = None
) -> tuple[int, str]:
    """GET ``url`` (5 s timeout): (status, body), an HTTP error status included; raises
    ``OSError`` when nothing answers."""
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as response:
            return int(response.status), response.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode(errors="replace")


def wait_until(
    what: str, ref: ProcessRef, check: Callable[[], bool], timeout: float, report: Reporter
) -> float:
    """Poll ``check()`` (True when ready) while ``ref`` runs; returns the seconds waited."""
    started = time.monotonic()
    next_note = started + 10
    last = ""
    while True:
        try:
            if check():
                return time.monotonic() - started
            last = ""
        except (OSError, ValueError) as exc:
            last = f" ({exc})"
        if not ref.alive():
            raise KubeAPIError(
                f"{ref.name} exited before {what}; last lines of {ref.log}:\n{tail(Path(ref.log), 40)}"
            )
        if time.monotonic() - started > timeout:
            raise KubeAPIError(
                f"{what}: not ready after {timeout:.0f} s{last}; last lines of {ref.log}:\n"
                f"{tail(Path(ref.log), 40)}"
            )
        if time.monotonic() >= next_note:
            report(f"  waiting for {what}: {time.monotonic() - started:.0f} s")
            next_note += 10
        time.sleep(0.2)


def spawn_ready(
    name: str,
    command: list[str],
    log: Path,
    what: str,
    check: Callable[[], bool],
    timeout: float,
    report: Reporter,
) -> ProcessRef:
    """:func:`spawn`, then :func:`wait_until` ``check()``; the process is stopped if it never gets
    ready (or the wait is interrupted), and the error raised."""
    process = spawn(name, command, log)
    try:
        wait_until(what, process, check, timeout, report)
    except BaseException:
        stop_process(process, report)
        raise
    return process
