"""The real monitoring tools for the tests of this folder (``devtools.testenv.monitoring``).

``monitoring_binaries`` builds Prometheus, promtool, Alertmanager and amtool on first use (CI
builds them in a step of its own: ``devicestate-dev testenv monitoring``) and FAILS the tests that
use it if it cannot; ``DEVICESTATE_MONITORING=off`` skips them instead on a machine without Go.
``prometheus_server`` and ``alertmanager_server`` start a server with a given config on a free
port and stop it by PID at the end of the test.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from devtools.stack.supervisor import StackError
from devtools.testenv import monitoring, monitoring_servers
from devtools.testenv.monitoring_servers import Server

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"


@pytest.fixture(scope="session")
def monitoring_binaries() -> monitoring.Binaries:
    if os.environ.get("DEVICESTATE_MONITORING", "").strip().lower() == "off":
        pytest.skip("DEVICESTATE_MONITORING=off: no Prometheus/Alertmanager tools")
    try:
        return monitoring.ensure_binaries()
    except (monitoring.MonitoringBuildError, StackError, OSError) as exc:
        pytest.fail(
            f"the monitoring tools could not be built (DEVICESTATE_MONITORING=off skips these "
            f"tests): {exc}",
            pytrace=False,
        )


def run_tool(binary: Path, *args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    """Run a tool; its exit code and output are the caller's to check."""
    return subprocess.run(
        [str(binary), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture
def prometheus_server(
    monitoring_binaries: monitoring.Binaries, tmp_path: Path
) -> Iterator[Callable[[Path], Server]]:
    started: list[Server] = []

    def start(config: Path) -> Server:
        server = monitoring_servers.start_prometheus(
            monitoring_binaries, tmp_path / f"prometheus-{len(started)}", config
        )
        started.append(server)
        return server

    yield start
    for server in started:
        monitoring_servers.stop(server)


@pytest.fixture
def alertmanager_server(
    monitoring_binaries: monitoring.Binaries, tmp_path: Path
) -> Iterator[Callable[[Path], Server]]:
    started: list[Server] = []

    def start(config: Path) -> Server:
        server = monitoring_servers.start_alertmanager(
            monitoring_binaries, tmp_path / f"alertmanager-{len(started)}", config
        )
        started.append(server)
        return server

    yield start
    for server in started:
        monitoring_servers.stop(server)
