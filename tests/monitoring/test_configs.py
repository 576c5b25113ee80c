"""The monitoring configs of deploy/ with the real tools: Prometheus's passes
``promtool check config`` (its rule file included), Alertmanager's ``amtool check-config``, and the
PrometheusRule of deploy/monitoring/ holds exactly the groups of deploy/prometheus/rules.yml."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from devtools import monitoring_rules
from devtools.testenv.monitoring import Binaries
from tests.monitoring.conftest import DEPLOY, run_tool

PROMETHEUS_CONFIG = DEPLOY / "prometheus" / "prometheus.yml"
ALERTMANAGER_CONFIG = DEPLOY / "alertmanager" / "alertmanager.yml"
PROMETHEUS_RULE = DEPLOY / "monitoring" / "prometheus-rule.yaml"


def test_promtool_checks_the_prometheus_config(monitoring_binaries: Binaries) -> None:
    result = run_tool(monitoring_binaries.promtool, "check", "config", str(PROMETHEUS_CONFIG))
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "rules.yml" in output  # the rule file was found and checked with it


def test_promtool_refuses_a_broken_config(monitoring_binaries: Binaries, tmp_path: Path) -> None:
    broken = tmp_path / "prometheus.yml"
    broken.write_text(PROMETHEUS_CONFIG.read_text().replace("scrape_interval", "scrape_intervl"))
    (tmp_path / "rules.yml").write_text((DEPLOY / "prometheus" / "rules.yml").read_text())
    result = run_tool(monitoring_binaries.promtool, "check", "config", str(broken))
    assert result.returncode != 0


def test_amtool_checks_the_alertmanager_config(monitoring_binaries: Binaries) -> None:
    result = run_tool(monitoring_binaries.amtool, "check-config", str(ALERTMANAGER_CONFIG))
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "SUCCESS" in output


def test_amtool_refuses_a_route_to_an_unknown_receiver(
    monitoring_binaries: Binaries, tmp_path: Path
) -> None:
    broken = tmp_path / "alertmanager.yml"
    broken.write_text(
        ALERTMANAGER_CONFIG.read_text().replace("receiver: oncall", "receiver: nobody")
    )
    result = run_tool(monitoring_binaries.amtool, "check-config", str(broken))
    assert result.returncode != 0


def test_the_prometheus_rule_object_is_generated_from_the_rules_file() -> None:
    assert PROMETHEUS_RULE.read_text() == monitoring_rules.render(), (
        "deploy/monitoring/prometheus-rule.yaml is stale: run "
        "`python -m devtools.monitoring_rules > deploy/monitoring/prometheus-rule.yaml`"
    )
    rule = yaml.safe_load(PROMETHEUS_RULE.read_text())
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    plain = yaml.safe_load((DEPLOY / "prometheus" / "rules.yml").read_text())
    assert rule["spec"]["groups"] == plain["groups"]
    kustomization = yaml.safe_load((DEPLOY / "monitoring" / "kustomization.yaml").read_text())
    assert kustomization["resources"] == ["prometheus-rule.yaml"]


def test_a_change_to_the_rules_file_shows_in_the_generated_object(tmp_path: Path) -> None:
    changed = tmp_path / "rules.yml"
    changed.write_text((DEPLOY / "prometheus" / "rules.yml").read_text().replace("> 120", "> 600"))
    assert monitoring_rules.render(changed) != PROMETHEUS_RULE.read_text()


def test_promtool_check_metrics_flags_what_the_services_must_not_do(
    monitoring_binaries: Binaries,
) -> None:
    # The linter test_scrape.py runs on every /metrics: a counter without _total and a unit that
    # is not a base unit are refused, so its passing there means something.
    bad = (
        "# HELP requests_count Requests.\n# TYPE requests_count counter\nrequests_count 1\n"
        "# HELP latency_milliseconds Latency.\n# TYPE latency_milliseconds gauge\n"
        "latency_milliseconds 3\n"
    )
    result = subprocess.run(
        [str(monitoring_binaries.promtool), "check", "metrics"],
        input=bad,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert '"_total" suffix' in result.stderr and 'base unit "seconds"' in result.stderr
