"""The wire form of PodWorkloadObserved, and the topic's older records still read beside it."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
import pytest

from services.domain.codec import EventDecodeError
from services.domain.events import DeviceHealthObserved, PodDevicesReleased
from services.domain.records import decode_record, decode_typed_record, encode_record
from services.domain.workloads.codec import decode_workload, encode_workload
from services.domain.workloads.events import PodWorkloadObserved
from services.domain.workloads.migration import MigrationClass, MigrationSource
from services.domain.workloads.owners import OwnerLink

AT = datetime(2026, 12, 2, 10, 0, 0, tzinfo=UTC)

RECORD = PodWorkloadObserved(
    node="gpu-1",
    namespace="team-a",
    pod_name="train-0-abc",
    pod_uid="0b7c3a8e-1111-4c5e-9f00-000000000001",
    status_version=123456789012345678901234567890,
    observed_at=AT,
    chain=(
        OwnerLink("Job", "train-0", "j-1", "batch/v1"),
        OwnerLink("JobSet", "train", "s-1", "jobset.x-k8s.io/v1alpha2"),
    ),
    chain_complete=True,
    migration_class=MigrationClass.CHECKPOINTED,
    migration_source=MigrationSource.OWNER,
    checkpoint_max_age_seconds=900,
)

# Records as the watcher wrote them before this record type existed (byte for byte).
OLD_OBSERVATION = (
    b'{"claim":null,"containers":[{"kind":"regular","name":"main"}],"flags":[],'
    b'"health":"Unhealthy","message":"XID 79","namespace":"team-a","node":"gpu-1",'
    b'"observedAt":"2026-11-01T08:00:00Z","podName":"train-0-abc",'
    b'"podUID":"0b7c3a8e-1111-4c5e-9f00-000000000001","rawHealth":null,'
    b'"resourceID":"GPU-5f2c","resourceName":"nvidia.com/gpu","schema":1,'
    b'"source":"device-plugin","statusVersion":"1200","type":"DeviceHealthObserved"}'
)
OLD_RELEASE = (
    b'{"namespace":"team-a","node":"gpu-1","observedAt":"2026-11-01T08:00:01Z",'
    b'"podName":"train-0-abc","podUID":"0b7c3a8e-1111-4c5e-9f00-000000000001",'
    b'"reason":"deleted","resourceIDs":["GPU-5f2c"],"schema":1,"statusVersion":"1201",'
    b'"type":"PodDevicesReleased"}'
)


def test_round_trip_through_the_topic_decoders() -> None:
    payload = encode_record(RECORD)
    assert payload == encode_workload(RECORD)
    assert decode_workload(payload) == RECORD
    assert decode_record(payload) == RECORD
    assert decode_typed_record(payload, "PodWorkloadObserved") == RECORD
    assert decode_typed_record(payload, None, inventory=True) == RECORD
    body = orjson.loads(payload)
    assert body["version"] == 1 and body["statusVersion"] == "123456789012345678901234567890"
    assert body["migration"]["class"] == "checkpointed"


def test_bare_pod_round_trip() -> None:
    bare = PodWorkloadObserved("gpu-1", "ns", "solo", "uid-1", None, AT)
    assert decode_workload(encode_workload(bare)) == bare
    assert bare.workload is None and bare.workload_kind == "Pod"


def test_old_records_still_read() -> None:
    observed = decode_record(OLD_OBSERVATION)
    assert isinstance(observed, DeviceHealthObserved) and observed.status_version == 1200
    released = decode_typed_record(OLD_RELEASE, "PodDevicesReleased")
    assert isinstance(released, PodDevicesReleased) and released.resource_ids == ("GPU-5f2c",)


def _variant(**changes: object) -> bytes:
    body = orjson.loads(encode_workload(RECORD))
    body.update(changes)
    return orjson.dumps(body)


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (_variant(version=2), "unsupported PodWorkloadObserved version 2"),
        (_variant(schema=2), "unsupported schema 2"),
        (_variant(migration={"class": "live", "source": "pod"}), "migration.class"),
        (_variant(chain=[{"kind": "Job"}]), "field 'chain' holds an entry without"),
        (_variant(chainComplete="yes"), "chainComplete"),
        (_variant(node="GPU_1"), "node is not a DNS-1123 subdomain"),
        (_variant(podName="a\x00b"), "podName contains a control character"),
        (_variant(statusVersion="007"), "statusVersion"),
        (b"{not json", "JSON"),
    ],
)
def test_refused_with_a_reason(payload: bytes, reason: str) -> None:
    with pytest.raises(EventDecodeError) as caught:
        decode_record(payload)
    assert reason in str(caught.value)


def test_type_header_disagreeing_with_the_body_is_refused() -> None:
    with pytest.raises(EventDecodeError, match="PodWorkloadObserved"):
        decode_typed_record(OLD_OBSERVATION, "PodWorkloadObserved")
