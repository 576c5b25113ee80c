"""Retiring an adoption pool (``adoption-retire``, ``DELETE /v1/adoption/{pool}``): the wire form
of the command, the governor's decision of it through :func:`machine.step` (the pool leaves the
gate, its firing alert is resolved, its gauge count goes), the rules (unknown pool, a pool still
on DRA without ``force``), a declaration of the name later starting a new pool, the fold of the
projection's decisions, and a replay of the log giving the same decisions and state."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
import pytest

from services.domain.codec import EventDecodeError
from services.domain.governance.adoption import (
    AdoptionRetirement,
    Declared,
    Phase,
    PoolSelector,
    Retired,
    declaration_from_dict,
    fold,
)
from services.domain.governance.decisions import AlertAction, Decision, DecisionKind
from services.domain.governance.input_codec import decode_input, decode_keyed, encode_input
from services.domain.governance.inputs import (
    CommandAction,
    GovernanceInput,
    MergeKey,
    OperatorCommand,
    Role,
)
from services.domain.governance.intake import take
from services.domain.governance.machine import step
from services.domain.governance.policy import GovernancePolicy
from services.domain.governance.state import GovernorState
from services.processes.alerts.mapping import ActiveAlerts
from services.processes.enforcement.admission_desired import KINDS, Kind, desired_policies, plan
from tests.adoption.test_verdicts import DRIVER, VERDICT, canary, declare, node_facts, verdicts
from tests.governance.harness import GovernanceRun
from tests.governance.strategies import at, watermark

RETIRED = DecisionKind.ADOPTION_RETIRED


def retire(
    n: int, pool: str = "east", force: bool = False, role: Role = Role.OPERATOR, reason: str = "x"
) -> OperatorCommand:
    return OperatorCommand(
        command_id=f"r{n}",
        action=CommandAction.ADOPTION_RETIRE,
        actor="olga",
        role=role,
        requested_at=at(n),
        reason=reason,
        retire=AdoptionRetirement(pool, force),
    )


def typo(n: int, phase: Phase = Phase.ROLLED_BACK) -> OperatorCommand:
    """A declaration of pool ``esat``, whose slice pool no driver publishes: pool-empty."""
    c = declare(n, phase, pool="esat")
    assert c.adoption is not None
    selector = PoolSelector(driver=DRIVER, pool="esat")
    return replace(c, adoption=replace(c.adoption, selector=selector))


def rejections(decisions: list[Decision]) -> list[str]:
    return [str(d.details["reason"]) for d in decisions if d.kind is DecisionKind.COMMAND_REJECTED]


def entries(decisions: list[Decision]) -> list[Declared | Retired]:
    """What ``AdoptionReads.declarations`` reads back from the projection's decisions."""
    out: list[Declared | Retired] = []
    for d in decisions:
        details = d.details
        if d.kind is DecisionKind.ADOPTION_DECLARED:
            out.append(
                Declared(
                    d.seq,
                    d.at,
                    details["actor"],
                    details["reason"],
                    declaration_from_dict(details["adoption"]),
                )
            )
        elif d.kind is RETIRED:
            out.append(Retired(d.seq, d.at, details["actor"], details["reason"], details["pool"]))
    return out


def test_the_retirement_round_trips_on_the_governance_topic() -> None:
    c = retire(1, force=True)
    assert decode_input(encode_input(c)) == c
    assert orjson.loads(encode_input(c))["retire"] == {"pool": "east", "force": True}
    assert "retire" not in orjson.loads(encode_input(declare(1)))  # a declaration's bytes as before
    body = orjson.loads(encode_input(c))
    body["retire"] = {"pool": "east", "force": "yes"}
    with pytest.raises(EventDecodeError, match="force"):
        decode_input(orjson.dumps(body))


def test_a_held_pool_retired_resolves_its_alert_and_leaves_the_gate() -> None:
    run = GovernanceRun()
    run.feed(watermark(10))
    run.feed(typo(11))  # a typo: no slice of it, pool-empty
    run.feed(declare(12))  # the real pool, clear
    run.feed(node_facts("node-a", 12))
    assert run.state.fleet.adoption.verdicts == {"east": "expand", "esat": "hold"}

    decided = run.feed(retire(13, "esat"))
    assert [d.kind for d in decided] == [DecisionKind.COMMAND_ACCEPTED, RETIRED]
    gone = decided[1]
    assert (gone.incident, gone.alert, gone.at) == (
        "adoption-hold/esat",
        AlertAction.RESOLVED,
        at(13),
    )
    assert gone.details["pool"] == "esat" and gone.details["previous"] == "hold"
    assert gone.details["phase"] == "rolled-back" and gone.details["retire"]["force"] is False
    ad = run.state.fleet.adoption
    assert set(ad.pools) == set(ad.verdicts) == {"east"}
    # Its alert, fired by the declaration, is resolved with the labels it fired with.
    active = ActiveAlerts()
    for d in run.decisions:
        active.apply(d)
    assert [a["labels"]["incident"] for a in active.firing()] == []
    # Nothing more is decided for it, and the other pool goes on.
    later = run.feed(node_facts("node-a", 20, divergent=True))
    assert verdicts(later) == [("adoption-hold/east", AlertAction.FIRING, "hold")]
    assert [d.details["pool"] for d in run.decisions[-1:] if d.kind is VERDICT] == ["east"]
    assert "esat" not in orjson.dumps(ad.to_json()).decode()


def test_the_gauge_no_longer_counts_a_retired_pool() -> None:
    from streams.governor_metrics import GovernorGauges
    from streams.metrics import WorkerMetrics

    metrics = WorkerMetrics()
    gauges = GovernorGauges(metrics)
    run = canary(node_facts("node-b", 20, divergent=True))

    def held() -> float | None:
        return metrics.registry.get_sample_value(
            "devicestate_governor_adoption_pools", {"verdict": "hold", "waiting": "false"}
        )

    gauges.update(run.state, every=True)
    assert held() == 1
    run.feed(declare(30, Phase.ROLLED_BACK))
    run.feed(retire(31))
    gauges.update(run.state)
    assert held() == 0


def test_retiring_is_refused_for_an_unknown_pool_a_pool_on_dra_without_force_and_a_viewer() -> None:
    run = canary()
    for c in (
        retire(20, "west"),
        retire(21),
        retire(22, role=Role.VIEWER),
        retire(23, reason=""),
    ):
        run.feed(c)
    assert rejections(run.decisions) == [
        "pool 'west' is not declared (GET /v1/adoption lists the pools)",
        "pool east is in canary: its devices are still on DRA; declare it rolled-back or "
        "plugin first, or retire it with force",
        "role viewer may not adoption-retire; operator needed",
        "a reason is required",
    ]
    assert "east" in run.state.fleet.adoption.pools
    decided = run.feed(retire(24, force=True))
    assert [d.kind for d in decided] == [DecisionKind.COMMAND_ACCEPTED, RETIRED]
    assert decided[1].incident is None  # it was on expand: no alert to resolve
    assert run.state.fleet.adoption.pools == {}
    assert rejections(run.feed(retire(25, force=True))) == [
        "pool 'east' is not declared (GET /v1/adoption lists the pools)"
    ]


def test_declaring_the_name_again_starts_a_new_pool() -> None:
    run = canary()
    run.feed(declare(20, Phase.DRA))
    run.feed(retire(21, force=True))
    decided = run.feed(declare(22, Phase.PLUGIN))
    [first] = [d for d in decided if d.kind is VERDICT]
    assert first.details["previous"] is None  # a new pool: its first verdict
    [state] = fold(entries(run.decisions)).values()
    assert [e.declaration.phase for e in state.history] == [Phase.PLUGIN]
    assert state.since == at(22)
    # Retired and not declared again: gone from the fold (GET /v1/adoption, adoption enforce).
    assert fold(entries(run.decisions[: -len(decided)])) == {}


def test_the_next_enforce_pass_removes_a_retired_pools_policy() -> None:
    run = canary()
    run.feed(declare(20, Phase.ROLLED_BACK))
    before = fold(entries(run.decisions))
    [wanted], _ = desired_policies(before)
    present: dict[Kind, list[dict[str, Any]]] = {}
    for kind in KINDS:
        obj = wanted.manifest(kind)
        obj["metadata"]["uid"] = f"uid-{kind}"
        present[kind] = [obj]
    assert plan([wanted], present).writes == []
    run.feed(retire(21))  # rolled-back: no force needed
    after, _ = desired_policies(fold(entries(run.decisions)))
    assert after == []
    writes = plan(after, present).writes
    assert [(w.op, w.kind, w.name) for w in writes] == [
        ("delete", "binding", wanted.name),
        ("delete", "policy", wanted.name),
    ]


def _replay(records: list[tuple[GovernanceInput, MergeKey | None]], restart_every: int) -> bytes:
    """Feed ``records`` (over the wire) through the governor's intake, restoring it from its
    snapshot's JSON after every ``restart_every`` records (0: never): the decisions and the
    adoption state, as JSON bytes."""
    state, policy = GovernorState(), GovernancePolicy()
    decided: list[Decision] = []
    for i, (record, key) in enumerate(records):
        if key is None:
            record = decode_input(encode_input(record))
        else:
            record, key = decode_keyed(encode_input(record, key))
        for folded in take(state, record, key, policy, step):
            decided.extend(folded.decisions)
        if restart_every and i % restart_every == 0:
            snap = orjson.loads(orjson.dumps(state.snapshot()))
            state = GovernorState.restore(
                snap["devices"], snap["nodes"], snap["fleet"], policy.heartbeat_grace_seconds
            )
    rows = [(d.decision_id, d.kind.value, d.at, d.incident, d.alert, d.details) for d in decided]
    return orjson.dumps([rows, state.fleet.adoption.to_json()], default=str)


def test_a_replay_of_the_log_gives_the_same_decisions_and_state() -> None:
    def keyed(record: GovernanceInput, t: float, offset: int) -> tuple[GovernanceInput, MergeKey]:
        return record, MergeKey(at(t), 0, offset, 0)

    log: list[tuple[GovernanceInput, MergeKey | None]] = [
        (typo(1), None),
        (declare(2), None),
        keyed(node_facts("node-a", 10), 10, 1),
        (retire(11, "esat"), None),
        keyed(node_facts("node-a", 20, divergent=True), 20, 2),
        (declare(21, Phase.ROLLED_BACK), None),
        (retire(22), None),
        (typo(23, Phase.PLUGIN), None),
        keyed(node_facts("node-a", 30), 30, 3),
    ]
    outcomes = {_replay(log, every) for every in (0, 1, 2, 3)}
    assert len(outcomes) == 1
    [outcome] = outcomes
    rows, adoption = orjson.loads(outcome)
    kinds = [kind for _, kind, *_ in rows]
    assert kinds.count(RETIRED.value) == 2
    assert sorted(p["declaration"]["pool"] for p in adoption["pools"]) == ["esat"]
