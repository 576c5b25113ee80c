"""The watcher's memory of Namespaces: only whether each carries the admin-access label (issue 16,
the adoption gate's ``tenant-boundary`` signal).

KEP-5018 (DRA admin access): a ResourceClaim (or ResourceClaimTemplate) with
``spec.devices.requests[].exactly.adminAccess: true`` is admitted only in a Namespace labelled
``resource.kubernetes.io/admin-access: "true"``, and the API server checks the label only when the
claim is created and when it is allocated: a Namespace that loses its label keeps its admitted
admin-access claims. So the watcher keeps the label per Namespace and the
:class:`~.inventory_tracker.InventoryTracker` writes it into the admin-access claims it publishes
(``ResourceClaimInfo.namespace_admin``), publishing them again when it changes.

Pure: raw JSON in (core/v1 Namespace), no I/O. Rules:

- a Namespace is kept as one bool: its label's value is exactly ``"true"`` (anything else, or
  no label, is ``False``), nothing else of the object;
- ADDED/MODIFIED whose resourceVersion is not newer than the newest seen is ``stale``; the same
  value again is ``unchanged``; a Namespace without a name is a rejection;
- DELETED forgets it; a complete LIST forgets the Namespaces it no longer has;
- every outcome says which Namespaces' value changed (known, unknown, true, false).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from services.domain.codec import parse_resource_version
from services.domain.watch.pod_tracker import WatchKind

NAMESPACE_KIND: Final = "Namespace"
"""The object kind of a Namespace (watch lines, the watcher's streams)."""

ADMIN_ACCESS_LABEL: Final = "resource.kubernetes.io/admin-access"
"""The Namespace label that allows admin-access ResourceClaims (KEP-5018), with value ``"true"``."""


@dataclass(frozen=True, slots=True)
class NamespaceOutcome:
    """``changed``: the Namespace whose admin-access value changed (``None``: none);
    ``reject_reason``: dead-letter the object with it; ``ignored``: why nothing changed
    (``stale``, ``unchanged``, ``unknown``)."""

    changed: str | None = None
    reject_reason: str | None = None
    ignored: str | None = None


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, Mapping) else {}


def admin_label(obj: Mapping[str, Any]) -> bool:
    """Whether a Namespace object carries ``resource.kubernetes.io/admin-access: "true"``."""
    labels = _metadata(obj).get("labels")
    return isinstance(labels, Mapping) and labels.get(ADMIN_ACCESS_LABEL) == "true"


class NamespaceTracker:
    """Per Namespace name: whether it carries the admin-access label, and the newest
    resourceVersion seen. See the module docstring."""

    def __init__(self) -> None:
        self._admin: dict[str, bool] = {}
        self._versions: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._admin)

    def admin_access(self, namespace: str) -> bool | None:
        """The Namespace's label (``True``: ``"true"``), ``None`` when it is not known."""
        return self._admin.get(namespace)

    def event(self, kind: WatchKind, obj: Mapping[str, Any]) -> NamespaceOutcome:
        """One ADDED/MODIFIED/DELETED of a Namespace."""
        metadata = _metadata(obj)
        name = metadata.get("name")
        if not isinstance(name, str) or not name:
            if kind is WatchKind.DELETED:
                return NamespaceOutcome(ignored="unknown")
            return NamespaceOutcome(reject_reason="Namespace <no name>: metadata.name missing")
        version = parse_resource_version(metadata.get("resourceVersion"))
        newest = self._versions.get(name)
        if kind is WatchKind.DELETED:
            if version is not None and newest is not None and version < newest:
                return NamespaceOutcome(ignored="stale")
            self._versions.pop(name, None)
            if self._admin.pop(name, None) is None:
                return NamespaceOutcome(ignored="unknown")
            return NamespaceOutcome(changed=name)
        if version is not None:
            if newest is not None and version <= newest:
                return NamespaceOutcome(ignored="stale")
            self._versions[name] = version
        value = admin_label(obj)
        if self._admin.get(name) is value:
            return NamespaceOutcome(ignored="unchanged")
        self._admin[name] = value
        return NamespaceOutcome(changed=name)

    def listed(self, objs: Iterable[Mapping[str, Any]]) -> tuple[list[NamespaceOutcome], set[str]]:
        """A complete LIST: every object read as ADDED (one outcome each, in order), then the
        Namespaces it no longer has forgotten; the names whose value changed."""
        outcomes, listed = [], set()
        for obj in objs:
            outcomes.append(self.event(WatchKind.ADDED, obj))
            name = _metadata(obj).get("name")
            if isinstance(name, str):
                listed.add(name)
        changed = {o.changed for o in outcomes if o.changed is not None}
        for name in sorted(set(self._admin) - listed):
            self._admin.pop(name, None)
            changed.add(name)
        for name in set(self._versions) - listed:
            self._versions.pop(name, None)
        return outcomes, changed
