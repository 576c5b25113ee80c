"""NodeTracker: Lease renewals into coarsened heartbeats, Node extended resources into changes."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.domain.node_events import NodeHeartbeat, NodeResourcesChanged
from services.domain.node_labels import NodeLabelsChanged
from services.domain.watch.node_objects import (
    COUNT_MAX,
    NodeProblemCode,
    parse_quantity,
    read_lease,
    read_node,
)
from services.domain.watch.node_tracker import NodeFact, NodeOutcome, NodeTracker
from services.domain.watch.pod_tracker import WatchKind

T0 = datetime(2026, 11, 29, 11, 0, tzinfo=UTC)
SEEN = datetime(2030, 1, 1, tzinfo=UTC)  # the watcher's clock: never used for coarsening
MINUTE = timedelta(seconds=60)


def lease(
    name: str | None = "gpu-node-a",
    renew: str | None = "2026-11-29T11:00:00.123456Z",
    version: str | None = "100",
    namespace: str | None = "kube-node-lease",
) -> dict[str, Any]:
    metadata: dict[str, Any] = {}
    if name is not None:
        metadata["name"] = name
    if namespace is not None:
        metadata["namespace"] = namespace
    if version is not None:
        metadata["resourceVersion"] = version
    spec: dict[str, Any] = {"holderIdentity": name, "leaseDurationSeconds": 40}
    if renew is not None:
        spec["renewTime"] = renew
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": metadata,
        "spec": spec,
    }


def node(
    name: str | None = "gpu-node-c",
    version: str | None = "200",
    capacity: dict[str, Any] | None = None,
    allocatable: dict[str, Any] | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {}
    if name is not None:
        metadata["name"] = name
    if version is not None:
        metadata["resourceVersion"] = version
    base = {"cpu": "96", "memory": "1056000Mi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": metadata,
        "status": {
            "capacity": {**base, **(capacity if capacity is not None else {"nvidia.com/gpu": "8"})},
            "allocatable": {
                **base,
                **(allocatable if allocatable is not None else {"nvidia.com/gpu": "8"}),
            },
        },
    }


def res(outcome: NodeOutcome) -> list[NodeFact]:
    """The outcome's resource changes (a Node's labels records are tested apart)."""
    return [e for e in outcome.events if isinstance(e, NodeResourcesChanged)]


def at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


# --- reading --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "count"),
    [("8", 8), ("0", 0), ("1k", 1000), ("2Ki", 2048), ("1e3", 1000), ("1500m", None), (8, 8)],
)
def test_parse_quantity(raw: object, count: int | None) -> None:
    if count is None:
        with pytest.raises(ValueError):
            parse_quantity(raw)
    else:
        assert parse_quantity(raw) == count


@pytest.mark.parametrize(
    "raw", ["100m", "1.5", "-1", "lots", "", " 8", True, None, 1.0, "1E99", str(COUNT_MAX + 1)]
)
def test_parse_quantity_refuses_what_is_not_a_whole_count(raw: object) -> None:
    with pytest.raises(ValueError):
        parse_quantity(raw)


def test_read_lease_with_micro_time() -> None:
    reading = read_lease(lease())
    assert reading.name == "gpu-node-a"
    assert reading.namespace == "kube-node-lease"
    assert reading.renewed_at == datetime(2026, 11, 29, 11, 0, 0, 123456, tzinfo=UTC)
    assert reading.lease_version == 100
    assert reading.problems == ()


@pytest.mark.parametrize(
    ("obj", "code"),
    [
        (lease(name=None), NodeProblemCode.MISSING_NAME),
        (lease(name="~tick/0"), NodeProblemCode.INVALID_NAME),
        (lease(name="gpu\nnode"), NodeProblemCode.INVALID_NAME),
        (lease(renew=None), NodeProblemCode.BAD_RENEW_TIME),
        (lease(renew="yesterday"), NodeProblemCode.BAD_RENEW_TIME),
        (lease(renew="2026-11-29T11:00:00"), NodeProblemCode.BAD_RENEW_TIME),  # no offset
    ],
)
def test_read_lease_problems(obj: dict[str, Any], code: NodeProblemCode) -> None:
    assert [p.code for p in read_lease(obj).problems] == [code]


def test_read_node_keeps_only_extended_resources() -> None:
    reading = read_node(
        node(
            capacity={"nvidia.com/gpu": "8", "example.com/nic": "2", "hugepages-2Mi": "0"},
            allocatable={"nvidia.com/gpu": "0", "example.com/nic": "2"},
        )
    )
    assert reading.name == "gpu-node-c"
    assert reading.capacity == (("example.com/nic", 2), ("nvidia.com/gpu", 8))
    assert reading.allocatable == (("example.com/nic", 2), ("nvidia.com/gpu", 0))
    assert reading.status_version == 200
    assert reading.problems == ()


def test_read_node_skips_a_non_integer_quantity_with_a_problem() -> None:
    reading = read_node(node(allocatable={"nvidia.com/gpu": "100m", "example.com/nic": "2"}))
    assert reading.allocatable == (("example.com/nic", 2),)
    (problem,) = reading.problems
    assert problem.code is NodeProblemCode.BAD_QUANTITY
    assert "status.allocatable[nvidia.com/gpu]" in problem.message and "100m" in problem.message


def test_read_node_without_status_or_with_a_broken_one() -> None:
    bare = read_node({"kind": "Node", "metadata": {"name": "n", "resourceVersion": "1"}})
    assert (bare.capacity, bare.allocatable, bare.problems) == ((), (), ())
    broken = read_node({"metadata": {"name": "n"}, "status": {"capacity": ["nvidia.com/gpu"]}})
    assert [p.code for p in broken.problems] == [NodeProblemCode.MALFORMED_STATUS]
    assert [p.code for p in read_node({"status": "x"}).problems] == [
        NodeProblemCode.MISSING_NAME,
        NodeProblemCode.MALFORMED_STATUS,
    ]


# --- heartbeats ---------------------------------------------------------------------------


def test_first_heartbeat_is_published_then_coarsened_per_interval() -> None:
    tracker = NodeTracker(MINUTE)
    published = []
    for version, seconds in enumerate([0, 10, 20, 59.999, 60, 70, 125], start=1):
        outcome = tracker.lease_event(
            WatchKind.MODIFIED, lease(renew=at(seconds), version=str(version)), SEEN
        )
        published += outcome.events
        assert outcome.coarsened == (0 if outcome.events else 1)
    assert published == [
        NodeHeartbeat("gpu-node-a", T0 + timedelta(seconds=s), SEEN, lease_version=v)
        for s, v in [(0, 1), (60, 5), (125, 7)]
    ]


def test_heartbeats_are_coarsened_per_node() -> None:
    tracker = NodeTracker(MINUTE)
    a = tracker.lease_event(WatchKind.ADDED, lease("a", at(0), "1"), SEEN)
    b = tracker.lease_event(WatchKind.ADDED, lease("b", at(5), "2"), SEEN)
    a2 = tracker.lease_event(WatchKind.MODIFIED, lease("a", at(10), "3"), SEEN)
    assert [e.node for e in a.events + b.events] == ["a", "b"]
    assert a2.events == [] and a2.coarsened == 1


def test_renew_time_going_back_by_an_interval_is_published() -> None:
    tracker = NodeTracker(MINUTE)
    assert tracker.heartbeat("n", T0, SEEN) is not None
    assert tracker.heartbeat("n", T0 - timedelta(seconds=30), SEEN) is None
    back = tracker.heartbeat("n", T0 - timedelta(hours=1), SEEN)  # kubelet's clock corrected
    assert back is not None and back.renewed_at == T0 - timedelta(hours=1)
    assert tracker.heartbeat("n", T0 - timedelta(minutes=59, seconds=30), SEEN) is None


def test_stale_and_foreign_leases_are_ignored() -> None:
    tracker = NodeTracker(MINUTE)
    assert tracker.lease_event(WatchKind.ADDED, lease(renew=at(0), version="10"), SEEN).events
    stale = tracker.lease_event(WatchKind.MODIFIED, lease(renew=at(-600), version="9"), SEEN)
    assert (stale.events, stale.ignored) == ([], "stale")
    foreign = tracker.lease_event(
        WatchKind.ADDED, lease("scheduler", at(0), "11", namespace="kube-system"), SEEN
    )
    assert (foreign.events, foreign.ignored) == ([], "outside kube-node-lease")


def test_deleted_lease_forgets_the_node() -> None:
    tracker = NodeTracker(MINUTE)
    tracker.lease_event(WatchKind.ADDED, lease(renew=at(0), version="10"), SEEN)
    assert tracker.nodes == 1
    assert (
        tracker.lease_event(WatchKind.DELETED, lease(renew=at(5), version="11"), SEEN).events == []
    )
    assert tracker.nodes == 0
    again = tracker.lease_event(WatchKind.ADDED, lease(renew=at(10), version="12"), SEEN)
    assert len(again.events) == 1  # a first sighting again


def test_bad_lease_is_rejected_once_until_it_is_readable_again() -> None:
    tracker = NodeTracker(MINUTE)
    first = tracker.lease_event(WatchKind.MODIFIED, lease(renew="soon", version="1"), SEEN)
    assert first.events == [] and first.reject_reason is not None
    assert first.reject_reason.startswith("Lease gpu-node-a: bad-renew-time")
    repeat = tracker.lease_event(WatchKind.MODIFIED, lease(renew="soon", version="2"), SEEN)
    assert repeat.reject_reason is None and len(repeat.problems) == 1  # counted, not re-sent
    good = tracker.lease_event(WatchKind.MODIFIED, lease(renew=at(0), version="3"), SEEN)
    assert len(good.events) == 1 and good.reject_reason is None
    again = tracker.lease_event(WatchKind.MODIFIED, lease(renew="soon", version="4"), SEEN)
    assert again.reject_reason is not None
    nameless = tracker.lease_event(WatchKind.ADDED, lease(name=None), SEEN)
    assert (
        nameless.reject_reason
        == "Lease <no name>: object-without-name: Lease without metadata.name"
    )


def test_lease_relist_forgets_unlisted_nodes() -> None:
    tracker = NodeTracker(MINUTE)
    tracker.lease_event(WatchKind.ADDED, lease("a", at(0), "1"), SEEN)
    tracker.lease_event(WatchKind.ADDED, lease("b", at(0), "2"), SEEN)
    outcomes = tracker.leases_listed([lease("a", at(30), "5")], SEEN)
    assert [o.coarsened for o in outcomes] == [1]
    assert tracker.nodes == 1  # b is gone
    beat = tracker.lease_event(WatchKind.ADDED, lease("b", at(31), "6"), SEEN)
    assert len(beat.events) == 1


# --- resources ----------------------------------------------------------------------------


def test_node_resources_published_on_first_sighting_and_on_change_only() -> None:
    tracker = NodeTracker(MINUTE)
    events = []
    for version, allocatable in [("1", "8"), ("2", "8"), ("3", "0"), ("4", "0"), ("5", "8")]:
        obj = node(version=version, allocatable={"nvidia.com/gpu": allocatable})
        events += res(tracker.node_event(WatchKind.MODIFIED, obj, SEEN))
    assert events == [
        NodeResourcesChanged(
            "gpu-node-c", (("nvidia.com/gpu", 8),), (("nvidia.com/gpu", a),), v, SEEN
        )
        for v, a in [(1, 8), (3, 0), (5, 8)]
    ]
    assert [e.missing() for e in events] == [{}, {"nvidia.com/gpu": 8}, {}]


def test_node_without_extended_resources_is_published_once() -> None:
    tracker = NodeTracker(MINUTE)
    first = tracker.node_event(WatchKind.ADDED, node(capacity={}, allocatable={}), SEEN)
    (event,) = res(first)
    assert isinstance(event, NodeResourcesChanged) and event.capacity == ()
    assert (
        res(
            tracker.node_event(
                WatchKind.MODIFIED, node(version="300", capacity={}, allocatable={}), SEEN
            )
        )
        == []
    )


def test_node_stale_version_and_deletion() -> None:
    tracker = NodeTracker(MINUTE)
    tracker.node_event(WatchKind.ADDED, node(version="10"), SEEN)
    stale = tracker.node_event(
        WatchKind.MODIFIED, node(version="9", allocatable={"nvidia.com/gpu": "0"}), SEEN
    )
    assert (res(stale), stale.ignored) == ([], "stale")
    tracker.node_event(WatchKind.DELETED, node(version="11"), SEEN)
    assert tracker.nodes == 0
    assert len(res(tracker.node_event(WatchKind.ADDED, node(version="12"), SEEN))) == 1


def test_node_with_a_bad_quantity_is_rejected_and_the_rest_published() -> None:
    tracker = NodeTracker(MINUTE)
    outcome = tracker.node_event(
        WatchKind.ADDED,
        node(capacity={"nvidia.com/gpu": "8", "example.com/x": "1.5"}),
        SEEN,
    )
    (event,) = res(outcome)
    assert isinstance(event, NodeResourcesChanged)
    assert event.capacity == (("nvidia.com/gpu", 8),)
    assert outcome.reject_reason is not None and "bad-quantity" in outcome.reject_reason
    assert [p.code for p in outcome.problems] == [NodeProblemCode.BAD_QUANTITY]


def test_node_relist_publishes_changes_only_and_forgets_the_unlisted() -> None:
    tracker = NodeTracker(MINUTE)
    tracker.node_event(WatchKind.ADDED, node("a", "1"), SEEN)
    tracker.node_event(WatchKind.ADDED, node("b", "2"), SEEN)
    outcomes = tracker.nodes_listed(
        [node("a", "7", allocatable={"nvidia.com/gpu": "7"}), node("c", "8")], SEEN
    )
    # The last outcome removes b's labels (tests/domain/test_node_labels_removed.py).
    assert [[e.node for e in res(o)] for o in outcomes] == [["a"], ["c"], []]
    assert tracker.nodes == 2
    assert len(res(tracker.node_event(WatchKind.ADDED, node("b", "9"), SEEN))) == 1


def test_node_labels_published_on_first_sighting_on_change_and_on_every_relist() -> None:
    tracker = NodeTracker(MINUTE)

    def labelled(version: str, labels: dict[str, Any]) -> dict[str, Any]:
        obj = node(version=version)
        obj["metadata"]["labels"] = labels
        return obj

    def labels_of(outcome: NodeOutcome) -> list[NodeFact]:
        return [e for e in outcome.events if isinstance(e, NodeLabelsChanged)]

    first = tracker.node_event(WatchKind.ADDED, labelled("1", {"pool": "east"}), SEEN)
    assert labels_of(first) == [NodeLabelsChanged("gpu-node-c", (("pool", "east"),), SEEN)]
    same = tracker.node_event(WatchKind.MODIFIED, labelled("2", {"pool": "east"}), SEEN)
    assert labels_of(same) == []
    moved = tracker.node_event(
        WatchKind.MODIFIED, labelled("3", {"pool": "west", "-bad": "x", "k": "no way"}), SEEN
    )
    assert labels_of(moved) == [NodeLabelsChanged("gpu-node-c", (("pool", "west"),), SEEN)]
    assert sorted((d.key, d.reason) for d in moved.dropped_labels) == [
        ("-bad", "invalid-key"),
        ("k", "invalid-value"),
    ]
    # A re-LIST re-states every Node's labels, even an unchanged (stale) object's.
    (relisted,) = tracker.nodes_listed([labelled("3", {"pool": "west"})], SEEN)
    assert relisted.ignored == "stale"
    assert labels_of(relisted) == [NodeLabelsChanged("gpu-node-c", (("pool", "west"),), SEEN)]
    # Deleted and seen again: a first sighting.
    tracker.node_event(WatchKind.DELETED, labelled("4", {}), SEEN)
    again = tracker.node_event(WatchKind.ADDED, labelled("5", {"pool": "west"}), SEEN)
    assert len(labels_of(again)) == 1


def test_interval_must_be_positive() -> None:
    with pytest.raises(ValueError):
        NodeTracker(timedelta(0))


# --- properties -----------------------------------------------------------------------------

renewals = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(min_value=0, max_value=600_000)),
    max_size=60,
)


@given(renewals, st.integers(min_value=1, max_value=120_000))
def test_published_heartbeats_keep_the_interval_and_cover_every_renewal(
    renews: list[tuple[str, int]], interval_ms: int
) -> None:
    """Per node: the first renewal is published; two published heartbeats are never closer than
    the interval (event time); a renewal dropped had a published one less than the interval away
    when it came (nothing is lost for longer than the interval)."""
    interval = timedelta(milliseconds=interval_ms)
    tracker = NodeTracker(interval)
    published: dict[str, list[datetime]] = {}
    for name, ms in renews:
        renewed = T0 + timedelta(milliseconds=ms)
        beat = tracker.heartbeat(name, renewed, SEEN)
        last = published.get(name, [])
        if not last:
            assert beat is not None, "the first renewal of a node is always published"
        if beat is None:
            assert abs(renewed - last[-1]) < interval
        else:
            assert beat.renewed_at == renewed and beat.node == name
            if last:
                assert abs(renewed - last[-1]) >= interval
            published.setdefault(name, []).append(renewed)


@given(st.lists(st.integers(min_value=0, max_value=10_000_000), max_size=60), st.integers(1, 600))
def test_monotonic_renewals_publish_spaced_heartbeats(ms: list[int], interval_s: int) -> None:
    """With renewTime only moving forward (a healthy kubelet), published heartbeats are sorted
    and at least the interval apart, and the gap to the next published one is never more than
    the interval past a coarsened renewal."""
    interval = timedelta(seconds=interval_s)
    tracker = NodeTracker(interval)
    published = []
    for value in sorted(ms):
        beat = tracker.heartbeat("n", T0 + timedelta(milliseconds=value), SEEN)
        if beat is not None:
            published.append(beat.renewed_at)
    assert all(b - a >= interval for a, b in itertools.pairwise(published))
    if ms:
        assert published[0] == T0 + timedelta(milliseconds=min(ms))


counts = st.dictionaries(
    st.sampled_from(["nvidia.com/gpu", "example.com/nic", "cpu"]),
    st.integers(min_value=0, max_value=16).map(str),
    max_size=3,
)


@given(st.lists(st.tuples(counts, counts), max_size=20))
def test_resource_changes_are_exactly_the_changes(
    states: list[tuple[dict[str, str], dict[str, str]]],
) -> None:
    tracker = NodeTracker(MINUTE)
    previous = None
    for version, (capacity, allocatable) in enumerate(states, start=1):
        obj = node(version=str(version), capacity=capacity, allocatable=allocatable)
        events = res(tracker.node_event(WatchKind.MODIFIED, obj, SEEN))
        extended = (
            tuple(sorted((k, int(v)) for k, v in capacity.items() if "/" in k)),
            tuple(sorted((k, int(v)) for k, v in allocatable.items() if "/" in k)),
        )
        assert bool(events) == (extended != previous)
        if events:
            (event,) = events
            assert isinstance(event, NodeResourcesChanged)
            assert (event.capacity, event.allocatable) == extended
            assert event.status_version == version
        previous = extended
