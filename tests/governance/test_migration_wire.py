"""The migration records' wire form on the governance topic: exact round trips, and bad input
refused with the field at fault (the governor agent dead-letters it with that reason)."""

from __future__ import annotations

import orjson
import pytest

from services.domain.codec import EventDecodeError
from services.domain.governance.input_codec import decode_input, encode_input
from services.domain.migration.records import MigrationClass, migration_class
from tests.governance.migration_builders import N1, R, mreport, workload


@pytest.mark.parametrize(
    "record",
    [
        workload(N1, "nvidia.com/gpu-0", "W", "train-0", "checkpointed", 5, 1, max_age=600),
        workload(N1, "GPU-0", "JS", "js-a-0", "sharded", 7, 1, shard="a", present=False),
        workload(N1, "GPU-0", "D", "web-0", None, 9, 1),
        mreport("m-1", R.LEASE_REQUESTED, "exec-a", 0, 2),
        mreport("m-1", R.CHECKPOINT_COMMITTED, "exec-a", 3, 2, checkpoint=("ckpt-1", 1.5)),
        mreport(
            "m-1", R.REPLACEMENT_OBSERVED, "exec-a", 3, 2, devices=((N1, "GPU-1"), ("n2", "x"))
        ),
        mreport("m-1", R.EVICTION_REFUSED, "exec-a", 3, 2, detail="pdb/x: 0 disruptions allowed"),
    ],
)
def test_round_trip(record: object) -> None:
    payload = encode_input(record)  # type: ignore[arg-type]
    assert decode_input(payload) == record
    assert encode_input(decode_input(payload)) == payload


def _bad(obj: dict[str, object], **changes: object) -> bytes:
    return orjson.dumps({**obj, **changes})


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"checkpointMaxAgeSeconds": 0}, "checkpointMaxAgeSeconds"),
        ({"checkpointMaxAgeSeconds": "600"}, "checkpointMaxAgeSeconds"),
        ({"statusVersion": "abc"}, "statusVersion"),
        ({"workloadUID": ""}, "workloadUID"),
        ({"present": "yes"}, "present"),
    ],
)
def test_a_bad_workload_fact_is_refused_with_the_field(
    changes: dict[str, object], message: str
) -> None:
    good = orjson.loads(encode_input(workload(N1, "GPU-0", "W", "p", "checkpointed", 5, 1)))
    with pytest.raises(EventDecodeError, match=message):
        decode_input(_bad(good, **changes))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"kind": "teleported"}, "kind"),
        ({"fencingToken": -1}, "fencingToken"),
        ({"devices": [{"node": "n"}]}, "devices"),
        ({"checkpointAt": "yesterday"}, "checkpointAt"),
        ({"holder": None}, "holder"),
    ],
)
def test_a_bad_report_is_refused_with_the_field(changes: dict[str, object], message: str) -> None:
    good = orjson.loads(encode_input(mreport("m-1", R.EVICTED, "exec-a", 1, 2)))
    with pytest.raises(EventDecodeError, match=message):
        decode_input(_bad(good, **changes))


def test_the_migration_class_annotation_defaults_to_non_recoverable() -> None:
    assert migration_class(None) == (MigrationClass.NON_RECOVERABLE, None)
    assert migration_class("sharded") == (MigrationClass.SHARDED, None)
    assert migration_class("Checkpointed") == (
        MigrationClass.NON_RECOVERABLE,
        "unknown migration class 'Checkpointed'",
    )
