"""Node-wide faults as one incident (issue 15 item 5), through ``machine.step`` on event time.

Stream shape (NVIDIA NVSentinel and node-problem-detector reports of alert storms): all eight GPUs
of a node read Unhealthy within a second (an NVLink or power fault). The governor quarantines each
(its records unchanged) and opens ONE node incident listing the eight; two of eight flipping is
no node incident. Any order of the eight, and any batching and interleaving of the partitions
through the event-time merge, decides alike.
"""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from services.domain.governance.decisions import AlertAction, Decision, DecisionKind
from services.domain.governance.device_state import GovState
from services.domain.governance.inputs import RecoveryStage
from services.domain.governance.policy import GovernancePolicy
from services.domain.governance.state import GovernorState
from services.domain.node_events import WatcherTick
from tests.governance.harness import GovernanceRun
from tests.governance.strategies import at, lease, report, transition, watermark
from tests.governance.test_event_order import Log, govern
from tests.governance.test_machine import N1, N2, H, U

K = DecisionKind
GPUS = [f"GPU-{i}" for i in range(8)]
POLICY = GovernancePolicy(  # the node-incident defaults: 1 s, 50 %
    recovery_stage_timeout_seconds=100.0,
    recovery_stability_seconds=200.0,
    recovery_holddown_seconds=0.0,
)


def healthy_node(run: GovernanceRun, node: str = N1) -> None:
    for i, gpu in enumerate(GPUS):
        run.feed(transition(node, gpu, H, i + 1, 0))


def of(run: GovernanceRun, *wanted: DecisionKind) -> list[Decision]:
    return [d for d in run.decisions if d.kind in wanted]


def test_the_defaults_are_one_second_and_half_the_node() -> None:
    policy = GovernancePolicy()
    assert (policy.node_incident_window_seconds, policy.node_incident_share) == (1.0, 0.5)


def test_eight_devices_flipping_within_the_window_are_one_node_incident() -> None:
    run = GovernanceRun(policy=POLICY)
    healthy_node(run)
    run.feed(watermark(10))
    for i, gpu in enumerate(GPUS):
        run.feed(transition(N1, gpu, U, 100 + i, 10 + i * 0.1))  # 8 faults in 0.7 s
    opened = of(run, K.NODE_FAULT_OPENED)
    assert len(opened) == 1
    incident = opened[0]
    assert incident.incident == "node-fault/node-1/2026-11-29T12:00:10Z"
    assert incident.alert is AlertAction.FIRING and incident.node == N1
    assert incident.details["devices"] == GPUS[:4]  # half of eight opens it
    assert incident.details["reason"] == "node-wide-fault" and incident.details["nodeDevices"] == 8
    updates = of(run, K.NODE_FAULT_UPDATED)
    assert [u.details["devices"] for u in updates] == [GPUS[: n + 1] for n in range(4, 8)]
    assert {u.incident for u in updates} == {incident.incident}
    # the devices' own quarantines are what they would be without the incident
    quarantined = of(run, K.QUARANTINED)
    assert [q.resource_id for q in quarantined] == GPUS
    assert {d.state for d in run.state.devices.values()} == {GovState.QUARANTINED}
    alone = GovernanceRun(policy=replace(POLICY, node_incident_min_devices=9))
    healthy_node(alone)
    alone.feed(watermark(10))
    for i, gpu in enumerate(GPUS):
        alone.feed(transition(N1, gpu, U, 100 + i, 10 + i * 0.1))
    assert not of(alone, K.NODE_FAULT_OPENED)
    assert alone.state.snapshot()["devices"] == run.state.snapshot()["devices"]
    # the incident decision comes before the quarantine of the device that completed it
    kinds = [d.kind for d in run.decisions]
    assert (
        kinds.index(K.NODE_FAULT_OPENED)
        < [i for i, d in enumerate(run.decisions) if d.kind is K.QUARANTINED][3]
    )


def test_two_of_eight_flipping_is_no_node_incident() -> None:
    run = GovernanceRun(policy=POLICY)
    healthy_node(run)
    run.feed(transition(N1, GPUS[0], U, 100, 10))
    run.feed(transition(N1, GPUS[1], U, 101, 10.5))
    assert not of(run, K.NODE_FAULT_OPENED, K.NODE_FAULT_UPDATED)
    assert len(of(run, K.QUARANTINED)) == 2


def test_faults_further_apart_than_the_window_are_no_node_incident() -> None:
    run = GovernanceRun(policy=POLICY)
    healthy_node(run)
    run.feed(watermark(5))
    for i, gpu in enumerate(GPUS):
        run.feed(transition(N1, gpu, U, 100 + i, 10 + i * 1.5))
        run.feed(watermark(10 + i * 1.5))
    assert not of(run, K.NODE_FAULT_OPENED)
    assert [r for _, r in run.state.fleet.recent_faults[N1]] == ["GPU-7"]  # within the window
    run.feed(watermark(30))
    assert run.state.fleet.recent_faults == {}  # nothing kept past it


@given(st.permutations(range(8)), st.permutations(range(8)))
def test_any_order_of_the_eight_is_one_incident_of_the_eight(
    order: list[int], times: list[int]
) -> None:
    run = GovernanceRun(policy=POLICY)
    healthy_node(run)
    for i in order:  # arrival order and fault times (within 0.7 s) drawn apart
        run.feed(transition(N1, GPUS[i], U, 100 + i, 10 + times[i] * 0.1))
    assert len(of(run, K.NODE_FAULT_OPENED)) == 1
    last = of(run, K.NODE_FAULT_OPENED, K.NODE_FAULT_UPDATED)[-1]
    assert last.details["devices"] == GPUS
    assert run.state.fleet.node_faults[N1].members == GPUS
    assert len(of(run, K.QUARANTINED)) == 8


def test_the_incident_closes_when_none_of_its_devices_is_held() -> None:
    run = GovernanceRun(policy=replace(POLICY, recovery_probe=False, recovery_canary=False))
    healthy_node(run)
    run.feed(watermark(10))
    for i, gpu in enumerate(GPUS[:4]):
        run.feed(transition(N1, gpu, U, 100 + i, 10 + i * 0.1))
    assert N1 in run.state.fleet.node_faults
    for i, gpu in enumerate(GPUS[:4]):
        run.feed(transition(N1, gpu, H, 200 + i, 20))
    run.feed(watermark(100))
    assert not of(run, K.NODE_FAULT_CLOSED)  # still quarantined: stability runs
    run.feed(watermark(400))
    released = of(run, K.QUARANTINE_RELEASED)
    assert len(released) == 4
    closed = of(run, K.NODE_FAULT_CLOSED)
    assert len(closed) == 1 and closed[0].alert is AlertAction.RESOLVED
    assert closed[0].incident == "node-fault/node-1/2026-11-29T12:00:10Z"
    assert closed[0].at == max(r.at for r in released)
    assert run.state.fleet.node_faults == {}
    # a later fault of two devices is not that incident again
    run.feed(transition(N1, GPUS[0], U, 300, 500))
    assert len(of(run, K.NODE_FAULT_OPENED)) == 1


def test_a_probe_that_passes_is_progress_not_a_close() -> None:
    run = GovernanceRun(policy=POLICY)
    healthy_node(run)
    run.feed(watermark(10))
    for i, gpu in enumerate(GPUS[:4]):
        run.feed(transition(N1, gpu, U, 100 + i, 10))
    run.feed(transition(N1, GPUS[0], H, 200, 20))
    run.feed(lease(N1, GPUS[0], "A", 21))
    run.feed(report(N1, GPUS[0], RecoveryStage.PROBE, True, "A", 1, 22))
    assert not of(run, K.NODE_FAULT_CLOSED)


def test_the_open_incident_survives_a_snapshot() -> None:
    run = GovernanceRun(policy=POLICY)
    healthy_node(run)
    for i, gpu in enumerate(GPUS[:5]):
        run.feed(transition(N1, gpu, U, 100 + i, 10))
    snap = run.state.snapshot()
    assert snap["fleet"]["nodeFaults"][N1]["members"] == GPUS[:5]
    restored = GovernorState.restore(
        snap["devices"], snap["nodes"], snap["fleet"], POLICY.heartbeat_grace_seconds
    )
    assert restored.snapshot() == snap


def node_logs(flips: int) -> list[Log]:
    """Partition 0: node-1's eight GPUs, ``flips`` of them faulting within 0.7 s; partition 1:
    node-2's, healthy; both ticking."""
    logs: list[Log] = [[], []]
    for p, node in enumerate((N1, N2)):
        log = logs[p]
        for i, gpu in enumerate(GPUS):
            log.append((transition(node, gpu, H, i + 1, 0, partition=p), at(0)))
        log.append((WatcherTick(p, at(5), watch_seen_at=at(5)), at(5)))
    for i in range(flips):
        t = 10 + i * 0.1
        logs[0].append((transition(N1, GPUS[i], U, 100 + i, t, partition=0), at(t)))
    for p in (0, 1):
        logs[p].append((WatcherTick(p, at(20), watch_seen_at=at(20)), at(20)))
        logs[p].append((WatcherTick(p, at(200), watch_seen_at=at(20)), at(200)))  # silent
        logs[p].append((WatcherTick(p, at(300), watch_seen_at=at(290)), at(300)))
    return logs


@given(st.integers(0, 2**32), st.integers(0, 2**32))
def test_any_batching_and_interleaving_decides_alike(seed_a: int, seed_b: int) -> None:
    logs = node_logs(8)
    decisions, snapshot = govern(logs, seed_a)
    assert (decisions, snapshot) == govern(logs, seed_b)
    kinds = [d for d in decisions if b'"NodeFaultIncidentOpened"' in d or b'"WatchStale"' in d]
    assert len(kinds) == 2
    assert sum(b'"WatchFresh"' in d for d in decisions) == 1


def test_through_the_merge_two_of_eight_is_no_incident() -> None:
    decisions, _ = govern(node_logs(2), random.randrange(2**32))
    assert not [d for d in decisions if b"NodeFaultIncident" in d]
    assert sum(b'"DeviceQuarantined"' in d for d in decisions) == 2


def test_a_late_repeat_of_a_device_keeps_its_latest_fault() -> None:
    # Found by the event-order property: a device's second fault arriving with an older time.
    run = GovernanceRun(policy=POLICY)
    healthy_node(run)
    run.feed(transition(N1, GPUS[0], U, 100, 100))
    run.feed(transition(N1, GPUS[0], H, 101, 100.5))
    run.feed(transition(N1, GPUS[0], U, 102, 50))  # late: older than the window before 100
    assert run.state.fleet.recent_faults[N1] == [(at(100), GPUS[0])]
    run.feed(watermark(200))
    assert run.state.fleet.recent_faults == {}
