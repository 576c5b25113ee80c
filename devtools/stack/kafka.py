"""Apache Kafka (KRaft, combined broker + controller nodes) run from its Maven jars.

One node by default, N with ``stack up --brokers N`` (:mod:`devtools.stack.kafka_nodes`: files,
ports, configuration). ``ensure_jars`` resolves the runtime classpath once with Maven into
``<cache>/kafka-<version>/lib`` (a ``.complete`` marker says the copy finished) and reuses it;
``launch`` formats each node's storage on first use and starts ``kafka.Kafka`` per node in the
background; ``wait_ready`` waits for "Kafka Server started" in each node's log, its metadata
answer, and metadata naming every broker. ``stop_node``/``launch_node`` stop and start one node by
its recorded PID (:mod:`devtools.stack.brokers` wraps them for fault tests).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from devtools.stack import kafka_nodes
from devtools.stack.kafka_jars import ensure_jars, java_executable
from devtools.stack.kafka_nodes import KafkaNode
from devtools.stack.supervisor import (
    BROKERS_FILE,
    HOST,
    PidRecord,
    Progress,
    Reporter,
    StackError,
    StackLayout,
    file_contains,
    file_size,
    live_record,
    port_listening,
    terminate,
    write_pid_file,
)

NAME = "kafka"
MAIN_CLASS = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"
READY_LINE = "Kafka Server started"
_CLUSTER_ID = re.compile(r"^[A-Za-z0-9_-]{22}$")


# --- storage and process ----------------------------------------------------------------------------
def _java_command(
    layout: StackLayout, node: KafkaNode, lib: Path, main: str, *args: str
) -> list[str]:
    return [
        java_executable(),
        f"-Xmx{layout.kafka_heap}",
        f"-Xms{layout.kafka_heap}" if main == MAIN_CLASS else "-Xms64m",
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        "-XX:+ExitOnOutOfMemoryError",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={node.log4j}",
        f"-Dkafka.logs.dir={layout.logs_dir}",
        "-cp",
        f"{lib}/*",
        main,
        *args,
    ]


def _write_configs(layout: StackLayout, node: KafkaNode) -> None:
    node.dir.mkdir(parents=True, exist_ok=True)
    layout.logs_dir.mkdir(parents=True, exist_ok=True)
    node.properties.write_text(kafka_nodes.server_properties(layout, node))
    node.log4j.write_text(kafka_nodes.log4j2_properties(node))


def _run_tool(layout: StackLayout, node: KafkaNode, lib: Path, *args: str) -> str:
    result = subprocess.run(
        _java_command(layout, node, lib, STORAGE_TOOL, *args),
        cwd=node.dir,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise StackError(
            f"{node.name}: StorageTool {args[0]} failed (exit {result.returncode}):\n"
            f"{result.stdout}{result.stderr}".rstrip(),
            (node.server_log,),
        )
    return result.stdout


def _check_broker_count(layout: StackLayout) -> None:
    recorded = layout.recorded_kafka_brokers()
    if recorded is None and (layout.kafka_dir / "data" / "meta.properties").is_file():
        recorded = 1  # formatted before the count was recorded: a single node
    if recorded is not None and recorded != layout.kafka_brokers:
        raise StackError(
            f"kafka: the storage in {layout.kafka_dir} was formatted for {recorded} broker(s), not "
            f"{layout.kafka_brokers}; run `devicestate-dev stack down --purge` to start afresh, "
            f"or `stack up --brokers {recorded}`"
        )


def _quorum(layout: StackLayout, node: KafkaNode) -> str:
    """What the storage's quorum was formatted for: the controller port, or every voter."""
    return str(node.controller_port) if layout.kafka_brokers == 1 else kafka_nodes.voters(layout)


def format_storage(layout: StackLayout, node: KafkaNode, lib: Path, report: Reporter) -> None:
    """Format the node's KRaft storage once; the cluster id is kept in ``<state>/kafka/cluster.id``
    (one id for every node) and the broker count in ``<state>/kafka/brokers``."""
    data = node.data_dir
    quorum_file = node.dir / "formatted-controller-port"
    if (data / "meta.properties").is_file():
        formatted_with = quorum_file.read_text().strip() if quorum_file.is_file() else ""
        if formatted_with and formatted_with != _quorum(layout, node):
            raise StackError(
                f"{node.name}: the storage in {data} was formatted for controller port(s) "
                f"{formatted_with}, not {_quorum(layout, node)}; run `devicestate-dev stack down "
                "--purge` to start afresh, or set DEVICESTATE_STACK_KAFKA_CONTROLLER_PORT back"
            )
        return
    cluster_id = _cluster_id(layout)
    report(f"{node.name}: formatting KRaft storage in {data} (cluster id {cluster_id})")
    # One node: a dynamic quorum of itself; several: the static quorum of the properties.
    standalone = ("--standalone",) if layout.kafka_brokers == 1 else ()
    _run_tool(
        layout, node, lib, "format", *standalone, "-t", cluster_id, "-c", str(node.properties),
        "--ignore-formatted",
    )  # fmt: skip
    quorum_file.write_text(f"{_quorum(layout, node)}\n")
    (layout.kafka_dir / BROKERS_FILE).write_text(f"{layout.kafka_brokers}\n")


def _cluster_id(layout: StackLayout) -> str:
    """The id in ``<state>/kafka/cluster.id``, made on first use as Kafka's ``Uuid.randomUuid``
    makes it (16 random bytes, URL-safe base64 without padding, not starting with "-")."""
    id_file = layout.kafka_dir / "cluster.id"
    cluster_id = id_file.read_text().strip() if id_file.is_file() else ""
    while not _CLUSTER_ID.match(cluster_id) or cluster_id.startswith("-"):
        cluster_id = base64.urlsafe_b64encode(secrets.token_bytes(16)).decode().rstrip("=")
        layout.kafka_dir.mkdir(parents=True, exist_ok=True)
        id_file.write_text(cluster_id + "\n")
    return cluster_id


@dataclass
class Launch:
    """A Kafka process started by this command, not yet known to be ready."""

    node: KafkaNode
    record: PidRecord
    process: subprocess.Popen[bytes] | None
    log_offset: int
    console_offset: int = 0
    started: float = field(default_factory=time.monotonic)


def node_running(layout: StackLayout, node: KafkaNode, report: Reporter) -> PidRecord | None:
    return live_record(layout.pid_file(node.name), node.name, report)


def running(layout: StackLayout, report: Reporter) -> list[tuple[KafkaNode, PidRecord | None]]:
    """Every node of the stack with its live pid record (None: not running)."""
    return [(n, node_running(layout, n, report)) for n in kafka_nodes.nodes(layout)]


def launch(layout: StackLayout, report: Reporter) -> list[Launch]:
    """Start every node that does not run yet; returns what to wait for (:func:`wait_ready`)."""
    _check_broker_count(layout)
    stopped = [n for n in kafka_nodes.nodes(layout) if node_running(layout, n, report) is None]
    if stopped:
        # Formatting starts a JVM per node: side by side, not one after the other.
        lib = ensure_jars(layout, report)
        _cluster_id(layout)
        for n in stopped:
            _write_configs(layout, n)
        with ThreadPoolExecutor(len(stopped)) as pool:
            for done in [pool.submit(format_storage, layout, n, lib, report) for n in stopped]:
                done.result()
    return [launch_node(layout, n, report) for n in kafka_nodes.nodes(layout)]


def launch_node(layout: StackLayout, node: KafkaNode, report: Reporter) -> Launch:
    """Start one node unless it already runs (formatting its storage on first use)."""
    current = node_running(layout, node, report)
    if current is not None:
        return Launch(node=node, record=current, process=None, log_offset=-1)
    for port in (node.port, node.controller_port):
        if port_listening(port):
            raise StackError(
                f"{node.name}: port {port} on {HOST} is already in use by a process this stack did "
                "not start; stop it, or choose other ports with DEVICESTATE_STACK_KAFKA_PORT and "
                "DEVICESTATE_STACK_KAFKA_CONTROLLER_PORT"
            )
    lib = ensure_jars(layout, report)
    _write_configs(layout, node)
    format_storage(layout, node, lib, report)
    offset = file_size(node.server_log)
    console_offset = file_size(node.console_log)
    with node.console_log.open("ab") as out:
        out.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} starting Kafka ===\n".encode())
        out.flush()
        process = subprocess.Popen(
            _java_command(layout, node, lib, MAIN_CLASS, str(node.properties)),
            cwd=node.dir,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # not tied to this terminal: Ctrl-C here does not stop it
        )
    record = write_pid_file(
        layout.pid_file(node.name),
        process.pid,
        port=node.port,
        controller_port=node.controller_port,
        node_id=node.index,
        version=layout.kafka_version,
    )
    report(
        f"{node.name}: started pid {process.pid} ({HOST}:{node.port}, controller "
        f"{node.controller_port}); log {node.server_log}"
    )
    return Launch(
        node=node, record=record, process=process, log_offset=offset, console_offset=console_offset
    )


async def metadata_answers(bootstrap_servers: str, seconds: float = 5.0, brokers: int = 1) -> bool:
    """The cluster answers a metadata request naming at least ``brokers`` brokers within
    ``seconds``."""
    from services.adapters.kafka.clients import make_admin

    admin = make_admin(
        bootstrap_servers, client_id="devicestate-stack", request_timeout_ms=int(seconds * 1000)
    )
    try:
        async with asyncio.timeout(seconds):
            await admin.start()
            cluster = await admin.describe_cluster()
        return len(cluster.get("brokers") or []) >= brokers
    except Exception:
        return False
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(admin.close(), seconds)


def wait_ready(
    layout: StackLayout, launches: list[Launch], report: Reporter, timeout: float
) -> None:
    """Wait for every launched node (:func:`wait_node_ready`), then for the metadata to name every
    broker; on failure stop what was started and raise :class:`StackError`."""
    try:
        for started in launches:
            wait_node_ready(layout, started, report, timeout)
        progress = Progress(NAME, report, timeout)
        count = layout.kafka_brokers
        while not asyncio.run(metadata_answers(layout.kafka_bootstrap_servers, 5.0, count)):
            if progress.expired:
                raise StackError(f"kafka: the metadata did not name {count} brokers in {timeout} s")
            progress.tick(f"waiting for the metadata to name {count} brokers")
            time.sleep(0.5)
    except StackError:
        for started in launches:
            if started.process is not None and started.record.alive():
                terminate(started.record.pid, started.node.name, report, timeout=20)
                layout.pid_file(started.node.name).unlink(missing_ok=True)
        raise


def wait_node_ready(layout: StackLayout, started: Launch, report: Reporter, timeout: float) -> None:
    """Wait for the node's "started" log line and its metadata answer; on failure stop it (if
    this command started it) and raise :class:`StackError`."""
    node = started.node
    logs = (node.console_log, node.server_log)
    offsets = {node.console_log: started.console_offset, node.server_log: started.log_offset}
    progress = Progress(node.name, report, timeout)
    log_seen = started.log_offset < 0  # a Kafka found running: its log line came earlier
    while True:
        if started.process is not None and started.process.poll() is not None:
            layout.pid_file(node.name).unlink(missing_ok=True)
            raise StackError(
                f"{node.name}: the broker exited with code {started.process.returncode} while "
                "starting",
                logs,
                offsets,
            )
        if started.process is None and not started.record.alive():
            layout.pid_file(node.name).unlink(missing_ok=True)
            raise StackError(
                f"{node.name}: pid {started.record.pid} exited while starting", logs, offsets
            )
        if not log_seen:
            log_seen = file_contains(node.server_log, READY_LINE, started.log_offset)
        if log_seen and asyncio.run(metadata_answers(node.bootstrap_servers, 5.0)):
            if started.process is None:
                report(
                    f"{node.name}: already running (pid {started.record.pid}) on "
                    f"{node.bootstrap_servers}"
                )
            else:
                took = time.monotonic() - started.started
                report(
                    f"{node.name}: ready on {node.bootstrap_servers} ({took:.1f} s after launch)"
                )
            return
        if progress.expired:
            if started.process is not None:
                report(
                    f"{node.name}: not ready after {timeout:.0f} s, stopping pid {started.record.pid}"
                )
                terminate(started.record.pid, node.name, report, timeout=20)
                layout.pid_file(node.name).unlink(missing_ok=True)
            waiting_for = "a metadata answer" if log_seen else f'"{READY_LINE}" in the log'
            raise StackError(
                f"{node.name}: not ready after {timeout:.0f} s (still waiting for {waiting_for})",
                logs,
                offsets,
            )
        progress.tick("waiting for the broker log line" if not log_seen else "waiting for metadata")
        time.sleep(0.5)


def stop_node(
    layout: StackLayout, node: KafkaNode, report: Reporter, *, kill: bool = False
) -> int | None:
    """Stop one node by its recorded PID: SIGTERM (a controlled shutdown, SIGKILL after 60 s) or,
    with ``kill``, SIGKILL at once (a crash). Returns the PID stopped, None if it was not running."""
    record = node_running(layout, node, report)
    if record is None:
        report(f"{node.name}: not running")
        return None
    report(f"{node.name}: {'killing' if kill else 'stopping'} pid {record.pid}")
    started = time.monotonic()
    if kill:
        with contextlib.suppress(ProcessLookupError):
            os.kill(record.pid, signal.SIGKILL)
    terminate(record.pid, node.name, report, timeout=60)
    _wait_ports_closed(node)
    layout.pid_file(node.name).unlink(missing_ok=True)
    report(f"{node.name}: stopped ({time.monotonic() - started:.1f} s)")
    return record.pid


def _wait_ports_closed(node: KafkaNode, seconds: float = 15.0) -> None:
    # A killed JVM's main thread is a zombie before its other threads have closed its sockets:
    # a restart right away would find its ports still taken.
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and (
        port_listening(node.port) or port_listening(node.controller_port)
    ):
        time.sleep(0.1)


def stop(layout: StackLayout, report: Reporter, *, kill: bool = False) -> None:
    """Stop every node (SIGTERM, or SIGKILL with ``kill``). All are signalled first: a cluster
    stopped one node at a time loses its controller quorum before the last nodes finish their
    controlled shutdown."""
    live = [(n, r) for n, r in running(layout, report) if r is not None]
    if not live:
        report("kafka: not running")
    started = time.monotonic()
    for node, record in live:
        report(f"{node.name}: stopping pid {record.pid}")
        with contextlib.suppress(ProcessLookupError):
            os.kill(record.pid, signal.SIGKILL if kill else signal.SIGTERM)
    for node, record in live:
        terminate(record.pid, node.name, report, timeout=60)
        layout.pid_file(node.name).unlink(missing_ok=True)
        report(f"{node.name}: stopped ({time.monotonic() - started:.1f} s)")


def purge(layout: StackLayout, report: Reporter) -> None:
    """Delete the brokers' data (topics, offsets, cluster id); only when they are stopped."""
    if layout.kafka_dir.exists():
        report(f"kafka: deleting {layout.kafka_dir}")
        shutil.rmtree(layout.kafka_dir)
