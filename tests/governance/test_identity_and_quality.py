"""The governor keys devices on their physical identity and turns inventory conflicts into
data-quality alerts (issue 4 inputs to the issue 3 core)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from services.domain.events import DeviceSource, Health
from services.domain.governance.decisions import AlertAction, DecisionKind
from services.domain.governance.device_state import GovState
from services.domain.governance.input_codec import decode_input, encode_input
from services.domain.governance.inputs import HealthTransition, InventoryConflict
from tests.governance.harness import GovernanceRun

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
GPU_2 = "gpu.example.com/gpu-node-a/gpu-2"


def cdi(claim_uid: str, version: int, health: Health, seconds: int) -> HealthTransition:
    return HealthTransition(
        node="gpu-node-a",
        resource_id=f"k8s.gpu.example.com/claim={claim_uid}-gpu-2",
        resource_name="claim:gpus/main",
        source=DeviceSource.DRA,
        health=health,
        status_version=version,
        observed_at=T0 + timedelta(seconds=seconds),
        partition=0,
        offset=version,
        resource_claim=f"claim-{claim_uid}",
        device_id=GPU_2,
        identity="resolved",
        uuid="GPU-0e18c688-f23f-5391-a735-114e22f43e9f",
    )


def test_a_quarantine_follows_the_physical_gpu_across_claims() -> None:
    """The same GPU under a new claim reports a new CDI-form resourceID: still one device, still
    quarantined, and no second quarantine."""
    run = GovernanceRun()
    run.feed(cdi("aaaa", 10, Health.UNHEALTHY, 0))
    run.feed(cdi("bbbb", 20, Health.UNHEALTHY, 60))  # a restarted Pod's new claim
    assert list(run.state.devices) == [("gpu-node-a", GPU_2)]
    device = run.state.devices[("gpu-node-a", GPU_2)]
    assert device.state is GovState.QUARANTINED
    assert device.reported_id == "k8s.gpu.example.com/claim=bbbb-gpu-2"
    assert device.uuid == "GPU-0e18c688-f23f-5391-a735-114e22f43e9f"
    assert [
        d.details["quarantineID"] for d in run.decisions if d.kind is DecisionKind.QUARANTINED
    ] == [f"gpu-node-a/{GPU_2}@10"]


def test_inventory_conflicts_raise_and_clear_one_data_quality_alert() -> None:
    run = GovernanceRun()
    raised = InventoryConflict("plugin-and-dra", "gpu-node-a", "GPU-1", "both", True, T0)
    cleared = InventoryConflict("plugin-and-dra", "gpu-node-a", "GPU-1", "both", False, T0)
    (first,) = run.feed(raised)
    (second,) = run.feed(cleared)
    assert first.kind is DecisionKind.DATA_QUALITY and first.alert is AlertAction.FIRING
    assert second.alert is AlertAction.RESOLVED and second.incident == first.incident
    assert decode_input(encode_input(raised)) == raised
    assert decode_input(encode_input(cdi("x", 1, Health.HEALTHY, 0))) == cdi(
        "x", 1, Health.HEALTHY, 0
    )
