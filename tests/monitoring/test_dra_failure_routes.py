"""The DRA failure classes' alerts (issue 16 item 3) routed by deploy/alertmanager/alertmanager.yml,
each class to its own receiver: ``amtool config routes test`` with the labels the rules set, and a
real Alertmanager receiving the three alerts as Prometheus posts them (API v2), grouped to
``dra-drivers`` by reason, ``tenants`` and ``platform-cleanup`` by namespace."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from devtools.testenv import monitoring_servers
from devtools.testenv.monitoring import Binaries
from devtools.testenv.monitoring_servers import Server
from tests.monitoring.conftest import DEPLOY, run_tool
from tests.monitoring.test_alertmanager import eventually

CONFIG = DEPLOY / "alertmanager" / "alertmanager.yml"
RULES = DEPLOY / "prometheus" / "rules.yml"
RECEIVERS = {
    "DRADriverFailuresRetryable": "dra-drivers",
    "DRAClaimsNonRetryable": "tenants",
    "DRAClaimsNeedCleanup": "platform-cleanup",
}


def rule_labels() -> dict[str, dict[str, str]]:
    """The static labels of each DRA failure alert, as deploy/prometheus/rules.yml sets them."""
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {
        r["alert"]: {str(k): str(v) for k, v in r["labels"].items()}
        for g in groups
        for r in g["rules"]
        if r.get("alert") in RECEIVERS
    }


def fired(alert: str, **labels: str) -> dict[str, str]:
    """The labels of ``alert`` as Prometheus sends it: the rule's and the expression's."""
    return {"alertname": alert, **rule_labels()[alert], **labels}


ALERTS = [
    fired("DRADriverFailuresRetryable", reason="FailedPrepareDynamicResources"),
    fired("DRAClaimsNonRetryable", namespace="team-a", reason="FailedScheduling"),
    fired("DRAClaimsNonRetryable", namespace="team-b", reason="FailedPrepareDynamicResources"),
    fired("DRAClaimsNeedCleanup", namespace="ml", reason="FailedUnprepareDynamicResources"),
]


def test_each_class_has_its_own_failure_class_label() -> None:
    labels = rule_labels()
    assert {a: labels[a]["failure_class"] for a in RECEIVERS} == {
        "DRADriverFailuresRetryable": "retryable",
        "DRAClaimsNonRetryable": "non-retryable",
        "DRAClaimsNeedCleanup": "needs-cleanup",
    }


@pytest.mark.parametrize("labels", ALERTS, ids=lambda labels: labels["alertname"])
def test_amtool_routes_each_class_to_its_receiver(
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


def post(server: Server, alerts: list[dict[str, Any]]) -> None:
    request = urllib.request.Request(
        f"{server.url}/api/v2/alerts",
        data=json.dumps(alerts).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


@pytest.mark.integration
async def test_alertmanager_groups_each_class_to_its_receiver(
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
            (g["labels"]["alertname"], g["labels"].get("namespace") or g["labels"]["reason"]): (
                g["receiver"]["name"],
                len(g["alerts"]),
            )
            for g in found
        }
        return grouped if len(grouped) == 4 else None

    assert await eventually(groups, "four groups in Alertmanager") == {
        ("DRADriverFailuresRetryable", "FailedPrepareDynamicResources"): ("dra-drivers", 1),
        ("DRAClaimsNonRetryable", "team-a"): ("tenants", 1),
        ("DRAClaimsNonRetryable", "team-b"): ("tenants", 1),
        ("DRAClaimsNeedCleanup", "ml"): ("platform-cleanup", 1),
    }
