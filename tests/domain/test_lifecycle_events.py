"""``PodLifecycleObserved`` (issue 16 item 5): built from the tracker's report, its wire form,
the topic's dispatch (by the type header and by the bytes) and what a reader refuses."""

from __future__ import annotations

import orjson
import pytest

from services.domain.codec import EventDecodeError
from services.domain.lifecycle import DevicePath, PodClaim, Stage, StageLatency, StageReport
from services.domain.lifecycle_events import (
    LIFECYCLE_EVENT_TYPE,
    PodLifecycleObserved,
    StageSample,
    decode_lifecycle,
    encode_lifecycle,
    lifecycle_record,
)
from services.domain.records import decode_record, decode_typed_record, encode_record
from tests.conftest import T0

POD = {
    "metadata": {"namespace": "ml", "name": "train-0", "uid": "uid-1"},
    "spec": {"nodeName": "gpu-node-a"},
}
RECORD = PodLifecycleObserved(
    "gpu-node-a",
    "ml",
    "train-0",
    "uid-1",
    T0,
    (
        StageSample(Stage.CLAIM_ALLOCATED, "gpu.example.com", DevicePath.DRA, 2.0, "claim-1"),
        StageSample(Stage.POD_READY, "gpu.example.com", DevicePath.DRA, 7.0),
    ),
    1,
)


def test_the_record_of_a_report() -> None:
    report = StageReport(
        latencies=[
            StageLatency(Stage.CLAIM_ALLOCATED, "gpu.example.com", DevicePath.DRA, 2.0, "claim-1"),
            StageLatency(Stage.POD_READY, "gpu.example.com", DevicePath.DRA, 7.0),
        ],
        unknown_claims=[PodClaim("gpu", "train-0-gpu")],
    )
    assert lifecycle_record(POD, report, T0) == RECORD
    assert lifecycle_record(POD, StageReport(), T0) is None
    unbound = {"metadata": POD["metadata"], "spec": {}}
    assert lifecycle_record(unbound, report, T0) is None


def test_round_trip_and_dispatch() -> None:
    payload = encode_lifecycle(RECORD)
    assert encode_record(RECORD) == payload
    assert decode_lifecycle(payload) == RECORD
    assert decode_record(payload) == RECORD
    assert decode_typed_record(payload, LIFECYCLE_EVENT_TYPE) == RECORD
    spaced = orjson.dumps(orjson.loads(payload), option=orjson.OPT_INDENT_2)
    assert decode_record(spaced) == RECORD


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"version": 2}, "version 2"),
        ({"stages": [{"stage": "x", "deviceClass": "c", "path": "dra", "seconds": 1}]}, "stage"),
        (
            {"stages": [{"stage": "pod_ready", "deviceClass": "c", "path": "dra", "seconds": -1}]},
            "seconds",
        ),
        (
            {"stages": [{"stage": "pod_ready", "deviceClass": "c", "path": "x", "seconds": 1}]},
            "path",
        ),
        ({"unknownClaims": -1}, "unknownClaims"),
        ({"podUID": ""}, "podUID is empty"),
        ({"observedAt": "yesterday"}, "observedAt"),
    ],
)
def test_a_reader_refuses_what_it_cannot_store(change: dict[str, object], reason: str) -> None:
    body = orjson.loads(encode_lifecycle(RECORD))
    body.update(change)
    with pytest.raises(EventDecodeError, match=reason):
        decode_lifecycle(orjson.dumps(body))
