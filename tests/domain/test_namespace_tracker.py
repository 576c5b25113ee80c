"""The watcher's memory of Namespaces' admin-access label (issue 16, the adoption gate's
``tenant-boundary``): the pure :class:`NamespaceTracker`, and the inventory tracker writing the
label into the admin-access claims it publishes, publishing them again when it changes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from services.domain.inventory.events import InventoryKind
from services.domain.inventory.objects import ResourceClaimInfo
from services.domain.watch.inventory_tracker import InventoryTracker
from services.domain.watch.namespace_tracker import ADMIN_ACCESS_LABEL, NamespaceTracker
from services.domain.watch.pod_tracker import WatchKind

T = datetime(2026, 12, 4, 1, 0, tzinfo=UTC)
ADDED, MODIFIED, DELETED = WatchKind.ADDED, WatchKind.MODIFIED, WatchKind.DELETED


def namespace(name: str, version: int, label: str | None = "true") -> dict[str, Any]:
    labels = {"kubernetes.io/metadata.name": name}
    if label is not None:
        labels[ADMIN_ACCESS_LABEL] = label
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "resourceVersion": str(version), "labels": labels},
    }


def test_the_tracker_keeps_whether_the_label_says_true() -> None:
    t = NamespaceTracker()
    assert t.admin_access("ops") is None
    assert t.event(ADDED, namespace("ops", 1)).changed == "ops"
    assert t.admin_access("ops") is True
    assert t.event(MODIFIED, namespace("ops", 2)).ignored == "unchanged"  # another label moved
    assert t.event(MODIFIED, namespace("ops", 2, label=None)).ignored == "stale"
    assert t.event(MODIFIED, namespace("ops", 3, label="True")).changed == "ops"  # not "true"
    assert t.admin_access("ops") is False
    assert t.event(MODIFIED, namespace("ops", 4, label=None)).ignored == "unchanged"
    assert t.event(DELETED, namespace("ops", 5)).changed == "ops"
    assert t.admin_access("ops") is None and len(t) == 0
    assert t.event(DELETED, namespace("ops", 6)).ignored == "unknown"
    assert t.event(ADDED, {"metadata": {}}).reject_reason is not None


def test_a_list_reads_every_namespace_and_forgets_the_missing_ones() -> None:
    t = NamespaceTracker()
    t.event(ADDED, namespace("gone", 1))
    t.event(ADDED, namespace("same", 2))
    outcomes, changed = t.listed([namespace("same", 2), namespace("new", 3, label=None)])
    assert [o.ignored for o in outcomes] == ["stale", None]
    assert changed == {"gone", "new"}
    assert (t.admin_access("gone"), t.admin_access("new"), t.admin_access("same")) == (
        None,
        False,
        True,
    )


def claim(name: str, version: int, *, admin: bool, ns: str = "ops") -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": "gpu.example.com"}
    if admin:
        exactly["adminAccess"] = True
    result: dict[str, Any] = {
        "request": "gpu",
        "driver": "gpu.example.com",
        "pool": "node-a",
        "device": "gpu-0",
    }
    if admin:
        result["adminAccess"] = True
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": f"uid-{name}",
            "resourceVersion": str(version),
        },
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
        "status": {
            "allocation": {
                "devices": {"results": [result]},
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": ["node-a"]}
                            ]
                        }
                    ]
                },
            },
            "reservedFor": [{"resource": "pods", "name": "p", "uid": "p1"}],
        },
    }


def published_claims(events: list[Any]) -> list[tuple[str, bool | None, bool]]:
    out = []
    for e in events:
        assert isinstance(e.obj, ResourceClaimInfo) and e.key == "node-a"  # the node's partition
        out.append((e.obj.name, e.obj.namespace_admin, e.obj.tenant_boundary))
    return out


def test_admin_claims_carry_the_label_and_are_published_again_when_it_changes() -> None:
    tracker = InventoryTracker()
    claims = InventoryKind.RESOURCE_CLAIM
    # The claims come before their Namespace is known: no label, no finding yet.
    first = tracker.event(ADDED, claims, claim("admin", 10, admin=True), T).events
    assert published_claims(first) == [("admin", None, False)]
    tracker.event(ADDED, claims, claim("plain", 11, admin=False), T)
    tracker.event(ADDED, claims, claim("elsewhere", 12, admin=True, ns="other"), T)
    listed = tracker.namespaces_listed([namespace("ops", 1), namespace("other", 2)], T)
    assert published_claims(listed.republished) == [
        ("admin", True, False),
        ("elsewhere", True, False),
    ]
    # The label removed from ops: only ops's admin-access claim is published again.
    lost = tracker.namespace_event(MODIFIED, namespace("ops", 3, label=None), T)
    assert published_claims(lost.events) == [("admin", False, True)]
    # A claim change keeps the label it now has.
    again = tracker.event(MODIFIED, claims, claim("admin", 13, admin=True), T)
    assert again.ignored == "unchanged"
    # Labelled again: published once more, without the finding.
    back = tracker.namespace_event(MODIFIED, namespace("ops", 4), T)
    assert published_claims(back.events) == [("admin", True, False)]
    assert tracker.namespace_event(MODIFIED, namespace("ops", 5), T).events == []
    # A non-admin claim never carries a label.
    plain = tracker.form(claims, "ops/plain")
    assert isinstance(plain, ResourceClaimInfo) and plain.namespace_admin is None
