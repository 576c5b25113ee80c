"""Properties of the pure governance core on generated governance topics (strategies.py):
replay and restart determinism, idempotency, out-of-order safety, the blast-radius limits and
the recovery lease."""

from __future__ import annotations

import os
from collections import defaultdict
from datetime import datetime

import orjson
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from services.domain.events import Health
from services.domain.governance.decisions import Decision, DecisionKind, encode_decision
from services.domain.governance.inputs import CommandAction, GovernanceInput, HealthTransition, Role
from services.domain.governance.machine import step
from services.domain.governance.policy import GovernancePolicy
from services.domain.governance.state import GovernorState
from tests.governance.strategies import Generated, command, governance_runs, transition

K = DecisionKind
PROPERTY_SETTINGS = settings(
    max_examples=int(os.environ.get("GOVERNANCE_PROPERTY_EXAMPLES", "100")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
"""100 examples each keep the module at about ten seconds; ``GOVERNANCE_PROPERTY_EXAMPLES=5000`` hunts
longer."""


def run(
    policy: GovernancePolicy,
    records: list[GovernanceInput],
    state: GovernorState | None = None,
    first_seq: int = 0,
) -> tuple[list[Decision], GovernorState]:
    state = GovernorState() if state is None else state
    decisions: list[Decision] = []
    for seq, record in enumerate(records, start=first_seq):
        decisions.extend(step(state, record, seq, policy))
    return decisions, state


def encoded(decisions: list[Decision]) -> list[bytes]:
    return [encode_decision(d) for d in decisions]


def snapshot_bytes(state: GovernorState) -> bytes:
    return orjson.dumps(state.snapshot(), option=orjson.OPT_SORT_KEYS)


def automatic_restriction(d: Decision) -> bool:
    return d.kind is K.RESTRICTED or (d.kind is K.QUARANTINED and d.details["actor"] == "system")


# --- determinism ---------------------------------------------------------------------------------


@PROPERTY_SETTINGS
@given(governance_runs())
def test_replay_gives_the_same_decisions_and_state(g: Generated) -> None:
    first, state1 = run(g.policy, g.records)
    second, state2 = run(g.policy, g.records)
    assert encoded(first) == encoded(second)
    assert snapshot_bytes(state1) == snapshot_bytes(state2)


@PROPERTY_SETTINGS
@given(governance_runs(), st.floats(min_value=0.0, max_value=1.0))
def test_a_restored_governor_continues_like_one_that_never_stopped(
    g: Generated, fraction: float
) -> None:
    cut = int(len(g.records) * fraction)
    whole, whole_state = run(g.policy, g.records)

    before, state = run(g.policy, g.records[:cut])
    snapshot = orjson.loads(orjson.dumps(state.snapshot()))
    restored = GovernorState.restore(
        snapshot["devices"], snapshot["nodes"], snapshot["fleet"], g.policy.heartbeat_grace_seconds
    )
    assert snapshot_bytes(restored) == snapshot_bytes(state)
    after, restored = run(g.policy, g.records[cut:], restored, first_seq=cut)

    assert encoded(before + after) == encoded(whole)
    assert snapshot_bytes(restored) == snapshot_bytes(whole_state)


# --- idempotency and order -------------------------------------------------------------------------


@st.composite
def with_duplicates(draw: st.DrawFn) -> tuple[Generated, list[GovernanceInput]]:
    """A run and the same run with exact duplicates of transitions inserted after the original
    (anywhere after it for a versioned transition; right after it for an unversioned one, whose
    duplicate is recognised only while the device's health has not changed since)."""
    g = draw(governance_runs())
    inserts: dict[int, list[GovernanceInput]] = defaultdict(list)
    for i, record in enumerate(g.records):
        if isinstance(record, HealthTransition) and draw(st.integers(0, 2)) == 0:
            last = i if record.status_version is None else len(g.records) - 1
            where = draw(st.integers(i, last))
            inserts[where].extend([record] * draw(st.integers(1, 2)))
    doubled: list[GovernanceInput] = []
    for i, record in enumerate(g.records):
        doubled.append(record)
        doubled.extend(inserts[i])
    return g, doubled


@PROPERTY_SETTINGS
@given(with_duplicates())
def test_duplicate_transitions_never_add_a_quarantine(
    case: tuple[Generated, list[GovernanceInput]],
) -> None:
    g, doubled = case
    plain, _ = run(g.policy, g.records)
    with_dups, _ = run(g.policy, doubled)

    def quarantines(decisions: list[Decision]) -> list[str]:
        return [d.details["quarantineID"] for d in decisions if d.kind is K.QUARANTINED]

    assert len(quarantines(with_dups)) == len(quarantines(plain))
    versioned = [q for q in quarantines(plain) if "@seq" not in q and not q.startswith("manual/")]
    assert [q for q in quarantines(with_dups) if q in versioned] == versioned


@PROPERTY_SETTINGS
@given(governance_runs())
def test_an_older_status_version_never_changes_observed_health(g: Generated) -> None:
    state = GovernorState()
    for seq, record in enumerate(g.records):
        device = None
        if isinstance(record, HealthTransition):
            device = state.devices.get((record.node, record.resource_id))
        before = None if device is None else (device.observed_health, device.status_version)
        step(state, record, seq, g.policy)
        if before is None or before[1] is None:
            continue
        assert isinstance(record, HealthTransition)
        if record.status_version is None or record.status_version <= before[1]:
            after = state.devices[(record.node, record.resource_id)]
            assert (after.observed_health, after.status_version) == before


# --- breaker ---------------------------------------------------------------------------------------


@PROPERTY_SETTINGS
@given(governance_runs())
def test_no_automatic_restriction_while_the_breaker_is_open(g: Generated) -> None:
    decisions, _ = run(g.policy, g.records)
    open_ = False
    for d in decisions:
        if d.kind is K.BREAKER_OPENED:
            assert not open_, "a second BreakerOpened without a reset"
            open_ = True
        elif d.kind is K.BREAKER_RESET:
            open_ = False
        elif automatic_restriction(d):
            assert not open_, f"{d.kind.value} {d.decision_id} while the breaker is open"


# --- leases ---------------------------------------------------------------------------------------


@PROPERTY_SETTINGS
@given(governance_runs())
def test_one_lease_holder_at_a_time_and_tokens_grow(g: Generated) -> None:
    decisions, _ = run(g.policy, g.records)
    lease: dict[tuple[str | None, str | None], Decision] = {}  # the device's live grant
    last_token: dict[tuple[str | None, str | None], int] = {}
    for d in decisions:
        key = (d.node, d.resource_id)
        if d.kind in (K.RECOVERY_STAGE_STARTED, K.RECOVERY_FAILED, K.QUARANTINE_RELEASED):
            lease.pop(key, None)  # a new stage, a failure or a release ends the lease
        elif d.kind is K.LEASE_GRANTED:
            token = d.details["fencingToken"]
            previous = lease.get(key)
            if previous is not None and previous.details["holder"] != d.details["holder"]:
                assert d.at >= datetime.fromisoformat(previous.details["expiresAt"]), (
                    f"{d.decision_id}: lease granted to {d.details['holder']} while "
                    f"{previous.details['holder']} holds it"
                )
            if previous is not None and previous.details["holder"] == d.details["holder"]:
                assert token >= last_token[key]
            else:
                assert token > last_token.get(key, 0)
            last_token[key] = token
            lease[key] = d
        elif d.kind is K.RECOVERY_STAGE_PASSED:
            granted = lease.get(key)
            assert granted is not None, f"{d.decision_id}: a stage passed without a lease"
            assert (d.details["holder"], d.details["fencingToken"]) == (
                granted.details["holder"],
                granted.details["fencingToken"],
            )


# --- found bugs (these fail until the core is fixed) -----------------------------------------------

RATE_LIMIT_CASE = Generated(
    GovernancePolicy(restrict_fleet_burst=2, restrict_fleet_refill_seconds=20.0),
    [
        transition("node-a", "GPU-0", Health.UNHEALTHY, 1, 100, partition=0),
        transition("node-a", "GPU-1", Health.UNHEALTHY, 1, 100, partition=0),
        transition("node-b", "GPU-0", Health.UNHEALTHY, 1, 1000, partition=1),
        transition("node-a", "GPU-2", Health.UNHEALTHY, 1, 100, partition=0),
    ],
)
BREAK_GLASS_CASE = Generated(
    GovernancePolicy(),
    [
        transition("node-a", "GPU-0", Health.UNHEALTHY, 1, 0),
        command(
            "b1",
            CommandAction.RELEASE,
            5,
            role=Role.ADMIN,
            reason="vendor: false alarm",
            node="node-a",
            resource_id="GPU-0",
            break_glass=True,
        ),
    ],
)


def assert_rate_limited(times: list[datetime], burst: int, refill_seconds: float) -> None:
    """Within every interval [t, t + d] of decision times: at most burst + d / refill."""
    times = sorted(times)
    for i in range(len(times)):
        for j in range(i, len(times)):
            d = (times[j] - times[i]).total_seconds()
            assert j - i + 1 <= burst + d / refill_seconds + 1e-9, (
                f"{j - i + 1} automatic restrictions within {d:g} s "
                f"({times[i].isoformat()} .. {times[j].isoformat()}), burst {burst}, "
                f"refill {refill_seconds:g} s"
            )


@PROPERTY_SETTINGS
@given(governance_runs())
@example(RATE_LIMIT_CASE)
def test_automatic_restrictions_stay_within_the_node_and_fleet_buckets(g: Generated) -> None:
    decisions, _ = run(g.policy, g.records)
    automatic = [d for d in decisions if automatic_restriction(d)]
    by_node: dict[str | None, list[datetime]] = defaultdict(list)
    for d in automatic:
        by_node[d.node].append(d.at)
    for times in by_node.values():
        assert_rate_limited(
            times, g.policy.restrict_node_burst, g.policy.restrict_node_refill_seconds
        )
    assert_rate_limited(
        [d.at for d in automatic],
        g.policy.restrict_fleet_burst,
        g.policy.restrict_fleet_refill_seconds,
    )


@PROPERTY_SETTINGS
@given(governance_runs())
@example(BREAK_GLASS_CASE)
def test_every_quarantine_has_its_own_id(g: Generated) -> None:
    """The quarantine id is the record's key (and the idempotency key of a system quarantine):
    no two DeviceQuarantined decisions of a run share one."""
    decisions, _ = run(g.policy, g.records)
    ids = [d.details["quarantineID"] for d in decisions if d.kind is K.QUARANTINED]
    assert len(ids) == len(set(ids)), ids
