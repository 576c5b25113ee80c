"""The governor's verdicts of a pool selected by node labels (issue 16): a relabelled node joins
and leaves the pool on event time, whatever the batching, interleaving, redeliveries and restarts
(the shared property of :mod:`tests.adoption.replays`)."""

from __future__ import annotations

import orjson

from services.domain.governance.adoption import AdoptionDeclaration, Phase, PoolSelector
from services.domain.governance.decisions import AlertAction
from services.domain.governance.input_codec import decode_input, encode_input
from services.domain.governance.inputs import CommandAction, OperatorCommand, Role
from services.domain.governance.state import GovernorState
from services.domain.labels import parse
from services.domain.node_events import WatcherTick
from services.domain.node_labels import NodeLabelsChanged
from tests.adoption.replays import verdict_rows_of_every_seed
from tests.adoption.test_verdicts import DRIVER, node_facts, verdicts
from tests.governance.harness import GovernanceRun
from tests.governance.strategies import at, watermark

EAST = PoolSelector(labels=parse("pool=east"))


def declare(n: int, selector: PoolSelector = EAST) -> OperatorCommand:
    return OperatorCommand(
        command_id=f"c{n}",
        action=CommandAction.ADOPTION_SET,
        actor="olga",
        role=Role.OPERATOR,
        requested_at=at(n),
        reason="canary by label",
        adoption=AdoptionDeclaration("east", selector, Phase.CANARY, DRIVER),
    )


def labels(node: str, t: float, **values: str) -> NodeLabelsChanged:
    return NodeLabelsChanged(node, tuple(values.items()), at(t))


def test_the_labels_record_round_trips_over_the_governance_topic() -> None:
    record = labels("node-a", 5, pool="east", zone="a")
    assert decode_input(encode_input(record)) == record
    removal = NodeLabelsChanged("node-a", (), at(6), removed=True)
    assert decode_input(encode_input(removal)) == removal


def test_a_node_relabelled_into_a_pool_joins_it_and_leaves_when_relabelled_out() -> None:
    run = GovernanceRun()
    for record in (
        watermark(10),
        node_facts("node-a", 5),
        node_facts("node-b", 5, divergent=True),
        labels("node-a", 5, pool="east"),
        labels("node-b", 5, pool="west"),
        declare(11),
    ):
        run.feed(record)
    assert verdicts(run.decisions) == [(None, None, "expand")]  # node-b diverges, not in the pool
    run.feed(labels("node-b", 20, pool="east"))
    assert verdicts(run.decisions)[-1] == ("adoption-hold/east", AlertAction.FIRING, "hold")
    run.feed(labels("node-b", 30, pool="west"))
    assert verdicts(run.decisions)[-1] == ("adoption-hold/east", AlertAction.RESOLVED, "expand")
    run.feed(labels("node-b", 25, pool="east"))  # older than what the governor holds: no-op
    assert verdicts(run.decisions)[-1][2] == "expand"
    # The labels are the nodes' rows (not the fleet's): a restored governor holds the same.
    snapshot = orjson.loads(orjson.dumps(run.state.snapshot()))
    assert "nodeLabels" not in snapshot["fleet"].get("adoption", {})
    restored = GovernorState.restore(
        snapshot["devices"],
        snapshot["nodes"],
        snapshot["fleet"],
        grace_seconds=120.0,
        labels=snapshot["nodeLabels"],
    )
    assert restored.fleet.adoption.labels == run.state.fleet.adoption.labels
    assert restored.snapshot() == run.state.snapshot()


def test_labels_with_a_driver_select_the_drivers_nodes_that_match() -> None:
    run = GovernanceRun()
    selector = PoolSelector(driver=DRIVER, labels=parse("pool in (east)"))
    for record in (
        watermark(10),
        node_facts("node-a", 5),
        labels("node-a", 5, pool="east"),
        labels("node-z", 5, pool="east"),  # no slice of the driver: not the pool's
        declare(11, selector),
    ):
        run.feed(record)
    [decision] = [d for d in run.decisions if d.details.get("verdict")]
    assert decision.details["nodes"] == 1


def test_relabelling_records_the_same_verdicts_whatever_the_batching() -> None:
    """node-a's facts and labels in partition 0, node-b's in partition 1: node-b (divergent)
    joins the pool at 45 and leaves it at 65, in event time."""
    logs = [
        [
            (node_facts("node-a", 20), at(20)),
            (labels("node-a", 20, pool="east"), at(20)),
            (WatcherTick(0, at(30)), at(30)),
            (WatcherTick(0, at(50)), at(50)),
            (WatcherTick(0, at(70)), at(70)),
            (WatcherTick(0, at(3000)), at(3000)),
        ],
        [
            (node_facts("node-b", 25, divergent=True), at(25)),
            (labels("node-b", 25, pool="west"), at(25)),
            (WatcherTick(1, at(35)), at(35)),
            (labels("node-b", 45, pool="east"), at(45)),
            (WatcherTick(1, at(55)), at(55)),
            (labels("node-b", 65, pool="west"), at(65)),
            (WatcherTick(1, at(3000)), at(3000)),
        ],
    ]
    runs = verdict_rows_of_every_seed(logs, declare(1))
    assert len(runs) == 1
    [(rows, _)] = runs
    assert [(incident, alert) for _, _, incident, alert, _ in rows] == [
        ("adoption-hold/east", AlertAction.FIRING),  # declared before any fact: pool-empty
        ("adoption-hold/east", AlertAction.RESOLVED),  # node-a labelled east: expand
        ("adoption-hold/east", AlertAction.FIRING),  # node-b relabelled east at 45: diverges
        ("adoption-hold/east", AlertAction.RESOLVED),  # node-b relabelled west at 65
    ]


def removed(node: str, t: float) -> NodeLabelsChanged:
    return NodeLabelsChanged(node, (), at(t), removed=True)


def test_a_removed_node_leaves_the_pool_and_a_recreated_one_joins_it_again() -> None:
    run = GovernanceRun()
    for record in (
        watermark(10),
        node_facts("node-a", 5),
        node_facts("node-b", 5, divergent=True),
        labels("node-a", 5, pool="east"),
        labels("node-b", 5, pool="east"),
        declare(11),
    ):
        run.feed(record)
    assert verdicts(run.decisions)[-1] == ("adoption-hold/east", AlertAction.FIRING, "hold")
    run.feed(removed("node-b", 20))  # node-b deleted: out of the pool
    assert verdicts(run.decisions)[-1] == ("adoption-hold/east", AlertAction.RESOLVED, "expand")
    assert "node-b" not in run.state.fleet.adoption.labels
    run.feed(removed("node-a", 30))  # the last node gone: the pool is empty
    assert verdicts(run.decisions)[-1] == ("adoption-hold/east", AlertAction.FIRING, "hold")
    assert run.decisions[-1].details["nodes"] == 0  # pool-empty
    run.feed(labels("node-a", 40, pool="east"))  # re-created: back in the pool
    assert verdicts(run.decisions)[-1] == ("adoption-hold/east", AlertAction.RESOLVED, "expand")


def test_a_removal_records_the_same_verdicts_whatever_the_batching() -> None:
    """node-b (divergent) joins the pool at 45, is deleted at 65 and re-created in it at 85."""
    logs = [
        [
            (node_facts("node-a", 20), at(20)),
            (labels("node-a", 20, pool="east"), at(20)),
            (WatcherTick(0, at(30)), at(30)),
            (WatcherTick(0, at(50)), at(50)),
            (WatcherTick(0, at(70)), at(70)),
            (WatcherTick(0, at(90)), at(90)),
            (WatcherTick(0, at(3000)), at(3000)),
        ],
        [
            (node_facts("node-b", 25, divergent=True), at(25)),
            (labels("node-b", 25, pool="west"), at(25)),
            (WatcherTick(1, at(35)), at(35)),
            (labels("node-b", 45, pool="east"), at(45)),
            (WatcherTick(1, at(55)), at(55)),
            (removed("node-b", 65), at(65)),
            (WatcherTick(1, at(75)), at(75)),
            (labels("node-b", 85, pool="east"), at(85)),
            (WatcherTick(1, at(3000)), at(3000)),
        ],
    ]
    runs = verdict_rows_of_every_seed(logs, declare(1))
    assert len(runs) == 1
    [(rows, _)] = runs
    assert [(incident, alert) for _, _, incident, alert, _ in rows] == [
        ("adoption-hold/east", AlertAction.FIRING),  # declared before any fact: pool-empty
        ("adoption-hold/east", AlertAction.RESOLVED),  # node-a labelled east: expand
        ("adoption-hold/east", AlertAction.FIRING),  # node-b relabelled east at 45: diverges
        ("adoption-hold/east", AlertAction.RESOLVED),  # node-b deleted at 65
        ("adoption-hold/east", AlertAction.FIRING),  # node-b re-created in the pool at 85
    ]
