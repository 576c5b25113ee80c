"""The alert mapping on what the real governor decides for the shared example streams
(``tests/governance/harness.py``): every alert has a known name and valid labels, and every
resolution closes an alert that fired, with the same labels."""

from __future__ import annotations

import re

import pytest

from services.domain.codec import parse_time
from services.domain.governance.decisions import AlertAction
from services.processes.alerts.mapping import ALERT_NAMES, ActiveAlerts
from tests.governance.harness import EXAMPLES, run_stream

STREAMS = sorted(p.stem for p in EXAMPLES.glob("stream-*.jsonl"))
LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


@pytest.mark.parametrize("stem", STREAMS)
def test_governor_alerts_map_cleanly(stem: str) -> None:
    run = run_stream(EXAMPLES / f"{stem}.jsonl")
    active = ActiveAlerts()
    fired: dict[str, dict[str, str]] = {}
    for decision in run.decisions:
        if decision.alert is AlertAction.RESOLVED:
            assert decision.incident in active, f"{decision.incident} resolved but never fired"
        for alert in active.apply(decision):
            labels = alert["labels"]
            assert labels["alertname"] in ALERT_NAMES.values(), labels
            assert all(LABEL_NAME.match(k) and v for k, v in labels.items()), labels
            if "endsAt" in alert:
                assert labels == fired[labels["incident"]]
                assert parse_time(alert["startsAt"]) <= parse_time(alert["endsAt"])
            else:
                fired[labels["incident"]] = labels


def test_the_examples_raise_alerts_at_all() -> None:
    names = set()
    for stem in STREAMS:
        active = ActiveAlerts()
        for decision in run_stream(EXAMPLES / f"{stem}.jsonl").decisions:
            names.update(a["labels"]["alertname"] for a in active.apply(decision))
    assert "DeviceQuarantined" in names
