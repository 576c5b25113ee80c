"""Events made to fit one Kafka record (services.domain.record_size, issue 11): a large release
is split and folds the same; a large observation's containers are cut and flagged, and folds to
the same health, transitions and holders."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final

from services.domain.directory import fold
from services.domain.event_codec import encode_event
from services.domain.events import (
    DeviceHealthObserved,
    Event,
    PodDevicesReleased,
    ReleaseReason,
)
from services.domain.pod_status import ProblemCode
from services.domain.record_size import CONTAINERS_TRUNCATED, event_budget, fit_events
from services.domain.watch.pod_tracker import WatchKind
from services.processes.watcher.processor import WatchProcessor
from tests.domain.test_pod_tracker import make_pod

AT: Final = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
BUDGET: Final = event_budget(1_048_576)


def shared_gpu_pod(containers: int = 10_000, version: str = "500") -> dict[str, object]:
    """A Pod whose ``containers`` containers (120-character names) all report GPU-S."""
    names = tuple(f"c{i:05d}-" + "x" * 113 for i in range(containers))
    return make_pod({"GPU-S": "Healthy"}, version, uid="uid-shared", containers=names)


def many_gpu_pod(devices: int = 25_000) -> dict[str, object]:
    ids = {f"GPU-{i:08d}-0000-4000-8000-{i:012d}": "Healthy" for i in range(devices)}
    return make_pod(ids, "600", uid="uid-many")


def test_ten_thousand_containers_on_one_gpu_are_cut_to_fit_and_flagged() -> None:
    raw = shared_gpu_pod()
    [whole] = (
        WatchProcessor(max_message_bytes=64 * 1024 * 1024)
        .pod_event(WatchKind.ADDED, raw, b"", "t", AT)
        .events
    )
    assert isinstance(whole, DeviceHealthObserved)
    assert len(encode_event(whole)) > 1_048_576  # the shape that stopped the watcher

    outcome = WatchProcessor().pod_event(WatchKind.ADDED, raw, b"", "t", AT)
    [cut] = outcome.events
    assert isinstance(cut, DeviceHealthObserved)
    assert len(encode_event(cut)) <= BUDGET
    assert CONTAINERS_TRUNCATED in cut.flags
    assert 0 < len(cut.containers) < 10_000
    assert cut.containers == tuple(sorted(whole.containers))[: len(cut.containers)]
    assert [p.code for p in outcome.problems] == [ProblemCode.CONTAINERS_TRUNCATED]
    assert "10000 containers" in outcome.problems[0].message

    # The device record: same health, version, transition time and holders; only the Pod's
    # allocation lists fewer containers and the flag says so.
    [(key, full)] = fold([whole]).items()
    [(cut_key, short)] = fold([cut]).items()
    assert key == cut_key
    assert (short.health, short.status_version, short.last_transition_at) == (
        full.health,
        full.status_version,
        full.last_transition_at,
    )
    assert [a.pod_uid for a in short.allocations] == [a.pod_uid for a in full.allocations]
    assert short.flags == (CONTAINERS_TRUNCATED,)


def test_a_large_release_is_split_and_folds_the_same() -> None:
    processor = WatchProcessor()
    added = processor.pod_event(WatchKind.ADDED, many_gpu_pod(), b"", "t", AT).events
    assert len(added) == 25_000
    assert all(len(encode_event(e)) < 1024 for e in added)
    deleted = processor.pod_event(WatchKind.DELETED, many_gpu_pod(), b"", "t", AT).events
    assert len(deleted) > 1
    assert all(isinstance(e, PodDevicesReleased) for e in deleted)
    assert all(len(encode_event(e)) <= BUDGET for e in deleted)
    ids = [i for e in deleted if isinstance(e, PodDevicesReleased) for i in e.resource_ids]
    assert ids == sorted(e.resource_id for e in added if isinstance(e, DeviceHealthObserved))

    whole: Event = PodDevicesReleased(
        node="gpu-node-a",
        namespace="ml",
        pod_name="train-0",
        pod_uid="uid-many",
        reason=ReleaseReason.DELETED,
        status_version=None,
        observed_at=AT,
        resource_ids=tuple(ids),
    )
    assert len(encode_event(whole)) > 1_048_576
    assert fold([*added, whole]) == fold([*added, *deleted])
    assert all(not record.allocations for record in fold([*added, *deleted]).values())


def test_events_that_fit_are_left_as_they_are() -> None:
    events = (
        WatchProcessor()
        .pod_event(WatchKind.ADDED, shared_gpu_pod(containers=3), b"", "t", AT)
        .events
    )
    assert fit_events(list(events), BUDGET).events == events
    assert all(
        isinstance(e, DeviceHealthObserved) and CONTAINERS_TRUNCATED not in e.flags for e in events
    )


def test_schema_2_puts_a_pod_change_in_records_that_fit_and_fold_the_same() -> None:
    """Issue 12: with ``record_schema`` 2 a Pod's change goes as schema-2 records of its
    observations, each within the budget (2,000 GPUs and 128 KiB records: several); flattened
    they are the schema-1 observations."""
    from services.domain.observations import DeviceHealthObservations, encode_observations

    small = 128 * 1024
    pod = many_gpu_pod(2_000)
    single = WatchProcessor(max_message_bytes=small).pod_event(WatchKind.ADDED, pod, b"", "t", AT)
    grouped = (
        WatchProcessor(max_message_bytes=small, record_schema=2)
        .pod_event(WatchKind.ADDED, pod, b"", "t", AT)
        .events
    )
    assert 1 < len(grouped) < 20
    assert all(isinstance(r, DeviceHealthObservations) for r in grouped)
    records = [r for r in grouped if isinstance(r, DeviceHealthObservations)]
    assert all(len(encode_observations(r)) <= event_budget(small) for r in records)
    flat: list[Event] = [o for r in records for o in r.observations]
    assert flat == single.events

    eight = make_pod({f"GPU-{i}": "Healthy" for i in range(8)}, "700", uid="uid-eight")
    [record] = (
        WatchProcessor(record_schema=2).pod_event(WatchKind.ADDED, eight, b"", "t", AT).events
    )
    assert isinstance(record, DeviceHealthObservations) and len(record.observations) == 8
    one = make_pod({"GPU-0": "Healthy"}, "701", uid="uid-one")
    [alone] = WatchProcessor(record_schema=2).pod_event(WatchKind.ADDED, one, b"", "t", AT).events
    assert isinstance(alone, DeviceHealthObserved)  # one device: a schema-1 record
