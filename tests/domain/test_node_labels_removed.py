"""A Node's labels removal (issue 16): the wire form of ``NodeLabelsChanged`` with ``removed``,
and the watcher's tracker publishing it for a Node DELETED and a Node a re-LIST no longer has."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from services.domain.codec import EventDecodeError
from services.domain.node_labels import (
    NodeLabelsChanged,
    decode_node_labels,
    encode_node_labels,
)
from services.domain.watch.node_tracker import NodeOutcome, NodeTracker
from services.domain.watch.pod_tracker import WatchKind

SEEN = datetime(2030, 1, 1, tzinfo=UTC)

OLD = (
    b'{"labels":{"pool":"east"},"node":"gpu-node-a","observedAt":"2030-01-01T00:00:00Z",'
    b'"schema":1,"type":"NodeLabelsChanged"}'
)


def test_a_record_without_removed_is_not_a_removal_and_keeps_its_bytes() -> None:
    record = decode_node_labels(OLD)
    assert record == NodeLabelsChanged("gpu-node-a", (("pool", "east"),), SEEN)
    assert not record.removed
    assert orjson.loads(encode_node_labels(record)) == orjson.loads(OLD)
    assert b"removed" not in encode_node_labels(record)


def test_a_removal_round_trips_and_carries_no_labels() -> None:
    removal = NodeLabelsChanged("gpu-node-a", (), SEEN, removed=True)
    wire = encode_node_labels(removal)
    assert orjson.loads(wire)["removed"] is True
    assert orjson.loads(wire)["labels"] == {}
    assert decode_node_labels(wire) == removal
    # An empty label set is not a removal (it matches `!k` selectors).
    assert NodeLabelsChanged("gpu-node-a", (), SEEN) != removal
    with pytest.raises(ValueError, match="no labels"):
        NodeLabelsChanged("gpu-node-a", (("pool", "east"),), SEEN, removed=True)


@pytest.mark.parametrize(
    ("patch", "message"),
    [({"removed": "yes"}, "'removed' must be a boolean"), ({"removed": True}, "no labels")],
)
def test_a_bad_removal_is_a_decode_error(patch: dict[str, Any], message: str) -> None:
    with pytest.raises(EventDecodeError, match=message):
        decode_node_labels(orjson.dumps({**orjson.loads(OLD), **patch}))


def node(name: str, version: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "resourceVersion": version}
    if labels is not None:
        metadata["labels"] = labels
    return {"metadata": metadata, "status": {"capacity": {}, "allocatable": {}}}


def labels_of(outcome: NodeOutcome) -> list[NodeLabelsChanged]:
    return [e for e in outcome.events if isinstance(e, NodeLabelsChanged)]


def test_a_deleted_node_gets_a_removal_once_and_a_recreated_one_its_labels() -> None:
    tracker = NodeTracker(timedelta(seconds=60))
    tracker.node_event(WatchKind.ADDED, node("a", "1", {"pool": "east"}), SEEN)
    gone = tracker.node_event(WatchKind.DELETED, node("a", "2", {"pool": "east"}), SEEN)
    assert labels_of(gone) == [NodeLabelsChanged("a", (), SEEN, removed=True)]
    # Deleted again (a replayed watch): nothing more to remove.
    assert labels_of(tracker.node_event(WatchKind.DELETED, node("a", "2"), SEEN)) == []
    back = tracker.node_event(WatchKind.ADDED, node("a", "3", {"pool": "west"}), SEEN)
    assert labels_of(back) == [NodeLabelsChanged("a", (("pool", "west"),), SEEN)]


def test_a_relist_removes_the_labels_of_the_nodes_it_no_longer_has() -> None:
    tracker = NodeTracker(timedelta(seconds=60))
    for name in ("a", "b", "c"):
        tracker.node_event(WatchKind.ADDED, node(name, "1", {"pool": "east"}), SEEN)
    outcomes = tracker.nodes_listed([node("b", "1", {"pool": "east"})], SEEN)
    assert len(outcomes) == 2  # one per listed Node, then the removals
    assert [e.node for e in labels_of(outcomes[0])] == ["b"]  # re-stated
    assert labels_of(outcomes[1]) == [
        NodeLabelsChanged("a", (), SEEN, removed=True),
        NodeLabelsChanged("c", (), SEEN, removed=True),
    ]
    # Forgotten: the next re-LIST without them removes nothing more.
    assert len(tracker.nodes_listed([node("b", "1", {"pool": "east"})], SEEN)) == 1
