"""The PrometheusRule object of ``deploy/monitoring/`` from the plain rules file.

``deploy/prometheus/rules.yml`` is the single source of the recording and alerting rules (what a
plain Prometheus loads, what ``promtool test rules`` tests); the Prometheus Operator takes the
same groups in a ``monitoring.coreos.com/v1`` PrometheusRule. ``render`` wraps them so, and
``python -m devtools.monitoring_rules > deploy/monitoring/prometheus-rule.yaml`` regenerates the
file (``tests/monitoring/test_deploy_monitoring.py`` checks it is up to date).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
RULES = REPO / "deploy" / "prometheus" / "rules.yml"
HEADER = (
    "# GENERATED from deploy/prometheus/rules.yml by `python -m devtools.monitoring_rules`: edit\n"
    "# that file, then regenerate this one (a test checks they agree). For the Prometheus Operator:\n"
    "# its Prometheus must select this object (ruleSelector); docs/operations.md, 'Alert rules'.\n"
)


def load_groups(path: Path = RULES) -> list[dict[str, Any]]:
    """The rule groups of a Prometheus rules file (raises ``ValueError`` if it has none)."""
    document = yaml.safe_load(path.read_text())
    groups = document.get("groups") if isinstance(document, dict) else None
    if not isinstance(groups, list) or not groups:
        raise ValueError(f"{path}: no rule groups")
    return groups


def prometheus_rule(groups: list[dict[str, Any]]) -> dict[str, Any]:
    """The PrometheusRule object holding ``groups`` as they are."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "devicestate",
            "namespace": "devicestate",
            "labels": {
                "app.kubernetes.io/name": "devicestate",
                "app.kubernetes.io/component": "alerting",
            },
        },
        "spec": {"groups": groups},
    }


def render(path: Path = RULES) -> str:
    """The text of ``deploy/monitoring/prometheus-rule.yaml``."""
    body = yaml.safe_dump(
        prometheus_rule(load_groups(path)), sort_keys=False, width=100, allow_unicode=True
    )
    return HEADER + body


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
