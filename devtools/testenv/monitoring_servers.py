"""A real Prometheus and a real Alertmanager on 127.0.0.1 for the tests, started and stopped by PID.

``start_prometheus`` runs the binary :mod:`devtools.testenv.monitoring` built with a given config
(its TSDB and log in one directory, on a free port unless told one), ``start_alertmanager`` the
same for Alertmanager with clustering off (``--cluster.listen-address=``: one instance, no gossip
port). Both wait for ``/-/ready``. ``stop`` ends a server by its recorded PID (SIGTERM, then
SIGKILL after 30 s) and never by name. ``query``/``alerts`` read their HTTP APIs (Prometheus
``/api/v1/query``, Alertmanager ``/api/v2/alerts``).
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devtools.stack.supervisor import HOST, Reporter
from devtools.testenv.monitoring import Binaries
from devtools.testenv.processes import ProcessRef, free_port, http_get, spawn_ready, stop_process


def _quiet(line: str) -> None:
    pass


@dataclass(frozen=True)
class Server:
    """One running server: its process, its base URL (``http://127.0.0.1:<port>``) and its log."""

    process: ProcessRef
    url: str
    directory: Path

    def alive(self) -> bool:
        return self.process.alive()

    @property
    def log(self) -> Path:
        return Path(self.process.log)


def _ready(url: str) -> bool:
    status, _ = http_get(f"{url}/-/ready")
    return status == 200


def _start(
    name: str,
    what: str,
    directory: Path,
    port: int | None,
    command: Callable[[int], list[str]],
    timeout: float,
    report: Reporter,
) -> Server:
    """Run ``command(port)`` with its log in ``directory/<name>.log`` until ``/-/ready`` says 200."""
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port() if port is None else port
    url = f"http://{HOST}:{port}"
    process = spawn_ready(
        name,
        command(port),
        directory / f"{name}.log",
        f"{what} was ready",
        lambda: _ready(url),
        timeout,
        report,
    )
    return Server(process, url, directory)


def start_prometheus(
    binaries: Binaries,
    directory: Path,
    config: Path,
    port: int | None = None,
    timeout: float = 60.0,
    report: Reporter = _quiet,
) -> Server:
    """Prometheus with ``config`` (``--config.file``), TSDB in ``directory/data``, on ``port``
    (default: a free one); ``/-/reload`` is enabled (``--web.enable-lifecycle``)."""
    return _start(
        "prometheus",
        "Prometheus",
        directory,
        port,
        lambda port: [
            str(binaries.prometheus),
            f"--config.file={config}",
            f"--storage.tsdb.path={directory / 'data'}",
            f"--web.listen-address={HOST}:{port}",
            "--web.enable-lifecycle",
            "--log.level=info",
        ],
        timeout,
        report,
    )


def start_alertmanager(
    binaries: Binaries,
    directory: Path,
    config: Path,
    port: int | None = None,
    timeout: float = 60.0,
    report: Reporter = _quiet,
) -> Server:
    """Alertmanager with ``config``, state in ``directory/data``, on ``port`` (default: a free
    one), clustering off."""
    return _start(
        "alertmanager",
        "Alertmanager",
        directory,
        port,
        lambda port: [
            str(binaries.alertmanager),
            f"--config.file={config}",
            f"--storage.path={directory / 'data'}",
            f"--web.listen-address={HOST}:{port}",
            "--cluster.listen-address=",  # one instance: no gossip, no second port
            "--log.level=info",
        ],
        timeout,
        report,
    )


def stop(server: Server, report: Reporter = _quiet) -> None:
    """End the server by its PID (SIGTERM, SIGKILL after 30 s)."""
    stop_process(server.process, report)


def get_json(url: str) -> Any:
    """GET ``url`` and parse the JSON body; raises ``ValueError`` on a non-200 answer."""
    status, body = http_get(url)
    if status != 200:
        raise ValueError(f"GET {url}: HTTP {status}: {body[:500]}")
    return json.loads(body)


def query(server: Server, promql: str) -> list[dict[str, Any]]:
    """Prometheus ``/api/v1/query``: the result vector (each ``{metric: {...}, value: [t, "v"]}``)."""
    url = f"{server.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    body = get_json(url)
    if body.get("status") != "success":
        raise ValueError(f"query {promql!r} failed: {body}")
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def targets(server: Server) -> list[dict[str, Any]]:
    """Prometheus ``/api/v1/targets``: the active targets (each with ``labels``, ``health``,
    ``lastError`` and ``lastScrape``)."""
    body = get_json(f"{server.url}/api/v1/targets?state=active")
    active: list[dict[str, Any]] = body["data"]["activeTargets"]
    return active


def alerts(server: Server, active: bool = True, inhibited: bool = True) -> list[dict[str, Any]]:
    """Alertmanager ``/api/v2/alerts`` (``active``/``inhibited`` filters as the API takes them)."""
    params = urllib.parse.urlencode(
        {"active": str(active).lower(), "inhibited": str(inhibited).lower()}
    )
    body = get_json(f"{server.url}/api/v2/alerts?{params}")
    assert isinstance(body, list)
    return body
