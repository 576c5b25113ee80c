"""The fault campaign's own parts (``bench.faults*``): the input implies its outcome, the checks
see a lost row, a doubled row and a quarantine a fault made or released (against a real
PostgreSQL schema), and the plan and verdict.

The campaign itself runs in ``.ci/run`` (``python -m bench.faults --short``) on the CI stack.
"""

from __future__ import annotations

from collections import Counter

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from bench.faults import fault_plan, totals
from bench.faults_check import count_observations, count_quarantines
from bench.faults_inject import FaultKind
from bench.faults_input import campaign_input, partition_of
from bench.faults_run import RoundResult, applied
from services.domain.directory import DeviceKey, DeviceRecord, Outcome, apply_event
from services.domain.event_codec import decode_event
from services.domain.events import DeviceHealthObserved, Health


def test_the_input_implies_its_observations_and_quarantines() -> None:
    campaign = campaign_input(6000, rounds=4, devices=300, nodes=20, partitions=6, seed=5)
    assert [r.events for r in campaign.rounds] == [1500] * 4
    state: dict[DeviceKey, DeviceRecord] = {}
    applied_keys: set[tuple[str, str, int]] = set()
    first_unhealthy: dict[tuple[str, str], int] = {}
    healthy_after: set[tuple[str, str]] = set()
    outcomes: Counter[Outcome] = Counter()
    for round_ in campaign.rounds:
        ticks = [r for r in round_.records if r[0].startswith(b"~tick/")]
        assert sorted(p for _, _, p in ticks) == list(range(6)), "one tick to every partition"
        assert round_.records[-6:] == ticks, "the ticks close the round"
        for key, value, partition in round_.records[:-6]:
            assert partition == partition_of(key, 6)
            event = decode_event(value)
            assert isinstance(event, DeviceHealthObserved)
            device = (event.node, event.resource_id)
            if event.health is Health.UNHEALTHY:
                first_unhealthy.setdefault(device, int(event.status_version or 0))
            elif device in first_unhealthy:
                healthy_after.add(device)
            for change in apply_event(state, event):
                outcomes[change.outcome] += 1
                if change.changed:
                    state[change.key] = change.record
                    applied_keys.add(
                        (event.node, event.resource_id, int(change.record.status_version or 0))
                    )
        # What the round says the log so far must have produced, the directory fold produced.
        assert round_.observations == applied_keys
        assert round_.quarantines == {
            f"{node}/{rid}@{version}": (node, rid)
            for (node, rid), version in first_unhealthy.items()
        }
    assert not healthy_after, "a quarantined device never reads Healthy again (no release due)"
    assert len(first_unhealthy) > 0
    assert outcomes[Outcome.DUPLICATE] == campaign.duplicates
    assert outcomes[Outcome.STALE] == campaign.stale
    assert campaign.duplicates > 0 and campaign.stale > 0


def test_the_input_is_a_function_of_its_seed() -> None:
    one = campaign_input(500, rounds=2, devices=50, nodes=5, partitions=3, seed=9)
    two = campaign_input(500, rounds=2, devices=50, nodes=5, partitions=3, seed=9)
    other = campaign_input(500, rounds=2, devices=50, nodes=5, partitions=3, seed=10)
    assert [r.records for r in one.rounds] == [r.records for r in two.rounds]
    assert [r.records for r in one.rounds] != [r.records for r in other.rounds]
    with pytest.raises(ValueError, match="rounds must be between 1 and events"):
        campaign_input(5, rounds=6, devices=5, nodes=1, partitions=1)


def test_the_plan_is_seeded_and_a_broker_loss_comes_last() -> None:
    plan = fault_plan(20, 1, 1, 1, seed=3)
    assert Counter(plan) == {
        FaultKind.WORKER_KILL: 20,
        FaultKind.BROKER_RESTART: 1,
        FaultKind.POSTGRES_RESTART: 1,
        FaultKind.BROKER_LOSS: 1,
    }
    assert plan[-1] is FaultKind.BROKER_LOSS
    assert plan == fault_plan(20, 1, 1, 1, seed=3)
    assert plan[:-1] != fault_plan(20, 1, 1, 0, seed=4)


def test_applied_counts_only_the_round() -> None:
    start, ends = {0: 9, 1: -1}, {0: 19, 1: 4}
    assert applied({0: 14, 1: 4}, start, ends) == 5 + 5
    assert applied({}, start, ends) == 0
    assert applied({0: 30, 1: 30}, start, ends) == 15


def test_the_verdict_fails_on_any_count() -> None:
    clean = RoundResult(1, "worker-kill", 100)
    assert totals([clean])["passed"]
    for name in (
        "lost", "doubled", "spurious_created", "spurious_released", "missing_quarantines",
        "replay_differences", "governance_differences",
    ):  # fmt: skip
        bad = RoundResult(2, "broker-restart", 100)
        setattr(bad, name, 1)
        summary = totals([clean, bad])
        assert not summary["passed"], name
    summary = totals([clean, RoundResult(2, "broker-loss", 0, error="no three brokers")])
    assert summary["errors"] == ["round 2: no three brokers"] and not summary["passed"]


HISTORY = (
    'INSERT INTO {s}.device_history (topic, "partition", "offset", node, resource_id, kind, '
    "health, status_version, observed_at, transition, pod_uid, namespace, pod_name) VALUES "
    "('t', 0, :offset, :node, :rid, 'observed', 'Healthy', :sv, now(), false, 'u', 'n', 'p')"
)


@pytest.mark.integration
async def test_the_checks_see_lost_doubled_and_spurious(
    engine: AsyncEngine, fresh_schema: str
) -> None:
    campaign = campaign_input(
        600, rounds=1, devices=100, nodes=4, partitions=2, bad_share=0.1, seed=3
    )
    [round_] = campaign.rounds
    s = f'"{fresh_schema}"'
    rows = sorted(round_.observations)
    history = HISTORY.format(s=s)
    quarantine = (
        f"INSERT INTO {s}.quarantines (quarantine_id, node, resource_id, kind, status, reason, "
        "actor, created_at, confirmed_fault, fencing_token, recovery_attempts) VALUES "
        "(:id, :node, :rid, 'system', :status, 'pod-status-unhealthy', 'system', now(), true, "
        "0, 0)"
    )
    ids = sorted(round_.quarantines)
    assert len(ids) >= 3
    async with engine.begin() as conn:
        for offset, (node, rid, sv) in enumerate(rows[1:]):  # the first one lost
            await conn.execute(
                text(history), {"offset": offset, "node": node, "rid": rid, "sv": sv}
            )
        node, rid, sv = rows[1]  # applied twice, at another offset (a re-send applied)
        await conn.execute(text(history), {"offset": 10**6, "node": node, "rid": rid, "sv": sv})
        await conn.execute(text(history), {"offset": 10**6 + 1, "node": node, "rid": rid, "sv": 1})
        for qid in ids[2:]:  # the first one missing, the second one released
            await conn.execute(
                text(quarantine), {"id": qid, "node": "n", "rid": "r", "status": "active"}
            )
        await conn.execute(
            text(quarantine), {"id": ids[1], "node": "n", "rid": "r", "status": "released"}
        )
        await conn.execute(
            text(quarantine), {"id": "x/y@1", "node": "x", "rid": "y", "status": "active"}
        )
    observations = await count_observations(engine, fresh_schema, round_.observations)
    assert (observations.lost, observations.doubled) == (1, 2)
    assert observations.rows == len(rows) + 1
    quarantines = await count_quarantines(engine, fresh_schema, round_)
    assert quarantines.missing == 1
    assert quarantines.spurious_released == 1
    assert quarantines.spurious_created == 1
    assert quarantines.rows == len(ids)  # one missing, one extra


@pytest.mark.integration
async def test_the_checks_pass_on_exactly_the_input(engine: AsyncEngine, fresh_schema: str) -> None:
    [round_] = campaign_input(200, rounds=1, devices=20, nodes=2, partitions=2, seed=4).rounds
    async with engine.begin() as conn:
        for offset, (node, rid, sv) in enumerate(sorted(round_.observations)):
            await conn.execute(
                text(HISTORY.format(s=f'"{fresh_schema}"')),
                {"offset": offset, "node": node, "rid": rid, "sv": sv},
            )
    observations = await count_observations(engine, fresh_schema, round_.observations)
    assert (observations.lost, observations.doubled) == (0, 0)
    assert observations.rows == observations.expected == len(round_.observations)
