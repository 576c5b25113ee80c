"""A private PostgreSQL cluster for the local stack, from Debian's PostgreSQL 15 package.

The cluster lives in ``<state dir>/postgres/data``, listens on 127.0.0.1 only (port 55432 by
default) with its Unix socket in ``<state dir>/postgres/run``, and trusts every connection it
accepts (``pg_hba.conf``: ``local`` and ``host 127.0.0.1/32`` with ``trust``). That is for a local
development stack only: nothing outside this machine can reach it. The role and database
``devicestate`` (password ``devicestate``, so URLs with a password work too) are created on start.

Running as root (development machines and CI do), ``initdb`` and ``pg_ctl`` run as the
``postgres`` user, which owns the cluster's files; the state dir and its parents are made
traversable (o+x) for that user.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

from devtools.stack.supervisor import (
    DB_NAME,
    DB_PASSWORD,
    DB_USER,
    HOST,
    PidRecord,
    Progress,
    Reporter,
    StackError,
    StackLayout,
    live_record,
    pid_alive,
    port_listening,
    terminate,
    write_pid_file,
)

NAME = "postgres"
PG_MAJOR = "15"
DEFAULT_BIN_DIR = Path(f"/usr/lib/postgresql/{PG_MAJOR}/bin")
SERVICE_USER = "postgres"
SUPERUSER = "postgres"

HBA_CONF = """\
# Written by `devicestate-dev stack up`. A local development cluster: it listens on 127.0.0.1 only,
# and trusts every connection it accepts. Never use this configuration anywhere else.
# TYPE  DATABASE  USER  ADDRESS        METHOD
local   all       all                  trust
host    all       all   127.0.0.1/32   trust
"""


def log_file(layout: StackLayout) -> Path:
    return layout.logs_dir / "postgres.log"


def _is_root() -> bool:
    return os.geteuid() == 0


# --- installation ---------------------------------------------------------------------------------
def bin_dir() -> Path | None:
    """Where ``initdb`` and ``pg_ctl`` are: $DEVICESTATE_STACK_POSTGRES_BIN, else Debian's 15."""
    override = os.environ.get("DEVICESTATE_STACK_POSTGRES_BIN")
    candidates = [Path(override)] if override else [DEFAULT_BIN_DIR]
    for candidate in candidates:
        if (candidate / "initdb").is_file() and (candidate / "pg_ctl").is_file():
            return candidate
    return None


def ensure_installed(report: Reporter) -> Path:
    """Debian's PostgreSQL binaries, installed with apt-get when they are missing."""
    found = bin_dir()
    if found is not None:
        return found
    if os.environ.get("DEVICESTATE_STACK_POSTGRES_BIN"):
        raise StackError(
            "postgres: DEVICESTATE_STACK_POSTGRES_BIN has no initdb and pg_ctl: "
            f"{os.environ['DEVICESTATE_STACK_POSTGRES_BIN']}"
        )
    if not _is_root() or shutil.which("apt-get") is None:
        raise StackError(
            f"postgres: {DEFAULT_BIN_DIR / 'initdb'} is missing; install PostgreSQL {PG_MAJOR} "
            "(as root: apt-get update && apt-get install -y postgresql)"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update"], ["apt-get", "install", "-y", "postgresql"]):
        report(f"postgres: {DEFAULT_BIN_DIR / 'initdb'} is missing, running {' '.join(command)}")
        result = subprocess.run(
            command, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            raise StackError(
                f"postgres: `{' '.join(command)}` failed (exit {result.returncode}):\n"
                + "\n".join((result.stdout + result.stderr).splitlines()[-30:])
            )
    found = bin_dir()
    if found is None:
        raise StackError(f"postgres: apt-get installed postgresql but {DEFAULT_BIN_DIR} is empty")
    return found


# --- running commands as the postgres user ----------------------------------------------------------
def _as_service_user(command: list[str]) -> list[str]:
    if _is_root():
        return ["runuser", "-u", SERVICE_USER, "--", *command]
    return command


def _run(layout: StackLayout, command: list[str], what: str, timeout: float) -> str:
    try:
        result = subprocess.run(
            _as_service_user(command),
            cwd=layout.postgres_dir,  # the postgres user may not be able to enter the caller's cwd
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise StackError(
            f"postgres: {what} took longer than {timeout:.0f} s", (log_file(layout),)
        ) from None
    if result.returncode != 0:
        raise StackError(
            f"postgres: {what} failed (exit {result.returncode}):\n"
            f"{result.stdout}{result.stderr}".rstrip(),
            (log_file(layout),),
        )
    return result.stdout


def _chown_to_service_user(path: Path) -> None:
    if _is_root():
        shutil.chown(path, user=SERVICE_USER, group=SERVICE_USER)


def _make_traversable(path: Path, report: Reporter) -> None:
    """Give "others" search permission on ``path`` and its parents where it is missing."""
    for directory in (path, *path.parents):
        mode = directory.stat().st_mode
        if not mode & stat.S_IXOTH:
            directory.chmod(mode | stat.S_IXOTH)
            report(f"postgres: chmod o+x {directory} (so the postgres user can reach its data)")


def _prepare_dirs(layout: StackLayout, report: Reporter) -> None:
    layout.state_dir.mkdir(parents=True, exist_ok=True)
    layout.logs_dir.mkdir(parents=True, exist_ok=True)
    layout.postgres_dir.mkdir(mode=0o700, exist_ok=True)
    socket_dir = layout.postgres_socket_dir
    socket_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    log = log_file(layout)
    log.touch(exist_ok=True)
    if _is_root():
        _make_traversable(layout.state_dir, report)
        if not socket_dir.is_relative_to(layout.postgres_dir):
            _make_traversable(socket_dir.parent, report)
        layout.logs_dir.chmod(layout.logs_dir.stat().st_mode | stat.S_IXOTH)
        for owned in (layout.postgres_dir, socket_dir, log):
            _chown_to_service_user(owned)


def _init_cluster(layout: StackLayout, pg_bin: Path, report: Reporter) -> None:
    data = layout.postgres_data_dir
    if (data / "PG_VERSION").is_file():
        version = (data / "PG_VERSION").read_text().strip()
        if version != PG_MAJOR and pg_bin == DEFAULT_BIN_DIR:
            raise StackError(
                f"postgres: {data} holds a PostgreSQL {version} cluster, not {PG_MAJOR}; "
                "run `devicestate-dev stack down --purge` to start afresh"
            )
        return
    if data.exists():  # a half-made cluster from an interrupted initdb
        shutil.rmtree(data)
    report(f"postgres: initdb {data}")
    _run(
        layout,
        [
            str(pg_bin / "initdb"),
            "-D", str(data),
            "-U", SUPERUSER,
            "-E", "UTF8",
            "--locale=C.UTF-8",
            "--auth-local=trust",
            "--auth-host=trust",
        ],
        "initdb",
        timeout=120,
    )  # fmt: skip
    hba = data / "pg_hba.conf"
    hba.write_text(HBA_CONF)
    _chown_to_service_user(hba)


# --- start / stop -----------------------------------------------------------------------------------
def _postmaster_pid(layout: StackLayout) -> int | None:
    """The PID in ``postmaster.pid`` if that process runs."""
    try:
        first = (layout.postgres_data_dir / "postmaster.pid").read_text().splitlines()[0]
        pid = int(first.strip())
    except (OSError, IndexError, ValueError):
        return None
    return pid if pid_alive(pid) else None


def running(layout: StackLayout, report: Reporter) -> PidRecord | None:
    record = live_record(layout.pid_file(NAME), NAME, report)
    if record is not None:
        return record
    pid = _postmaster_pid(layout)
    if pid is None:
        return None
    # Our cluster runs but its pid file went missing: adopt it (its data dir is ours).
    report(f"postgres: cluster in {layout.postgres_data_dir} runs as pid {pid}; recording it")
    return write_pid_file(layout.pid_file(NAME), pid, port=_running_port(layout, pid))


def _running_port(layout: StackLayout, pid: int) -> int:
    try:
        return int((layout.postgres_data_dir / "postmaster.pid").read_text().splitlines()[3])
    except (OSError, IndexError, ValueError):
        return layout.postgres_port


def _server_options(layout: StackLayout) -> str:
    return " ".join(
        [
            f"-p {layout.postgres_port}",
            f"-k {layout.postgres_socket_dir}",
            f"-c listen_addresses={HOST}",
            "-c max_connections=200",
        ]
    )


def start(layout: StackLayout, report: Reporter, timeout: float) -> None:
    """Install, initialise and start the cluster if needed, then make the role and database."""
    started = time.monotonic()
    record = running(layout, report)
    if record is not None:
        port = int(record.info.get("port", layout.postgres_port))
        if port != layout.postgres_port:
            raise StackError(
                f"postgres: already running on port {port}, not {layout.postgres_port}; "
                "run `devicestate-dev stack down` first"
            )
        if asyncio.run(select_one(layout.postgres_port, seconds=5.0)):
            report(f"postgres: already running (pid {record.pid}) on {HOST}:{port}")
            return
    else:
        if port_listening(layout.postgres_port):
            raise StackError(
                f"postgres: port {layout.postgres_port} on {HOST} is already in use by a process "
                "this stack did not start; stop it or set DEVICESTATE_STACK_POSTGRES_PORT"
            )
        pg_bin = ensure_installed(report)
        _prepare_dirs(layout, report)
        _init_cluster(layout, pg_bin, report)
        report(f"postgres: starting on {HOST}:{layout.postgres_port}; log {log_file(layout)}")
        _run(
            layout,
            [
                str(pg_bin / "pg_ctl"),
                "-D", str(layout.postgres_data_dir),
                "-l", str(log_file(layout)),
                "-o", _server_options(layout),
                "-w", "-t", str(int(timeout)),
                "start",
            ],
            "pg_ctl start",
            timeout=timeout + 10,
        )  # fmt: skip
        pid = _postmaster_pid(layout)
        if pid is None:
            raise StackError("postgres: pg_ctl started no postmaster", (log_file(layout),))
        record = write_pid_file(layout.pid_file(NAME), pid, port=layout.postgres_port)
        report(f"postgres: started pid {pid}")
    _wait_ready(layout, report, timeout - (time.monotonic() - started))
    asyncio.run(_ensure_role_and_database(layout.postgres_port))
    if not asyncio.run(select_one(layout.postgres_port, seconds=10.0)):
        raise StackError(
            f"postgres: SELECT 1 as {DB_USER} on {DB_NAME} failed", (log_file(layout),)
        )
    report(f"postgres: ready on {HOST}:{layout.postgres_port} ({time.monotonic() - started:.1f} s)")


def _wait_ready(layout: StackLayout, report: Reporter, timeout: float) -> None:
    progress = Progress(NAME, report, max(timeout, 10.0))
    while not asyncio.run(select_one(layout.postgres_port, user=SUPERUSER, database="postgres")):
        if progress.expired:
            raise StackError(
                f"postgres: no answer to SELECT 1 after {progress.timeout:.0f} s",
                (log_file(layout),),
            )
        progress.tick("waiting for SELECT 1")
        time.sleep(0.3)


async def select_one(
    port: int,
    *,
    user: str = DB_USER,
    database: str = DB_NAME,
    seconds: float = 3.0,
) -> bool:
    """``SELECT 1`` answers over TCP on 127.0.0.1:``port`` within ``seconds``."""
    import asyncpg

    try:
        conn = await asyncpg.connect(
            host=HOST, port=port, user=user, password=DB_PASSWORD, database=database,
            timeout=seconds,
        )  # fmt: skip
    except Exception:
        return False
    try:
        return bool(await asyncio.wait_for(conn.fetchval("SELECT 1"), seconds) == 1)
    except Exception:
        return False
    finally:
        await conn.close()


async def _ensure_role_and_database(port: int) -> None:
    import asyncpg

    conn = await asyncpg.connect(
        host=HOST, port=port, user=SUPERUSER, database="postgres", timeout=10
    )
    try:
        if not await conn.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", DB_USER):
            # CREATEDB lets tests make throw-away databases of their own.
            await conn.execute(f"CREATE ROLE {DB_USER} LOGIN CREATEDB PASSWORD '{DB_PASSWORD}'")
        if not await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", DB_NAME):
            await conn.execute(f"CREATE DATABASE {DB_NAME} OWNER {DB_USER}")
    finally:
        await conn.close()


def stop(layout: StackLayout, report: Reporter) -> None:
    """``pg_ctl stop -m fast``; if that fails, SIGTERM (then SIGKILL) the recorded postmaster."""
    record = running(layout, report)
    if record is None:
        report("postgres: not running")
        return
    report(f"postgres: stopping pid {record.pid}")
    started = time.monotonic()
    pg_bin = bin_dir()
    try:
        if pg_bin is None:
            raise StackError("postgres: pg_ctl is missing")
        _run(
            layout,
            [str(pg_bin / "pg_ctl"), "-D", str(layout.postgres_data_dir), "-m", "fast",
             "-w", "-t", "60", "stop"],
            "pg_ctl stop",
            timeout=70,
        )  # fmt: skip
    except StackError as exc:
        report(f"{exc.message}; signalling pid {record.pid}")
    if record.alive():
        terminate(record.pid, NAME, report, timeout=30)
    layout.pid_file(NAME).unlink(missing_ok=True)
    report(f"postgres: stopped ({time.monotonic() - started:.1f} s)")


def purge(layout: StackLayout, report: Reporter) -> None:
    """Delete the cluster (all databases); only when it is stopped."""
    if layout.postgres_dir.exists():
        report(f"postgres: deleting {layout.postgres_dir}")
        shutil.rmtree(layout.postgres_dir)
    socket_dir = layout.postgres_socket_dir
    if socket_dir.exists() and not socket_dir.is_relative_to(layout.state_dir):
        shutil.rmtree(socket_dir, ignore_errors=True)
