"""The gate's ``claim-failures`` signal in the governor (issue 16 item 2): what the worker forwards
(an increase per source, never the same occurrences twice), the golden hold and its end on
event time, the tenant's failures shown but not held on, the per-node cap, the wire form, a
restored governor that continues alike, and the same verdicts whatever the batching,
interleaving, redelivery or restarts."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import orjson
import pytest

from services.domain.adoption.failure_classes import FailureClass
from services.domain.adoption.failure_events import DRAFailureObserved, FailureOrigin
from services.domain.adoption.failure_forward import forwarded_failures
from services.domain.codec import EventDecodeError
from services.domain.governance.adoption_state import MAX_FAILURES_PER_NODE
from services.domain.governance.decisions import AlertAction, Decision
from services.domain.governance.input_codec import decode_input, encode_input
from services.domain.governance.inputs_failures import NodeFailureObserved
from services.domain.governance.policy import GovernancePolicy
from services.domain.governance.state import GovernorState
from services.domain.log import LogPosition
from services.domain.node_events import WatcherTick
from tests.adoption.replays import verdict_rows_of_every_seed
from tests.adoption.test_verdicts import VERDICT, canary, declare, node_facts, verdicts
from tests.governance.harness import GovernanceRun
from tests.governance.strategies import at, watermark
from tests.governance.test_event_order import Log

WINDOW = GovernancePolicy().adoption.failure_window_seconds
HOLD_AT = GovernancePolicy().adoption.failures_hold


def seen(
    uid: str, occurrences: int, node: str | None = "node-a", cls: str = "retryable", t: float = 20
) -> DRAFailureObserved:
    return DRAFailureObserved(
        source_uid=uid,
        occurrences=occurrences,
        origin=FailureOrigin.EVENT,
        namespace="ml",
        pod_name="train-0",
        pod_uid="uid-train-0",
        node_name=node,
        reason="FailedPrepareDynamicResources",
        message="NodePrepareResources failed: timeout",
        failure_class=FailureClass(cls),
        why="prepare-error",
        observed_at=at(t),
    )


def failed(
    uid: str, t: float, increase: int = 1, node: str = "node-a", cls: str = "retryable"
) -> NodeFailureObserved:
    return NodeFailureObserved(
        node=node,
        observed_at=at(t),
        source_uid=uid,
        occurrences=increase,
        increase=increase,
        failure_class=cls,
        reason="FailedPrepareDynamicResources",
    )


def claim_failures(d: Decision) -> dict[str, object]:
    [reason] = [r for r in d.details["reasons"] if r["code"] == "claim-failures"]
    return dict(reason["figures"], verdict=reason["verdict"])


def test_the_worker_forwards_each_sources_increase_once() -> None:
    items = [
        seen("e1", 2),
        seen("e1", 2),  # published again (a re-LIST): nothing new
        seen("e1", 5),  # the count grew: 3 more
        seen("e1", 3),  # an older copy read late: nothing
        seen("e2", 4),  # the projection already holds 4 (a restarted watcher): nothing
        seen("e2", 6),
        seen("e3", 2, node=None),  # no node yet: raises the count, not forwarded
        seen("e3", 3),  # now on node-a: the one it adds
    ]
    positions = [LogPosition("health", 0, i) for i in range(len(items))]
    out = forwarded_failures(list(zip(positions, items, strict=True)), {"e2": 4})
    assert [(p.offset, f.source_uid, f.occurrences, f.increase) for p, f in out] == [
        (0, "e1", 2, 2),
        (2, "e1", 5, 3),
        (5, "e2", 6, 2),
        (7, "e3", 3, 1),
    ]
    assert {f.node for _, f in out} == {"node-a"} and out[0][1].failure_class == "retryable"


def test_failures_hold_the_pool_at_the_threshold_and_expire_on_event_time() -> None:
    run = canary(watermark(20))
    run.feed(failed("e1", 20, increase=HOLD_AT - 1))
    run.feed(failed("e2", 30, node="node-b", cls="non-retryable", increase=50))  # not held on
    assert verdicts(run.decisions) == [(None, None, "expand")]
    run.feed(watermark(40))
    decided = run.feed(failed("e3", 40, node="node-b", cls="needs-cleanup"))
    [d] = [d for d in decided if d.kind is VERDICT]
    assert (d.incident, d.alert, d.at) == ("adoption-hold/east", AlertAction.FIRING, at(40))
    assert claim_failures(d) == {
        "verdict": "hold",
        "failures": HOLD_AT,
        "retryable": HOLD_AT - 1,
        "needsCleanup": 1,
        "nonRetryable": 50,
        "windowSeconds": WINDOW,
        "holdAt": HOLD_AT,
        "rollbackAt": 0,
    }
    run.feed(watermark(20 + WINDOW))  # e1 is exactly at the window's edge: still counted
    assert len(verdicts(run.decisions)) == 2
    decided = run.feed(watermark(21 + WINDOW))  # e1 left the window: one failure left
    [d] = [d for d in decided if d.kind is VERDICT]
    assert (d.alert, d.at, claim_failures(d)["failures"]) == (
        AlertAction.RESOLVED,
        at(21 + WINDOW),
        1,
    )
    run.feed(watermark(41 + WINDOW))  # the rest expire: nothing kept
    assert run.state.fleet.adoption.failures == {}


def test_a_repeated_record_counts_once_and_a_node_keeps_its_newest_failures() -> None:
    run = canary(watermark(20))
    for _ in range(3):
        run.feed(failed("e1", 20, increase=HOLD_AT - 1))  # the same fact again (no merge key)
    [gate] = [r for r in run.decisions if r.kind is VERDICT]
    assert gate.details["verdict"] == "expand"
    assert len(run.state.fleet.adoption.failures["node-a"]) == 1
    for i in range(MAX_FAILURES_PER_NODE + 10):
        run.feed(failed(f"x{i}", 21 + i / 1000))
    held = run.state.fleet.adoption.failures["node-a"]
    assert len(held) == MAX_FAILURES_PER_NODE
    assert held[0].source_uid == "x10"  # the oldest went first (e1 among them)


def test_without_a_pool_the_failures_are_kept_for_the_window_only() -> None:
    run = GovernanceRun()
    run.feed(watermark(10))
    run.feed(failed("old", 10))
    run.feed(watermark(20 + WINDOW))
    run.feed(failed("new", 20 + WINDOW))  # the node's failures that left the window go
    assert [f.source_uid for f in run.state.fleet.adoption.failures["node-a"]] == ["new"]
    assert not [d for d in run.decisions if d.kind is VERDICT]  # nothing evaluated: no pool


def test_the_record_round_trips_and_bad_records_are_refused_with_the_reason() -> None:
    record = failed("e1", 5, increase=2)
    assert decode_input(encode_input(record)) == record
    body = orjson.loads(encode_input(record))
    assert body["type"] == "NodeFailureObserved" and body["increase"] == 2
    for field, value, match in (
        ("increase", 0, "increase"),
        ("increase", 3, "between 1 and occurrences"),
        ("failureClass", "bad", "failureClass"),
        ("sourceUID", "", "sourceUID"),
    ):
        with pytest.raises(EventDecodeError, match=match):
            decode_input(orjson.dumps({**body, field: value}))


def test_a_restored_governor_continues_with_the_same_failures_and_expiry() -> None:
    run = canary(watermark(20), failed("e1", 20, increase=HOLD_AT))
    assert verdicts(run.decisions)[-1] == ("adoption-hold/east", AlertAction.FIRING, "hold")
    snapshot = run.state.snapshot()
    assert snapshot["fleet"]["adoption"]["failures"]
    restored = GovernorState.restore(
        snapshot["devices"], snapshot["nodes"], snapshot["fleet"], grace_seconds=120.0
    )
    assert restored.snapshot() == snapshot
    again = GovernanceRun(state=restored, records=list(run.records))
    for record in (failed("e2", 30, node="node-b"), watermark(25 + WINDOW)):
        run.feed(record)
        again.feed(record)
    assert verdicts(again.decisions) == [("adoption-hold/east", AlertAction.RESOLVED, "expand")]
    assert verdicts(run.decisions[-1:]) == verdicts(again.decisions)
    assert run.state.snapshot() == again.state.snapshot()


def test_any_batching_interleaving_redelivery_or_restart_records_the_same_verdicts() -> None:
    """As the other adoption signals (tests/adoption/test_verdicts.py): node-a's failures in
    partition 0, node-b's in partition 1, forwarded with random batch sizes, interleavings,
    redeliveries and restarts, give the same decisions row for row, the expiry included."""
    logs: list[Log] = [
        [
            (node_facts("node-a", 10), at(10)),
            (failed("a1", 20, increase=2), at(20)),
            (WatcherTick(0, at(30)), at(30)),
            (failed("a2", 40, increase=1, cls="non-retryable"), at(40)),
            (WatcherTick(0, at(WINDOW + 25)), at(WINDOW + 25)),
            (WatcherTick(0, at(3000)), at(3000)),
        ],
        [
            (node_facts("node-b", 10), at(10)),
            (failed("b1", 25, increase=3, node="node-b"), at(25)),
            (WatcherTick(1, at(35)), at(35)),
            # its count grew from 3 to 4
            (NodeFailureObserved("node-b", at(50), "b1", 4, 1, "retryable", "r"), at(50)),
            (WatcherTick(1, at(WINDOW + 60)), at(WINDOW + 60)),
            (WatcherTick(1, at(3000)), at(3000)),
        ],
    ]
    runs = verdict_rows_of_every_seed(logs, declare(1))
    assert len(runs) == 1
    [(rows, _)] = runs
    summary = [(incident, alert, orjson.loads(details)) for _, _, incident, alert, details in rows]
    assert [(i, a) for i, a, _ in summary] == [
        ("adoption-hold/east", AlertAction.FIRING),  # declared before any fact: pool-empty
        ("adoption-hold/east", AlertAction.RESOLVED),  # the slices and event time: expand
        ("adoption-hold/east", AlertAction.FIRING),  # 2 + 3 retryable failures: hold at 5
        ("adoption-hold/east", AlertAction.RESOLVED),  # a1 left the window
    ]
    hold, end = summary[2][2], summary[3][2]

    def counted(details: dict[str, Any]) -> int:
        return int(
            next(r for r in details["reasons"] if r["code"] == "claim-failures")["figures"][
                "failures"
            ]
        )

    assert counted(hold) == 5
    assert counted(end) == 4  # b1's 3 + 1 (a1's 2 are out; a2 is non-retryable)
    assert rows[3][1] - at(20) > timedelta(seconds=WINDOW)
