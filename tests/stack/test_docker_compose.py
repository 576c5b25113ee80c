"""docker-compose.yml describes the same topology as the local stack, with the project's settings.

Every ``DEVICESTATE_*`` variable in it must be a setting of ``services.runtime.config.Settings``
(``DEVICESTATE_X`` -> top-level field ``x``; ``DEVICESTATE_X__Y`` -> nested field of ``x``), and
each process's environment must build a valid ``Settings``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from services.runtime.config import Settings

ROOT = Path(__file__).resolve().parents[2]
PROCESSES = {"watcher": "watch", "worker": "worker", "api": "api", "alerts": "alerts"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(data, dict)
    return data


def _environment(service: dict[str, Any]) -> dict[str, str]:
    """A service's environment as a dict, from either compose form (mapping or NAME=value list)."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        pairs = (item.split("=", 1) for item in env)
        return {name: value for name, value in pairs}
    return {str(name): "" if value is None else str(value) for name, value in env.items()}


def _devicestate_env(compose: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {
        name: {k: v for k, v in _environment(service).items() if k.startswith("DEVICESTATE_")}
        for name, service in compose["services"].items()
    }


def test_services_exist(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {"kafka", "postgres", *PROCESSES} <= set(services)
    assert services["kafka"]["image"] == "apache/kafka:4.1.1"
    assert services["postgres"]["image"] == "postgres:15"


@pytest.mark.parametrize(("service", "subcommand"), sorted(PROCESSES.items()))
def test_processes_run_devicestate_from_the_repository_image(
    compose: dict[str, Any], service: str, subcommand: str
) -> None:
    spec = compose["services"][service]
    assert spec.get("build") in (".", {"context": "."}), (
        f"{service} must be built from ./Dockerfile"
    )
    entrypoint = spec.get("entrypoint") or []
    command = spec.get("command") or []
    entrypoint = entrypoint.split() if isinstance(entrypoint, str) else list(entrypoint)
    command = command.split() if isinstance(command, str) else list(command)
    assert [*entrypoint, *command][:2] == ["devicestate", subcommand]


def test_every_devicestate_variable_is_a_setting(compose: dict[str, Any]) -> None:
    fields = set(Settings.model_fields)
    used = {name for env in _devicestate_env(compose).values() for name in env}
    assert used, "docker-compose.yml sets no DEVICESTATE_* variable"
    unknown = sorted(
        name
        for name in used
        if name.removeprefix("DEVICESTATE_").split("__", 1)[0].lower() not in fields
    )
    assert not unknown, f"not fields of services.runtime.config.Settings: {unknown}"


@pytest.mark.parametrize("service", sorted(PROCESSES))
def test_each_process_environment_builds_valid_settings(
    compose: dict[str, Any], service: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("DEVICESTATE_"):
            monkeypatch.delenv(name)
    env = _devicestate_env(compose)[service]
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = Settings()
    assert settings.kafka_bootstrap_servers == env["DEVICESTATE_KAFKA_BOOTSTRAP_SERVERS"]
    assert settings.database_url == env["DEVICESTATE_DATABASE_URL"]


def test_connection_settings_point_at_the_compose_servers(compose: dict[str, Any]) -> None:
    services = compose["services"]
    kafka_env = _environment(services["kafka"])
    advertised = kafka_env["KAFKA_ADVERTISED_LISTENERS"].split(",")
    internal = {listener.split("://", 1)[1] for listener in advertised}
    postgres_env = _environment(services["postgres"])
    for name in PROCESSES:
        env = _environment(services[name])
        assert env["DEVICESTATE_KAFKA_BOOTSTRAP_SERVERS"] in internal
        url = urlsplit(env["DEVICESTATE_DATABASE_URL"])
        assert url.scheme == "postgresql+asyncpg"
        assert (url.hostname, url.port) == ("postgres", 5432)
        assert url.username == postgres_env["POSTGRES_USER"]
        assert url.password == postgres_env["POSTGRES_PASSWORD"]
        assert url.path == "/" + postgres_env["POSTGRES_DB"]


def test_the_compose_broker_creates_no_topic_by_itself(compose: dict[str, Any]) -> None:
    # A command POSTed before the worker's first start made it create a 6-partition governance
    # topic (issue 11 item 6): the processes create and check their topics instead.
    kafka_env = _environment(compose["services"]["kafka"])
    assert kafka_env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"


def test_prometheus_scrapes_every_process_on_its_published_metrics_port(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    config = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    targets = {
        target
        for job in config["scrape_configs"]
        for static in job["static_configs"]
        for target in static["targets"]
    }
    ports = {
        "watcher": "DEVICESTATE_WATCHER_METRICS_PORT",
        "worker": "DEVICESTATE_WORKER_METRICS_PORT",
        "api": "DEVICESTATE_API_PORT",
    }
    expected = {f"{name}:{_environment(services[name])[var]}" for name, var in ports.items()}
    expected.add("alerts:9109")  # `devicestate alerts --metrics-port` default
    assert targets == expected
    (alertmanager,) = config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert alertmanager == "alertmanager:9093"
    webhook = _environment(services["alerts"])["DEVICESTATE_ALERT_WEBHOOK_URL"]
    assert webhook == f"http://{alertmanager}"


@pytest.mark.parametrize(
    ("service", "directory", "config"),
    [
        ("prometheus", "prometheus", "prometheus.yml"),
        ("alertmanager", "alertmanager", "alertmanager.yml"),
    ],
)
def test_monitoring_services_mount_the_deploy_configs(
    compose: dict[str, Any], service: str, directory: str, config: str
) -> None:
    spec = compose["services"][service]
    mounts = {m.split(":")[0]: m.split(":")[1] for m in spec["volumes"] if m.startswith("./")}
    assert mounts == {f"./deploy/{directory}": f"/etc/{directory}"}
    assert f"--config.file=/etc/{directory}/{config}" in spec["command"]
    assert (ROOT / "deploy" / directory / config).is_file()
