"""The migration alerts (issue 13 item 5) routed by deploy/alertmanager/alertmanager.yml:
``MigrationNonRecoverable`` (the tenant notification, carrying the namespace) reaches ``tenants``
one group per namespace, the other two the default route; checked with ``amtool config routes
test`` and a real Alertmanager receiving the alerts as Prometheus posts them (API v2)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from devtools.testenv import monitoring_servers
from devtools.testenv.monitoring import Binaries
from devtools.testenv.monitoring_servers import Server
from tests.monitoring.conftest import run_tool
from tests.monitoring.test_alertmanager import eventually
from tests.monitoring.test_dra_failure_routes import CONFIG, RULES, post

RECEIVERS = {
    "MigrationNonRecoverable": "tenants",
    "MigrationFailed": "tickets",
    "MigrationsRateLimited": "tickets",
}


def fired(alert: str, **labels: str) -> dict[str, str]:
    """The labels of ``alert`` as Prometheus sends it: the rule's and the expression's."""
    groups = yaml.safe_load(RULES.read_text())["groups"]
    (rule,) = [r for g in groups for r in g["rules"] if r.get("alert") == alert]
    return {"alertname": alert, **{str(k): str(v) for k, v in rule["labels"].items()}, **labels}


ALERTS = [
    fired("MigrationNonRecoverable", namespace="team-a"),
    fired("MigrationNonRecoverable", namespace="team-b"),
    fired("MigrationFailed", namespace="team-a", reason="pdb-refused"),
    fired("MigrationsRateLimited", job="devicestate-api", waiting_for="rate-limited"),
]


@pytest.mark.parametrize("labels", ALERTS, ids=lambda labels: labels["alertname"])
def test_amtool_routes_each_migration_alert(
    monitoring_binaries: Binaries, labels: dict[str, str]
) -> None:
    result = run_tool(
        monitoring_binaries.amtool,
        "config",
        "routes",
        "test",
        f"--config.file={CONFIG}",
        *(f"{k}={v}" for k, v in labels.items()),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == RECEIVERS[labels["alertname"]]


@pytest.mark.integration
async def test_alertmanager_sends_the_non_recoverable_alert_to_each_namespace_s_tenant(
    alertmanager_server: Callable[[Path], Server],
) -> None:
    am = alertmanager_server(CONFIG)
    now = datetime.now(UTC)
    post(
        am,
        [
            {
                "labels": labels,
                "annotations": {"summary": labels["alertname"]},
                "startsAt": now.isoformat(),
                "endsAt": (now + timedelta(minutes=10)).isoformat(),
            }
            for labels in ALERTS
        ],
    )

    def groups() -> dict[tuple[str, str], tuple[str, int]] | None:
        found = monitoring_servers.get_json(f"{am.url}/api/v2/alerts/groups")
        grouped = {
            (g["labels"]["alertname"], g["labels"].get("namespace", "")): (
                g["receiver"]["name"],
                len(g["alerts"]),
            )
            for g in found
        }
        return grouped if len(grouped) == 4 else None

    assert await eventually(groups, "four groups in Alertmanager") == {
        ("MigrationNonRecoverable", "team-a"): ("tenants", 1),
        ("MigrationNonRecoverable", "team-b"): ("tenants", 1),
        ("MigrationFailed", ""): ("tickets", 1),  # default grouping: alertname, node
        ("MigrationsRateLimited", ""): ("tickets", 1),
    }
