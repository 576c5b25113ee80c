"""The watcher's memory of driver and claim failures (:mod:`services.domain.watch.failure_tracker`)
and the ``DRAFailureObserved`` record's wire form: what is published for Events and
``PodScheduled`` conditions, once per count, within bounded memory."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from services.domain.adoption.failure_classes import FailureClass
from services.domain.adoption.failure_events import (
    MESSAGE_MAX_LENGTH,
    DRAFailureObserved,
    FailureOrigin,
    decode_failure,
    encode_failure,
)
from services.domain.codec import EventDecodeError
from services.domain.records import decode_record, decode_typed_record, encode_record
from services.domain.watch.failure_tracker import FailureTracker, occurrences
from services.domain.watch.pod_tracker import WatchKind

T0 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
PREPARE_MESSAGE = (
    "Failed to prepare dynamic resources: NodePrepareResources failed for ResourceClaim "
    "gpu-claim: driver gpu.nvidia.com: rpc error: code = DeadlineExceeded"
)
INVALID_MESSAGE = (
    "Failed to prepare dynamic resources: NodePrepareResources failed for ResourceClaim c: "
    'failed to decode opaque config: unknown field "sharing"'
)
SCHEDULING_MESSAGE = "0/3 nodes are available: 3 cannot allocate all claims."


def event(
    uid: str = "ev-1",
    reason: str = "FailedPrepareDynamicResources",
    message: str = PREPARE_MESSAGE,
    count: int | None = 1,
    host: str | None = "gpu-a",
    kind: str = "Pod",
    **extra: Any,
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {"uid": uid, "namespace": "ml", "name": f"train-0.{uid}"},
        "involvedObject": {"kind": kind, "namespace": "ml", "name": "train-0", "uid": "pod-1"},
        "reason": reason,
        "message": message,
        "type": "Warning",
        **extra,
    }
    if count is not None:
        obj["count"] = count
    if host is not None:
        obj["source"] = {"component": "kubelet", "host": host}
    return obj


def unschedulable_pod(
    uid: str = "pod-2", message: str = SCHEDULING_MESSAGE, transition: str = "2026-12-03T12:00:00Z"
) -> dict[str, Any]:
    return {
        "metadata": {"uid": uid, "namespace": "team-a", "name": "serve-0"},
        "spec": {},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                    "lastTransitionTime": transition,
                }
            ],
        },
    }


def test_a_prepare_failure_event_is_published_once_per_count() -> None:
    tracker = FailureTracker()
    first = tracker.event(WatchKind.ADDED, event(), T0)
    [record] = first.records
    assert record.failure_class is FailureClass.RETRYABLE and record.why == "prepare-error"
    assert (record.source_uid, record.occurrences, record.origin) == (
        "ev-1",
        1,
        FailureOrigin.EVENT,
    )
    assert (record.namespace, record.pod_name, record.pod_uid) == ("ml", "train-0", "pod-1")
    assert record.node_name == "gpu-a" and record.node == "gpu-a"
    # The same count again (a MODIFIED of another field, a re-LIST) publishes nothing.
    assert tracker.event(WatchKind.MODIFIED, event(), T0).ignored == ["seen"]
    assert tracker.events_listed([event()], T0).records == []
    # The kubelet counted it again: published with the new count.
    [again] = tracker.event(WatchKind.MODIFIED, event(count=3), T0).records
    assert again.occurrences == 3


def test_series_count_and_the_namespace_key_without_a_node() -> None:
    tracker = FailureTracker()
    scheduler = event(
        "ev-s", "FailedScheduling", SCHEDULING_MESSAGE, count=None, host=None, series={"count": 4}
    )
    [record] = tracker.event(WatchKind.ADDED, scheduler, T0).records
    assert record.occurrences == 4 and record.node_name is None
    assert record.node == "namespace:ml"
    assert record.failure_class is FailureClass.RETRYABLE
    assert occurrences({"count": 0, "series": {"count": "x"}}) == 1


def test_invalid_claims_and_unprepare_failures_have_their_classes() -> None:
    tracker = FailureTracker()
    [invalid] = tracker.event(WatchKind.ADDED, event("a", message=INVALID_MESSAGE), T0).records
    assert invalid.failure_class is FailureClass.NON_RETRYABLE
    unprepare = event("b", "FailedUnprepareDynamicResources", "NodeUnprepareResources failed")
    [cleanup] = tracker.event(WatchKind.ADDED, unprepare, T0).records
    assert cleanup.failure_class is FailureClass.NEEDS_CLEANUP


def test_unclassified_other_kinds_and_unreadable_events() -> None:
    tracker = FailureTracker()
    assert tracker.event(WatchKind.ADDED, event(reason="BackOff"), T0).ignored == ["unclassified"]
    cpu = event(reason="FailedScheduling", message="0/3 nodes are available: 3 Insufficient cpu.")
    assert tracker.event(WatchKind.ADDED, cpu, T0).ignored == ["unclassified"]
    assert tracker.event(WatchKind.ADDED, event(kind="Node"), T0).ignored == ["not-a-pod"]
    broken = event()
    broken["involvedObject"] = {"kind": "Pod"}  # no name, no namespace
    del broken["metadata"]
    outcome = tracker.event(WatchKind.ADDED, broken, T0)
    assert outcome.records == [] and len(outcome.problems) == 1
    too_long = event(uid="u" * 500)
    assert tracker.event(WatchKind.ADDED, too_long, T0).problems
    # Neither stopped anything: a good Event after them is published.
    assert tracker.event(WatchKind.ADDED, event("ok"), T0).records


def test_a_bad_node_name_is_left_out_and_the_message_is_cut() -> None:
    tracker = FailureTracker()
    long = event(host="Not A Node", message="line one\nline two " + "x" * 2000)
    [record] = tracker.event(WatchKind.ADDED, long, T0).records
    assert record.node_name is None and record.node == "namespace:ml"
    assert len(record.message) == MESSAGE_MAX_LENGTH and "\n" not in record.message
    assert record.message.endswith("...")


def test_memory_is_bounded_and_a_list_forgets_what_it_no_longer_has() -> None:
    tracker = FailureTracker(max_remembered=2)
    for uid in ("a", "b", "c"):
        tracker.event(WatchKind.ADDED, event(uid), T0)
    assert tracker.remembered == (2, 0)
    # "a" was forgotten first: seen again, it is published again (the projection keeps one row).
    assert tracker.event(WatchKind.ADDED, event("a"), T0).records
    tracker.events_listed([event("c")], T0)
    assert tracker.remembered == (1, 0)
    assert tracker.event(WatchKind.DELETED, event("c"), T0).ignored == ["deleted"]
    assert tracker.remembered == (0, 0)


def test_an_unschedulable_condition_is_published_once_per_transition() -> None:
    tracker = FailureTracker()
    [record] = tracker.pod(WatchKind.ADDED, unschedulable_pod(), T0).records
    assert record.origin is FailureOrigin.POD_CONDITION and record.reason == "Unschedulable"
    assert record.source_uid == "pod-2/PodScheduled/2026-12-03T12:00:00Z"
    assert record.node == "namespace:team-a" and record.occurrences == 1
    assert tracker.pod(WatchKind.MODIFIED, unschedulable_pod(), T0).ignored == ["seen"]
    assert tracker.pods_listed([unschedulable_pod()], T0).records == []
    later = unschedulable_pod(transition="2026-12-03T12:05:00Z")
    assert len(tracker.pod(WatchKind.MODIFIED, later, T0).records) == 1
    cpu = unschedulable_pod("pod-3", "0/3 nodes are available: 3 Insufficient memory.")
    assert tracker.pod(WatchKind.ADDED, cpu, T0).ignored == ["unclassified"]
    scheduled = unschedulable_pod("pod-4")
    scheduled["status"]["conditions"][0]["status"] = "True"
    assert tracker.pod(WatchKind.ADDED, scheduled, T0).records == []
    tracker.pod(WatchKind.DELETED, later, T0)
    assert tracker.remembered == (0, 0)
    tracker.pod(WatchKind.ADDED, unschedulable_pod("pod-5"), T0)
    tracker.pods_listed([], T0)
    assert tracker.remembered == (0, 0)


def record() -> DRAFailureObserved:
    [found] = FailureTracker().event(WatchKind.ADDED, event(count=7), T0).records
    return found


def test_the_wire_form_round_trips_through_the_record_dispatch() -> None:
    original = record()
    payload = encode_record(original)
    assert payload == encode_failure(original)
    assert decode_failure(payload) == original
    assert decode_record(payload) == original
    assert decode_typed_record(payload, "DRAFailureObserved") == original
    with pytest.raises(EventDecodeError, match=r"differs|PodWorkloadObserved"):
        decode_typed_record(payload, "PodWorkloadObserved")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"version": 2}, "unsupported DRAFailureObserved version 2"),
        ({"occurrences": 0}, "'occurrences' must be an integer >= 1"),
        ({"failureClass": "fatal"}, "'failureClass' has unknown value 'fatal'"),
        ({"origin": "Log"}, "'origin' has unknown value 'Log'"),
        ({"nodeName": "Bad Node"}, "node is not a DNS-1123 subdomain"),
        ({"sourceUID": ""}, "'sourceUID' must be a non-empty string"),
        ({"observedAt": "0001-01-01T00:00:00Z"}, "out of range"),
    ],
)
def test_a_record_that_cannot_be_stored_is_refused_with_the_field(
    change: dict[str, Any], message: str
) -> None:
    body = orjson.loads(encode_failure(record()))
    body.update(change)
    with pytest.raises(EventDecodeError, match=message):
        decode_failure(orjson.dumps(body))
