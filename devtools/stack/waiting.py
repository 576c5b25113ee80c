"""Waiting for the stack's servers: open ports, lines in their logs, locks, progress lines.

Shared by the local stack (:mod:`devtools.stack`) and the test environment
(:mod:`devtools.testenv`); :mod:`devtools.stack.supervisor` re-exports every name.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

Reporter = Callable[[str], None]
"""Receives one line of progress for the person running the command."""

HOST = "127.0.0.1"


# --- network and files -----------------------------------------------------------------------------
def port_listening(port: int, host: str = HOST, timeout: float = 0.5) -> bool:
    """Something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def tail(path: Path, lines: int = 40, offset: int = 0) -> str:
    """The last ``lines`` lines of a text file after byte ``offset`` ("" if it is missing)."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            if not 0 <= offset <= size:  # unknown, or rotated or truncated since
                offset = 0
            handle.seek(max(offset, size - 1024 * 1024))
            data = handle.read()
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:])


def file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def file_contains(path: Path, needle: str, offset: int = 0) -> bool:
    """``needle`` occurs in ``path`` after byte ``offset`` (from the start if the file shrank)."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            if handle.tell() < offset:
                offset = 0
            handle.seek(offset)
            return needle.encode() in handle.read()
    except OSError:
        return False


@contextlib.contextmanager
def file_lock(path: Path, report: Reporter, what: str) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if needed) for the duration of the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            report(f"waiting for another process holding {path} ({what})...")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class Progress:
    """Prints "still waiting" lines every ``every`` seconds while something starts."""

    def __init__(self, what: str, report: Reporter, timeout: float, every: float = 10.0) -> None:
        self.what = what
        self.report = report
        self.timeout = timeout
        self.every = every
        self.started = time.monotonic()
        self._next = self.started + every

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def expired(self) -> bool:
        return self.elapsed >= self.timeout

    def tick(self, state: str) -> None:
        now = time.monotonic()
        if now >= self._next:
            self.report(f"{self.what}: {state} ({self.elapsed:.0f} s of {self.timeout:.0f} s)")
            self._next = now + self.every
