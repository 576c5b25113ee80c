"""Work a Pod change's observations share (issue 12, the health agent's CPU per observation):
the Pod's field checks once per schema-2 record, its containers and claim decoded once, and one
``Allocation`` object for the devices the change allocates. Each shortcut gives what the work it
replaces gives."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from services.adapters.projection.batch_plan import plan_batch
from services.domain.directory import allocation_of
from services.domain.events import ClaimRef, DeviceHealthObserved
from services.domain.limits import (
    _name_problem,
    _plain,
    device_violations,
    field_violations,
    pod_fields_violate,
)
from services.domain.log import LoggedEvent, LogPosition
from services.domain.observations import (
    DeviceHealthObservations,
    decode_observations,
    encode_observations,
    observation_positions,
)
from tests.domain.strategies import observations
from tests.domain.test_observations import gpu


@given(st.text(), st.integers(1, 300))
def test_a_plain_value_has_no_name_problem(value: str, limit: int) -> None:
    if _plain(value, limit):
        assert _name_problem("field", value, limit) is None


names = st.text(max_size=40) | st.sampled_from(["GPU-0", "x" * 1100, "a\x1fb", "caf\u200be"])


@given(observations(), names, names, names, st.none() | names)
def test_device_violations_are_the_field_violations_of_an_observation_of_a_good_pod(
    event: DeviceHealthObserved,
    resource_id: str,
    resource_name: str,
    flag: str,
    message: str | None,
) -> None:
    event = replace(
        event, resource_id=resource_id, resource_name=resource_name, flags=(flag,), message=message
    )
    pod = (event.node, event.namespace, event.pod_name, event.pod_uid, event.status_version)
    assert not pod_fields_violate(*pod)
    assert device_violations(event) == field_violations(event)
    bad_pod = replace(event, pod_uid="uid\x00")
    assert pod_fields_violate(*pod[:3], "uid\x00", event.status_version)
    assert any("podUID" in reason for reason in field_violations(bad_pod))


@given(st.sampled_from(["a\x00b", "x" * 300, "caf\u200be", "", "ok"]))
def test_a_bad_device_field_gets_the_reason_a_schema_1_record_gets(bad: str) -> None:
    good = gpu(0)
    flawed = replace(gpu(1), resource_name=bad or "x", message=bad if bad != "ok" else None)
    decoded = decode_observations(encode_observations(DeviceHealthObservations.of([good, flawed])))
    reasons = field_violations(flawed)
    if reasons:
        assert [r.reason for r in decoded.rejected] == [
            "observation 1 of 2: cannot be stored: " + "; ".join(reasons)
        ]
        assert decoded.observations == (good,)
    else:
        assert decoded.observations == (good, flawed)


def test_the_entries_of_a_record_share_their_containers_and_claim() -> None:
    claim = ClaimRef("gpus", "req", "job-gpus")
    change = [gpu(i, claim=claim) for i in range(8)]
    decoded = decode_observations(encode_observations(DeviceHealthObservations.of(change)))
    assert decoded.observations == tuple(change)
    first = decoded.observations[0]
    assert all(o.containers is first.containers for o in decoded.observations)
    assert all(o.claim is first.claim for o in decoded.observations)


def test_the_devices_of_one_pod_change_hold_one_allocation_object() -> None:
    decoded = decode_observations(
        encode_observations(DeviceHealthObservations.of([gpu(i) for i in range(8)]))
    )
    records = [LoggedEvent(p, o) for p, o in observation_positions(LogPosition("t", 0, 3), decoded)]
    plan = plan_batch({}, records)
    allocations = [r.allocations for r in plan.written.values()]
    assert len(allocations) == 8
    assert all(a == (allocation_of(decoded.observations[0]),) for a in allocations)
    assert all(a[0] is allocations[0][0] for a in allocations)
