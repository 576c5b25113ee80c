"""Values the projection cannot store never leave the watcher as events (domain/limits.py).

Each of these once stopped the worker for good: PostgreSQL rejected the batch on every restart.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from services.domain.events import DeviceHealthObserved, PodsListed
from services.domain.limits import field_violations
from services.domain.watch.pod_tracker import WatchKind
from services.processes.watcher.processor import WatchProcessor

AT = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
POD: dict[str, Any] = {
    "kind": "Pod",
    "metadata": {"name": "p", "namespace": "ns", "uid": "uid-1", "resourceVersion": "100"},
    "spec": {"nodeName": "gpu-node-a", "containers": [{"name": "c"}]},
    "status": {
        "phase": "Running",
        "containerStatuses": [
            {
                "name": "c",
                "allocatedResourcesStatus": [
                    {
                        "name": "nvidia.com/gpu",
                        "resources": [{"resourceID": "GPU-1", "health": "Unhealthy"}],
                    }
                ],
            }
        ],
    },
}


def pod_with(resource: dict[str, Any] | None = None, node: str | None = None) -> dict[str, Any]:
    pod = copy.deepcopy(POD)
    if resource is not None:
        entry = pod["status"]["containerStatuses"][0]["allocatedResourcesStatus"][0]
        entry["resources"] = [resource]
    if node is not None:
        pod["spec"]["nodeName"] = node
    return pod


def process(pod: dict[str, Any]) -> Any:
    return WatchProcessor().pod_event(WatchKind.ADDED, pod, orjson.dumps(pod), "test:1", AT)


def test_nul_in_a_message_is_replaced_and_the_observation_kept() -> None:
    outcome = process(
        pod_with({"resourceID": "GPU-1", "health": "Unhealthy", "message": "XID\x0079"})
    )
    [event] = outcome.events
    assert isinstance(event, DeviceHealthObserved)
    assert event.message == "XID\ufffd79"
    assert field_violations(event) == []
    assert outcome.dead_letters == []


def test_nul_in_an_unrecognised_health_is_replaced_and_cut() -> None:
    outcome = process(pod_with({"resourceID": "GPU-1", "health": "Bad\x00" + "x" * 5000}))
    [event] = outcome.events
    assert isinstance(event, DeviceHealthObserved)
    assert event.raw_health is not None and len(event.raw_health) == 256
    assert "\x00" not in event.raw_health


@pytest.mark.parametrize(
    ("resource", "node", "reason"),
    [
        ({"resourceID": "GPU-a\x1fb", "health": "Healthy"}, None, "resourceID contains a control"),
        ({"resourceID": "GPU-\x00", "health": "Healthy"}, None, "resourceID contains a control"),
        ({"resourceID": "G" * 3000, "health": "Healthy"}, None, "resourceID is longer than 1024"),
        (None, "gpu-node\x1fGPU", "node contains a control character"),
        (None, "n" * 300, "node is longer than 253"),
    ],
)
def test_unstorable_identifiers_are_dead_lettered_not_published(
    resource: dict[str, Any] | None, node: str | None, reason: str
) -> None:
    pod = pod_with(resource, node)
    outcome = process(pod)
    assert outcome.events == []
    [letter] = outcome.dead_letters
    assert reason in letter.reason and "invalid-field" in letter.reason
    assert letter.original == orjson.dumps(pod)


def test_a_relist_dead_letters_unstorable_pods_and_keeps_the_rest() -> None:
    good, bad = pod_with(), pod_with({"resourceID": "GPU-\x1f", "health": "Healthy"})
    bad["metadata"]["uid"] = "uid-2"
    outcome = WatchProcessor().relisted([good, bad], "200", "test:list", AT)
    *events, snapshot = outcome.events
    assert [e.pod_uid for e in events if not isinstance(e, PodsListed)] == ["uid-1"]
    # Both Pods exist: the snapshot lists them, stored or not.
    assert isinstance(snapshot, PodsListed) and snapshot.pod_uids == ("uid-1", "uid-2")
    [letter] = outcome.dead_letters
    assert orjson.loads(letter.original)["metadata"]["uid"] == "uid-2"
