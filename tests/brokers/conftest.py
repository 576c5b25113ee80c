"""A private three-broker Kafka cluster for the tests of the log's fault tolerance.

``three_brokers`` starts three KRaft nodes (each broker and controller) with the stack's own code
(:mod:`devtools.stack.brokers`), its state under the module's temporary directory and its ports
from ``DEVICESTATE_TEST_BROKERS_PORT`` (broker i on that + 2(i-1), controllers one above) or, when
unset, six free consecutive ports; it kills them by PID at the end of the module. The normal
stack (single broker) is left alone; PostgreSQL is the normal stack's.

The stop/start functions run ``asyncio.run`` inside: from an async test, call them through
``asyncio.to_thread``.
"""

from __future__ import annotations

import os
import random
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.stack import brokers
from devtools.stack.supervisor import StackError, StackLayout

BROKERS = 3


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def base_port() -> int:
    """``DEVICESTATE_TEST_BROKERS_PORT``, else the first of six free consecutive ports."""
    raw = os.environ.get("DEVICESTATE_TEST_BROKERS_PORT", "").strip()
    if raw:
        return int(raw)
    for _ in range(200):
        base = random.randrange(20000, 30000, 2)
        if all(_free(base + i) for i in range(2 * BROKERS)):
            return base
    raise RuntimeError("no six free consecutive ports between 20000 and 30000")


def _report(line: str) -> None:
    print(f"[three-brokers] {line}", file=sys.stderr, flush=True)


@pytest.fixture(scope="module")
def three_brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackLayout]:
    """The layout of a running three-broker cluster (``layout.kafka_bootstrap_servers``)."""
    port = base_port()
    layout = StackLayout(
        state_dir=Path(tmp_path_factory.mktemp("three-brokers")),
        cache_dir=StackLayout.from_env().cache_dir,  # the Kafka jars the stack fetched
        kafka_port=port,
        kafka_controller_port=port + 1,
        kafka_partitions=3,
        kafka_heap="384m",
    ).with_brokers(BROKERS)
    try:
        brokers.start_cluster(layout, report=_report, timeout=180)
    except StackError as exc:
        brokers.stop_cluster(layout, report=_report)
        pytest.fail(f"the three-broker cluster did not start: {exc.details()}")
    try:
        yield layout
    finally:
        brokers.stop_cluster(layout, kill=True, report=_report)  # its data goes with tmp_path
