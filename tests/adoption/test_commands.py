"""Adoption declarations as governance commands: the wire form on the governance topic and the
governor's decision of them (through :func:`machine.step`), folded back into pools."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import orjson
import pytest

from services.domain.codec import EventDecodeError
from services.domain.governance.adoption import (
    AdoptionDeclaration,
    Declared,
    Phase,
    PoolSelector,
    declaration_from_dict,
    fold,
)
from services.domain.governance.decisions import DecisionKind, decision_to_dict
from services.domain.governance.input_codec import decode_input, encode_input
from services.domain.governance.inputs import CommandAction, OperatorCommand, Role
from services.domain.governance.machine import step
from services.domain.governance.policy import GovernancePolicy
from services.domain.governance.state import GovernorState

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
CANARY = AdoptionDeclaration(
    "a100-east",
    PoolSelector(driver="gpu.example.com", pool="east"),
    Phase.CANARY,
    "gpu.example.com",
)


def command(
    n: int,
    declaration: AdoptionDeclaration | None = CANARY,
    role: Role = Role.OPERATOR,
    reason: str = "start the canary",
) -> OperatorCommand:
    return OperatorCommand(
        command_id=f"c{n}",
        action=CommandAction.ADOPTION_SET,
        actor="olga",
        role=role,
        requested_at=T0 + timedelta(minutes=n),
        reason=reason,
        adoption=declaration,
    )


def test_the_declaration_round_trips_on_the_governance_topic() -> None:
    c = command(1)
    assert decode_input(encode_input(c)) == c
    body = orjson.loads(encode_input(c))
    assert body["adoption"] == {
        "pool": "a100-east",
        "selector": {"driver": "gpu.example.com", "pool": "east"},
        "phase": "canary",
        "deviceClass": "gpu.example.com",
    }
    named = command(2, AdoptionDeclaration("p", PoolSelector(nodes=("n2", "n1")), Phase.DRA))
    assert decode_input(encode_input(named)) == named
    # A command of before issue 16 has no adoption key, and reads as before.
    old = command(3, None)
    assert "adoption" not in orjson.loads(encode_input(old))


@pytest.mark.parametrize(
    ("adoption", "message"),
    [
        (
            {"pool": "x", "selector": {}, "phase": "canary"},
            r"either a driver \(and pool\) or nodes",
        ),
        (
            {"pool": "x", "selector": {"driver": "d", "nodes": ["n"]}, "phase": "dra"},
            "either a driver",
        ),
        (
            {"pool": "x", "selector": {"pool": "east", "nodes": ["n"]}, "phase": "dra"},
            "needs its driver",
        ),
        ({"pool": "Not_A_Label", "selector": {"driver": "d"}, "phase": "dra"}, "DNS label"),
        (
            {"pool": "x", "selector": {"driver": "d"}, "phase": "half"},
            "field 'phase' has unknown value",
        ),
        ({"pool": "x", "selector": {"nodes": "n1"}, "phase": "dra"}, "list of node names"),
        ("canary", "must be an object"),
    ],
)
def test_a_bad_declaration_is_refused_with_the_reason(adoption: object, message: str) -> None:
    with pytest.raises(EventDecodeError, match=message):
        declaration_from_dict(adoption)
    record = orjson.loads(encode_input(command(1)))
    record["adoption"] = adoption
    with pytest.raises(EventDecodeError, match=message):
        decode_input(orjson.dumps(record))


def run(*commands: OperatorCommand) -> list[object]:
    state, policy = GovernorState(), GovernancePolicy()
    decisions = []
    for seq, c in enumerate(commands):
        decisions += step(state, c, seq, policy)
    return decisions


def declared(decisions: list[object]) -> list[Declared]:
    """What ``GET /v1/adoption`` reads back from the projection's decisions."""
    out = []
    for d in decisions:
        body = decision_to_dict(d)  # type: ignore[arg-type]
        if body["type"] != DecisionKind.ADOPTION_DECLARED.value:
            continue
        details = body["details"]
        out.append(
            Declared(
                body["seq"],
                d.at,
                details["actor"],
                details["reason"],
                declaration_from_dict(details["adoption"]),
            )  # type: ignore[attr-defined]
        )
    return out


def test_the_governor_records_an_accepted_declaration_with_its_actor() -> None:
    decisions = run(command(1))
    assert (
        [d.kind for d in decisions]
        == [
            DecisionKind.COMMAND_ACCEPTED,
            DecisionKind.ADOPTION_DECLARED,
            DecisionKind.ADOPTION_VERDICT_CHANGED,  # the gate's first verdict (tests/adoption/test_verdicts.py)
        ]
    )
    accepted, recorded, verdict = decisions
    assert (verdict.details["verdict"], verdict.details["reasons"][0]["code"]) == (
        "hold",
        "pool-empty",
    )
    assert accepted.details["action"] == "adoption-set"
    assert (accepted.details["pool"], accepted.details["phase"]) == ("a100-east", "canary")
    assert recorded.details["actor"] == "olga"
    assert recorded.details["commandID"] == "c1"
    assert recorded.summary == "pool a100-east declared canary by olga"
    [entry] = declared(decisions)
    assert entry.declaration == CANARY


def test_the_governor_rejects_a_viewer_a_missing_declaration_and_no_reason() -> None:
    decisions = run(command(1, role=Role.VIEWER), command(2, None), command(3, reason=""))
    assert [d.kind for d in decisions] == [DecisionKind.COMMAND_REJECTED] * 3
    assert [d.details["reason"] for d in decisions] == [
        "role viewer may not adoption-set; operator needed",
        "adoption-set needs a pool declaration",
        "a reason is required",
    ]


def test_a_repeated_command_is_decided_once_and_the_history_folds_into_the_phase() -> None:
    dra = AdoptionDeclaration(CANARY.pool, CANARY.selector, Phase.DRA)
    back = AdoptionDeclaration(CANARY.pool, CANARY.selector, Phase.ROLLED_BACK)
    decisions = run(command(1), command(1), command(2, dra), command(3, back), command(4, back))
    pools = fold(declared(decisions))
    state = pools["a100-east"]
    assert [e.declaration.phase for e in state.history] == [
        Phase.CANARY,
        Phase.DRA,
        Phase.ROLLED_BACK,
        Phase.ROLLED_BACK,
    ]
    assert state.phase is Phase.ROLLED_BACK
    assert state.since == T0 + timedelta(minutes=3)  # the repeat keeps the phase's start
