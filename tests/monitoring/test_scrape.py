"""A real Prometheus scrapes the watcher, the worker and the API during an end-to-end run of the
demo stream (real Kafka, PostgreSQL, worker and API processes), evaluates deploy/prometheus/
rules.yml, and its HTTP API gives the expected series and values; ``promtool check metrics``
passes on every ``/metrics``.

The watcher reads the recorded stream in this process and its ``/metrics`` stays served until
the end of the test (a watcher on a live cluster runs for good); the worker and the API are
subprocesses, each on a free port.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.demo.catchup import wait_caught_up
from devtools.testenv import monitoring_servers
from devtools.testenv.kubeapi import free_port
from devtools.testenv.monitoring import Binaries
from devtools.testenv.monitoring_servers import Server
from services.processes.watcher.metrics import WatcherMetrics
from services.processes.watcher.run import run_watch
from services.runtime.config import Settings
from tests.conftest import settings_env
from tests.monitoring.conftest import DEPLOY, REPO

pytestmark = pytest.mark.integration

DEMO_STREAM = REPO / "devtools" / "examples" / "demo-stream.jsonl"
JOBS = ("devicestate-watcher", "devicestate-worker", "devicestate-api")


def prometheus_config(path: Path, targets: dict[str, int]) -> Path:
    jobs = "".join(
        f"  - job_name: {job}\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
        for job, port in targets.items()
    )
    path.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"rule_files:\n  - {DEPLOY / 'prometheus' / 'rules.yml'}\n"
        f"scrape_configs:\n{jobs}"
    )
    return path


@pytest.fixture
def api_process(tmp_path: Path) -> Iterator[Callable[[Settings, int], subprocess.Popen[bytes]]]:
    """``devicestate api`` in a subprocess on 127.0.0.1:<port>; killed at teardown."""
    started: list[subprocess.Popen[bytes]] = []

    def start(settings: Settings, port: int) -> subprocess.Popen[bytes]:
        env = {**os.environ, **settings_env(settings)}
        env.update(DEVICESTATE_API_HOST="127.0.0.1", DEVICESTATE_API_PORT=str(port))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        with (tmp_path / "api.log").open("ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "services.cli.main", "api"],
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()
        process.wait()


async def eventually(
    check: Callable[[], Any],
    what: str,
    seconds: float = 120.0,
    why: Callable[[], Any] | None = None,
) -> Any:
    """``check()``'s first truthy answer, polled every 0.5 s; ``AssertionError`` after
    ``seconds``, with the last answer and, given ``why``, what it says (the scrape targets)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    last: Any = None
    while loop.time() < deadline:
        try:
            last = await asyncio.to_thread(check)
        except (OSError, ValueError) as exc:
            last = exc
        if last and not isinstance(last, Exception):
            return last
        await asyncio.sleep(0.5)
    said = f"; {await asyncio.to_thread(why)!r}" if why is not None else ""
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}{said}")


def value(server: Server, promql: str) -> float | None:
    """The single value of an instant query (``None``: no series)."""
    result = monitoring_servers.query(server, promql)
    if not result:
        return None
    assert len(result) == 1, (promql, result)
    return float(result[0]["value"][1])


def metrics_text(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        body: bytes = response.read()
    return body.decode()


def check_metrics(binaries: Binaries, port: int) -> subprocess.CompletedProcess[str]:
    """``promtool check metrics`` on what ``127.0.0.1:<port>/metrics`` serves."""
    return subprocess.run(
        [str(binaries.promtool), "check", "metrics"],
        input=metrics_text(port),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_prometheus_scrapes_the_pipeline_and_evaluates_the_rules(
    stream_settings: Settings,
    kafka_bootstrap: str,
    worker_process: Any,
    api_process: Callable[[Settings, int], subprocess.Popen[bytes]],
    prometheus_server: Callable[[Path], Server],
    monitoring_binaries: Binaries,
    tmp_path: Path,
) -> None:
    ports = {job: free_port() for job in JOBS}
    settings = stream_settings.model_copy(
        update={"worker_metrics_port": ports["devicestate-worker"]}
    )
    worker = worker_process(settings)
    api = api_process(settings, ports["devicestate-api"])
    watcher_metrics = WatcherMetrics()
    watcher_metrics.serve(ports["devicestate-watcher"], addr="127.0.0.1")
    try:
        prometheus = prometheus_server(prometheus_config(tmp_path / "prometheus.yml", ports))

        def worker_alive() -> None:
            assert worker.process.poll() is None, "the worker exited"

        summary = await run_watch(settings, from_file=DEMO_STREAM, metrics=watcher_metrics)
        await wait_caught_up(
            kafka_bootstrap,
            settings.topic,
            settings.consumer_group,
            120,
            still_alive=worker_alive,
        )
        assert api.poll() is None, (tmp_path / "api.log").read_text()

        # The governor quarantined the demo's 5 Unhealthy GPUs: the API reads it from the
        # projection, the worker's governor keeps it in its gauge, Prometheus has both.
        await eventually(
            lambda: value(prometheus, 'devicestate_quarantines_active{job="devicestate-api"}') == 5,
            "the API's quarantine gauge at 5 in Prometheus",
        )
        # Each job is scraped on its own loop: one may not have had its first scrape yet.
        for job in JOBS:
            up = f'up{{job="{job}"}}'
            await eventually(
                lambda up=up: value(prometheus, up) == 1,  # type: ignore[misc]
                f"{up} == 1",
                seconds=60,
                why=lambda: monitoring_servers.targets(prometheus),
            )
        # The governor sets its gauge after its own commit, which may come after the worker's
        # last scrape so far (CI saw 0 once): wait for a scrape that has it.
        await eventually(
            lambda: value(prometheus, "devicestate_governor_active_quarantines") == 5,
            "the governor's quarantine gauge at 5 in Prometheus",
        )
        await eventually(
            lambda: (
                value(prometheus, 'devicestate_devices_by_governance_state{state="Quarantined"}')
                == 5
            ),
            "the Quarantined devices gauge at 5 in Prometheus",
        )
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{ports['devicestate-api']}") as c:
            tolerated = await c.get("/v1/devices", params={"state": "UnknownTolerated"})
            assert tolerated.status_code == 200, tolerated.text
        unknown = len(tolerated.json()["items"])
        assert unknown > 0
        assert (
            value(prometheus, 'devicestate_devices_by_governance_state{state="UnknownTolerated"}')
            == unknown
        )
        # What the watcher counted, as Prometheus read it.
        published = summary.events_published["DeviceHealthObserved"]
        assert (
            value(
                prometheus,
                'devicestate_watcher_events_published_total{type="DeviceHealthObserved"}',
            )
            == published
        )
        assert value(prometheus, "sum(devicestate_watcher_dead_lettered_total)") == (
            summary.dead_lettered
        )
        assert (
            value(prometheus, "sum(devicestate_worker_events_consumed_total)") or 0
        ) >= published
        assert value(prometheus, 'devicestate_breaker_open{job="devicestate-api"}') == 0

        # The rules ran on the scraped series: the recording rule and the alert it feeds.
        await eventually(
            lambda: value(prometheus, "devicestate:quarantines_active:max") == 5,
            "the recording rule",
        )
        firing = await eventually(
            lambda: monitoring_servers.query(
                prometheus, 'ALERTS{alertname="DevicestateDevicesQuarantined",alertstate="firing"}'
            ),
            "DevicestateDevicesQuarantined firing",
        )
        assert firing[0]["metric"]["severity"] == "warning"
        assert not monitoring_servers.query(
            prometheus, 'ALERTS{alertname="DevicestateBreakerOpen"}'
        )

        # promtool's linter on every endpoint (names, units, types, help).
        for job, port in ports.items():
            result = await asyncio.to_thread(check_metrics, monitoring_binaries, port)
            assert result.returncode == 0 and not result.stdout.strip(), (
                f"{job}: promtool check metrics:\n{result.stdout}{result.stderr}"
            )
    finally:
        watcher_metrics.close()
