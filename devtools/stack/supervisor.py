"""Bookkeeping shared by the stack's servers: where things live (:class:`StackLayout`), pid files;
the helpers for waiting (ports, log lines, locks, progress) are :mod:`devtools.stack.waiting`'s,
re-exported here.

The local stack records the PID of each server it started in ``<state dir>/run/<name>.pid``
(JSON: the PID, the process's start time in clock ticks as ``/proc/<pid>/stat`` gives it, and the
ports). A pid file whose process is gone, or whose PID now belongs to another process (the start
time differs), is *stale* and is removed. ``down`` signals exactly the recorded PIDs, never
processes found by name.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devtools.stack.waiting import HOST as HOST
from devtools.stack.waiting import Progress as Progress
from devtools.stack.waiting import Reporter as Reporter
from devtools.stack.waiting import file_contains as file_contains
from devtools.stack.waiting import file_lock as file_lock
from devtools.stack.waiting import file_size as file_size
from devtools.stack.waiting import port_listening as port_listening
from devtools.stack.waiting import tail as tail

DEFAULT_KAFKA_VERSION = "4.1.1"
DEFAULT_KAFKA_PORT = 9092
DEFAULT_KAFKA_CONTROLLER_PORT = 9093
DEFAULT_KAFKA_PARTITIONS = 6
DEFAULT_KAFKA_HEAP = "512m"
MAX_KAFKA_BROKERS = 5
BROKERS_FILE = "brokers"
"""``<state>/kafka/brokers``: how many brokers the stack's Kafka storage was formatted for."""
DEFAULT_POSTGRES_PORT = 55432

DB_NAME = "devicestate"
DB_USER = "devicestate"
DB_PASSWORD = "devicestate"

# A Unix socket path may hold at most 107 bytes (sun_path); PostgreSQL adds "/.s.PGSQL.<port>".
_MAX_SOCKET_DIR_LEN = 80


class StackError(RuntimeError):
    """A failure to show as it is: a message and, where there are any, the logs to look at.

    ``offsets`` gives, per log file, where the attempt that failed began writing, so that the
    tail shows this attempt only.
    """

    def __init__(
        self,
        message: str,
        log_files: tuple[Path, ...] = (),
        offsets: Mapping[Path, int] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.log_files = log_files
        self.offsets = dict(offsets or {})

    def details(self, lines: int = 30) -> str:
        parts = [self.message]
        for log in self.log_files:
            offset = self.offsets.get(log, 0)
            errors = [
                line
                for line in tail(log, 100_000, offset).splitlines()
                if " ERROR " in line or " FATAL " in line
            ]
            if errors:
                parts.append(f"--- first ERROR lines of {log} ---\n" + "\n".join(errors[:10]))
            text = tail(log, lines, offset)
            if text.strip():
                parts.append(f"--- last lines of {log} ---\n{text}")
        return "\n".join(parts)


def _env_int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise StackError(f"{name}={raw!r} is not a whole number") from None
    if not 0 < value < 65536:
        raise StackError(f"{name}={value} is out of range")
    return value


@dataclass(frozen=True)
class StackLayout:
    """Where the stack keeps its files and which ports it uses.

    Read from the environment (``DEVICESTATE_STACK_*``) by :meth:`from_env`; the defaults give
    Kafka on 127.0.0.1:9092 (controller 9093) and PostgreSQL on 127.0.0.1:55432, with all state in
    ``./.stack`` and the Kafka jars in ``~/.cache/devicestate``. With ``kafka_brokers`` = N > 1,
    broker i (1..N) listens on ``kafka_port + 2(i-1)``, its controller on
    ``kafka_controller_port + 2(i-1)`` (9092/9094/9096, controllers 9093/9095/9097).
    """

    state_dir: Path
    cache_dir: Path
    kafka_version: str = DEFAULT_KAFKA_VERSION
    kafka_port: int = DEFAULT_KAFKA_PORT
    kafka_controller_port: int = DEFAULT_KAFKA_CONTROLLER_PORT
    kafka_partitions: int = DEFAULT_KAFKA_PARTITIONS
    kafka_heap: str = DEFAULT_KAFKA_HEAP
    postgres_port: int = DEFAULT_POSTGRES_PORT
    kafka_brokers: int = 1

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, cwd: Path | None = None) -> StackLayout:
        env = os.environ if env is None else env
        cwd = Path.cwd() if cwd is None else cwd
        state = Path(env.get("DEVICESTATE_STACK_DIR") or ".stack").expanduser()
        cache = Path(
            env.get("DEVICESTATE_STACK_CACHE_DIR") or Path.home() / ".cache" / "devicestate"
        ).expanduser()
        layout = cls(
            state_dir=(cwd / state).resolve(),
            cache_dir=(cwd / cache).resolve(),
            kafka_version=env.get("DEVICESTATE_STACK_KAFKA_VERSION") or DEFAULT_KAFKA_VERSION,
            kafka_port=_env_int(env, "DEVICESTATE_STACK_KAFKA_PORT", DEFAULT_KAFKA_PORT),
            kafka_controller_port=_env_int(
                env, "DEVICESTATE_STACK_KAFKA_CONTROLLER_PORT", DEFAULT_KAFKA_CONTROLLER_PORT
            ),
            kafka_partitions=_env_int(
                env, "DEVICESTATE_STACK_KAFKA_PARTITIONS", DEFAULT_KAFKA_PARTITIONS
            ),
            kafka_heap=env.get("DEVICESTATE_STACK_KAFKA_HEAP") or DEFAULT_KAFKA_HEAP,
            postgres_port=_env_int(env, "DEVICESTATE_STACK_POSTGRES_PORT", DEFAULT_POSTGRES_PORT),
        )
        # Explicit, else what `stack up --brokers N` formatted the storage for, else one.
        recorded = layout.recorded_kafka_brokers()
        brokers = _env_int(env, "DEVICESTATE_STACK_KAFKA_BROKERS", recorded or 1)
        return layout.with_brokers(brokers)

    def with_brokers(self, brokers: int) -> StackLayout:
        """This layout with ``brokers`` Kafka nodes (1..:data:`MAX_KAFKA_BROKERS`); raises
        :class:`StackError` when it is out of range or two of the nodes' ports coincide."""
        if not 1 <= brokers <= MAX_KAFKA_BROKERS:
            raise StackError(f"--brokers {brokers}: from 1 to {MAX_KAFKA_BROKERS} brokers")
        layout = dataclasses.replace(self, kafka_brokers=brokers)
        ports = [port for pair in layout.kafka_node_ports for port in pair]
        if len(set(ports)) != len(ports) or any(port >= 65536 for port in ports):
            raise StackError(
                f"the Kafka ports {ports} must be distinct and below 65536: broker i listens on "
                "DEVICESTATE_STACK_KAFKA_PORT + 2(i-1), its controller on "
                "DEVICESTATE_STACK_KAFKA_CONTROLLER_PORT + 2(i-1)"
            )
        return layout

    def recorded_kafka_brokers(self) -> int | None:
        """The broker count the Kafka storage was formatted for (None: not formatted yet)."""
        try:
            return int((self.kafka_dir / BROKERS_FILE).read_text().strip())
        except (OSError, ValueError):
            return None

    @property
    def kafka_node_ports(self) -> list[tuple[int, int]]:
        """(broker port, controller port) of nodes 1..N."""
        return [
            (self.kafka_port + 2 * i, self.kafka_controller_port + 2 * i)
            for i in range(self.kafka_brokers)
        ]

    # --- directories ---------------------------------------------------------------------------
    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def run_dir(self) -> Path:
        return self.state_dir / "run"

    @property
    def kafka_dir(self) -> Path:
        return self.state_dir / "kafka"

    @property
    def postgres_dir(self) -> Path:
        return self.state_dir / "postgres"

    @property
    def postgres_data_dir(self) -> Path:
        return self.postgres_dir / "data"

    @property
    def postgres_socket_dir(self) -> Path:
        """Inside the state dir, unless that path is too long for a Unix socket."""
        preferred = self.postgres_dir / "run"
        if len(str(preferred)) <= _MAX_SOCKET_DIR_LEN:
            return preferred
        digest = hashlib.sha256(str(self.state_dir).encode()).hexdigest()[:12]
        return Path("/tmp") / f"devicestate-pg-{digest}"

    @property
    def kafka_lib_dir(self) -> Path:
        return self.cache_dir / f"kafka-{self.kafka_version}" / "lib"

    def pid_file(self, name: str) -> Path:
        return self.run_dir / f"{name}.pid"

    # --- what clients use ----------------------------------------------------------------------
    @property
    def kafka_bootstrap_servers(self) -> str:
        return ",".join(f"{HOST}:{port}" for port, _ in self.kafka_node_ports)

    @property
    def database_url(self) -> str:
        return f"postgresql+asyncpg://{DB_USER}:{DB_PASSWORD}@{HOST}:{self.postgres_port}/{DB_NAME}"

    def connection_env(self) -> dict[str, str]:
        """The project's settings (``services.runtime.config.Settings``) that point at this stack."""
        return {
            "DEVICESTATE_KAFKA_BOOTSTRAP_SERVERS": self.kafka_bootstrap_servers,
            "DEVICESTATE_DATABASE_URL": self.database_url,
        }


# --- processes -----------------------------------------------------------------------------------
def process_start_ticks(pid: int) -> int | None:
    """Start time of a process in clock ticks since boot, or None if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may contain spaces: split after it.
    fields = stat[stat.rfind(")") + 2 :].split()
    if fields and fields[0] == "Z":  # a zombie has ended; only its exit status is left
        return None
    try:
        return int(fields[19])  # field 22 of the whole line
    except (IndexError, ValueError):
        return None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return process_start_ticks(pid) is not None


@dataclass(frozen=True)
class PidRecord:
    """What a pid file says about a server this stack started."""

    pid: int
    start_ticks: int | None
    info: dict[str, Any]

    def alive(self) -> bool:
        """The recorded process still runs (and is the same process, not a reused PID)."""
        ticks = process_start_ticks(self.pid)
        if ticks is None or not pid_alive(self.pid):
            return False
        return self.start_ticks is None or ticks == self.start_ticks


def write_pid_file(path: Path, pid: int, **info: Any) -> PidRecord:
    record = PidRecord(pid=pid, start_ticks=process_start_ticks(pid), info=dict(info))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(
        json.dumps({"pid": pid, "start_ticks": record.start_ticks, **info}, sort_keys=True) + "\n"
    )
    tmp.replace(path)
    return record


def read_pid_file(path: Path) -> PidRecord | None:
    """The record in ``path``, or None if there is none or it cannot be read."""
    try:
        raw = path.read_text().strip()
    except FileNotFoundError:
        return None
    try:
        data = json.loads(raw)
        pid = int(data.pop("pid"))
        ticks = data.pop("start_ticks", None)
        return PidRecord(pid=pid, start_ticks=None if ticks is None else int(ticks), info=data)
    except (ValueError, KeyError, TypeError, AttributeError):
        # A bare number is accepted too (a pid file written by hand).
        try:
            return PidRecord(pid=int(raw), start_ticks=None, info={})
        except ValueError:
            return None


def live_record(path: Path, name: str, report: Reporter) -> PidRecord | None:
    """The pid file's record if its process still runs; a stale pid file is removed."""
    record = read_pid_file(path)
    if record is None:
        if path.exists():
            report(f"{name}: removing unreadable pid file {path}")
            path.unlink(missing_ok=True)
        return None
    if record.alive():
        return record
    report(f"{name}: removing stale pid file {path} (pid {record.pid} is not running)")
    path.unlink(missing_ok=True)
    return None


def terminate(pid: int, name: str, report: Reporter, timeout: float = 60.0) -> None:
    """SIGTERM ``pid``, wait up to ``timeout`` seconds for it to end, then SIGKILL it."""
    start_ticks = process_start_ticks(pid)
    if start_ticks is None:
        return

    def same_process_alive() -> bool:
        return process_start_ticks(pid) == start_ticks

    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    next_note = time.monotonic() + 10
    while same_process_alive():
        _reap(pid)
        if time.monotonic() >= deadline:
            report(f"{name}: pid {pid} still running after {timeout:.0f} s, sending SIGKILL")
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            kill_deadline = time.monotonic() + 10
            while same_process_alive() and time.monotonic() < kill_deadline:
                _reap(pid)
                time.sleep(0.1)
            if same_process_alive():
                raise StackError(f"{name}: pid {pid} survived SIGKILL")
            return
        if time.monotonic() >= next_note:
            report(f"{name}: waiting for pid {pid} to exit...")
            next_note += 10
        time.sleep(0.2)


def _reap(pid: int) -> None:
    """Collect the exit status if ``pid`` is our own child, so it does not linger as a zombie."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)
