"""The governor holds one record per GPU even when the worker identified it late (issue 10).

A DRA device forwarded before its ResourceClaim was read is keyed on its CDI-form resourceID (a
*ghost*); ``DeviceIdentified`` merges it onto ``driver/pool/device``.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from services.domain.events import DeviceSource, Health
from services.domain.governance.decisions import DecisionKind
from services.domain.governance.device_state import GovState, QuarantineStatus
from services.domain.governance.input_codec import decode_input, encode_input
from services.domain.governance.inputs import DeviceIdentified, HealthTransition
from services.domain.governance.state import GovernorState
from tests.governance.harness import GovernanceRun

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
NODE = "gpu-node-a"
GPU_2 = "gpu.example.com/gpu-node-a/gpu-2"
UUID = "GPU-0e18c688-f23f-5391-a735-114e22f43e9f"


def cdi(claim_uid: str) -> str:
    return f"k8s.gpu.example.com/claim={claim_uid}-gpu-2"


def seen(
    claim_uid: str, version: int, health: Health, seconds: int, resolved: bool
) -> HealthTransition:
    """A transition of GPU_2 reported under claim ``claim_uid``, resolved or not."""
    return HealthTransition(
        node=NODE,
        resource_id=cdi(claim_uid),
        resource_name="claim:gpus/main",
        source=DeviceSource.DRA,
        health=health,
        status_version=version,
        observed_at=T0 + timedelta(seconds=seconds),
        partition=0,
        offset=version,
        resource_claim=f"claim-{claim_uid}",
        device_id=GPU_2 if resolved else None,
        identity="resolved" if resolved else "unresolved",
        uuid=UUID if resolved else None,
    )


def identified(claim_uid: str, seconds: int) -> DeviceIdentified:
    return DeviceIdentified(NODE, cdi(claim_uid), GPU_2, T0 + timedelta(seconds=seconds), UUID)


def test_a_ghost_is_rekeyed_onto_the_physical_device_with_its_quarantine() -> None:
    run = GovernanceRun()
    run.feed(seen("aaaa", 10, Health.UNHEALTHY, 0, resolved=False))
    assert list(run.state.devices) == [(NODE, cdi("aaaa"))]
    decided = run.feed(identified("aaaa", 5))
    assert list(run.state.devices) == [(NODE, GPU_2)]
    device = run.state.devices[(NODE, GPU_2)]
    assert device.state is GovState.QUARANTINED and device.uuid == UUID
    assert device.merged_ids == (cdi("aaaa"),)
    assert device.quarantine is not None and device.quarantine.resource_id == GPU_2
    assert (NODE, cdi("aaaa")) in run.state.dirty_devices  # its row is deleted
    assert [d.kind for d in decided] == [DecisionKind.IDENTITY_MERGED]
    # A transition still keyed on the reported ID (forwarded before the worker knew) follows.
    run.feed(seen("aaaa", 20, Health.HEALTHY, 60, resolved=False))
    assert list(run.state.devices) == [(NODE, GPU_2)]
    assert run.state.devices[(NODE, GPU_2)].state is GovState.RECOVERING


def test_a_ghost_and_the_physical_record_merge_into_the_more_restrictive_one() -> None:
    """The issue's case: the physical record is Quarantined, the ghost Available."""
    run = GovernanceRun()
    run.feed(seen("aaaa", 10, Health.HEALTHY, 0, resolved=False))  # the ghost
    run.feed(seen("bbbb", 20, Health.UNHEALTHY, 30, resolved=True))  # a new claim, resolved
    assert {k[1] for k in run.state.devices} == {cdi("aaaa"), GPU_2}
    run.feed(identified("aaaa", 40))
    assert list(run.state.devices) == [(NODE, GPU_2)]
    device = run.state.devices[(NODE, GPU_2)]
    assert device.state is GovState.QUARANTINED
    assert device.status_version == 20 and device.reported_id == cdi("bbbb")
    merged = [d for d in run.decisions if d.kind is DecisionKind.IDENTITY_MERGED]
    assert [(d.details["state"], d.details["mergedState"]) for d in merged] == [
        ("Quarantined", "Available")
    ]


def test_a_restricted_ghost_is_not_lifted_by_an_available_physical_record() -> None:
    run = GovernanceRun()
    run.feed(seen("aaaa", 10, Health.UNHEALTHY, 0, resolved=False))  # ghost: Quarantined
    run.feed(seen("bbbb", 20, Health.HEALTHY, 30, resolved=True))  # physical: Available
    run.feed(identified("aaaa", 40))
    [device] = run.state.devices.values()
    assert device.key == (NODE, GPU_2)
    # The newer observation (Healthy) is the survivor's: it starts recovery, not a release.
    assert device.state is GovState.RECOVERING and device.observed_health is Health.HEALTHY
    assert device.quarantine is not None and device.quarantine.resource_id == GPU_2


def test_two_quarantines_merge_into_one_and_the_other_is_closed_as_merged() -> None:
    run = GovernanceRun()
    run.feed(seen("aaaa", 10, Health.UNHEALTHY, 0, resolved=False))
    run.feed(seen("bbbb", 20, Health.UNHEALTHY, 30, resolved=True))
    ghost_q = run.state.devices[(NODE, cdi("aaaa"))].quarantine
    assert ghost_q is not None
    run.feed(identified("aaaa", 40))
    [device] = run.state.devices.values()
    assert (
        device.quarantine is not None and device.quarantine.quarantine_id != ghost_q.quarantine_id
    )
    assert (ghost_q.status, ghost_q.release_reason) == (QuarantineStatus.RELEASED, "merged")
    assert ghost_q.quarantine_id in run.state.touched_quarantines
    [released] = [d for d in run.decisions if d.kind is DecisionKind.QUARANTINE_RELEASED]
    assert released.details["quarantineID"] == ghost_q.quarantine_id


def test_identified_without_a_ghost_or_twice_changes_nothing() -> None:
    run = GovernanceRun()
    run.feed(seen("aaaa", 10, Health.HEALTHY, 0, resolved=True))
    before = run.state.snapshot()
    assert run.feed(identified("aaaa", 5)) == []
    assert run.state.snapshot() == before
    ghost = GovernanceRun()
    ghost.feed(seen("aaaa", 10, Health.HEALTHY, 0, resolved=False))
    ghost.feed(identified("aaaa", 5))
    once = ghost.state.snapshot()
    assert ghost.feed(identified("aaaa", 6)) == []
    assert ghost.state.snapshot() == once


def test_a_merged_state_restores_with_its_aliases_and_the_record_round_trips() -> None:
    run = GovernanceRun()
    run.feed(seen("aaaa", 10, Health.UNHEALTHY, 0, resolved=False))
    run.feed(identified("aaaa", 5))
    snapshot = run.state.snapshot()
    restored = GovernorState.restore(snapshot["devices"], snapshot["nodes"], snapshot["fleet"], 60)
    assert restored.snapshot() == snapshot
    assert restored.aliases == {(NODE, cdi("aaaa")): (NODE, GPU_2)}
    record = identified("aaaa", 5)
    assert decode_input(encode_input(record)) == record
    assert decode_input(encode_input(dataclasses.replace(record, uuid=None))).uuid is None
    placed = dataclasses.replace(record, partition=2, offset=41)
    assert decode_input(encode_input(placed)) == placed


def test_the_node_unknown_incident_closes_when_its_only_member_is_merged_away() -> None:
    run = GovernanceRun()
    run.feed(seen("aaaa", 10, Health.UNKNOWN, 0, resolved=False))  # ghost: UnknownTolerated
    run.feed(seen("bbbb", 20, Health.UNHEALTHY, 30, resolved=True))  # physical: Quarantined
    assert run.state.nodes[NODE].unknown_incident is not None
    decided = run.feed(identified("aaaa", 40))
    [device] = run.state.devices.values()
    assert device.state is GovState.QUARANTINED and device.key == (NODE, GPU_2)
    assert run.state.nodes[NODE].unknown_incident is None  # its only member left
    assert DecisionKind.INCIDENT_RESOLVED in [d.kind for d in decided]
