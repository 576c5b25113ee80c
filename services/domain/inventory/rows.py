"""The rows of the inventory tables (:mod:`services.adapters.projection.inventory_tables`) as the
pure fold (:mod:`.fold`) makes them, and back: objects, node resources, identities, conflicts.
Times are event times (UTC)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeAlias

from services.domain.events import ClaimRef, DeviceSource
from services.domain.inventory.events import InventoryObserved, object_to_json
from services.domain.inventory.identity import Identity, IdentityStatus
from services.domain.inventory.objects import (
    DeviceClassInfo,
    ResourceClaimInfo,
    ResourceSliceInfo,
)
from services.domain.inventory.resolution import AliasInput
from services.domain.inventory.state import Conflict, InventoryState
from services.domain.node_events import NodeResourcesChanged
from services.domain.node_labels import NodeLabelsChanged

ConflictKey: TypeAlias = tuple[str, str, str]
"""``(kind, node, subject)``: the primary key of ``inventory_conflicts``."""

ObjectKey: TypeAlias = tuple[str, str]
"""``(kind, object_key)``: the primary key of ``inventory_objects``."""

Row: TypeAlias = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ConflictRow:
    """One ``inventory_conflicts`` row."""

    kind: str
    node: str
    subject: str
    detail: str
    active: bool
    first_seen: datetime
    last_seen: datetime

    @property
    def key(self) -> ConflictKey:
        return (self.kind, self.node, self.subject)

    def to_row(self) -> Row:
        return {
            "kind": self.kind,
            "node": self.node,
            "subject": self.subject,
            "detail": self.detail,
            "active": self.active,
            "first_seen": self.first_seen,
            "last_seen": self.last_seen,
        }


# --- rows ---------------------------------------------------------------------------------------


def object_key(obj: ResourceSliceInfo | ResourceClaimInfo | DeviceClassInfo) -> str:
    """``inventory_objects.object_key``: ``driver/pool/slice-name``, ``namespace/name`` or the
    DeviceClass name."""
    if isinstance(obj, ResourceSliceInfo):
        return f"{obj.driver}/{obj.pool}/{obj.name}"
    if isinstance(obj, ResourceClaimInfo):
        return f"{obj.namespace}/{obj.name}"
    return obj.name


def object_row(event: InventoryObserved) -> Row:
    """The ``inventory_objects`` row of an inventory event (a deletion is a tombstone: the last
    form with ``deleted`` set)."""
    obj = event.obj
    return {
        "kind": event.kind.value,
        "object_key": object_key(obj),
        "record_key": event.key,
        "node": None if isinstance(obj, DeviceClassInfo) else obj.node,
        "object": object_to_json(obj),
        "deleted": event.deleted,
        "observed_at": event.observed_at,
    }


def node_resources_row(event: NodeResourcesChanged) -> Row:
    """The ``node_resources`` row of a ``NodeResourcesChanged``."""
    return {
        "node": event.node,
        "capacity": dict(event.capacity),
        "allocatable": dict(event.allocatable),
        "observed_at": event.observed_at,
    }


def node_labels_row(event: NodeLabelsChanged) -> Row:
    """The ``node_labels`` row of a ``NodeLabelsChanged`` (issue 16)."""
    return {"node": event.node, "labels": dict(event.labels), "observed_at": event.observed_at}


def identity_row(
    node: str,
    resource_id: str,
    identity: Identity,
    observed_at: datetime,
    reported_with: AliasInput | None = None,
    last_observed_at: datetime | None = None,
    partition: int | None = None,
) -> Row:
    """The ``device_identities`` row of a reported ``(node, resourceID)``: ``observed_at`` is the
    event time of its first observation, ``reported_with`` the claim its latest observation that
    named one named (what a claim read later re-resolves it through; ``None`` for none). For a
    claim alias (:mod:`.expiry`), ``last_observed_at`` is the event time of its latest applied
    observation and ``partition`` the health-topic partition it came from (``None`` otherwise)."""
    return {
        "node": node,
        "resource_id": resource_id,
        "device_id": identity.device_id,
        "owner": identity.owner.value,
        "status": identity.status.value,
        "uuid": identity.uuid,
        "candidates": list(identity.candidates),
        "reason": identity.reason,
        "observed_at": observed_at,
        "reported_with": None if reported_with is None else reported_with_json(reported_with),
        "last_observed_at": last_observed_at,
        "partition": partition,
    }


def reported_with_json(given: AliasInput) -> dict[str, str | None]:
    """``device_identities.reported_with``: ``{namespace, podClaim, request, resourceClaim}``."""
    claim = given.claim
    return {
        "namespace": given.namespace,
        "podClaim": claim.pod_claim_name,
        "request": claim.request,
        "resourceClaim": claim.resource_claim_name,
    }


def reported_with_from_json(obj: Mapping[str, Any] | None) -> AliasInput | None:
    """Inverse of :func:`reported_with_json` (``None`` kept)."""
    if not obj or not obj.get("resourceClaim"):
        return None
    return AliasInput(
        obj["namespace"], ClaimRef(obj["podClaim"], obj.get("request"), obj["resourceClaim"])
    )


def identity_from_row(row: Mapping[str, Any]) -> Identity:
    """The :class:`Identity` a ``device_identities`` row holds (inverse of :func:`identity_row`)."""
    return Identity(
        device_id=row["device_id"],
        owner=DeviceSource(row["owner"]),
        status=IdentityStatus(row["status"]),
        uuid=row["uuid"],
        candidates=tuple(row["candidates"] or ()),
        reason=row["reason"],
    )


def conflict_key(conflict: Conflict) -> ConflictKey:
    return (conflict.kind.value, conflict.node, conflict.subject)


def by_key(conflicts: Iterable[Conflict]) -> dict[ConflictKey, Conflict]:
    """Conflicts by key; of several with one key (differing in detail only), the first of
    ``conflicts`` (give them sorted for a deterministic pick)."""
    out: dict[ConflictKey, Conflict] = {}
    for conflict in conflicts:
        out.setdefault(conflict_key(conflict), conflict)
    return out


def place_object(
    state: InventoryState,
    obj: ResourceSliceInfo | ResourceClaimInfo | DeviceClassInfo,
    deleted: bool = False,
) -> None:
    """Put an ``inventory_objects`` row's object (a tombstone when ``deleted``) into ``state`` as
    loaded: what the resolutions learn from it, and the object by its key unless deleted (slices
    by ``(driver, pool, name)``, claims by ``(namespace, name)``, classes by name). No conflict
    is computed and the indexes are not rebuilt (call ``state.reindex()``)."""
    state.resolutions.learn_object(obj, deleted)
    if deleted:
        return
    if isinstance(obj, ResourceSliceInfo):
        state.slices[(obj.driver, obj.pool, obj.name)] = obj
    elif isinstance(obj, ResourceClaimInfo):
        state.claims[(obj.namespace, obj.name)] = obj
    else:
        state.classes[obj.name] = obj


def place_identity(state: InventoryState, row: Mapping[str, Any]) -> None:
    """Put a ``device_identities`` row into ``state`` as loaded (its identity, first observation
    and reported claim); call ``state.reindex()`` after the last one."""
    alias = (row["node"], row["resource_id"])
    state.aliases[alias] = identity_from_row(row)
    state.first_seen[alias] = row["observed_at"]
    given = reported_with_from_json(row.get("reported_with"))
    if given is not None:
        state.resolutions.inputs[alias] = given
