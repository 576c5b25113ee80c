"""Stop and start one broker of the local Kafka cluster by its recorded PID (fault tests).

For a stack started with ``devicestate-dev stack up --brokers 3`` (or :func:`start_cluster`):
brokers are numbered 1..N (their ``node.id``); :func:`stop_broker` stops broker i (SIGTERM, a
controlled shutdown, or ``kill=True``: SIGKILL, a crash) and :func:`start_broker` starts it again
on the same storage and waits until it answers and the metadata names every broker again.
Nothing is found by name: each broker is signalled by the PID in ``<state>/run/kafka-<i>.pid``.
Every function takes the :class:`~devtools.stack.supervisor.StackLayout` of the stack (e.g.
``StackLayout.from_env()``, which reads the broker count the stack was formatted for) and raises
:class:`~devtools.stack.supervisor.StackError` when a broker does not start, ``ValueError`` for a
broker the stack does not have.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from devtools.stack import kafka, kafka_nodes
from devtools.stack.kafka_nodes import KafkaNode
from devtools.stack.supervisor import Progress, Reporter, StackError, StackLayout, file_lock


def _quiet(_line: str) -> None:
    pass


def brokers(layout: StackLayout) -> tuple[KafkaNode, ...]:
    """The stack's brokers (index, ports, files), in ``node.id`` order."""
    return kafka_nodes.nodes(layout)


def broker_pid(layout: StackLayout, index: int) -> int | None:
    """The PID of broker ``index`` (1..N), None when it is not running."""
    record = kafka.node_running(layout, kafka_nodes.node(layout, index), _quiet)
    return None if record is None else record.pid


def stop_broker(
    layout: StackLayout, index: int, *, kill: bool = False, report: Reporter = _quiet
) -> int | None:
    """Stop broker ``index``: SIGTERM and wait (SIGKILL after 60 s), or SIGKILL at once with
    ``kill``. Returns the PID it stopped (None: it was not running). The other brokers go on."""
    with file_lock(layout.state_dir / "stack.lock", report, "stop a broker"):
        return kafka.stop_node(layout, kafka_nodes.node(layout, index), report, kill=kill)


def start_broker(
    layout: StackLayout, index: int, *, report: Reporter = _quiet, timeout: float = 180.0
) -> int:
    """Start broker ``index`` again (a no-op when it runs) and wait up to ``timeout`` seconds for
    it to answer and for the metadata to name all N brokers. Returns its PID."""
    node = kafka_nodes.node(layout, index)
    with file_lock(layout.state_dir / "stack.lock", report, "start a broker"):
        started = kafka.launch_node(layout, node, report)
        kafka.wait_ready(layout, [started], report, timeout)
    return started.record.pid


def start_cluster(layout: StackLayout, *, report: Reporter = _quiet, timeout: float = 180.0) -> str:
    """Start every broker of ``layout`` (formatting their storage on first use), wait until the
    metadata names all of them, and return the bootstrap servers (``host:port,...``)."""
    layout.state_dir.mkdir(parents=True, exist_ok=True)
    with file_lock(layout.state_dir / "stack.lock", report, "stack up"):
        kafka.wait_ready(layout, kafka.launch(layout, report), report, timeout)
    return layout.kafka_bootstrap_servers


def stop_cluster(layout: StackLayout, *, kill: bool = False, report: Reporter = _quiet) -> None:
    """Stop every broker of ``layout`` by its recorded PID (SIGTERM, or SIGKILL with ``kill``:
    quicker when the data is thrown away next)."""
    if layout.state_dir.is_dir():
        with file_lock(layout.state_dir / "stack.lock", report, "stack down"):
            kafka.stop(layout, report, kill=kill)


def wait_in_sync(
    layout: StackLayout, topics: list[str], *, timeout: float = 120.0, report: Reporter = _quiet
) -> None:
    """Wait until every partition of ``topics`` has all its replicas in sync again (after a
    broker came back); raises :class:`StackError` after ``timeout`` seconds."""
    progress = Progress("kafka", report, timeout)
    while not asyncio.run(_all_in_sync(layout.kafka_bootstrap_servers, topics)):
        if progress.expired:
            raise StackError(f"kafka: replicas of {topics} not in sync after {timeout:.0f} s")
        progress.tick("waiting for the replicas to catch up")
        time.sleep(0.5)


async def _all_in_sync(bootstrap_servers: str, topics: list[str]) -> bool:
    from services.adapters.kafka.clients import make_admin

    admin = make_admin(bootstrap_servers, client_id="devicestate-stack", request_timeout_ms=5000)
    try:
        await admin.start()
        described = await admin.describe_topics(topics)
    except Exception:
        return False
    finally:
        with contextlib.suppress(Exception):
            await admin.close()
    partitions = [p for topic in described for p in topic.get("partitions") or []]
    return bool(partitions) and all(set(p["replicas"]) == set(p["isr"]) for p in partitions)
