"""The adoption gate in the governor (issue 16, item 2 on event time): golden cases through
:func:`machine.step` (tests/governance/harness.py), one per input, the alerts a verdict change
raises and resolves, the wire form of the facts record, a snapshot that continues alike, and the
order-independence of the verdicts."""

from __future__ import annotations

import random

import orjson
import pytest
from pydantic import ValidationError

from services.domain.codec import EventDecodeError
from services.domain.events import Health
from services.domain.governance.adoption import AdoptionDeclaration, Phase, PoolSelector
from services.domain.governance.adoption_facts import ClaimFact, DivergenceFact
from services.domain.governance.adoption_gate import evaluate
from services.domain.governance.adoption_verdicts import facts_of
from services.domain.governance.context import Ctx
from services.domain.governance.decisions import AlertAction, Decision, DecisionKind, Severity
from services.domain.governance.input_codec import decode_input, encode_input
from services.domain.governance.inputs import (
    CommandAction,
    GovernanceInput,
    InventoryConflict,
    MergeKey,
    OperatorCommand,
    Role,
)
from services.domain.governance.inputs_adoption import NodeAdoptionFacts
from services.domain.governance.inputs_failures import NodeFailureObserved
from services.domain.governance.machine import step
from services.domain.governance.policy import GovernancePolicy, thresholds_from_settings
from services.domain.governance.state import GovernorState
from services.domain.node_events import WatcherTick
from services.processes.alerts.mapping import ActiveAlerts
from services.runtime.config import AdoptionSettings
from tests.adoption.replays import verdict_rows_of_every_seed
from tests.governance.harness import GovernanceRun
from tests.governance.strategies import at, transition, watermark
from tests.governance.test_event_order import Log

DRIVER = "gpu.example.com"
EAST = PoolSelector(driver=DRIVER, pool="east")
VERDICT = DecisionKind.ADOPTION_VERDICT_CHANGED


def declare(n: int, phase: Phase = Phase.CANARY, pool: str = "east") -> OperatorCommand:
    return OperatorCommand(
        command_id=f"c{n}",
        action=CommandAction.ADOPTION_SET,
        actor="olga",
        role=Role.OPERATOR,
        requested_at=at(n),
        reason=f"declare {phase.value}",
        adoption=AdoptionDeclaration(pool, EAST, phase, DRIVER),
    )


def node_facts(
    node: str,
    t: float,
    *,
    claims: tuple[ClaimFact, ...] = (),
    divergent: bool = False,
) -> NodeAdoptionFacts:
    return NodeAdoptionFacts(
        node=node,
        observed_at=at(t),
        slices=((DRIVER, "east"),),
        divergences=(DivergenceFact(node, "nvidia.com/gpu", 8, 4),) if divergent else (),
        claims=claims,
    )


def claim(node: str, name: str, allocated: float, reserved: bool = False) -> ClaimFact:
    return ClaimFact("team-a", name, node, ((DRIVER, "east"),), at(allocated), reserved)


def conflict(node: str, t: float, active: bool = True) -> InventoryConflict:
    return InventoryConflict(
        "plugin-and-dra", node, "nvidia.com/gpu", "offered by both paths", active, at(t)
    )


def verdicts(decisions: list[Decision]) -> list[tuple[str | None, AlertAction | None, str]]:
    """``(incident, alert, verdict)`` of each verdict decision."""
    return [(d.incident, d.alert, d.details["verdict"]) for d in decisions if d.kind is VERDICT]


def canary(*extra: GovernanceInput) -> GovernanceRun:
    """A canary pool over node-a and node-b, all clear, at event time 10."""
    run = GovernanceRun()
    for record in (watermark(10), node_facts("node-a", 5), node_facts("node-b", 5), declare(11)):
        run.feed(record)
    for record in extra:
        run.feed(record)
    return run


def test_a_clear_canary_records_expand_once_without_an_alert() -> None:
    run = canary()
    assert verdicts(run.decisions) == [(None, None, "expand")]
    [d] = [d for d in run.decisions if d.kind is VERDICT]
    assert d.details["pool"] == "east" and d.details["nodes"] == 2
    assert d.details["previous"] is None and d.details["deviceClass"] == DRIVER
    assert {r["code"] for r in d.details["reasons"]} == {
        "ownership-conflict",
        "slice-capacity-divergence",
        "devices-quarantined",
        "leaked-claims",
        "claim-failures",
        "ready-latency",
        "tenant-boundary",
    }
    run.feed(node_facts("node-a", 20))  # the same facts again: no change, no decision
    run.feed(watermark(30))
    assert len(verdicts(run.decisions)) == 1


def keyed(
    run: GovernanceRun, record: GovernanceInput, t: float, clamped: bool = False
) -> list[Decision]:
    """Feed ``record`` as the event-time merge releases it: with a merge key at ``t``."""
    key = MergeKey(at(t), 0, len(run.records), 0, clamped)
    decided = step(run.state, record, len(run.records), run.policy, key)
    run.records.append(record)
    run.decisions.extend(decided)
    return decided


def test_a_record_whose_observed_at_ran_ahead_takes_its_clamped_time() -> None:
    # The watcher's clock jumps a year ahead for one record: the merge clamps its key to 40 and
    # the divergence it reports holds the pool; at 50 the divergence clears with the clock right
    # again. Dated a year ahead, the held facts would hide that clearing for a year.
    year = 365 * 86400
    run = canary()
    decided = keyed(run, node_facts("node-a", year, divergent=True), 40, clamped=True)
    assert verdicts(decided) == [("adoption-hold/east", AlertAction.FIRING, "hold")]
    decided = keyed(run, node_facts("node-a", 50), 50)
    assert verdicts(decided) == [("adoption-hold/east", AlertAction.RESOLVED, "expand")]
    # A failure so dated leaves its window as one at 60 does, not a year later.
    failure = NodeFailureObserved("node-a", at(year), "e1", 5, 5, "retryable", "FailedPrepare")
    decided = keyed(run, failure, 60, clamped=True)
    assert verdicts(decided) == [("adoption-hold/east", AlertAction.FIRING, "hold")]
    window = run.policy.adoption.failure_window_seconds
    decided = keyed(run, WatcherTick(partition=0, observed_at=at(61 + window)), 61 + window)
    assert verdicts(decided) == [("adoption-hold/east", AlertAction.RESOLVED, "expand")]


def test_a_record_whose_observed_at_went_back_takes_its_event_time() -> None:
    # The watcher's clock jumps a year back for the record that clears the divergence: its
    # event time is its partition's (50); dated a year back, it would be ignored as older.
    run = canary()
    decided = keyed(run, node_facts("node-a", 40, divergent=True), 40)
    assert verdicts(decided) == [("adoption-hold/east", AlertAction.FIRING, "hold")]
    decided = keyed(run, node_facts("node-a", -365 * 86400), 50)
    assert verdicts(decided) == [("adoption-hold/east", AlertAction.RESOLVED, "expand")]


def test_an_ownership_conflict_rolls_back_and_its_clearing_expands_again() -> None:
    run = canary(watermark(20))
    decided = run.feed(conflict("node-a", 20))
    [d] = [d for d in decided if d.kind is VERDICT]
    assert (d.incident, d.alert, d.severity) == (
        "adoption-rollback/east",
        AlertAction.FIRING,
        Severity.CRITICAL,
    )
    [reason] = [r for r in d.details["reasons"] if r["code"] == "ownership-conflict"]
    assert reason["verdict"] == "rollback" and reason["figures"]["conflicts"] == 1
    assert d.at == at(20)  # event time: the governor's watermark
    run.feed(conflict("node-a", 30, active=False))
    assert verdicts(run.decisions)[-1] == ("adoption-rollback/east", AlertAction.RESOLVED, "expand")


def test_divergence_holds_and_a_conflict_then_turns_the_hold_into_a_rollback() -> None:
    run = canary(node_facts("node-b", 20, divergent=True))
    assert verdicts(run.decisions)[-1] == ("adoption-hold/east", AlertAction.FIRING, "hold")
    decided = run.feed(conflict("node-b", 30))
    assert verdicts(decided) == [
        ("adoption-rollback/east", AlertAction.FIRING, "rollback"),
        ("adoption-hold/east", AlertAction.RESOLVED, "rollback"),
    ]


def test_a_leaked_claim_holds_once_event_time_passes_its_threshold() -> None:
    policy_seconds = GovernancePolicy().adoption.leaked_claim_seconds
    run = canary(node_facts("node-a", 20, claims=(claim("node-a", "idle", 15),)))
    assert verdicts(run.decisions) == [(None, None, "expand")]
    run.feed(watermark(15 + policy_seconds))  # exactly the threshold: not yet leaked
    assert len(verdicts(run.decisions)) == 1
    decided = run.feed(watermark(16 + policy_seconds))
    [d] = [d for d in decided if d.kind is VERDICT]
    assert (d.incident, d.alert, d.at) == (
        "adoption-hold/east",
        AlertAction.FIRING,
        at(16 + policy_seconds),
    )
    [reason] = [r for r in d.details["reasons"] if r["code"] == "leaked-claims"]
    assert reason["figures"]["leaked"] == 1 and reason["figures"]["oldestSeconds"] == 901.0


@pytest.mark.parametrize("seconds", ["inf", "1e12"])
def test_a_leak_threshold_the_governor_cannot_time_is_refused_at_start(
    monkeypatch: pytest.MonkeyPatch, seconds: str
) -> None:
    # Accepted, it made the governor's leak timer (allocation + threshold) overflow on a pool's
    # first unreserved claim: the worker's governor failed on that record on every restart.
    monkeypatch.setenv("DEVICESTATE_ADOPTION_LEAKED_CLAIM_SECONDS", seconds)
    with pytest.raises(ValidationError, match="adoption_leaked_claim_seconds"):
        AdoptionSettings()
    monkeypatch.setenv("DEVICESTATE_ADOPTION_LEAKED_CLAIM_SECONDS", str(366 * 86400))
    run = canary()
    run.policy = GovernancePolicy(adoption=thresholds_from_settings(AdoptionSettings()))
    decided = run.feed(node_facts("node-a", 20, claims=(claim("node-a", "idle", 15),)))
    assert run.state.fleet.adoption.next_due == at(15 + 366 * 86400)
    assert verdicts(decided) == []


def test_a_reserved_claim_never_leaks() -> None:
    run = canary(node_facts("node-a", 20, claims=(claim("node-a", "busy", 15, reserved=True),)))
    run.feed(watermark(5000))
    assert verdicts(run.decisions) == [(None, None, "expand")]


def test_quarantined_devices_hold_then_roll_back_at_the_fraction() -> None:
    devices = [transition("node-a", f"GPU-{i}", Health.HEALTHY, 1, 12) for i in range(5)]
    run = canary(*devices)
    run.feed(transition("node-a", "GPU-0", Health.UNHEALTHY, 2, 20))
    assert verdicts(run.decisions)[-1] == ("adoption-hold/east", AlertAction.FIRING, "hold")
    run.feed(transition("node-a", "GPU-1", Health.UNHEALTHY, 2, 21))
    assert verdicts(run.decisions)[-2:] == [
        ("adoption-rollback/east", AlertAction.FIRING, "rollback"),
        ("adoption-hold/east", AlertAction.RESOLVED, "rollback"),
    ]


def test_a_rolled_back_pool_holds_on_a_rollback_finding() -> None:
    run = canary(conflict("node-a", 20))
    run.feed(declare(30, Phase.ROLLED_BACK))
    assert verdicts(run.decisions)[-2:] == [
        ("adoption-hold/east", AlertAction.FIRING, "hold"),
        ("adoption-rollback/east", AlertAction.RESOLVED, "hold"),
    ]


def test_a_pool_without_event_time_holds_and_expands_when_time_arrives() -> None:
    run = GovernanceRun()
    run.feed(node_facts("node-a", 5))
    run.feed(declare(6))
    [d] = [d for d in run.decisions if d.kind is VERDICT]
    assert d.details["verdict"] == "hold"
    assert "no-event-time" in [r["code"] for r in d.details["reasons"]]
    assert d.at == at(6)  # no watermark yet: the declaration's time
    run.feed(watermark(10))
    assert verdicts(run.decisions)[-1] == ("adoption-hold/east", AlertAction.RESOLVED, "expand")


def test_older_facts_of_a_node_never_replace_newer_ones() -> None:
    run = canary(node_facts("node-b", 20, divergent=True))
    run.feed(node_facts("node-b", 15))  # an older reading (a redelivery): ignored
    assert verdicts(run.decisions)[-1][2] == "hold"
    assert run.state.fleet.adoption.node_facts["node-b"].observed_at == at(20)


def test_the_facts_record_round_trips_and_bad_facts_are_refused_with_the_reason() -> None:
    record = node_facts("node-a", 5, claims=(claim("node-a", "c1", 3),), divergent=True)
    assert decode_input(encode_input(record)) == record
    body = orjson.loads(encode_input(record))
    assert body["claims"][0]["devices"] == [{"driver": DRIVER, "pool": "east"}]
    body["claims"][0]["reserved"] = "yes"
    with pytest.raises(EventDecodeError, match="reserved"):
        decode_input(orjson.dumps(body))
    with pytest.raises(ValueError, match="another node"):
        NodeAdoptionFacts("node-a", at(1), claims=(claim("node-b", "c1", 0),))


def test_a_restored_governor_continues_with_the_same_verdicts() -> None:
    run = canary(node_facts("node-b", 20, divergent=True), conflict("node-a", 25))
    snapshot = run.state.snapshot()
    assert "adoption" in snapshot["fleet"]
    restored = GovernorState.restore(
        snapshot["devices"], snapshot["nodes"], snapshot["fleet"], grace_seconds=120.0
    )
    assert restored.snapshot() == snapshot
    tail = [conflict("node-a", 40, active=False), node_facts("node-b", 41)]
    again = GovernanceRun(state=restored, records=list(run.records))
    for record in tail:
        run.feed(record)
        again.feed(record)
    assert verdicts(run.decisions[-4:]) == verdicts(again.decisions)
    assert run.state.snapshot() == again.state.snapshot()


def test_a_snapshot_without_pools_is_the_same_as_before() -> None:
    run = GovernanceRun()
    run.feed(watermark(10))
    assert "adoption" not in run.state.snapshot()["fleet"]


def test_the_verdicts_do_not_depend_on_the_order_the_facts_come_in() -> None:
    facts = [
        node_facts("node-a", 20, claims=(claim("node-a", "idle", 15),)),
        node_facts("node-b", 21, divergent=True),
        node_facts("node-c", 22),
        conflict("node-c", 23),
        conflict("node-a", 24),
        conflict("node-a", 25, active=False),
        NodeFailureObserved("node-b", at(1500), "f1", 5, 5, "retryable", "r"),
        NodeFailureObserved("node-c", at(1400), "f2", 9, 9, "non-retryable", "r"),
    ]
    outcomes = set()
    for seed in range(12):
        shuffled = list(facts)
        random.Random(seed).shuffle(shuffled)
        # a conflict's clearing stays after its raising (one key, in event time)
        shuffled.sort(key=lambda r: isinstance(r, InventoryConflict) and not r.active)
        run = canary(*shuffled)
        run.feed(watermark(2000))
        ad = run.state.fleet.adoption
        [gate] = evaluate(
            ad.pool_states(),
            facts_of(Ctx(run.state, 0, run.policy), ad),
            run.policy.adoption,
            run.state.fleet.watermark,
        )
        assert gate.verdict.value == ad.verdicts["east"]  # what the last decision recorded
        reasons = [{"code": r.code, "verdict": r.verdict.value, **r.figures} for r in gate.reasons]
        outcomes.add((orjson.dumps(reasons), orjson.dumps(ad.to_json())))
    assert len(outcomes) == 1
    [(reasons, _)] = outcomes
    codes = {r["code"]: r["verdict"] for r in orjson.loads(reasons)}
    assert orjson.loads(reasons)[0]["conflicts"] == 1  # node-c's; node-a's was cleared
    assert codes == {
        "ownership-conflict": "rollback",
        "slice-capacity-divergence": "hold",
        "devices-quarantined": "expand",
        "leaked-claims": "hold",
        "claim-failures": "hold",
        "ready-latency": "expand",
        "tenant-boundary": "expand",
    }


def test_the_verdict_alerts_reach_alertmanager_named_and_resolved_with_the_same_labels() -> None:
    run = canary(node_facts("node-b", 20, divergent=True), conflict("node-b", 30))
    run.feed(conflict("node-b", 40, active=False))
    run.feed(node_facts("node-b", 41))
    active = ActiveAlerts()
    posted = [
        a
        for d in run.decisions
        for a in active.apply(d)
        if a["labels"]["alertname"].startswith("Adoption")  # not the conflicts' DataQuality
    ]
    assert [(a["labels"]["alertname"], "endsAt" in a) for a in posted] == [
        ("AdoptionHold", False),
        ("AdoptionRollback", False),
        ("AdoptionHold", True),
        ("AdoptionHold", False),  # the conflict cleared: the divergence still holds
        ("AdoptionRollback", True),
        ("AdoptionHold", True),  # the divergence is gone: expand
    ]
    assert posted[1]["labels"]["severity"] == "critical"
    assert posted[0]["labels"]["incident"] == "adoption-hold/east"
    assert not [a for a in active.firing() if a["labels"]["alertname"].startswith("Adoption")]


def test_any_batching_interleaving_redelivery_or_restart_records_the_same_verdicts() -> None:
    """Through the governor's intake and event-time merge (as tests/governance/test_event_order.py
    does): the facts of node-a in partition 0 and node-b in partition 1, forwarded with random
    batch sizes, interleavings, redeliveries and restarts, give the same decisions row for row."""
    leak = GovernancePolicy().adoption.leaked_claim_seconds
    logs: list[Log] = [
        [
            (node_facts("node-a", 20), at(20)),
            (WatcherTick(0, at(30)), at(30)),
            (conflict("node-a", 40), at(40)),
            (WatcherTick(0, at(50)), at(50)),
            (conflict("node-a", 60, active=False), at(60)),
            (WatcherTick(0, at(leak + 100)), at(leak + 100)),
            (WatcherTick(0, at(3000)), at(3000)),
        ],
        [
            (node_facts("node-b", 25, claims=(claim("node-b", "idle", 25),)), at(25)),
            (
                node_facts("node-b", 45, claims=(claim("node-b", "idle", 25),), divergent=True),
                at(45),
            ),
            (WatcherTick(1, at(55)), at(55)),
            (node_facts("node-b", 65, claims=(claim("node-b", "idle", 25),)), at(65)),
            (WatcherTick(1, at(leak + 200)), at(leak + 200)),
            (WatcherTick(1, at(3000)), at(3000)),
        ],
    ]
    runs = verdict_rows_of_every_seed(logs, declare(1))
    assert len(runs) == 1
    [(rows, _)] = runs
    assert [(incident, alert) for _, _, incident, alert, _ in rows] == [
        ("adoption-hold/east", AlertAction.FIRING),  # declared before any fact: pool-empty
        ("adoption-hold/east", AlertAction.RESOLVED),  # node-a's slices, event time: expand
        ("adoption-rollback/east", AlertAction.FIRING),  # node-a's conflict at 40
        ("adoption-hold/east", AlertAction.FIRING),  # cleared at 60; node-b still diverges (45)
        ("adoption-rollback/east", AlertAction.RESOLVED),
        ("adoption-hold/east", AlertAction.RESOLVED),  # node-b agrees again at 65
        ("adoption-hold/east", AlertAction.FIRING),  # node-b's idle claim leaked
    ]


def test_the_worker_gauges_count_pools_by_recorded_verdict() -> None:
    """``devicestate_governor_adoption_pools{verdict, waiting}`` (what DevicestateAdoptionHold and
    DevicestateAdoptionRollback read) follows the recorded verdicts."""
    from streams.governor_metrics import GovernorGauges
    from streams.metrics import WorkerMetrics

    metrics = WorkerMetrics()
    gauges = GovernorGauges(metrics)
    run = canary(node_facts("node-b", 20, divergent=True))

    def value(verdict: str) -> float | None:
        return metrics.registry.get_sample_value(
            "devicestate_governor_adoption_pools", {"verdict": verdict, "waiting": "false"}
        )

    gauges.update(run.state, every=True)
    assert (value("expand"), value("hold"), value("rollback")) == (0, 1, 0)
    run.feed(conflict("node-b", 30))
    gauges.update(run.state)
    assert (value("expand"), value("hold"), value("rollback")) == (0, 0, 1)
