"""The Grafana dashboards of deploy/grafana (issue 14 item 2): the committed JSON is what
``devtools.grafana_dashboards`` generates, every panel reads a provisioned datasource, every
panel's PromQL parses in promtool (as the expressions of a rules file), the datasources and
dashboards are provisioned in docker-compose.yml and rendered by the real kustomize.
Every panel's SQL runs against a real projection in tests/monitoring/test_dashboard_sql.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from devtools import grafana_dashboards
from devtools.stack.supervisor import StackError
from devtools.testenv import kustomize
from devtools.testenv.errors import KubeAPIError
from devtools.testenv.monitoring import Binaries
from tests.monitoring.conftest import DEPLOY, REPO, run_tool

GRAFANA = DEPLOY / "grafana"
DATASOURCES = GRAFANA / "provisioning" / "datasources" / "devicestate.yaml"


def dashboards() -> dict[str, dict[str, Any]]:
    """The committed dashboards by name."""
    return {
        name: json.loads((GRAFANA / "dashboards" / f"{name}.json").read_text())
        for name in grafana_dashboards.DASHBOARDS
    }


def targets(kind: str) -> list[tuple[str, str]]:
    """``(panel title, query)`` of every committed panel target of datasource type ``kind``."""
    found = []
    for board in dashboards().values():
        for panel in board["panels"]:
            for target in panel["targets"]:
                if target["datasource"]["type"] == kind:
                    found.append((panel["title"], target.get("rawSql") or target["expr"]))
    return found


def test_committed_dashboards_are_what_the_generator_makes(tmp_path: Path) -> None:
    assert grafana_dashboards.main(["--check"]) == 0, (
        "deploy/grafana/dashboards is stale: run `python -m devtools.grafana_dashboards`"
    )
    assert grafana_dashboards.main(["--out", str(tmp_path)]) == 0
    for name in grafana_dashboards.DASHBOARDS:
        assert (tmp_path / f"{name}.json").read_text() == (
            GRAFANA / "dashboards" / f"{name}.json"
        ).read_text()


def test_every_panel_has_one_query_on_a_provisioned_datasource() -> None:
    provisioned = {
        d["uid"]: d["type"] for d in yaml.safe_load(DATASOURCES.read_text())["datasources"]
    }
    assert provisioned == {
        "devicestate-postgres": "grafana-postgresql-datasource",
        "devicestate-prometheus": "prometheus",
    }
    boards = dashboards()
    assert {b["uid"] for b in boards.values()} == {
        "devicestate-fleet",
        "devicestate-pipeline",
        "devicestate-migrations",
    }
    for board in boards.values():
        assert board["panels"], board["title"]
        for panel in board["panels"]:
            assert len(panel["targets"]) == 1, panel["title"]
            source = panel["targets"][0]["datasource"]
            assert provisioned[source["uid"]] == source["type"], panel["title"]
    # What the issue asks each dashboard to show.
    fleet = " ".join(p["title"] for p in boards["fleet"]["panels"])
    for word in ("per node", "Quarantine", "Unknown", "Breaker", "Capacity"):
        assert word in fleet, word
    pipeline = " ".join(p["title"] for p in boards["pipeline"]["panels"])
    for word in ("Ingest rate", "lag", "Dead letters", "Replay progress", "watermark", "staleness"):
        assert word in pipeline, word
    # Issue 13 item 5: migrations by outcome, time to checkpoint and to rebuild, idle GPUs
    # while quarantined, migrations refused by the limits.
    migrations = " ".join(p["title"] for p in boards["migrations"]["panels"])
    for word in ("finished", "checkpoint", "rebuild", "Idle quarantined", "Refused by limits"):
        assert word in migrations, word


def test_every_panel_promql_parses_in_promtool(
    monitoring_binaries: Binaries, tmp_path: Path
) -> None:
    queries = targets("prometheus")
    assert len(queries) >= 7
    rules = {
        "groups": [
            {
                "name": "dashboard-panels",
                "rules": [
                    {"record": f"panel:query_{i}", "expr": expr}
                    for i, (_, expr) in enumerate(queries)
                ],
            }
        ]
    }
    path = tmp_path / "panels.yml"
    path.write_text(yaml.safe_dump(rules))
    result = run_tool(monitoring_binaries.promtool, "check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(queries)} rules found" in result.stdout + result.stderr
    # promtool really parses them: a broken expression fails the same check.
    path.write_text(
        yaml.safe_dump(
            {
                "groups": [
                    {
                        "name": "g",
                        "rules": [{"record": "panel:broken", "expr": "sum by (type (rate(x[5m]))"}],
                    }
                ]
            }
        )
    )
    assert run_tool(monitoring_binaries.promtool, "check", "rules", str(path)).returncode != 0


def test_recording_rules_the_panels_read_exist() -> None:
    recorded = {
        rule["record"]
        for group in yaml.safe_load((DEPLOY / "prometheus" / "rules.yml").read_text())["groups"]
        for rule in group["rules"]
        if "record" in rule
    }
    for title, expr in targets("prometheus"):
        if expr.startswith("devicestate:"):
            assert expr in recorded, title


def test_compose_runs_grafana_from_its_image_with_the_provisioning() -> None:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    grafana = compose["services"]["grafana"]
    assert grafana["image"].startswith("grafana/grafana")
    assert "build" not in grafana  # AGPL: never built here
    mounts = {v.split(":")[0]: v.split(":")[1] for v in grafana["volumes"] if v.startswith("./")}
    assert mounts["./deploy/grafana/provisioning"] == "/etc/grafana/provisioning"
    provider = yaml.safe_load(
        (GRAFANA / "provisioning" / "dashboards" / "devicestate.yaml").read_text()
    )
    assert mounts["./deploy/grafana/dashboards"] == provider["providers"][0]["options"]["path"]
    env = grafana["environment"]
    used = {word[2:-1] for word in DATASOURCES.read_text().split() if word.startswith("${")}
    assert used <= set(env), used - set(env)
    postgres = compose["services"]["postgres"]["volumes"]
    assert any(v.startswith("./deploy/grafana/dashboards-role.sql:") for v in postgres)


@pytest.fixture(scope="module")
def kustomize_binary() -> Path:
    try:
        return kustomize.ensure_kustomize()
    except (KubeAPIError, StackError, OSError) as exc:
        pytest.fail(f"kustomize could not be built: {exc}", pytrace=False)


def test_kustomize_renders_the_grafana_config_maps(kustomize_binary: Path) -> None:
    documents = list(yaml.safe_load_all(kustomize.render(GRAFANA, kustomize_binary)))
    by_name = {d["metadata"]["name"]: d for d in documents}
    dashboards_map = by_name["devicestate-grafana-dashboards"]
    assert dashboards_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboards_map["metadata"]["namespace"] == "devicestate"
    for name, board in dashboards().items():
        assert json.loads(dashboards_map["data"][f"{name}.json"]) == board
    sources = by_name["devicestate-grafana-datasources"]
    assert sources["metadata"]["labels"]["grafana_datasource"] == "1"
    assert yaml.safe_load(sources["data"]["devicestate.yaml"]) == yaml.safe_load(
        DATASOURCES.read_text()
    )


def test_operations_doc_lists_every_panel_with_its_query() -> None:
    doc = (REPO / "docs" / "operations.md").read_text()
    assert grafana_dashboards.markdown() in doc, (
        "docs/operations.md's panel list is stale: paste "
        "`python -m devtools.grafana_dashboards --markdown` under its section Grafana"
    )
    for board in dashboards().values():
        for panel in board["panels"]:
            target = panel["targets"][0]
            assert (target.get("rawSql") or target["expr"]).splitlines()[0] in doc, panel["title"]
