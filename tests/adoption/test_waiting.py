"""A pool declared in ``plugin`` before the DRA driver publishes its ResourceSlices (issue 16):
the governor records ``hold`` (``pool-empty``, waiting for the driver's slices) without an
alert, and alerts as usual once the wait turns into a finding or the pool leaves ``plugin``;
the worker's gauge tells the wait apart (``waiting="true"``, which DevicestateAdoptionHold
leaves out); a snapshot keeps it, so a restored governor decides alike."""

from __future__ import annotations

import orjson

from services.domain.events import Health
from services.domain.governance.adoption import Phase
from services.domain.governance.decisions import AlertAction, DecisionKind
from services.domain.governance.inputs_adoption import NodeAdoptionFacts
from services.domain.governance.state import GovernorState
from tests.adoption.test_retire import retire
from tests.adoption.test_verdicts import VERDICT, declare, node_facts, verdicts
from tests.governance.harness import GovernanceRun
from tests.governance.strategies import at, transition, watermark


def planned() -> GovernanceRun:
    """A pool ``east`` declared ``plugin`` at event time 10, before any slice of its driver."""
    run = GovernanceRun()
    run.feed(watermark(10))
    run.feed(declare(11, Phase.PLUGIN))
    return run


def test_a_planned_pool_holds_without_an_alert_until_its_slices_appear() -> None:
    run = planned()
    [d] = [d for d in run.decisions if d.kind is VERDICT]
    assert (d.incident, d.alert, d.details["verdict"], d.details["waiting"]) == (
        None,
        None,
        "hold",
        True,
    )
    [empty] = d.details["reasons"]
    assert empty["code"] == "pool-empty"
    assert empty["detail"].startswith("waiting for the DRA driver's ResourceSlices")
    decided = run.feed(node_facts("node-a", 20))  # the driver publishes: all clear
    assert verdicts(decided) == [(None, None, "expand")]
    assert "waiting" not in next(d for d in decided if d.kind is VERDICT).details
    assert run.state.fleet.adoption.waiting == set()


def test_the_wait_alerts_once_it_is_a_finding_or_the_pool_leaves_plugin() -> None:
    run = planned()
    run.feed(transition("node-a", "GPU-0", Health.HEALTHY, 1, 12))
    # Slices appear on a node with a quarantined device: a real hold, which alerts.
    run.feed(transition("node-a", "GPU-0", Health.UNHEALTHY, 2, 15))
    decided = run.feed(node_facts("node-a", 20))
    assert verdicts(decided) == [("adoption-hold/east", AlertAction.FIRING, "hold")]
    # The slices go again: back to the wait, the alert resolved.
    decided = run.feed(NodeAdoptionFacts("node-a", at(30)))
    assert verdicts(decided) == [("adoption-hold/east", AlertAction.RESOLVED, "hold")]
    # Declared canary with no slice yet: an empty canary is a finding.
    decided = run.feed(declare(40))
    assert verdicts(decided) == [("adoption-hold/east", AlertAction.FIRING, "hold")]
    decided = run.feed(declare(41, Phase.PLUGIN))
    assert verdicts(decided) == [("adoption-hold/east", AlertAction.RESOLVED, "hold")]


def test_a_waiting_pool_retired_resolves_nothing() -> None:
    run = planned()
    decided = run.feed(retire(20))
    [gone] = [d for d in decided if d.kind is DecisionKind.ADOPTION_RETIRED]
    assert (gone.incident, gone.alert, gone.details["previous"]) == (None, None, "hold")
    assert run.state.fleet.adoption.waiting == set()


def test_the_gauge_tells_the_wait_apart() -> None:
    from streams.governor_metrics import GovernorGauges
    from streams.metrics import WorkerMetrics

    metrics = WorkerMetrics()
    gauges = GovernorGauges(metrics)
    run = planned()

    def pools(verdict: str, waiting: str) -> float | None:
        return metrics.registry.get_sample_value(
            "devicestate_governor_adoption_pools", {"verdict": verdict, "waiting": waiting}
        )

    gauges.update(run.state, every=True)
    assert (pools("hold", "true"), pools("hold", "false")) == (1, 0)
    run.feed(declare(20))  # canary, still no slice: the alerting hold
    gauges.update(run.state)
    assert (pools("hold", "true"), pools("hold", "false")) == (0, 1)


def test_a_restored_governor_keeps_the_wait() -> None:
    run = planned()
    snapshot = orjson.loads(orjson.dumps(run.state.snapshot()))
    assert snapshot["fleet"]["adoption"]["waiting"] == ["east"]
    restored = GovernorState.restore(
        snapshot["devices"], snapshot["nodes"], snapshot["fleet"], grace_seconds=120.0
    )
    again = GovernanceRun(state=restored, records=list(run.records))
    tail = [node_facts("node-a", 20, divergent=True), node_facts("node-a", 30)]
    for record in tail:
        run.feed(record)
        again.feed(record)
    assert (
        verdicts(again.decisions)
        == verdicts(run.decisions[-2:])
        == [
            ("adoption-hold/east", AlertAction.FIRING, "hold"),
            ("adoption-hold/east", AlertAction.RESOLVED, "expand"),
        ]
    )
    assert run.state.snapshot() == again.state.snapshot()
