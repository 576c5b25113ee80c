"""A single-node Apache Kafka (KRaft, combined broker + controller) run from its Maven jars.

``ensure_jars`` resolves the runtime classpath once with Maven into
``<cache>/kafka-<version>/lib`` (a ``.complete`` marker says the copy finished) and reuses it;
``launch`` formats the storage on first use and starts ``kafka.Kafka`` in the background;
``wait_ready`` waits for "Kafka Server started" in its log and a metadata answer from aiokafka.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from devtools.stack.supervisor import (
    HOST,
    PidRecord,
    Progress,
    Reporter,
    StackError,
    StackLayout,
    file_contains,
    file_lock,
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
POM = Path(__file__).with_name("maven") / "pom.xml"
_COMPLETE_MARKER = ".complete"
_CLUSTER_ID = re.compile(r"^[A-Za-z0-9_-]{22}$")


# --- files ----------------------------------------------------------------------------------------
def server_log(layout: StackLayout) -> Path:
    return layout.logs_dir / "kafka-server.log"


def console_log(layout: StackLayout) -> Path:
    """The JVM's own stdout and stderr (crashes before logging starts land here)."""
    return layout.logs_dir / "kafka-console.log"


def data_dir(layout: StackLayout) -> Path:
    return layout.kafka_dir / "data"


def server_properties(layout: StackLayout) -> str:
    port, controller = layout.kafka_port, layout.kafka_controller_port
    return f"""\
# Written by `devicestate-dev stack up` on every start: edit devtools/stack/kafka.py, not this file.
# One node acting as broker and KRaft controller, on loopback only.
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers={HOST}:{controller}
listeners=PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{controller}
advertised.listeners=PLAINTEXT://{HOST}:{port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs={data_dir(layout)}

# Topics: a single replica everywhere.
num.partitions={layout.kafka_partitions}
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=12
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
auto.create.topics.enable=false
delete.topic.enable=true

# Consumer groups form at once (tests would otherwise wait 3 s per new group).
group.initial.rebalance.delay.ms=0

# Small machine: a modest heap, so a smaller compaction dedupe buffer (faust changelogs are
# compacted), fewer threads.
log.cleaner.dedupe.buffer.size=33554432
num.network.threads=2
num.io.threads=4
num.recovery.threads.per.data.dir=1
"""


def log4j2_properties(layout: StackLayout) -> str:
    log = server_log(layout)
    return f"""\
# log4j2 configuration of the local Kafka broker (written by `devicestate-dev stack up`).
status = warn
name = devicestate-kafka

appender.server.type = RollingFile
appender.server.name = SERVER
appender.server.fileName = {log}
appender.server.filePattern = {log}.%i
appender.server.layout.type = PatternLayout
appender.server.layout.pattern = [%d] %p %m (%c)%n
appender.server.policies.type = Policies
appender.server.policies.size.type = SizeBasedTriggeringPolicy
appender.server.policies.size.size = 100MB
appender.server.strategy.type = DefaultRolloverStrategy
appender.server.strategy.max = 3

rootLogger.level = INFO
rootLogger.appenderRef.server.ref = SERVER

logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.controller.name = kafka.controller
logger.controller.level = INFO
logger.statechange.name = state.change.logger
logger.statechange.level = WARN
logger.zk.name = org.apache.zookeeper
logger.zk.level = WARN
"""


# --- jars -----------------------------------------------------------------------------------------
def java_executable() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise StackError("java was not found: Kafka 4.x needs Java 17 or newer on the PATH")
    return java


def ensure_jars(layout: StackLayout, report: Reporter) -> Path:
    """The directory of Kafka's runtime jars, fetched from Maven Central on first use."""
    lib = layout.kafka_lib_dir
    marker = lib.parent / _COMPLETE_MARKER
    if marker.is_file() and lib.is_dir():
        return lib
    mvn = shutil.which("mvn")
    if mvn is None:
        raise StackError("mvn was not found: Maven fetches Kafka's jars (apt-get install maven)")
    lib.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(lib.parent / ".lock", report, "fetching Kafka's jars"):
        if marker.is_file() and lib.is_dir():  # another process finished it meanwhile
            return lib
        for leftover in lib.parent.glob("lib.partial-*"):  # from an interrupted fetch
            shutil.rmtree(leftover, ignore_errors=True)
        staging = lib.parent / f"lib.partial-{os.getpid()}"
        log = lib.parent / "maven.log"
        report(f"kafka: fetching Apache Kafka {layout.kafka_version} jars with Maven into {lib}")
        started = time.monotonic()
        command = [
            mvn,
            "-B",
            "-q",
            "-Dstyle.color=never",
            "-f",
            str(POM),
            f"-Dmaven.repo.local={layout.cache_dir / 'maven-repository'}",
            f"-Dkafka.version={layout.kafka_version}",
            f"-DoutputDirectory={staging}",
            "dependency:copy-dependencies",
        ]
        with log.open("w") as out:
            result = subprocess.run(
                command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, check=False
            )
        jars = sorted(staging.glob("*.jar")) if staging.is_dir() else []
        if result.returncode != 0 or not any(j.name.startswith("kafka_2.13-") for j in jars):
            shutil.rmtree(staging, ignore_errors=True)
            raise StackError(
                f"Maven could not fetch Kafka {layout.kafka_version} (exit {result.returncode}); "
                f"command: {' '.join(command)}",
                (log,),
            )
        shutil.rmtree(lib, ignore_errors=True)
        staging.rename(lib)
        marker.write_text(f"{len(jars)} jars\n")
        report(f"kafka: {len(jars)} jars fetched in {time.monotonic() - started:.1f} s")
    return lib


# --- storage and process ----------------------------------------------------------------------------
def _java_command(layout: StackLayout, lib: Path, main: str, *args: str) -> list[str]:
    log4j = layout.kafka_dir / "log4j2.properties"
    return [
        java_executable(),
        f"-Xmx{layout.kafka_heap}",
        f"-Xms{layout.kafka_heap}" if main == MAIN_CLASS else "-Xms64m",
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        "-XX:+ExitOnOutOfMemoryError",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={log4j}",
        f"-Dkafka.logs.dir={layout.logs_dir}",
        "-cp",
        f"{lib}/*",
        main,
        *args,
    ]


def _write_configs(layout: StackLayout) -> Path:
    layout.kafka_dir.mkdir(parents=True, exist_ok=True)
    layout.logs_dir.mkdir(parents=True, exist_ok=True)
    props = layout.kafka_dir / "server.properties"
    props.write_text(server_properties(layout))
    (layout.kafka_dir / "log4j2.properties").write_text(log4j2_properties(layout))
    return props


def _run_tool(layout: StackLayout, lib: Path, *args: str) -> str:
    result = subprocess.run(
        _java_command(layout, lib, STORAGE_TOOL, *args),
        cwd=layout.kafka_dir,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise StackError(
            f"kafka: StorageTool {args[0]} failed (exit {result.returncode}):\n"
            f"{result.stdout}{result.stderr}".rstrip(),
            (server_log(layout),),
        )
    return result.stdout


def format_storage(layout: StackLayout, lib: Path, props: Path, report: Reporter) -> None:
    """Format the KRaft storage once; the cluster id is kept in ``<state>/kafka/cluster.id``."""
    data = data_dir(layout)
    ports_file = layout.kafka_dir / "formatted-controller-port"
    if (data / "meta.properties").is_file():
        formatted_with = ports_file.read_text().strip() if ports_file.is_file() else ""
        if formatted_with and formatted_with != str(layout.kafka_controller_port):
            raise StackError(
                f"kafka: the storage in {data} was formatted for controller port {formatted_with}, "
                f"not {layout.kafka_controller_port}; run `devicestate-dev stack down --purge` "
                "to start afresh, or set DEVICESTATE_STACK_KAFKA_CONTROLLER_PORT back"
            )
        return
    id_file = layout.kafka_dir / "cluster.id"
    cluster_id = id_file.read_text().strip() if id_file.is_file() else ""
    if not _CLUSTER_ID.match(cluster_id):
        lines = _run_tool(layout, lib, "random-uuid").split()
        cluster_id = lines[-1] if lines else ""
        if not _CLUSTER_ID.match(cluster_id):
            raise StackError(f"kafka: StorageTool random-uuid printed no cluster id: {lines!r}")
        id_file.write_text(cluster_id + "\n")
    report(f"kafka: formatting KRaft storage in {data} (cluster id {cluster_id})")
    _run_tool(
        layout, lib, "format", "--standalone", "-t", cluster_id, "-c", str(props),
        "--ignore-formatted",
    )  # fmt: skip
    ports_file.write_text(f"{layout.kafka_controller_port}\n")


@dataclass
class Launch:
    """A Kafka process started by this command, not yet known to be ready."""

    record: PidRecord
    process: subprocess.Popen[bytes] | None
    log_offset: int
    console_offset: int = 0
    started: float = field(default_factory=time.monotonic)


def running(layout: StackLayout, report: Reporter) -> PidRecord | None:
    return live_record(layout.pid_file(NAME), NAME, report)


def launch(layout: StackLayout, report: Reporter) -> Launch:
    """Start Kafka unless the stack's Kafka already runs; returns what to wait for."""
    current = running(layout, report)
    if current is not None:
        return Launch(record=current, process=None, log_offset=-1)
    for port in (layout.kafka_port, layout.kafka_controller_port):
        if port_listening(port):
            raise StackError(
                f"kafka: port {port} on {HOST} is already in use by a process this stack did not "
                "start; stop it, or choose other ports with DEVICESTATE_STACK_KAFKA_PORT and "
                "DEVICESTATE_STACK_KAFKA_CONTROLLER_PORT"
            )
    lib = ensure_jars(layout, report)
    props = _write_configs(layout)
    format_storage(layout, lib, props, report)
    offset = file_size(server_log(layout))
    console = console_log(layout)
    console_offset = file_size(console)
    with console.open("ab") as out:
        out.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} starting Kafka ===\n".encode())
        out.flush()
        process = subprocess.Popen(
            _java_command(layout, lib, MAIN_CLASS, str(props)),
            cwd=layout.kafka_dir,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # not tied to this terminal: Ctrl-C here does not stop it
        )
    record = write_pid_file(
        layout.pid_file(NAME),
        process.pid,
        port=layout.kafka_port,
        controller_port=layout.kafka_controller_port,
        version=layout.kafka_version,
    )
    report(
        f"kafka: started pid {process.pid} ({HOST}:{layout.kafka_port}, controller "
        f"{layout.kafka_controller_port}); log {server_log(layout)}"
    )
    return Launch(record=record, process=process, log_offset=offset, console_offset=console_offset)


async def metadata_answers(bootstrap_servers: str, seconds: float = 5.0) -> bool:
    """The broker answers a metadata request, naming at least one broker, within ``seconds``."""
    from services.adapters.kafka.clients import make_admin

    admin = make_admin(
        bootstrap_servers, client_id="devicestate-stack", request_timeout_ms=int(seconds * 1000)
    )
    try:
        async with asyncio.timeout(seconds):
            await admin.start()
            cluster = await admin.describe_cluster()
        return bool(cluster.get("brokers"))
    except Exception:
        return False
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(admin.close(), seconds)


def wait_ready(layout: StackLayout, started: Launch, report: Reporter, timeout: float) -> None:
    """Wait for the log line and a metadata answer; on failure stop what we started and raise."""
    logs = (console_log(layout), server_log(layout))
    offsets = {console_log(layout): started.console_offset, server_log(layout): started.log_offset}
    progress = Progress(NAME, report, timeout)
    log_seen = started.log_offset < 0  # a Kafka found running: its log line came earlier
    while True:
        if started.process is not None and started.process.poll() is not None:
            layout.pid_file(NAME).unlink(missing_ok=True)
            raise StackError(
                f"kafka: the broker exited with code {started.process.returncode} while starting",
                logs,
                offsets,
            )
        if started.process is None and not started.record.alive():
            layout.pid_file(NAME).unlink(missing_ok=True)
            raise StackError(
                f"kafka: pid {started.record.pid} exited while starting", logs, offsets
            )
        if not log_seen:
            log_seen = file_contains(server_log(layout), READY_LINE, started.log_offset)
        if log_seen and asyncio.run(metadata_answers(layout.kafka_bootstrap_servers, 5.0)):
            if started.process is None:
                report(
                    f"kafka: already running (pid {started.record.pid}) on {layout.kafka_bootstrap_servers}"
                )
            else:
                took = time.monotonic() - started.started
                report(
                    f"kafka: ready on {layout.kafka_bootstrap_servers} ({took:.1f} s after launch)"
                )
            return
        if progress.expired:
            if started.process is not None:
                report(f"kafka: not ready after {timeout:.0f} s, stopping pid {started.record.pid}")
                terminate(started.record.pid, NAME, report, timeout=20)
                layout.pid_file(NAME).unlink(missing_ok=True)
            waiting_for = "a metadata answer" if log_seen else f'"{READY_LINE}" in the log'
            raise StackError(
                f"kafka: not ready after {timeout:.0f} s (still waiting for {waiting_for})",
                logs,
                offsets,
            )
        progress.tick("waiting for the broker log line" if not log_seen else "waiting for metadata")
        time.sleep(0.5)


def stop(layout: StackLayout, report: Reporter) -> None:
    record = running(layout, report)
    if record is None:
        report("kafka: not running")
        return
    report(f"kafka: stopping pid {record.pid}")
    started = time.monotonic()
    terminate(record.pid, NAME, report, timeout=60)
    layout.pid_file(NAME).unlink(missing_ok=True)
    report(f"kafka: stopped ({time.monotonic() - started:.1f} s)")


def purge(layout: StackLayout, report: Reporter) -> None:
    """Delete the broker's data (topics, offsets, cluster id); only when it is stopped."""
    if layout.kafka_dir.exists():
        report(f"kafka: deleting {layout.kafka_dir}")
        shutil.rmtree(layout.kafka_dir)
