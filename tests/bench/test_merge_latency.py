"""``bench.merge_latency`` without a stack: matching the forwarded records and the decisions to the
observations, and the figures (p50/p95/max, the ratio to the forwarding baseline)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from bench.merge_latency import Seen, latencies, ratios, summary
from services.domain.events import DeviceSource, Health
from services.domain.governance.decisions import Decision, DecisionKind
from services.domain.governance.inputs import HealthTransition, MergeKey

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def transition(node: str, at: datetime, offset: int) -> HealthTransition:
    return HealthTransition(
        node=node,
        resource_id=f"GPU-{offset}",
        resource_name="nvidia.com/gpu",
        source=DeviceSource.DEVICE_PLUGIN,
        health=Health.UNHEALTHY,
        status_version=offset,
        observed_at=at,
        partition=0,
        offset=offset,
    )


def test_latencies_match_decisions_on_the_merge_keys_time() -> None:
    seen = Seen()
    early, late, warmup = T0 + timedelta(seconds=10), T0 + timedelta(seconds=11), T0
    for i, at in enumerate((warmup, early, late)):
        seen.published[("n1", at)] = at.timestamp()
        seen.forwarded.append((at.timestamp() + 0.5, transition("n1", at, i), None))
    # The log was ahead of `late`: its merge key (and its decision) carry the later time.
    bumped = late + timedelta(seconds=0.25)
    seen.forwarded[2] = (
        late.timestamp() + 0.5,
        transition("n1", late, 2),
        MergeKey(bumped, 0, 2, 0),
    )
    seen.decisions += [
        (early.timestamp() + 2.0, Decision(DecisionKind.STATE_CHANGED, 1, 0, early, node="n1")),
        (early.timestamp() + 2.5, Decision(DecisionKind.QUARANTINED, 1, 1, early, node="n1")),
        (late.timestamp() + 4.0, Decision(DecisionKind.STATE_CHANGED, 2, 0, bumped, node="n1")),
        (late.timestamp() + 9.0, Decision(DecisionKind.STATE_CHANGED, 3, 0, late, node="n2")),
        (warmup.timestamp() + 1.0, Decision(DecisionKind.STATE_CHANGED, 0, 0, warmup, node="n1")),
    ]
    forwarding, decision, kinds = latencies(seen, since=early.timestamp())
    assert forwarding == [0.5, 0.5]
    assert decision == [2.0, 4.0]  # the first decision of each; warm-up and other nodes left out
    assert kinds == {"DeviceGovernanceChanged": 2}


def test_summary_and_ratio_to_the_baseline() -> None:
    fwd, dec = summary([0.2, 0.3, 0.4, 0.5]), summary([1.0, 2.0, 3.0, 4.0])
    assert fwd == {"count": 4, "p50": 0.3, "p95": 0.5, "max": 0.5}
    assert ratios(dec, fwd) == {"p50": 6.7, "p95": 8.0, "max": 8.0}
    assert summary([])["p50"] is None and ratios(summary([]), fwd)["p50"] is None
