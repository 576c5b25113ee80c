"""Schema-2 records: the observations of one Pod status change in one record (issue 12)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.domain.codec import EventDecodeError
from services.domain.event_codec import decode_event, encode_event
from services.domain.events import (
    ClaimRef,
    ContainerKind,
    ContainerRef,
    DeviceHealthObserved,
    DeviceSource,
    Event,
    Health,
    PodDevicesReleased,
    ReleaseReason,
)
from services.domain.log import LogPosition
from services.domain.observations import (
    DeviceHealthObservations,
    decode_observations,
    encode_observations,
    group_pod_changes,
    observation_positions,
)
from services.domain.records import check_key, decode_record, decode_typed_record, encode_record
from tests.domain.strategies import EPOCH, events, versions

AT = datetime(2026, 12, 3, 12, 0, 0, 250000, tzinfo=UTC)


def gpu(index: int, health: Health = Health.HEALTHY, **changes: object) -> DeviceHealthObserved:
    event = DeviceHealthObserved(
        node="gpu-node-1",
        namespace="train",
        pod_name="job-0",
        pod_uid="0b8f5c2e-7d4e-4d4a-9d8e-1f2a3b4c5d6e",
        containers=(ContainerRef("main"),),
        resource_name="nvidia.com/gpu",
        resource_id=f"GPU-{index}",
        health=health,
        source=DeviceSource.DEVICE_PLUGIN,
        status_version=4242,
        observed_at=AT,
        message="XID 79" if health is Health.UNHEALTHY else None,
    )
    return replace(event, **changes)  # type: ignore[arg-type]


GOLDEN = (
    b'{"namespace":"train","node":"gpu-node-1","observations":['
    b'{"claim":null,"containers":[{"kind":"regular","name":"main"}],"flags":[],"health":"Healthy",'
    b'"message":null,"rawHealth":null,"resourceID":"GPU-0","resourceName":"nvidia.com/gpu",'
    b'"source":"device-plugin"},'
    b'{"claim":null,"containers":[{"kind":"regular","name":"main"}],"flags":[],"health":"Unhealthy",'
    b'"message":"XID 79","rawHealth":null,"resourceID":"GPU-1","resourceName":"nvidia.com/gpu",'
    b'"source":"device-plugin"}],'
    b'"observedAt":"2026-12-03T12:00:00.250000Z","podName":"job-0",'
    b'"podUID":"0b8f5c2e-7d4e-4d4a-9d8e-1f2a3b4c5d6e","schema":2,"statusVersion":"4242",'
    b'"type":"DeviceHealthObservations"}'
)


def test_golden_bytes_and_back() -> None:
    record = DeviceHealthObservations.of([gpu(0), gpu(1, Health.UNHEALTHY)])
    assert encode_observations(record) == GOLDEN
    decoded = decode_observations(GOLDEN)
    assert decoded == record
    assert decoded.observations == (gpu(0), gpu(1, Health.UNHEALTHY))
    assert decode_record(GOLDEN) == record
    assert decode_typed_record(GOLDEN, "DeviceHealthObservations") == record
    assert encode_record(record) == GOLDEN


def test_each_observation_is_what_its_schema_1_record_gives() -> None:
    singles = [gpu(0), gpu(1, Health.UNHEALTHY), gpu(2, pod_terminated=True)]
    terminated = [replace(o, pod_terminated=True) for o in singles]
    record = DeviceHealthObservations.of(terminated)
    decoded = decode_observations(encode_observations(record))
    assert decoded.observations == tuple(decode_event(encode_event(o)) for o in terminated)
    assert b'"podTerminated":true' in encode_observations(record)


def test_schema_1_records_still_decode() -> None:
    payload = encode_event(gpu(3))
    assert decode_record(payload) == gpu(3)
    assert decode_typed_record(payload, "DeviceHealthObserved") == gpu(3)


@st.composite
def pod_changes(draw: st.DrawFn) -> list[DeviceHealthObserved]:
    version = draw(versions)
    count = draw(st.integers(min_value=1, max_value=8))
    terminated = draw(st.booleans())
    out = []
    for index in draw(st.lists(st.integers(0, 15), min_size=count, max_size=count, unique=True)):
        health = draw(st.sampled_from(list(Health)))
        out.append(
            gpu(
                index,
                health,
                status_version=version,
                observed_at=EPOCH,
                pod_terminated=terminated,
                raw_health=draw(st.one_of(st.none(), st.just("Broken"))),
                claim=draw(st.one_of(st.none(), st.just(ClaimRef("gpus", "r0", "job-0-gpus")))),
                containers=(ContainerRef("main"), ContainerRef("init", ContainerKind.INIT)),
                flags=draw(st.sampled_from([(), ("containers-truncated",)])),
                source=draw(st.sampled_from(list(DeviceSource))),
            )
        )
    return out


@given(pod_changes())
def test_round_trip(observations: list[DeviceHealthObserved]) -> None:
    record = DeviceHealthObservations.of(observations)
    decoded = decode_observations(encode_observations(record))
    assert decoded == record
    assert [o for _, o in decoded.entries()] == observations


def test_a_bad_observation_is_rejected_alone() -> None:
    obj = orjson.loads(GOLDEN)
    obj["observations"].insert(1, {"resourceID": "GPU-9", "health": "Healthy"})
    obj["observations"].append({**obj["observations"][0]})  # GPU-0 again
    obj["observations"].append({**obj["observations"][0], "resourceID": "GPU-\x00"})
    decoded = decode_observations(orjson.dumps(obj))
    assert decoded.observations == (gpu(0), gpu(1, Health.UNHEALTHY))
    assert decoded.indexes == (0, 2)
    assert [(r.index, r.reason) for r in decoded.rejected[:2]] == [
        (1, "observation 1 of 5: missing field 'containers'"),
        (3, "observation 3 of 5: resourceID 'GPU-0' repeats observation 0"),
    ]
    assert decoded.rejected[2].index == 4
    assert decoded.rejected[2].reason.startswith("observation 4 of 5: cannot be stored: ")
    alone = orjson.loads(decoded.rejected[0].original)
    assert alone["observations"] == [{"resourceID": "GPU-9", "health": "Healthy"}]
    assert alone["podUID"] == obj["podUID"]
    # The dead letter's value is a schema-2 record that is rejected for the same reason.
    assert (
        decode_observations(decoded.rejected[0].original)
        .rejected[0]
        .reason.endswith("missing field 'containers'")
    )
    position = LogPosition("t", 3, 17)
    assert [p for p, _ in observation_positions(position, decoded)] == [
        LogPosition("t", 3, 17, 0),
        LogPosition("t", 3, 17, 2),
    ]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"observations": []}, "field 'observations' is empty"),
        ({"observations": {}}, "field 'observations' must be a list"),
        ({"node": ""}, "field 'node' is empty"),
        ({"observedAt": "yesterday"}, "field 'observedAt'"),
        ({"statusVersion": "01"}, "statusVersion"),
        ({"podTerminated": "yes"}, "field 'podTerminated' must be a boolean"),
        ({"schema": 3}, "not a schema-2 DeviceHealthObservations record"),
    ],
)
def test_a_bad_record_is_refused_whole(change: dict[str, object], reason: str) -> None:
    obj = {**orjson.loads(GOLDEN), **change}
    with pytest.raises(EventDecodeError, match=reason):
        decode_observations(orjson.dumps(obj))


def test_schema_1_decoder_refuses_schema_2() -> None:
    with pytest.raises(EventDecodeError, match="unsupported schema 2"):
        decode_event(GOLDEN)


def test_the_record_is_keyed_by_its_node() -> None:
    record = decode_observations(GOLDEN)
    assert check_key(record, b"gpu-node-1") is record
    with pytest.raises(EventDecodeError, match="differs from the body's node"):
        check_key(record, b"gpu-node-2")


def test_of_refuses_observations_of_several_changes() -> None:
    with pytest.raises(ValueError, match="one Pod status change"):
        DeviceHealthObservations.of([gpu(0), gpu(1, status_version=4243)])
    with pytest.raises(ValueError, match="distinct resourceIDs"):
        DeviceHealthObservations.of([gpu(0), gpu(0)])


def test_grouping_makes_one_record_per_pod_change_and_keeps_the_rest() -> None:
    release = PodDevicesReleased(
        "gpu-node-1", "train", "job-1", "uid-1", ReleaseReason.DELETED, 9, AT, ("GPU-7",)
    )
    other = [gpu(i, pod_name="job-2", pod_uid="uid-2") for i in (4, 5)]
    events = [gpu(0), gpu(1), release, gpu(2), *other, gpu(3, status_version=4243)]
    grouped = group_pod_changes(events, 1_000_000)
    assert grouped == [
        DeviceHealthObservations.of([gpu(0), gpu(1)]),
        release,
        gpu(2),
        DeviceHealthObservations.of(other),
        gpu(3, status_version=4243),
    ]


@given(st.integers(min_value=700, max_value=4000))
def test_grouping_fits_the_budget_and_keeps_every_observation(budget: int) -> None:
    change = [gpu(i, message="m" * 100) for i in range(12)]
    grouped = group_pod_changes(change, budget)
    flat = []
    for record in grouped:
        if isinstance(record, DeviceHealthObservations):
            assert len(encode_observations(record)) <= budget
            flat.extend(record.observations)
        else:
            flat.append(record)
    assert flat == change


# Hypothesis: the Pod's fields of any length (escaped or multi-byte characters make the JSON
# longer than the text), any number of a change's devices, with or without messages.
_text = st.text(min_size=1, max_size=80)


@given(
    st.integers(min_value=2, max_value=12),
    _text,
    _text,
    st.one_of(st.none(), _text),
    st.booleans(),
)
def test_a_record_of_a_change_is_smaller_than_its_single_events(
    count: int, namespace: str, pod_name: str, message: str | None, terminated: bool
) -> None:
    # What lets the watcher skip encoding a record it has sized by its events (Fitted.sizes).
    change = [
        gpu(i, namespace=namespace, pod_name=pod_name, message=message, pod_terminated=terminated)
        for i in range(count)
    ]
    record = DeviceHealthObservations.of(change)
    assert len(encode_observations(record)) < sum(len(encode_event(e)) for e in change)


def _changes(shapes: list[tuple[int, int]]) -> list[Event]:
    """One Pod change per shape (devices, message length), each its own statusVersion."""
    return [
        gpu(i, status_version=1000 + n, message="m" * length if length else None)
        for n, (count, length) in enumerate(shapes)
        for i in range(count)
    ]


@given(
    st.lists(st.tuples(st.integers(1, 8), st.integers(0, 300)), max_size=6),
    st.lists(events, max_size=6),
    st.integers(min_value=600, max_value=4000),
)
def test_grouping_by_the_events_sizes_gives_the_records_of_encoding_them(
    shapes: list[tuple[int, int]], others: list[Event], budget: int
) -> None:
    log = _changes(shapes) + others
    sizes = [len(encode_event(e)) for e in log]
    by_sizes = group_pod_changes(log, budget, sizes)
    for record in by_sizes:
        if isinstance(record, DeviceHealthObservations):
            assert len(encode_observations(record)) <= budget
    # Where a run's events add up to the budget the record is not encoded again; it is the one
    # record greedy sizing makes too, so the records are the same either way.
    assert by_sizes == group_pod_changes(log, budget)
