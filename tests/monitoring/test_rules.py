"""deploy/prometheus/rules.yml with the real promtool: ``check rules``, and ``test rules`` on the
synthetic series of rules_test.yml; every alert is unit-tested there and has its runbook entry in
docs/operations.md."""

from __future__ import annotations

from pathlib import Path

import yaml

from devtools.testenv.monitoring import Binaries
from tests.monitoring.conftest import DEPLOY, REPO, run_tool

RULES = DEPLOY / "prometheus" / "rules.yml"
RULES_TEST = Path(__file__).with_name("rules_test.yml")
ALERTS_WANTED = {
    "DevicestateDevicesQuarantined",
    "DevicestateUnknownBeyondWindow",
    "DevicestateBreakerOpen",
    "DevicestateProjectionLagging",
    "DevicestateGovernorStale",
    "DevicestateDeadLettersRising",
    "DevicestateRecoveryFailingRepeatedly",
    "DevicestateWatcherSilent",
    "DevicestateQuarantineNeedsOperator",  # issue 15 item 4
    "DevicestateDedupTableAhead",  # issue 11: the early-drop check fired
    "DevicestateAdoptionHold",  # issue 16: a DRA adoption pool's recorded verdict
    "DevicestateAdoptionRollback",
    "DevicestateWatchStale",  # issue 15 item 3
    "DevicestateNodeIncidentOpen",  # issue 15 item 5
    "DRADriverFailuresRetryable",  # issue 16 item 3: one per driver and claim failure class
    "DRAClaimsNonRetryable",
    "DRAClaimsNeedCleanup",
}
"""Issue 14 item 3: quarantined, Unknown beyond its window, breaker, lag/staleness, dead letters,
recovery failing, watcher silent."""


def _alert_rules() -> list[dict[str, object]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def test_promtool_checks_the_rules(monitoring_binaries: Binaries) -> None:
    result = run_tool(monitoring_binaries.promtool, "check", "rules", "--lint=all", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


def test_promtool_unit_tests_pass(monitoring_binaries: Binaries) -> None:
    result = run_tool(monitoring_binaries.promtool, "test", "rules", str(RULES_TEST))
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_unit_tests_fail_on_a_wrong_expectation(
    monitoring_binaries: Binaries, tmp_path: Path
) -> None:
    # The same tests with the breaker alert expected while the breaker is closed must fail:
    # promtool compares what it expects, so the suite above is not vacuous.
    broken = RULES_TEST.read_text().replace(
        "      - eval_time: 0m\n        alertname: DevicestateBreakerOpen\n        exp_alerts: []",
        "      - eval_time: 0m\n        alertname: DevicestateBreakerOpen\n        exp_alerts:\n"
        "          - exp_labels: {severity: critical, scope: fleet, job: devicestate-api}",
    )
    assert broken != RULES_TEST.read_text()
    rules_dir = tmp_path / "deploy" / "prometheus"
    rules_dir.mkdir(parents=True)
    (rules_dir / "rules.yml").write_text(RULES.read_text())
    test_dir = tmp_path / "tests" / "monitoring"
    test_dir.mkdir(parents=True)
    (test_dir / "rules_test.yml").write_text(broken)
    result = run_tool(
        monitoring_binaries.promtool, "test", "rules", str(test_dir / "rules_test.yml")
    )
    assert result.returncode != 0
    assert "DevicestateBreakerOpen" in result.stdout + result.stderr


def test_the_issue_s_alerts_exist_each_unit_tested_with_a_runbook_entry() -> None:
    names = {str(rule["alert"]) for rule in _alert_rules()}
    assert names == ALERTS_WANTED
    tests = yaml.safe_load(RULES_TEST.read_text())["tests"]
    tested = {
        case["alertname"]
        for group in tests
        for case in group.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert tested == names, "every alert must be shown firing in rules_test.yml"
    runbook = (REPO / "docs" / "operations.md").read_text()
    for rule in _alert_rules():
        annotations = rule["annotations"]
        assert isinstance(annotations, dict)
        anchor = str(annotations["runbook_url"]).split("#", 1)[1]
        assert f"### {rule['alert']}" in runbook and anchor == str(rule["alert"]).lower()
        labels = rule["labels"]
        assert isinstance(labels, dict)
        assert labels["severity"] in {"warning", "critical"} and labels["scope"] in {
            "fleet",
            "pipeline",
        }
