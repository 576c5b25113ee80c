"""Driver-published device taints as a fault signal (issue 15 item 1), through ``machine.step``.

Golden cases from the public reports: the NVIDIA DRA driver taints a device in its ResourceSlice on
a fatal XID (``gpu.nvidia.com/xid=79``, NoSchedule; non-fatal XIDs get effect None) and never
removes the taint by itself (kubernetes-sigs/dra-driver-nvidia-gpu#1455); a batch Pod that failed
on the GPU keeps a frozen Healthy status (kubernetes/kubernetes#132978), so the taint is the only
fault signal.
"""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from services.domain.events import DeviceSource
from services.domain.governance.decisions import DecisionKind
from services.domain.governance.device_state import GovState
from services.domain.governance.input_codec import decode_input, encode_input
from services.domain.governance.inputs import GovernanceInput, HealthTransition, RecoveryStage
from services.domain.governance.policy import GovernancePolicy
from services.domain.governance.state import GovernorState
from services.domain.governance.taint_inputs import DeviceTaintsObserved, SliceTaint
from services.domain.inventory.events import InventoryKind
from services.domain.node_events import WatcherTick
from services.domain.watch.inventory_tracker import InventoryTracker
from services.domain.watch.pod_tracker import WatchKind
from services.processes.enforcement.desired import DesiredRule, Effect, rule_manifest
from streams.forward_taints import slice_taints
from tests.governance.harness import GovernanceRun
from tests.governance.strategies import at, lease, report, transition, watermark
from tests.governance.test_event_order import SETTINGS, Log, govern
from tests.governance.test_machine import N1, POLICY, H, U, kinds, one

K = DecisionKind
EXAMPLES = Path(__file__).parents[2].parent / "shared" / "examples"
DRIVER, POOL = "gpu.nvidia.com", "node-1"
D0, D1 = "gpu-0", "gpu-1"
ID0, ID1 = f"{DRIVER}/{POOL}/{D0}", f"{DRIVER}/{POOL}/{D1}"
XID = "gpu.nvidia.com/xid"
SLICE = "node-1-gpu.nvidia.com-x7k2p"


def taints(
    t: float,
    *tainted: SliceTaint,
    devices: tuple[str, ...] = (D0, D1),
    node: str = N1,
    deleted: bool = False,
    slice_name: str = SLICE,
) -> DeviceTaintsObserved:
    return DeviceTaintsObserved(
        node=node,
        driver=DRIVER,
        pool=POOL,
        slice=slice_name,
        devices=devices,
        taints=tainted,
        deleted=deleted,
        observed_at=at(t),
    )


def xid(
    device: str = D0, value: str | None = "79", effect: str = "NoSchedule", added: float | None = 3
) -> SliceTaint:
    return SliceTaint(device, XID, value, effect, None if added is None else at(added))


def dra_healthy(version: int, t: float, device_id: str = ID0) -> HealthTransition:
    """The frozen Healthy status of the batch Pod that ran on the device (resolved identity)."""
    return replace(
        transition(
            N1, "k8s.gpu.nvidia.com/claim=abc-gpu-0", H, version, t, source=DeviceSource.DRA
        ),
        resource_name="claim:gpu",
        device_id=device_id,
    )


def test_a_fatal_xid_taint_quarantines_with_its_reason_effect_and_time() -> None:
    run = GovernanceRun(policy=POLICY)
    run.feed(dra_healthy(10, 0))
    decisions = run.feed(taints(5, xid()))
    q = one(decisions, K.QUARANTINED)
    assert (q.node, q.resource_id) == (N1, ID0)
    assert q.details["reason"] == "driver-taint:gpu.nvidia.com/xid=79"
    assert q.details["taintEffect"] == "NoSchedule"
    assert q.details["taintAddedAt"] == "2026-11-29T12:00:03Z"  # timeAdded, not the event time
    assert q.details["taintKey"] == XID and q.details["taintValue"] == "79"
    device = run.state.devices[(N1, ID0)]
    assert device.state is GovState.QUARANTINED
    assert device.quarantine is not None and device.quarantine.confirmed_fault
    assert device.effective_reason == "driver-taint:gpu.nvidia.com/xid=79"
    assert (N1, ID1) not in run.state.devices  # untainted devices of the slice are not governed


def test_without_time_added_the_taint_is_dated_by_the_event_time() -> None:
    run = GovernanceRun(policy=POLICY)
    q = one(run.feed(taints(7, xid(added=None, effect="NoExecute"))), K.QUARANTINED)
    assert q.details["taintAddedAt"] == "2026-11-29T12:00:07Z"
    assert q.details["taintEffect"] == "NoExecute"


def test_a_device_the_governor_never_saw_is_governed_from_its_taint() -> None:
    run = GovernanceRun(policy=POLICY)
    one(run.feed(taints(5, xid())), K.QUARANTINED)
    device = run.state.devices[(N1, ID0)]
    assert device.source is DeviceSource.DRA and device.resource_name == DRIVER


def test_removal_starts_the_staged_recovery_and_releases_nothing() -> None:
    run = GovernanceRun(policy=POLICY)
    run.feed(dra_healthy(10, 0))
    run.feed(taints(5, xid()))
    decisions = run.feed(taints(50))  # the driver cleared it (e.g. the plugin restarted)
    assert K.QUARANTINE_RELEASED not in kinds(decisions)
    started = one(decisions, K.RECOVERY_STAGE_STARTED)
    assert started.details["stage"] == RecoveryStage.PROBE.value
    device = run.state.devices[(N1, ID0)]
    assert device.state is GovState.RECOVERING and device.driver_taint is None
    assert K.QUARANTINE_RELEASED not in kinds(run.feed(watermark(60)))
    # probe and canary pass, the stability window runs out: only then the release
    run.feed(lease(N1, ID0, "exec", 61))
    run.feed(report(N1, ID0, RecoveryStage.PROBE, True, "exec", 1, 62))
    run.feed(lease(N1, ID0, "exec", 63))
    passed = run.feed(report(N1, ID0, RecoveryStage.CANARY, True, "exec", 2, 64))
    stability = [d for d in passed if d.kind is K.RECOVERY_STAGE_STARTED]
    assert [d.details["stage"] for d in stability] == [RecoveryStage.STABILITY.value]
    end = (stability[0].at - at(0)).total_seconds() + POLICY.recovery_stability_seconds
    assert K.QUARANTINE_RELEASED not in kinds(run.feed(watermark(end - 1)))
    released = one(run.feed(watermark(end)), K.QUARANTINE_RELEASED)
    assert released.details["reason"] == "recovered"


def test_a_taint_back_during_recovery_fails_it() -> None:
    run = GovernanceRun(policy=POLICY)
    run.feed(taints(5, xid()))
    run.feed(taints(50))
    decisions = run.feed(taints(60, xid(value="48", added=59)))
    failed = one(decisions, K.RECOVERY_FAILED)
    assert "Unhealthy" in failed.details["reason"]
    assert run.state.devices[(N1, ID0)].state is GovState.QUARANTINED


def test_a_deleted_slice_clears_its_taints_as_evidence_for_recovery() -> None:
    run = GovernanceRun(policy=POLICY)
    run.feed(taints(5, xid()))
    decisions = run.feed(taints(50, xid(), deleted=True))
    one(decisions, K.RECOVERY_STAGE_STARTED)
    assert K.QUARANTINE_RELEASED not in kinds(decisions)


def test_a_device_that_leaves_the_slice_loses_the_slices_taint() -> None:
    run = GovernanceRun(policy=POLICY)
    run.feed(taints(5, xid()))
    one(run.feed(taints(50, devices=(D1,))), K.RECOVERY_STAGE_STARTED)


def test_another_slice_does_not_clear_a_taint_it_did_not_publish() -> None:
    run = GovernanceRun(policy=POLICY)
    run.feed(taints(5, xid()))
    assert run.feed(taints(50, devices=(D0,), slice_name="other-slice")) == []
    assert run.state.devices[(N1, ID0)].driver_taint is not None


def test_the_same_fault_with_a_new_time_decides_nothing() -> None:
    run = GovernanceRun(policy=POLICY)
    run.feed(taints(5, xid()))
    assert run.feed(taints(6, xid(added=6))) == []


def test_a_key_outside_the_set_and_an_informational_effect_are_ignored() -> None:
    run = GovernanceRun(policy=POLICY)
    other = SliceTaint(D0, "example.com/maintenance", "true", "NoSchedule", at(1))
    assert run.feed(taints(5, other, xid(device=D1, value="13", effect="None"))) == []
    assert run.feed(taints(6, xid(effect="PreferNoSchedule"))) == []  # unknown effect: None
    assert run.state.devices == {}


def test_the_key_set_is_the_policys() -> None:
    policy = replace(POLICY, driver_taint_keys=("example.com/fault",))
    run = GovernanceRun(policy=policy)
    assert run.feed(taints(5, xid())) == []
    fault = SliceTaint(D0, "example.com/fault", None, "NoSchedule", None)
    q = one(run.feed(taints(6, fault)), K.QUARANTINED)
    assert q.details["reason"] == "driver-taint:example.com/fault"


def test_the_default_keys_are_the_nvidia_dra_drivers_fatal_ones() -> None:
    assert GovernancePolicy().driver_taint_keys == ("gpu.nvidia.com/gpu-lost", "gpu.nvidia.com/xid")


def test_a_pod_status_unhealthy_after_the_taint_keeps_one_quarantine() -> None:
    run = GovernanceRun(policy=POLICY)
    run.feed(taints(5, xid()))
    unhealthy = replace(dra_healthy(11, 10), health=U)
    assert K.QUARANTINED not in kinds(run.feed(unhealthy))
    assert run.state.devices[(N1, ID0)].state is GovState.QUARANTINED


def test_the_record_and_the_taint_survive_the_wire_and_a_restart() -> None:
    record = taints(5, xid(), xid(device=D1, value=None, effect="None", added=None))
    assert decode_input(encode_input(record)) == record
    run = GovernanceRun(policy=POLICY)
    run.feed(record)
    snap = orjson.loads(orjson.dumps(run.state.snapshot()))
    restored = GovernorState.restore(snap["devices"], snap["nodes"], snap["fleet"], 30.0)
    assert restored.devices[(N1, ID0)].driver_taint == run.state.devices[(N1, ID0)].driver_taint
    assert restored.snapshot() == run.state.snapshot()


# --- order independence (as tests.governance.test_event_order checks it) -------------------------


@st.composite
def taint_logs(draw: st.DrawFn) -> list[Log]:
    """Two partitions: Pod status transitions of the DRA devices in one, slice taints in the
    other, on random event times."""
    nodes = ["n0", "n1"]
    logs: list[Log] = []
    for p in range(2):
        clock, version = 0.0, 1
        log: Log = []
        for _ in range(draw(st.integers(2, 15))):
            clock += draw(st.sampled_from([0, 1, 5, 20, 90]))
            node = draw(st.sampled_from(nodes))
            record: GovernanceInput
            if p == 0:
                version += 1
                health = draw(st.sampled_from([H, H, U]))
                device = draw(st.sampled_from([ID0, ID1]))
                record = replace(dra_healthy(version, clock, device), node=node, health=health)
            else:
                tainted = draw(
                    st.lists(
                        st.builds(
                            SliceTaint,
                            st.sampled_from([D0, D1]),
                            st.sampled_from([XID, "example.com/other"]),
                            st.sampled_from(["79", "48"]),
                            st.sampled_from(["NoSchedule", "NoExecute", "None"]),
                            st.none(),
                        ),
                        max_size=2,
                    )
                )
                record = replace(taints(clock, *tainted), node=node)
            log.append((record, at(clock)))
        log.append((WatcherTick(p, at(clock + 1000)), at(clock + 1000)))
        logs.append(log)
    return logs


@SETTINGS
@given(taint_logs(), st.integers(0, 2**32), st.integers(0, 2**32))
def test_taints_decide_alike_whatever_the_batching_interleaving_or_restarts(
    logs: list[Log], seed_a: int, seed_b: int
) -> None:
    assert govern(logs, seed_a) == govern(logs, seed_b)


def test_the_property_sees_taints_quarantine() -> None:
    """The generator reaches the rule: one fixed log quarantines through a taint."""
    logs: list[Log] = [
        [(WatcherTick(0, at(1000)), at(1000))],
        [(taints(5, xid()), at(5)), (WatcherTick(1, at(1000)), at(1000))],
    ]
    decisions, _ = govern(logs, random.Random(1).randrange(2**32))
    assert any(b'"driver-taint:gpu.nvidia.com/xid=79"' in d for d in decisions)


# --- DeviceTaintRules: the watcher's tracker -> the forwarder's record -> machine.step ------------


def rules_run(*items: tuple[str, dict[str, Any]], keys: tuple[str, ...] | None = None) -> Any:
    """Feed watch objects (``("slice" | "rule", object)``) through the watcher's inventory tracker
    and the forwarder's conversion into the governor, as the pipeline does; the run."""
    policy = POLICY if keys is None else replace(POLICY, driver_taint_keys=keys)
    run = GovernanceRun(policy=policy)
    tracker = InventoryTracker()
    for n, (what, obj) in enumerate(items):
        if what == "slice":
            outcome = tracker.event(WatchKind.ADDED, InventoryKind.RESOURCE_SLICE, obj, at(n))
        else:
            outcome = tracker.rule_event(WatchKind.ADDED, obj, at(n))
        for event in outcome.events:
            record = slice_taints(event)
            assert record is not None
            run.feed(record)
    return run


SLICE_A = "gpu.example.com/gpu-node-a/gpu-2"


def test_an_administrators_rule_quarantines_the_device_it_selects() -> None:
    run = rules_run(("slice", example_slice()), ("rule", admin_rule()))
    [q] = [d for d in run.decisions if d.kind is K.QUARANTINED]
    assert (q.node, q.resource_id) == ("gpu-node-a", SLICE_A)
    assert q.details["reason"] == "driver-taint:gpu.nvidia.com/xid=79"
    assert q.details["taintRule"] == "sre-xid-gpu-2" and q.details["taintEffect"] == "NoExecute"


def test_an_enforce_owned_rule_is_never_read_back_as_a_fault() -> None:
    # even with its own key in the set: the rule is left out by its labels, not by its key
    run = rules_run(
        ("slice", example_slice()), ("rule", enforce_rule()), keys=("devicestate.io/quarantined",)
    )
    assert run.decisions == [] and run.state.devices == {}


def example_slice() -> dict[str, Any]:
    obj: dict[str, Any] = json.loads((EXAMPLES / "dra-resourceslice-gpu-node-a.json").read_text())
    return obj


def admin_rule() -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1beta2",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "sre-xid-gpu-2", "resourceVersion": "3"},
        "spec": {
            "deviceSelector": {
                "driver": "gpu.example.com",
                "pool": "gpu-node-a",
                "device": "gpu-2",
            },
            "taint": {"key": XID, "value": "79", "effect": "NoExecute"},
        },
    }


def enforce_rule() -> dict[str, Any]:
    desired = DesiredRule(
        name="devicestate-quarantine-abc",
        quarantine_id=f"gpu-node-a/{SLICE_A}@7",
        node="gpu-node-a",
        driver="gpu.example.com",
        pool="gpu-node-a",
        device="gpu-2",
        kind="system",
        reason="pod-status-unhealthy",
        effect=Effect.NO_SCHEDULE,
    )
    return rule_manifest(desired)


def test_a_reason_is_bounded_and_has_no_trailing_equals_sign() -> None:
    from datetime import UTC, datetime

    from services.domain.governance.taint_state import VALUE_MAX, DriverTaint

    since = datetime(2026, 11, 29, tzinfo=UTC)
    long = DriverTaint("gpu.nvidia.com/xid", "7" * 5000, "NoSchedule", since, "s")
    assert long.reason == "driver-taint:gpu.nvidia.com/xid=" + "7" * (VALUE_MAX - 1) + "…"
    bare = DriverTaint("gpu.nvidia.com/gpu-lost", None, "NoExecute", since, "s")
    assert bare.reason == "driver-taint:gpu.nvidia.com/gpu-lost"
