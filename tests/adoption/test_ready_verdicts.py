"""The gate's ``ready-latency`` signal in the governor (issue 16 item 2): what the worker forwards
(the bound-to-Ready stages, a plugin sample naming its DeviceClasses), the golden hold and its
end on event time, a Pod counted once, the per-node cap, the wire form, a restored governor
that continues alike, and the same verdicts whatever the batching, interleaving, redelivery or
restarts."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from services.domain.adoption.ready_forward import extended_classes, forwarded_ready
from services.domain.codec import EventDecodeError
from services.domain.governance.adoption_state import MAX_READY_PER_NODE
from services.domain.governance.decisions import AlertAction, Decision
from services.domain.governance.input_codec import decode_input, encode_input
from services.domain.governance.inputs_ready import NodeReadyObserved, ReadySample
from services.domain.governance.policy import GovernancePolicy
from services.domain.governance.state import GovernorState
from services.domain.lifecycle import DevicePath, Stage
from services.domain.lifecycle_events import PodLifecycleObserved, StageSample
from services.domain.log import LogPosition
from services.domain.node_events import WatcherTick
from tests.adoption.replays import verdict_rows_of_every_seed
from tests.adoption.test_verdicts import DRIVER, VERDICT, canary, declare, node_facts, verdicts
from tests.governance.harness import GovernanceRun
from tests.governance.strategies import at, watermark
from tests.governance.test_event_order import Log

POLICY = GovernancePolicy().adoption
WINDOW = POLICY.ready_window_seconds
MIN = POLICY.ready_min_samples
RESOURCE = "example.com/gpu"  # the extended resource the pool's DeviceClass (DRIVER) names


def dra(pod: str, t: float, seconds: float, node: str = "node-a") -> NodeReadyObserved:
    return NodeReadyObserved(node, at(t), pod, (ReadySample(DRIVER, "dra", seconds, (DRIVER,)),))


def plugin(pod: str, t: float, seconds: float, node: str = "plug-1") -> NodeReadyObserved:
    sample = ReadySample(RESOURCE, "device-plugin", seconds, (DRIVER,))
    return NodeReadyObserved(node, at(t), pod, (sample,))


def latency(d: Decision) -> dict[str, Any]:
    [reason] = [r for r in d.details["reasons"] if r["code"] == "ready-latency"]
    return dict(reason["figures"], verdict=reason["verdict"])


def test_the_worker_forwards_the_bound_to_ready_stages_with_the_plugin_classes() -> None:
    stages = (
        StageSample(Stage.CLAIM_ALLOCATED, DRIVER, DevicePath.DRA, 3.0, "claim-1"),
        StageSample(Stage.POD_BOUND, DRIVER, DevicePath.DRA, 1.0),
        StageSample(Stage.POD_READY, DRIVER, DevicePath.DRA, 7.0),
        StageSample(Stage.POD_READY, RESOURCE, DevicePath.DEVICE_PLUGIN, 4.0),
        StageSample(Stage.POD_READY, "other.com/fpga", DevicePath.DEVICE_PLUGIN, 2.0),
    )
    items = [
        PodLifecycleObserved("node-a", "ml", "train-0", "uid-0", at(20), stages),
        PodLifecycleObserved("node-a", "ml", "train-1", "uid-1", at(21), stages[:2]),  # not Ready
    ]
    positions = [LogPosition("health", 0, i) for i in range(len(items))]
    classes = extended_classes({DRIVER: RESOURCE, "mig.example.com": RESOURCE, "x": None})
    assert classes == {RESOURCE: (DRIVER, "mig.example.com")}
    [(position, record)] = forwarded_ready(list(zip(positions, items, strict=True)), classes)
    assert (position.offset, record.node, record.pod_uid, record.observed_at) == (
        0,
        "node-a",
        "uid-0",
        at(20),
    )
    assert record.samples == (  # sorted
        ReadySample(RESOURCE, "device-plugin", 4.0, (DRIVER, "mig.example.com")),
        ReadySample(DRIVER, "dra", 7.0, (DRIVER,)),
        ReadySample("other.com/fpga", "device-plugin", 2.0, ()),  # no DeviceClass names it
    )


def test_a_slow_dra_p95_holds_the_pool_and_expires_on_event_time() -> None:
    run = canary(watermark(20))
    for i in range(MIN):
        run.feed(plugin(f"p{i}", 20, 4.0, node=f"plug-{i % 3}"))  # any node of the fleet
    for i in range(MIN - 1):
        run.feed(dra(f"d{i}", 30 + i, 10.0))
    [d] = [d for d in run.decisions if d.kind is VERDICT]
    assert latency(d)["verdict"] == "expand"  # the first verdict, before any sample
    run.feed(watermark(60))
    decided = run.feed(dra(f"d{MIN - 1}", 60, 10.0, node="node-b"))
    [d] = [d for d in decided if d.kind is VERDICT]
    assert (d.incident, d.alert, d.at) == ("adoption-hold/east", AlertAction.FIRING, at(60))
    assert latency(d) == {
        "verdict": "hold",
        "deviceClass": DRIVER,
        "draP95": 10.0,
        "pluginP95": 4.0,
        "draSamples": MIN,
        "pluginSamples": MIN,
        "ratio": 2.5,
        "windowSeconds": WINDOW,
        "minSamples": MIN,
        "holdRatio": 2.0,
        "rollbackRatio": 0.0,
    }
    run.feed(dra("d0", 61, 10.0))  # Pod d0 published again (a restarted watcher): once
    run.feed(watermark(20 + WINDOW))  # the plugin samples are at the window's edge: counted
    assert len(verdicts(run.decisions)) == 2
    decided = run.feed(watermark(21 + WINDOW))  # they left the window: not enough samples
    [d] = [d for d in decided if d.kind is VERDICT]
    assert (d.alert, d.at) == (AlertAction.RESOLVED, at(21 + WINDOW))
    assert (latency(d)["pluginSamples"], latency(d)["draSamples"]) == (0, MIN)
    [ready_reason] = [r for r in d.details["reasons"] if r["code"] == "ready-latency"]
    assert ready_reason["detail"].startswith("not enough samples")
    run.feed(watermark(61 + WINDOW))  # the rest expire: nothing kept
    assert run.state.fleet.adoption.ready == {}


def test_a_node_keeps_its_newest_samples_and_without_a_pool_the_window_only() -> None:
    run = GovernanceRun()
    run.feed(watermark(10))
    for i in range(MAX_READY_PER_NODE + 10):
        run.feed(dra(f"x{i}", 10 + i / 1000, 1.0))
    held = run.state.fleet.adoption.ready["node-a"]
    assert len(held) == MAX_READY_PER_NODE
    assert held[0].pod_uid == "x10"  # the oldest went first
    run.feed(watermark(20 + WINDOW))
    run.feed(dra("new", 20 + WINDOW, 1.0))  # the node's samples that left the window go
    assert [f.pod_uid for f in run.state.fleet.adoption.ready["node-a"]] == ["new"]
    assert not [d for d in run.decisions if d.kind is VERDICT]  # nothing evaluated: no pool


def test_the_record_round_trips_and_bad_records_are_refused_with_the_reason() -> None:
    record = plugin("p1", 5, 2.5)
    assert decode_input(encode_input(record)) == record
    body = orjson.loads(encode_input(record))
    assert body["type"] == "NodeReadyObserved" and body["samples"][0]["classes"] == [DRIVER]
    sample = body["samples"][0]
    for change, match in (
        ({"podUID": ""}, "podUID"),
        ({"samples": [{**sample, "seconds": -1}]}, "seconds"),
        ({"samples": [{**sample, "path": "other"}]}, "path"),
        ({"samples": [{**sample, "classes": "x"}]}, "classes"),
        ({"samples": [{**sample, "seconds": i} for i in range(65)]}, "at most 64"),
    ):
        with pytest.raises(EventDecodeError, match=match):
            decode_input(orjson.dumps({**body, **change}))


def test_a_restored_governor_continues_with_the_same_samples_and_expiry() -> None:
    samples = [plugin(f"p{i}", 20, 1.0) for i in range(MIN)]
    run = canary(watermark(20), *samples, *(dra(f"d{i}", 20, 9.0) for i in range(MIN)))
    assert verdicts(run.decisions)[-1] == ("adoption-hold/east", AlertAction.FIRING, "hold")
    snapshot = run.state.snapshot()
    assert len(snapshot["fleet"]["adoption"]["ready"]) == 2 * MIN
    restored = GovernorState.restore(
        snapshot["devices"], snapshot["nodes"], snapshot["fleet"], grace_seconds=120.0
    )
    assert restored.snapshot() == snapshot
    again = GovernanceRun(state=restored, records=list(run.records))
    for record in (dra("late", 30, 1.0, node="node-b"), watermark(25 + WINDOW)):
        run.feed(record)
        again.feed(record)
    assert verdicts(again.decisions) == [("adoption-hold/east", AlertAction.RESOLVED, "expand")]
    assert verdicts(run.decisions[-1:]) == verdicts(again.decisions)
    assert run.state.snapshot() == again.state.snapshot()


def test_a_snapshot_without_samples_has_no_ready_entry() -> None:
    run = canary(watermark(20))
    assert "ready" not in run.state.snapshot()["fleet"]["adoption"]


def test_any_batching_interleaving_redelivery_or_restart_records_the_same_verdicts() -> None:
    """As the other adoption signals: the pool's DRA samples in partition 0 (node-a), the
    plugin's in partition 1 (another node), forwarded with random batch sizes, interleavings,
    redeliveries and restarts, give the same decisions row for row, the expiry included."""
    logs: list[Log] = [
        [
            (node_facts("node-a", 10), at(10)),
            *((dra(f"d{i}", 20 + i, 10.0 + i % 3), at(20 + i)) for i in range(MIN)),
            (WatcherTick(0, at(60)), at(60)),
            (WatcherTick(0, at(WINDOW + 25)), at(WINDOW + 25)),
            (WatcherTick(0, at(9000)), at(9000)),
        ],
        [
            *((plugin(f"p{i}", 15 + i, 3.0 + i % 2), at(15 + i)) for i in range(MIN)),
            (plugin("p0", 50, 3.0), at(50)),  # Pod p0 published again: counted once
            (WatcherTick(1, at(60)), at(60)),
            (WatcherTick(1, at(WINDOW + 60)), at(WINDOW + 60)),
            (WatcherTick(1, at(9000)), at(9000)),
        ],
    ]
    runs = verdict_rows_of_every_seed(logs, declare(1))
    assert len(runs) == 1
    [(rows, _)] = runs
    summary = [(incident, alert, orjson.loads(details)) for _, _, incident, alert, details in rows]
    assert [(i, a) for i, a, _ in summary] == [
        ("adoption-hold/east", AlertAction.FIRING),  # declared before any fact: pool-empty
        ("adoption-hold/east", AlertAction.RESOLVED),  # the slices and event time: expand
        ("adoption-hold/east", AlertAction.FIRING),  # both sides at 20: p95 12 > 2 x 4
        ("adoption-hold/east", AlertAction.RESOLVED),  # event time jumped: the oldest left
    ]

    def figures(details: dict[str, Any]) -> dict[str, Any]:
        return dict(next(r for r in details["reasons"] if r["code"] == "ready-latency")["figures"])

    hold, end = figures(summary[2][2]), figures(summary[3][2])
    assert (hold["draP95"], hold["pluginP95"], hold["pluginSamples"]) == (12.0, 4.0, MIN)
    # at WINDOW + 25 (both partitions' ticks): the samples before 25 are out of the window
    assert (end["pluginSamples"], end["draSamples"]) == (10, 15)
    assert rows[3][1] == at(WINDOW + 25)
