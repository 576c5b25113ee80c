"""Behaviour of the governance core, ``step(state, record, seq, policy)``, on hand-built records.

Times are seconds after ``T0`` (:func:`tests.governance.strategies.at`). Each test feeds a short
governance topic through :class:`tests.governance.harness.GovernanceRun` and checks the decisions
of each step and the device's governance state.
"""

from __future__ import annotations

from dataclasses import replace

from services.domain.events import DeviceSource, Health
from services.domain.governance.decisions import AlertAction, Decision, DecisionKind
from services.domain.governance.device_state import DeviceGov, GovState
from services.domain.governance.inputs import CommandAction, RecoveryStage, Role
from services.domain.governance.policy import GovernancePolicy
from tests.governance.harness import GovernanceRun
from tests.governance.strategies import (
    at,
    command,
    heartbeat,
    lease,
    report,
    resources,
    transition,
    watermark,
)

H, U, UNK = Health.HEALTHY, Health.UNHEALTHY, Health.UNKNOWN
K = DecisionKind
N1, N2 = "node-1", "node-2"
G0, G1, G2, G3 = "GPU-0", "GPU-1", "GPU-2", "GPU-3"

POLICY = GovernancePolicy(
    unknown_tolerance_seconds=60.0,
    unknown_tolerance_max_seconds=180.0,
    unknown_backoff_factor=2.0,
    unknown_backoff_reset_seconds=3600.0,
    heartbeat_grace_seconds=30.0,
    flap_threshold=3,
    flap_window_seconds=600.0,
    recovery_stage_timeout_seconds=100.0,
    recovery_stability_seconds=200.0,
    recovery_holddown_seconds=300.0,
    recovery_lease_seconds=50.0,
)


def gov(policy: GovernancePolicy = POLICY) -> GovernanceRun:
    return GovernanceRun(policy=policy)


def kinds(decisions: list[Decision]) -> list[DecisionKind]:
    return [d.kind for d in decisions]


def without_state_changes(decisions: list[Decision]) -> list[DecisionKind]:
    return [d.kind for d in decisions if d.kind is not K.STATE_CHANGED]


def device(run: GovernanceRun, node: str = N1, resource_id: str = G0) -> DeviceGov:
    return run.state.devices[(node, resource_id)]


def one(decisions: list[Decision], kind: DecisionKind) -> Decision:
    found = [d for d in decisions if d.kind is kind]
    assert len(found) == 1, f"expected one {kind.value}, got {kinds(decisions)}"
    return found[0]


def states(run: GovernanceRun, *keys: tuple[str, str]) -> list[GovState]:
    return [run.state.devices[k].state for k in keys]


# --- Unhealthy: quarantine at once ---------------------------------------------------------------


def test_unhealthy_quarantines_at_once_with_the_idempotency_key_as_id() -> None:
    run = gov()
    run.feed(transition(N1, G0, H, 5, 0))
    decisions = run.feed(transition(N1, G0, U, 7, 10))
    assert kinds(decisions) == [K.QUARANTINED, K.STATE_CHANGED]
    quarantined = decisions[0]
    assert quarantined.details["quarantineID"] == f"{N1}/{G0}@7"
    assert quarantined.details["actor"] == "system"
    assert quarantined.details["quarantineKind"] == "system"
    assert quarantined.alert is AlertAction.FIRING
    assert quarantined.incident == f"quarantine/{N1}/{G0}@7"
    assert quarantined.at == at(10)
    assert decisions[1].details["state"] == GovState.QUARANTINED.value
    assert device(run).state is GovState.QUARANTINED
    assert device(run).quarantine is not None
    assert device(run).quarantine.quarantine_id == f"{N1}/{G0}@7"  # type: ignore[union-attr]


def test_a_first_seen_unhealthy_device_is_quarantined_too() -> None:
    run = gov()
    decisions = run.feed(transition(N1, G0, U, 3, 0))
    assert one(decisions, K.QUARANTINED).details["quarantineID"] == f"{N1}/{G0}@3"
    assert device(run).state is GovState.QUARANTINED


def test_duplicate_and_stale_transitions_make_no_decision() -> None:
    run = gov()
    unhealthy = transition(N1, G0, U, 7, 10)
    run.feed(unhealthy)
    before = run.state.snapshot()
    assert run.feed(unhealthy) == []  # the same record again
    assert run.feed(replace(unhealthy, observed_at=at(20), offset=99)) == []  # same version
    assert run.feed(transition(N1, G0, H, 6, 30)) == []  # older version, other health
    assert run.feed(transition(N1, G0, U, 2, 30)) == []
    assert run.feed(transition(N1, G0, H, None, 30)) == []  # unordered after ordered
    assert run.state.snapshot() == before
    assert device(run).observed_health is U


# --- Unknown: tolerance window, restriction, backoff -------------------------------------------------


def test_unknown_is_tolerated_then_restricted_at_the_deadline_then_lifted() -> None:
    run = gov()
    run.feed(watermark(0))
    run.feed(transition(N1, G0, H, 1, 0))
    decisions = run.feed(transition(N1, G0, UNK, 2, 10))
    assert kinds(decisions) == [
        K.UNKNOWN_TOLERANCE_STARTED,
        K.STATE_CHANGED,
        K.INCIDENT_OPENED,
    ]
    started = decisions[0]
    assert started.details["toleranceSeconds"] == 60.0
    assert started.details["deadline"] == "2026-11-29T12:01:10Z"
    assert started.details["reason"] == "pod-status-unknown"
    opened = decisions[2]
    assert opened.alert is AlertAction.FIRING  # alerting during the window: one node incident
    assert opened.incident is not None and opened.incident.startswith("node-unknown/node-1/")
    assert device(run).state is GovState.UNKNOWN_TOLERATED

    assert run.feed(watermark(69)) == []  # before the deadline: nothing
    assert device(run).state is GovState.UNKNOWN_TOLERATED

    decisions = run.feed(watermark(70))  # at the deadline
    assert kinds(decisions) == [K.RESTRICTED, K.STATE_CHANGED]
    assert decisions[0].at == at(70)
    assert device(run).state is GovState.RESTRICTED

    decisions = run.feed(transition(N1, G0, H, 3, 100))
    assert K.RESTRICTION_LIFTED in kinds(decisions)
    resolved = [d for d in decisions if d.alert is AlertAction.RESOLVED]
    assert [d.incident for d in resolved] == [opened.incident]
    back = [d for d in decisions if d.kind is K.STATE_CHANGED and d.details["state"] == "Available"]
    assert [d.details["unknownSeconds"] for d in back] == [90.0]
    assert device(run).state is GovState.AVAILABLE


def test_a_watermark_past_the_deadline_restricts_at_the_deadline() -> None:
    run = gov()
    run.feed(watermark(0))
    run.feed(transition(N1, G0, UNK, 1, 0))
    decisions = run.feed(watermark(500))
    assert one(decisions, K.RESTRICTED).at == at(60)
    assert device(run).state is GovState.RESTRICTED


def test_healthy_inside_the_window_makes_the_device_available_without_restriction() -> None:
    run = gov()
    run.feed(watermark(0))
    run.feed(transition(N1, G0, UNK, 1, 0))
    decisions = run.feed(transition(N1, G0, H, 2, 30))
    assert K.RESTRICTION_LIFTED not in kinds(decisions)
    assert device(run).state is GovState.AVAILABLE
    assert run.feed(watermark(1000)) == []
    assert device(run).state is GovState.AVAILABLE


def test_an_unrecognised_health_value_is_tolerated_like_unknown() -> None:
    run = gov()
    decisions = run.feed(transition(N1, G0, UNK, 1, 0, raw_health="Degraded"))
    assert one(decisions, K.UNKNOWN_TOLERANCE_STARTED).details["reason"] == "unrecognised-health"
    assert device(run).state is GovState.UNKNOWN_TOLERATED


def test_the_window_grows_for_a_device_that_keeps_going_unknown_up_to_the_max() -> None:
    run = gov()
    run.feed(watermark(0))
    windows = []
    version = 0
    for start in (0, 400, 800, 1200):
        version += 1
        decisions = run.feed(transition(N1, G0, UNK, version, start))
        windows.append(one(decisions, K.UNKNOWN_TOLERANCE_STARTED).details["toleranceSeconds"])
        version += 1
        run.feed(transition(N1, G0, H, version, start + 10))
    assert windows == [60.0, 120.0, 180.0, 180.0]  # 60 * 2**(n-1), at most 180


def test_the_backoff_resets_after_the_reset_period() -> None:
    run = gov()
    run.feed(transition(N1, G0, UNK, 1, 0))
    run.feed(transition(N1, G0, H, 2, 10))
    decisions = run.feed(transition(N1, G0, UNK, 3, 100))
    assert one(decisions, K.UNKNOWN_TOLERANCE_STARTED).details["toleranceSeconds"] == 120.0
    run.feed(transition(N1, G0, H, 4, 110))
    decisions = run.feed(transition(N1, G0, UNK, 5, 100 + 3600 + 1))  # both earlier ones expired
    assert one(decisions, K.UNKNOWN_TOLERANCE_STARTED).details["toleranceSeconds"] == 60.0


def test_a_grown_window_delays_the_restriction() -> None:
    run = gov()
    run.feed(watermark(0))
    run.feed(transition(N1, G0, UNK, 1, 0))
    run.feed(transition(N1, G0, H, 2, 10))
    run.feed(transition(N1, G0, UNK, 3, 100))  # second episode: 120 s
    assert run.feed(watermark(219)) == []
    assert device(run).state is GovState.UNKNOWN_TOLERATED
    assert K.RESTRICTED in kinds(run.feed(watermark(220)))


# --- event time ---------------------------------------------------------------------------------


def test_without_watermarks_no_timer_ever_fires() -> None:
    """The watcher-outage rule: event time comes only from watermarks; transitions' own times,
    however late, never fire a tolerance window, heartbeat loss, stage timeout or expiry."""
    run = gov()
    run.feed(heartbeat(N1, 0))
    run.feed(transition(N1, G0, UNK, 1, 0))
    run.feed(transition(N1, G1, U, 1, 0))
    run.feed(transition(N1, G1, H, 2, 1))  # recovery probe starts (stage timeout 100 s)
    run.feed(transition(N1, G2, H, 1, 0))
    run.feed(
        command(
            "c1", CommandAction.QUARANTINE, 0, reason="test", node=N1, resource_id=G2, expires=5
        )
    )
    for t in (1000, 10_000, 100_000):
        decisions = run.feed(transition(N2, G0, H, t, t))
        decisions += run.feed(heartbeat(N2, t))
        assert not {K.RESTRICTED, K.NODE_INCIDENT_OPENED, K.RECOVERY_FAILED} & set(kinds(decisions))
        assert K.QUARANTINE_RELEASED not in kinds(decisions)
    assert states(run, (N1, G0), (N1, G1), (N1, G2)) == [
        GovState.UNKNOWN_TOLERATED,
        GovState.RECOVERING,
        GovState.QUARANTINED,
    ]
    assert run.state.fleet.watermark is None


def test_the_watermark_is_the_minimum_over_partitions() -> None:
    run = gov()
    run.feed(transition(N1, G0, UNK, 1, 0))  # deadline 60
    assert run.feed(watermark(100, partition=0, partitions=2)) == []  # partition 1 unknown yet
    assert run.state.fleet.watermark is None
    assert run.feed(watermark(30, partition=1, partitions=2)) == []  # fleet watermark 30
    assert run.state.fleet.watermark == at(30)
    assert run.feed(watermark(59, partition=1, partitions=2)) == []
    assert device(run).state is GovState.UNKNOWN_TOLERATED
    assert run.feed(watermark(200, partition=1, partitions=2)) != []  # fleet watermark 100
    assert run.state.fleet.watermark == at(100)
    assert device(run).state is GovState.RESTRICTED


def test_a_lagging_partition_holds_the_timer_back() -> None:
    run = gov()
    run.feed(transition(N1, G0, UNK, 1, 0))
    run.feed(watermark(10, partition=0, partitions=2))
    run.feed(watermark(10, partition=1, partitions=2))
    for t in (100, 1000, 5000):
        assert run.feed(watermark(t, partition=1, partitions=2)) == []
    assert device(run).state is GovState.UNKNOWN_TOLERATED
    assert K.RESTRICTED in kinds(run.feed(watermark(60, partition=0, partitions=2)))


def test_a_watermark_never_goes_back() -> None:
    run = gov()
    run.feed(watermark(100))
    assert run.feed(watermark(50)) == []
    assert run.state.fleet.watermark == at(100)


# --- node heartbeat ------------------------------------------------------------------------------


def test_heartbeat_loss_is_one_node_incident_and_its_devices_read_unknown() -> None:
    run = gov()
    run.feed(watermark(0))
    run.feed(transition(N1, G0, H, 1, 0))
    run.feed(transition(N1, G1, H, 1, 0))
    run.feed(transition(N2, G0, H, 1, 0))
    run.feed(heartbeat(N1, 10))
    run.feed(heartbeat(N2, 10))
    assert run.feed(watermark(39)) == []  # before renewed + grace: still fine
    run.feed(heartbeat(N2, 40))
    decisions = run.feed(watermark(45))
    incident = one(decisions, K.NODE_INCIDENT_OPENED)
    assert incident.node == N1
    assert incident.alert is AlertAction.FIRING
    assert incident.details["reason"] == "node-heartbeat-lost"
    tolerated = [d for d in decisions if d.kind is K.UNKNOWN_TOLERANCE_STARTED]
    assert [(d.node, d.resource_id) for d in tolerated] == [(N1, G0), (N1, G1)]
    assert all(d.details["reason"] == "node-heartbeat-lost" for d in tolerated)
    # Only the node incident alerts: no per-device alert.
    assert [d for d in decisions if d.alert is not None] == [incident]
    assert states(run, (N1, G0), (N1, G1), (N2, G0)) == [
        GovState.UNKNOWN_TOLERATED,
        GovState.UNKNOWN_TOLERATED,
        GovState.AVAILABLE,
    ]
    assert device(run).effective_reason == "node-heartbeat-lost"

    decisions = run.feed(heartbeat(N1, 50))
    closed = one(decisions, K.NODE_INCIDENT_CLOSED)
    assert closed.alert is AlertAction.RESOLVED
    assert closed.incident == incident.incident
    assert states(run, (N1, G0), (N1, G1)) == [GovState.AVAILABLE, GovState.AVAILABLE]
    assert all(d.alert is None for d in decisions if d is not closed)


def test_a_node_without_any_heartbeat_is_never_declared_lost() -> None:
    run = gov()
    run.feed(watermark(0))
    run.feed(transition(N1, G0, H, 1, 0))
    run.feed(heartbeat(N2, 0))  # another node's heartbeat does not count for node-1
    run.feed(heartbeat(N2, 1000))
    run.feed(heartbeat(N2, 100_000))
    for t in (1000, 100_000):
        decisions = run.feed(watermark(t))
        assert [d for d in decisions if d.node == N1] == []
    assert device(run).state is GovState.AVAILABLE


def test_heartbeat_loss_past_the_tolerance_restricts_without_a_device_alert() -> None:
    run = gov()
    run.feed(watermark(0))
    run.feed(transition(N1, G0, H, 1, 0))
    run.feed(heartbeat(N1, 0))
    run.feed(watermark(31))  # lost at 30; tolerance until 90
    decisions = run.feed(watermark(100))
    assert K.RESTRICTED in kinds(decisions)
    assert device(run).state is GovState.RESTRICTED
    decisions = run.feed(heartbeat(N1, 100))
    assert K.RESTRICTION_LIFTED in kinds(decisions)
    assert device(run).state is GovState.AVAILABLE


# --- device plugin loss -------------------------------------------------------------------------


def test_device_plugin_loss_makes_that_resources_plugin_devices_unknown() -> None:
    run = gov()
    run.feed(watermark(0))
    run.feed(transition(N1, G0, H, 1, 0))
    run.feed(transition(N1, G1, H, 1, 0))
    run.feed(transition(N1, "FPGA-0", H, 1, 0, resource_name="example.com/fpga"))
    run.feed(
        transition(N1, "drv/pool/dev", H, 1, 0, resource_name="claim:gpu", source=DeviceSource.DRA)
    )
    run.feed(transition(N2, G0, H, 1, 0))
    capacity = {"nvidia.com/gpu": 2, "example.com/fpga": 1}
    assert run.feed(resources(N1, capacity, capacity, 5)) == []
    decisions = run.feed(resources(N1, capacity, {"nvidia.com/gpu": 1, "example.com/fpga": 1}, 10))
    incident = one(decisions, K.NODE_INCIDENT_OPENED)
    assert incident.alert is AlertAction.FIRING
    assert incident.details["reason"] == "device-plugin-lost"
    assert incident.details["resourceName"] == "nvidia.com/gpu"
    tolerated = [d for d in decisions if d.kind is K.UNKNOWN_TOLERANCE_STARTED]
    assert [(d.node, d.resource_id) for d in tolerated] == [(N1, G0), (N1, G1)]
    assert all(d.details["reason"] == "device-plugin-lost" for d in tolerated)
    assert [d for d in decisions if d.alert is not None] == [incident]
    assert states(run, (N1, G0), (N1, G1), (N1, "FPGA-0"), (N1, "drv/pool/dev"), (N2, G0)) == [
        GovState.UNKNOWN_TOLERATED,
        GovState.UNKNOWN_TOLERATED,
        GovState.AVAILABLE,
        GovState.AVAILABLE,
        GovState.AVAILABLE,
    ]
    # Still missing: no second incident.
    assert run.feed(resources(N1, capacity, {"nvidia.com/gpu": 0, "example.com/fpga": 1}, 15)) == []

    decisions = run.feed(resources(N1, capacity, capacity, 20))
    closed = one(decisions, K.NODE_INCIDENT_CLOSED)
    assert closed.alert is AlertAction.RESOLVED
    assert closed.incident == incident.incident
    assert states(run, (N1, G0), (N1, G1)) == [GovState.AVAILABLE, GovState.AVAILABLE]


def test_a_device_reported_unhealthy_explains_its_gap_in_allocatable() -> None:
    """kubelet's allocatable counts the plugin's healthy devices: one GPU Unhealthy in its Pod's
    status and one missing from allocatable is that GPU's fault, not a lost plugin; the node's
    other GPUs stay Available, in either order of the two records."""
    capacity, fewer = {"nvidia.com/gpu": 2}, {"nvidia.com/gpu": 1}
    for resources_first in (False, True):
        run = gov()
        run.feed(watermark(0))
        run.feed(transition(N1, G0, H, 1, 0))
        run.feed(transition(N1, G1, H, 1, 0))
        run.feed(resources(N1, capacity, capacity, 5))
        if resources_first:
            opened = one(run.feed(resources(N1, capacity, fewer, 10)), K.NODE_INCIDENT_OPENED)
            decisions = run.feed(transition(N1, G0, U, 2, 11))
            assert one(decisions, K.NODE_INCIDENT_CLOSED).incident == opened.incident
        else:
            run.feed(transition(N1, G0, U, 2, 10))
            assert K.NODE_INCIDENT_OPENED not in kinds(run.feed(resources(N1, capacity, fewer, 11)))
        assert states(run, (N1, G0), (N1, G1)) == [GovState.QUARANTINED, GovState.AVAILABLE]
        # A second device missing, that nobody reports Unhealthy: the plugin lost it.
        zero = {"nvidia.com/gpu": 0}
        opened = one(run.feed(resources(N1, capacity, zero, 20)), K.NODE_INCIDENT_OPENED)
        assert (opened.details["missing"], opened.details["resourceName"]) == (1, "nvidia.com/gpu")
        assert states(run, (N1, G1)) == [GovState.UNKNOWN_TOLERATED]
        # The Unhealthy one recovers while still missing from allocatable: now unexplained too,
        # the incident stays open (one per resource).
        assert K.NODE_INCIDENT_OPENED not in kinds(run.feed(transition(N1, G0, H, 3, 25)))
        closed = one(run.feed(resources(N1, capacity, capacity, 30)), K.NODE_INCIDENT_CLOSED)
        assert closed.incident == opened.incident


# --- staged recovery ----------------------------------------------------------------------------


def quarantined_then_healthy(policy: GovernancePolicy = POLICY) -> tuple[GovernanceRun, Decision]:
    """node-1/GPU-0 quarantined at 0 (version 1), Healthy again at 10 (version 2); watermark 10."""
    run = gov(policy)
    run.feed(watermark(0))
    run.feed(transition(N1, G0, U, 1, 0))
    run.feed(watermark(10))
    decisions = run.feed(transition(N1, G0, H, 2, 10))
    return run, one(decisions, K.RECOVERY_STAGE_STARTED)


def test_staged_recovery_probe_canary_stability_then_release() -> None:
    run, started = quarantined_then_healthy()
    assert started.details["stage"] == "probe"
    assert started.details["quarantineID"] == f"{N1}/{G0}@1"
    assert device(run).state is GovState.RECOVERING

    granted = one(run.feed(lease(N1, G0, "A", 11)), K.LEASE_GRANTED)
    assert (granted.details["holder"], granted.details["fencingToken"]) == ("A", 1)
    denied = one(run.feed(lease(N1, G0, "B", 12)), K.LEASE_DENIED)
    assert denied.details["heldBy"] == "A"
    assert kinds(run.feed(report(N1, G0, RecoveryStage.PROBE, True, "B", 1, 13))) == [
        K.REPORT_REJECTED
    ]
    assert kinds(run.feed(report(N1, G0, RecoveryStage.CANARY, True, "A", 1, 13))) == [
        K.REPORT_REJECTED
    ]  # not the running stage
    assert device(run).state is GovState.RECOVERING

    decisions = run.feed(report(N1, G0, RecoveryStage.PROBE, True, "A", 1, 14))
    assert without_state_changes(decisions) == [K.RECOVERY_STAGE_PASSED, K.RECOVERY_STAGE_STARTED]
    assert decisions[1].details["stage"] == "canary"

    # The probe's lease does not carry over: the canary needs a new one, with a higher token.
    assert kinds(run.feed(report(N1, G0, RecoveryStage.CANARY, True, "A", 1, 15))) == [
        K.REPORT_REJECTED
    ]
    granted = one(run.feed(lease(N1, G0, "B", 16)), K.LEASE_GRANTED)
    assert (granted.details["holder"], granted.details["fencingToken"]) == ("B", 2)
    assert kinds(run.feed(report(N1, G0, RecoveryStage.CANARY, True, "B", 1, 17))) == [
        K.REPORT_REJECTED
    ]  # stale token
    decisions = run.feed(report(N1, G0, RecoveryStage.CANARY, True, "B", 2, 18))
    assert without_state_changes(decisions) == [K.RECOVERY_STAGE_PASSED, K.RECOVERY_STAGE_STARTED]
    stability = decisions[1]
    assert stability.details["stage"] == "stability"
    assert device(run).state is GovState.RECOVERING

    # Stability: 200 s of event time from the canary's pass (watermark 10).
    assert run.feed(watermark(209)) == []
    decisions = run.feed(watermark(210))
    released = one(decisions, K.QUARANTINE_RELEASED)
    assert released.details["reason"] == "recovered"
    assert released.alert is AlertAction.RESOLVED
    assert released.incident == f"quarantine/{N1}/{G0}@1"
    assert device(run).state is GovState.AVAILABLE
    assert device(run).quarantine is None


def test_a_failed_probe_extends_the_quarantine_and_holds_recovery_down() -> None:
    run, _ = quarantined_then_healthy()
    run.feed(lease(N1, G0, "A", 11))
    decisions = run.feed(report(N1, G0, RecoveryStage.PROBE, False, "A", 1, 12, "xid 79"))
    assert kinds(decisions) == [K.RECOVERY_FAILED, K.QUARANTINE_EXTENDED, K.STATE_CHANGED]
    assert decisions[1].details["until"] == "2026-11-29T12:05:10Z"  # watermark 10 + 300
    assert device(run).state is GovState.QUARANTINED
    assert device(run).quarantine.confirmed_fault  # type: ignore[union-attr]
    # The device keeps reading Healthy: no new recovery before the hold-down ends.
    assert run.feed(watermark(300)) == []
    assert run.feed(transition(N1, G0, U, 3, 301)) == []
    assert run.feed(transition(N1, G0, H, 4, 302)) == []
    assert run.feed(watermark(309)) == []
    decisions = run.feed(watermark(310))
    started = one(decisions, K.RECOVERY_STAGE_STARTED)
    assert (started.details["stage"], started.details["attempt"]) == ("probe", 2)
    assert started.at == at(310)


def test_unhealthy_during_recovery_fails_it() -> None:
    run, _ = quarantined_then_healthy()
    run.feed(lease(N1, G0, "A", 11))
    decisions = run.feed(transition(N1, G0, U, 3, 20))
    assert without_state_changes(decisions)[:2] == [K.RECOVERY_FAILED, K.QUARANTINE_EXTENDED]
    assert device(run).state is GovState.QUARANTINED
    assert K.REPORT_REJECTED in kinds(
        run.feed(report(N1, G0, RecoveryStage.PROBE, True, "A", 1, 21))
    )


def test_unknown_during_recovery_fails_it() -> None:
    run, _ = quarantined_then_healthy()
    decisions = run.feed(transition(N1, G0, UNK, 3, 20))
    assert K.RECOVERY_FAILED in kinds(decisions)
    assert device(run).state is GovState.QUARANTINED


def test_a_stage_that_reports_nothing_times_out() -> None:
    run, _ = quarantined_then_healthy()
    run.feed(lease(N1, G0, "A", 11))
    assert run.feed(watermark(109)) == []
    decisions = run.feed(watermark(110))  # started at 10, timeout 100
    failed = one(decisions, K.RECOVERY_FAILED)
    assert failed.details["stage"] == "probe"
    assert "timed out" in failed.details["reason"]
    assert K.QUARANTINE_EXTENDED in kinds(decisions)
    assert device(run).state is GovState.QUARANTINED


def test_an_expired_lease_goes_to_another_holder_with_a_higher_token() -> None:
    run, _ = quarantined_then_healthy()
    assert one(run.feed(lease(N1, G0, "A", 11)), K.LEASE_GRANTED).details["fencingToken"] == 1
    run.feed(watermark(59))
    assert K.LEASE_DENIED in kinds(run.feed(lease(N1, G0, "B", 59)))
    run.feed(watermark(60))  # granted at watermark 10 for 50 s
    granted = one(run.feed(lease(N1, G0, "B", 60)), K.LEASE_GRANTED)
    assert (granted.details["holder"], granted.details["fencingToken"]) == ("B", 2)
    # The old holder's report is fenced off.
    assert kinds(run.feed(report(N1, G0, RecoveryStage.PROBE, True, "A", 1, 61))) == [
        K.REPORT_REJECTED
    ]
    assert K.RECOVERY_STAGE_PASSED in kinds(
        run.feed(report(N1, G0, RecoveryStage.PROBE, True, "B", 2, 62))
    )


def test_the_holder_renews_its_lease_with_the_same_token() -> None:
    run, _ = quarantined_then_healthy()
    run.feed(lease(N1, G0, "A", 11))
    run.feed(watermark(40))
    granted = one(run.feed(lease(N1, G0, "A", 40)), K.LEASE_GRANTED)
    assert granted.details["fencingToken"] == 1
    run.feed(watermark(70))  # the renewed lease holds until 90
    assert K.LEASE_DENIED in kinds(run.feed(lease(N1, G0, "B", 70)))


def test_lease_requests_and_reports_for_a_device_not_in_recovery_are_refused() -> None:
    run = gov()
    run.feed(transition(N1, G0, U, 1, 0))
    assert kinds(run.feed(lease(N1, G0, "A", 1))) == [K.LEASE_DENIED]
    assert kinds(run.feed(lease(N2, G0, "A", 1))) == [K.LEASE_DENIED]
    assert kinds(run.feed(report(N1, G0, RecoveryStage.PROBE, True, "A", 1, 2))) == [
        K.REPORT_REJECTED
    ]
    assert device(run).state is GovState.QUARANTINED


def test_a_policy_without_probe_starts_with_the_canary() -> None:
    _, started = quarantined_then_healthy(replace(POLICY, recovery_probe=False))
    assert started.details["stage"] == "canary"


def test_a_policy_without_canary_goes_from_probe_to_stability() -> None:
    run, started = quarantined_then_healthy(replace(POLICY, recovery_canary=False))
    assert started.details["stage"] == "probe"
    run.feed(lease(N1, G0, "A", 11))
    decisions = run.feed(report(N1, G0, RecoveryStage.PROBE, True, "A", 1, 12))
    assert one(decisions, K.RECOVERY_STAGE_STARTED).details["stage"] == "stability"


def test_a_policy_without_probe_and_canary_waits_only_for_stability() -> None:
    policy = replace(POLICY, recovery_probe=False, recovery_canary=False)
    run, started = quarantined_then_healthy(policy)
    assert started.details["stage"] == "stability"
    assert kinds(run.feed(lease(N1, G0, "A", 11))) == [K.LEASE_DENIED]  # nothing to run
    assert run.feed(watermark(209)) == []
    assert one(run.feed(watermark(210)), K.QUARANTINE_RELEASED).details["reason"] == "recovered"


def test_unhealthy_in_the_stability_window_fails_the_recovery() -> None:
    policy = replace(POLICY, recovery_probe=False, recovery_canary=False)
    run, _ = quarantined_then_healthy(policy)
    decisions = run.feed(transition(N1, G0, U, 3, 100))
    assert K.RECOVERY_FAILED in kinds(decisions)
    assert device(run).state is GovState.QUARANTINED
    assert K.QUARANTINE_RELEASED not in kinds(run.feed(watermark(250)))


# --- flapping ------------------------------------------------------------------------------------


def test_a_flapping_device_stays_quarantined() -> None:
    run = gov()
    run.feed(watermark(0))
    run.feed(transition(N1, G0, U, 1, 0))  # quarantined (1 Unhealthy transition)
    run.feed(transition(N1, G0, H, 2, 10))  # recovery starts
    run.feed(transition(N1, G0, U, 3, 20))  # recovery fails (2); hold-down until 320
    run.feed(transition(N1, G0, H, 4, 30))
    run.feed(transition(N1, G0, U, 5, 40))  # 3 Unhealthy transitions within 600 s
    decisions = run.feed(transition(N1, G0, H, 6, 50))
    extended = one(decisions, K.QUARANTINE_EXTENDED)
    assert "flapping" in extended.details["reason"]
    assert extended.details["until"] == "2026-11-29T12:10:40Z"  # last Unhealthy (40) + 600
    assert K.RECOVERY_STAGE_STARTED not in kinds(decisions)
    assert device(run).state is GovState.QUARANTINED
    # The hold-down of the failed recovery (320) is over, the flapping hold (640) is not.
    assert K.RECOVERY_STAGE_STARTED not in kinds(run.feed(watermark(639)))
    started = one(run.feed(watermark(640)), K.RECOVERY_STAGE_STARTED)
    assert started.at == at(640)


def test_flapping_with_no_hold_down_still_holds_the_device() -> None:
    run = gov(replace(POLICY, recovery_holddown_seconds=0.0))
    run.feed(watermark(0))
    version = 0
    for t in (0, 20):
        version += 1
        run.feed(transition(N1, G0, U, version, t))
        version += 1
        run.feed(watermark(t + 10))
        assert K.RECOVERY_STAGE_STARTED in kinds(run.feed(transition(N1, G0, H, version, t + 10)))
    run.feed(transition(N1, G0, U, 5, 40))
    run.feed(watermark(50))
    decisions = run.feed(transition(N1, G0, H, 6, 50))
    assert "flapping" in one(decisions, K.QUARANTINE_EXTENDED).details["reason"]
    assert K.RECOVERY_STAGE_STARTED not in kinds(decisions)


# --- escalation -----------------------------------------------------------------------------------


def test_node_escalation_is_recommended_once_and_resolved() -> None:
    run = gov()
    for rid in (G0, G1, G2, G3):
        run.feed(transition(N1, rid, H, 1, 0))
    assert K.NODE_ESCALATION_RECOMMENDED not in kinds(run.feed(transition(N1, G0, U, 2, 10)))
    decisions = run.feed(transition(N1, G1, U, 2, 20))  # 2 of 4 = 0.5, and >= 2
    escalation = one(decisions, K.NODE_ESCALATION_RECOMMENDED)
    assert escalation.alert is AlertAction.FIRING
    assert escalation.node == N1
    assert (escalation.details["unhealthy"], escalation.details["devices"]) == (2, 4)
    assert K.NODE_ESCALATION_RECOMMENDED not in kinds(run.feed(transition(N1, G2, U, 2, 30)))
    assert K.NODE_ESCALATION_RECOMMENDED not in kinds(run.feed(transition(N1, G2, H, 3, 40)))
    decisions = run.feed(transition(N1, G1, H, 3, 50))  # 1 of 4
    resolved = one(decisions, K.NODE_ESCALATION_RECOMMENDED)
    assert resolved.alert is AlertAction.RESOLVED
    assert resolved.incident == escalation.incident


def test_escalation_needs_the_minimum_count() -> None:
    run = gov(replace(POLICY, node_escalation_min_devices=3))
    run.feed(transition(N1, G0, H, 1, 0))
    run.feed(transition(N1, G1, U, 1, 0))
    run.feed(transition(N2, G0, U, 1, 0))
    run.feed(transition(N2, G1, U, 1, 0))  # 2 of 2 on node-2, fewer than 3
    assert K.NODE_ESCALATION_RECOMMENDED not in kinds(run.decisions)


# --- operator commands ---------------------------------------------------------------------------


def test_a_viewer_may_not_write() -> None:
    run = gov()
    run.feed(transition(N1, G0, H, 1, 0))
    for n, action in enumerate(CommandAction):
        decisions = run.feed(
            command(
                f"v{n}", action, 1, role=Role.VIEWER, reason="r", node=N1, resource_id=G0, expires=9
            )
        )
        assert kinds(decisions) == [K.COMMAND_REJECTED]
        assert decisions[0].details["actor"] == "alice"
    assert device(run).state is GovState.AVAILABLE


def test_reset_breaker_needs_an_admin_and_an_open_breaker() -> None:
    policy = replace(POLICY, breaker_min_devices=2, breaker_device_share=0.3)
    run = gov(policy)
    for rid in (G0, G1, G2, G3):
        run.feed(transition(N1, rid, H, 1, 0))
    reset = command("r0", CommandAction.RESET_BREAKER, 1, role=Role.ADMIN, reason="r")
    assert kinds(run.feed(reset)) == [K.COMMAND_REJECTED]  # not open
    run.feed(transition(N1, G0, U, 2, 10))  # 1 of 4 turned bad
    decisions = run.feed(transition(N1, G1, U, 2, 11))  # 2 of 4 > 0.3: tripped
    opened = one(decisions, K.BREAKER_OPENED)
    assert opened.alert is AlertAction.FIRING
    assert one(decisions, K.RESTRICTION_DEFERRED).resource_id == G1
    assert device(run, N1, G1).state is GovState.DEFERRED
    assert run.state.fleet.breaker_open

    as_operator = command("r1", CommandAction.RESET_BREAKER, 12, reason="r")
    assert kinds(run.feed(as_operator)) == [K.COMMAND_REJECTED]
    assert run.state.fleet.breaker_open
    decisions = run.feed(
        command("r2", CommandAction.RESET_BREAKER, 13, role=Role.ADMIN, reason="ok")
    )
    assert without_state_changes(decisions) == [K.COMMAND_ACCEPTED, K.BREAKER_RESET, K.QUARANTINED]
    assert one(decisions, K.BREAKER_RESET).incident == opened.incident
    assert not run.state.fleet.breaker_open
    assert device(run, N1, G1).state is GovState.QUARANTINED


def test_a_manual_quarantine_is_released_at_its_expiry() -> None:
    run = gov()
    run.feed(watermark(0))
    run.feed(transition(N1, G0, H, 1, 0))
    decisions = run.feed(
        command(
            "m1",
            CommandAction.QUARANTINE,
            5,
            reason="suspect ECC",
            node=N1,
            resource_id=G0,
            expires=100,
        )
    )
    assert without_state_changes(decisions) == [K.COMMAND_ACCEPTED, K.QUARANTINED]
    quarantined = one(decisions, K.QUARANTINED)
    assert quarantined.details["quarantineID"] == "manual/m1"
    assert quarantined.details["actor"] == "alice"
    assert quarantined.details["quarantineKind"] == "manual"
    assert quarantined.details["expiresAt"] == "2026-11-29T12:01:40Z"
    assert device(run).state is GovState.QUARANTINED
    # A Healthy device under a manual quarantine does not start recovery.
    assert run.feed(transition(N1, G0, H, 2, 10)) == []
    assert run.feed(watermark(99)) == []
    released = one(run.feed(watermark(100)), K.QUARANTINE_RELEASED)
    assert released.details["reason"] == "expired"
    assert released.at == at(100)
    assert device(run).state is GovState.AVAILABLE


def test_extend_pushes_the_expiry() -> None:
    run = gov()
    run.feed(watermark(0))
    run.feed(transition(N1, G0, H, 1, 0))
    run.feed(
        command("m1", CommandAction.QUARANTINE, 5, reason="r", node=N1, resource_id=G0, expires=100)
    )
    earlier = command(
        "e0", CommandAction.EXTEND, 6, reason="r", node=N1, resource_id=G0, expires=90
    )
    assert kinds(run.feed(earlier)) == [K.COMMAND_REJECTED]
    decisions = run.feed(
        command("e1", CommandAction.EXTEND, 6, reason="more", node=N1, resource_id=G0, expires=300)
    )
    assert kinds(decisions) == [K.COMMAND_ACCEPTED, K.QUARANTINE_EXTENDED]
    assert decisions[1].details["until"] == "2026-11-29T12:05:00Z"
    assert run.feed(watermark(100)) == []
    assert run.feed(watermark(299)) == []
    assert device(run).state is GovState.QUARANTINED
    assert one(run.feed(watermark(300)), K.QUARANTINE_RELEASED).details["reason"] == "expired"


def test_a_manual_quarantine_needs_a_reason_and_a_future_expiry() -> None:
    run = gov()
    run.feed(transition(N1, G0, H, 1, 0))
    no_reason = command("m1", CommandAction.QUARANTINE, 5, node=N1, resource_id=G0)
    past = command(
        "m2", CommandAction.QUARANTINE, 5, reason="r", node=N1, resource_id=G0, expires=5
    )
    unknown_device = command("m3", CommandAction.QUARANTINE, 5, reason="r", node=N2, resource_id=G0)
    for c in (no_reason, past, unknown_device):
        assert kinds(run.feed(c)) == [K.COMMAND_REJECTED]
    assert device(run).state is GovState.AVAILABLE


def test_an_operator_may_not_release_a_system_quarantine_before_stability() -> None:
    run, _ = quarantined_then_healthy()
    release = command("x1", CommandAction.RELEASE, 11, reason="looks fine", node=N1, resource_id=G0)
    assert kinds(run.feed(release)) == [K.COMMAND_REJECTED]
    as_admin = replace(release, command_id="x2", role=Role.ADMIN)  # admin, but no break-glass
    assert kinds(run.feed(as_admin)) == [K.COMMAND_REJECTED]
    assert device(run).state is GovState.RECOVERING


def test_an_operator_may_release_a_system_quarantine_in_the_stability_stage() -> None:
    run, _ = quarantined_then_healthy(replace(POLICY, recovery_probe=False, recovery_canary=False))
    decisions = run.feed(
        command("x1", CommandAction.RELEASE, 11, reason="passed", node=N1, resource_id=G0)
    )
    assert without_state_changes(decisions) == [K.COMMAND_ACCEPTED, K.QUARANTINE_RELEASED]
    released = one(decisions, K.QUARANTINE_RELEASED)
    assert (released.details["actor"], released.details["reason"]) == ("alice", "passed")
    assert device(run).state is GovState.AVAILABLE


def test_break_glass_needs_an_admin_and_a_reason_and_releases_a_system_quarantine() -> None:
    run, _ = quarantined_then_healthy()
    glass = command(
        "b1",
        CommandAction.RELEASE,
        11,
        reason="vendor says fine",
        node=N1,
        resource_id=G0,
        break_glass=True,
    )
    assert kinds(run.feed(glass)) == [K.COMMAND_REJECTED]  # operator
    no_reason = replace(glass, command_id="b2", role=Role.ADMIN, reason="")
    assert kinds(run.feed(no_reason)) == [K.COMMAND_REJECTED]
    assert device(run).state is GovState.RECOVERING
    decisions = run.feed(replace(glass, command_id="b3", role=Role.ADMIN, actor="root"))
    released = one(decisions, K.QUARANTINE_RELEASED)
    assert released.details["actor"] == "root"
    assert released.details["reason"] == "break-glass: vendor says fine"
    assert device(run).state is GovState.AVAILABLE
    assert device(run).quarantine is None


def test_extend_and_release_naming_another_quarantine_are_rejected() -> None:
    run = gov()
    run.feed(watermark(0))
    run.feed(transition(N1, G0, H, 1, 0))
    run.feed(
        command("m1", CommandAction.QUARANTINE, 5, reason="r", node=N1, resource_id=G0, expires=50)
    )
    run.feed(watermark(50))  # manual/m1 expired
    run.feed(command("m2", CommandAction.QUARANTINE, 60, reason="r", node=N1, resource_id=G0))
    stale = command(
        "e1",
        CommandAction.EXTEND,
        61,
        reason="r",
        node=N1,
        resource_id=G0,
        expires=500,
        quarantine_id="manual/m1",
    )
    assert kinds(run.feed(stale)) == [K.COMMAND_REJECTED]
    release_stale = replace(stale, command_id="x1", action=CommandAction.RELEASE)
    assert kinds(run.feed(release_stale)) == [K.COMMAND_REJECTED]
    assert device(run).state is GovState.QUARANTINED
    release = replace(release_stale, command_id="x2", quarantine_id="manual/m2")
    assert one(run.feed(release), K.QUARANTINE_RELEASED).details["quarantineID"] == "manual/m2"


def test_a_repeated_command_id_is_ignored() -> None:
    run = gov()
    run.feed(transition(N1, G0, H, 1, 0))
    quarantine = command("m1", CommandAction.QUARANTINE, 5, reason="r", node=N1, resource_id=G0)
    assert K.QUARANTINED in kinds(run.feed(quarantine))
    assert run.feed(quarantine) == []
    # Same id, another action: still the same command (a client retry), ignored.
    assert run.feed(replace(quarantine, action=CommandAction.RELEASE)) == []
    assert device(run).state is GovState.QUARANTINED
    rejected = command("v1", CommandAction.PAUSE, 6, role=Role.VIEWER)
    assert kinds(run.feed(rejected)) == [K.COMMAND_REJECTED]
    assert run.feed(replace(rejected, role=Role.ADMIN)) == []  # a rejected id is spent too
    assert not run.state.fleet.automation_paused


def test_paused_automation_defers_restrictions_and_resume_performs_them() -> None:
    run = gov()
    run.feed(watermark(0))
    run.feed(transition(N1, G0, H, 1, 0))
    run.feed(transition(N1, G1, H, 1, 0))
    decisions = run.feed(command("p1", CommandAction.PAUSE, 1, reason="maintenance"))
    assert kinds(decisions) == [K.COMMAND_ACCEPTED, K.AUTOMATION_PAUSED]
    assert decisions[1].alert is AlertAction.FIRING

    decisions = run.feed(transition(N1, G0, U, 2, 10))
    deferred = one(decisions, K.RESTRICTION_DEFERRED)
    assert deferred.details["action"] == "quarantine"
    assert K.QUARANTINED not in kinds(decisions)
    assert device(run).state is GovState.DEFERRED

    run.feed(transition(N1, G1, UNK, 2, 10))
    decisions = run.feed(watermark(100))  # G1's tolerance (60 s) is over
    assert one(decisions, K.RESTRICTION_DEFERRED).details["action"] == "restrict"
    assert K.RESTRICTED not in kinds(decisions)
    assert device(run, N1, G1).state is GovState.DEFERRED
    assert run.feed(watermark(200)) == []  # still paused: no repeated deferral

    decisions = run.feed(command("p2", CommandAction.RESUME, 300))
    assert without_state_changes(decisions)[:2] == [K.COMMAND_ACCEPTED, K.AUTOMATION_RESUMED]
    assert one(decisions, K.AUTOMATION_RESUMED).alert is AlertAction.RESOLVED
    assert one(decisions, K.QUARANTINED).resource_id == G0
    assert one(decisions, K.RESTRICTED).resource_id == G1
    assert states(run, (N1, G0), (N1, G1)) == [GovState.QUARANTINED, GovState.RESTRICTED]


def test_pause_and_resume_need_an_operator() -> None:
    run = gov()
    assert kinds(run.feed(command("p1", CommandAction.PAUSE, 1, role=Role.VIEWER))) == [
        K.COMMAND_REJECTED
    ]
    assert not run.state.fleet.automation_paused


def test_manual_quarantine_is_not_held_back_by_paused_automation() -> None:
    run = gov()
    run.feed(transition(N1, G0, H, 1, 0))
    run.feed(command("p1", CommandAction.PAUSE, 1, reason="maintenance"))
    decisions = run.feed(
        command("m1", CommandAction.QUARANTINE, 2, reason="r", node=N1, resource_id=G0)
    )
    assert K.QUARANTINED in kinds(decisions)
    assert device(run).state is GovState.QUARANTINED


# --- rate limits -----------------------------------------------------------------------------------


def test_the_node_bucket_defers_quarantines_past_its_burst_and_refills_on_event_time() -> None:
    policy = replace(POLICY, restrict_node_burst=2, restrict_node_refill_seconds=60.0)
    run = gov(policy)
    run.feed(watermark(0))
    for rid in (G0, G1, G2):
        run.feed(transition(N1, rid, U, 1, 0))
    assert states(run, (N1, G0), (N1, G1), (N1, G2)) == [
        GovState.QUARANTINED,
        GovState.QUARANTINED,
        GovState.DEFERRED,
    ]
    deferred = [d for d in run.decisions if d.kind is K.RESTRICTION_DEFERRED]
    assert len(deferred) == 1
    assert "rate limit" in deferred[0].details["blockedBy"]
    run.feed(transition(N2, G0, U, 1, 0))  # another node has its own bucket
    assert device(run, N2, G0).state is GovState.QUARANTINED
    assert run.feed(watermark(59)) == []
    decisions = run.feed(watermark(60))
    assert one(decisions, K.QUARANTINED).resource_id == G2
    assert one(decisions, K.QUARANTINED).at == at(60)


# --- decision ids ------------------------------------------------------------------------------------


def test_decision_ids_are_seq_and_index() -> None:
    run, _ = quarantined_then_healthy()
    run.feed(lease(N1, G0, "A", 11))
    run.feed(report(N1, G0, RecoveryStage.PROBE, True, "A", 1, 12))
    run.feed(transition(N1, G1, U, 1, 13))
    run.feed(watermark(5000))
    by_seq: dict[int, list[Decision]] = {}
    for d in run.decisions:
        by_seq.setdefault(d.seq, []).append(d)
    assert len(by_seq) >= 5
    for seq, decisions in by_seq.items():
        assert [d.index for d in decisions] == list(range(len(decisions)))
        assert [d.decision_id for d in decisions] == [f"{seq}.{i}" for i in range(len(decisions))]
    assert sorted(by_seq) == [d.seq for d in run.decisions if d.index == 0]


# --- found bugs (these fail until the core is fixed) -----------------------------------------------


def test_a_recovery_started_after_a_watermark_jump_gets_its_whole_stage_timeout() -> None:
    """After the hold-down, a recovery started by a watermark that jumped past the hold-down end
    (e.g. the watcher was down) must leave the executor its stage timeout: no RecoveryFailed in
    the same step, and the probe can still be leased."""
    run, _ = quarantined_then_healthy()
    run.feed(lease(N1, G0, "A", 11))
    run.feed(report(N1, G0, RecoveryStage.PROBE, False, "A", 1, 12))  # hold-down until 310
    decisions = run.feed(watermark(1000))
    assert without_state_changes(decisions) == [K.RECOVERY_STAGE_STARTED]
    assert device(run).state is GovState.RECOVERING
    assert K.LEASE_GRANTED in kinds(run.feed(lease(N1, G0, "A", 1000)))


def test_break_glass_never_reuses_the_released_quarantine_id() -> None:
    """A break-glass release of a device that still reads Unhealthy (same statusVersion) must not
    quarantine it again under the id just released (the quarantines table's key)."""
    run = gov()
    run.feed(transition(N1, G0, U, 1, 0))
    glass = command(
        "b1",
        CommandAction.RELEASE,
        5,
        role=Role.ADMIN,
        reason="vendor: false alarm",
        node=N1,
        resource_id=G0,
        break_glass=True,
    )
    decisions = run.feed(glass)
    released = one(decisions, K.QUARANTINE_RELEASED)
    again = [d for d in decisions if d.kind is K.QUARANTINED]
    assert [d.details["quarantineID"] for d in again] != [released.details["quarantineID"]]


def test_the_node_bucket_bounds_restrictions_by_their_decision_time() -> None:
    """Burst 2: at most 2 automatic restrictions of a node at one decision time. A tolerance
    deadline fired late (a lagging partition held the watermark) must not be dated in a past
    interval whose budget was already spent."""
    policy = replace(
        POLICY,
        unknown_tolerance_seconds=100.0,
        restrict_node_burst=2,
        restrict_node_refill_seconds=60.0,
    )
    run = gov(policy)
    run.feed(transition(N1, G0, UNK, 1, 100))  # deadline 200
    run.feed(transition(N1, G1, U, 1, 200))  # quarantined at 200
    run.feed(transition(N1, G2, U, 1, 200))  # quarantined at 200: the burst is spent
    run.feed(transition(N1, G3, U, 1, 1000))  # quarantined at 1000
    run.feed(watermark(1000, 0, 2))
    run.feed(watermark(1000, 1, 2))  # G0's deadline fires now
    automatic = [
        d.at
        for d in run.decisions
        if d.kind is K.RESTRICTED or (d.kind is K.QUARANTINED and d.details["actor"] == "system")
    ]
    assert len(automatic) == 4
    assert automatic.count(at(200)) <= 2


def test_the_fleet_bucket_bounds_restrictions_by_their_decision_time() -> None:
    """Fleet burst 2: partition 1 runs ahead of partition 0; its quarantine at 1000 refills the
    fleet bucket, and a third quarantine dated 100 takes a token earned after 100."""
    run = gov(replace(POLICY, restrict_fleet_burst=2, restrict_fleet_refill_seconds=20.0))
    run.feed(transition(N1, G0, U, 1, 100, partition=0))
    run.feed(transition(N1, G1, U, 1, 100, partition=0))  # the fleet burst is spent at 100
    run.feed(transition(N2, G0, U, 1, 1000, partition=1))
    run.feed(transition(N1, G2, U, 1, 100, partition=0))
    times = [d.at for d in run.decisions if d.kind is K.QUARANTINED]
    assert times.count(at(100)) <= 2


def test_a_node_unknown_alert_stays_open_while_a_device_reads_unknown() -> None:
    """A device reading Unknown in Pod status opened the node's Unknown incident; the node's
    heartbeat is lost and comes back. The device still reads Unknown (and is Restricted), so an
    Unknown incident of the node must be firing at the end."""
    run = gov()
    run.feed(watermark(0))
    run.feed(heartbeat(N1, 0))
    run.feed(transition(N1, G0, UNK, 1, 0))  # node-unknown incident fires
    run.feed(watermark(95))  # heartbeat lost at 30; G0's window ends at 60
    run.feed(heartbeat(N1, 95))  # heartbeat back
    assert device(run).state is GovState.RESTRICTED
    assert device(run).effective_reason == "pod-status-unknown"
    firing: set[str] = set()
    for d in run.decisions:
        if d.incident is not None and d.incident.startswith(f"node-unknown/{N1}/"):
            if d.alert is AlertAction.FIRING:
                firing.add(d.incident)
            elif d.alert is AlertAction.RESOLVED:
                firing.discard(d.incident)
    assert firing, "no node-unknown incident is firing for a Restricted device reading Unknown"
