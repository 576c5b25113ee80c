"""Quarantines that need an operator (issue 15 item 4), through ``machine.step`` on event time.

Golden case from the NVIDIA k8s-device-plugin report ("there is no way to recover from the
Unhealthy state"): the device reads Unhealthy and never anything else, so after the configured age
(72 h by default) the governor says the quarantine needs an operator, once.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st

from services.domain.governance.decisions import AlertAction, DecisionKind
from services.domain.governance.device_state import DeviceGov
from services.domain.governance.inputs import RecoveryStage
from services.domain.governance.policy import GovernancePolicy
from services.domain.governance.state import GovernorState
from tests.governance.harness import GovernanceRun
from tests.governance.strategies import lease, report, transition, watermark
from tests.governance.test_machine import G0, N1, POLICY, H, U, device, kinds, one

K = DecisionKind
AGE = 259200.0  # the default: 72 h


def test_the_default_age_is_72_hours() -> None:
    assert GovernancePolicy().quarantine_operator_age_seconds == AGE


def test_an_unhealthy_that_never_clears_needs_an_operator_once_at_72_hours() -> None:
    run = GovernanceRun(policy=POLICY)
    run.feed(transition(N1, G0, H, 1, 0))
    run.feed(transition(N1, G0, U, 2, 10))
    q = device(run).quarantine
    assert q is not None and q.operator_due_at is not None
    assert run.feed(watermark(10 + AGE - 1)) == []
    decisions = run.feed(watermark(10 + AGE))
    alert = one(decisions, K.QUARANTINE_NEEDS_OPERATOR)
    assert alert.alert is AlertAction.FIRING
    assert alert.incident == f"quarantine-age/{N1}/{G0}@2"
    assert alert.details["quarantinedSeconds"] == AGE
    assert alert.at == q.created_at + timedelta(seconds=AGE) == q.operator_due_at
    after = device(run).quarantine
    assert after is not None and after.needs_operator
    assert K.QUARANTINE_NEEDS_OPERATOR not in kinds(run.feed(watermark(10 + 3 * AGE)))


def test_recovery_progress_restarts_the_age_and_resolves_the_alert() -> None:
    policy = replace(POLICY, quarantine_operator_age_seconds=1000.0)
    run = GovernanceRun(policy=policy)
    run.feed(transition(N1, G0, U, 1, 0))
    one(run.feed(watermark(1000)), K.QUARANTINE_NEEDS_OPERATOR)
    run.feed(transition(N1, G0, H, 2, 1001))  # probe starts: no progress yet
    run.feed(lease(N1, G0, "A", 1002))
    decisions = run.feed(report(N1, G0, RecoveryStage.PROBE, True, "A", 1, 1003))
    resolved = one(decisions, K.QUARANTINE_OPERATOR_RESOLVED)
    assert resolved.alert is AlertAction.RESOLVED
    q = device(run).quarantine
    assert q is not None and not q.needs_operator and q.operator_due_at is not None
    assert (q.operator_due_at - resolved.at).total_seconds() == 1000.0


def test_the_release_resolves_a_firing_age_alert() -> None:
    policy = replace(
        POLICY,
        quarantine_operator_age_seconds=50.0,
        recovery_probe=False,
        recovery_canary=False,
        recovery_stability_seconds=20.0,
    )
    run = GovernanceRun(policy=policy)
    run.feed(transition(N1, G0, U, 1, 0))
    one(run.feed(watermark(50)), K.QUARANTINE_NEEDS_OPERATOR)
    run.feed(transition(N1, G0, H, 2, 60))
    decisions = run.feed(watermark(80))
    assert kinds(decisions).index(K.QUARANTINE_OPERATOR_RESOLVED) < kinds(decisions).index(
        K.QUARANTINE_RELEASED
    )
    assert device(run).quarantine is None


def test_the_age_survives_a_snapshot_round_trip() -> None:
    run = GovernanceRun(policy=POLICY)
    run.feed(transition(N1, G0, U, 1, 0))
    one(run.feed(watermark(AGE)), K.QUARANTINE_NEEDS_OPERATOR)
    gov = device(run)
    assert DeviceGov.from_json(gov.to_json()).to_json() == gov.to_json()
    assert gov.to_json()["quarantine"]["needsOperator"] is True


@given(st.lists(st.floats(min_value=1, max_value=4 * AGE), min_size=1, max_size=6))
def test_any_watermark_split_gives_the_same_single_decision(steps: list[float]) -> None:
    """Event time alone decides: however the watermarks advance, one decision dated at the age."""
    run = GovernanceRun(policy=POLICY)
    run.feed(transition(N1, G0, U, 1, 0))
    found = []
    for t in [*sorted(steps), 4 * AGE + 1]:
        found += [d for d in run.feed(watermark(t)) if d.kind is K.QUARANTINE_NEEDS_OPERATOR]
    assert len(found) == 1
    q = device(run).quarantine
    assert q is not None and found[0].at == q.operator_due_at
    assert isinstance(run.state, GovernorState)
