"""The governance-topic record that carries the adoption gate's inventory facts of one node to the
governor (issue 16), and its wire form.

The governor knows devices, quarantines, Node capacity and inventory conflicts from the records
it already folds; what the gate also reads lives only in the DRA inventory: which driver's
ResourceSlices (of which ``spec.pool.name``) publish on the node, where those slices disagree
with the Node's capacity (the reconcile check), and the node's allocated ResourceClaims that no
consumer reserved. A :class:`NodeAdoptionFacts` is the whole of that for one node at event time
``observed_at``: the governor replaces the node's facts with it (the newest in event time wins),
so a redelivered or repeated record changes nothing (``docs/dra-adoption.md``, "The gate in the
governor").

Wire versions (``version``): 1 (no field; before the ``tenant-boundary`` signal) and 2 (a claim may
carry ``tenantBoundary: true``, written only when true). A version-1 record reads as no claim
crossing a tenant boundary; a newer version than :data:`FACTS_VERSION` is refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from services.domain.codec import (
    EventDecodeError,
    bool_field,
    event_time_field,
    int_field,
    optional_time_field,
    str_field,
)
from services.domain.events import SCHEMA_VERSION, format_time
from services.domain.governance.adoption_facts import ClaimFact, DivergenceFact

MAX_SLICES: Final = 256
"""Most ``(driver, pool)`` pairs a record may carry for one node."""
MAX_CLAIMS: Final = 4096
"""Most allocated ResourceClaims a record may carry for one node."""
MAX_DIVERGENCES: Final = 256
"""Most divergent extended resources a record may carry for one node."""
FACTS_VERSION: Final = 2
"""The ``version`` written in every record; a reader refuses a newer one."""


@dataclass(frozen=True, slots=True)
class NodeAdoptionFacts:
    """The gate's inventory facts of ``node`` at event time ``observed_at`` (UTC):

    - ``slices``: sorted ``(driver, pool)`` of the ResourceSlices naming the node
      (``spec.driver``, ``spec.pool.name``, ``spec.nodeName``; resource.k8s.io/v1);
    - ``divergences``: the node's extended resources whose slices and Node capacity disagree
      (:mod:`services.domain.inventory.reconcile`, status ``mismatch``), each with ``node`` equal
      to ``node``;
    - ``claims``: ResourceClaims allocated on the node (``status.allocation``), each with
      ``node`` equal to ``node`` and ``reserved`` from ``status.reservedFor``; the worker sends
      only those with no consumer reserved (the gate counts them as leaked) and those crossing a
      tenant boundary (``tenant_boundary``: admin access in a Namespace without the label).

    ``ValueError`` when a fact names another node or a list exceeds its limit.
    """

    node: str
    observed_at: datetime
    slices: tuple[tuple[str, str], ...] = ()
    divergences: tuple[DivergenceFact, ...] = ()
    claims: tuple[ClaimFact, ...] = ()
    type: str = field(default="NodeAdoptionFacts", init=False)

    def __post_init__(self) -> None:
        # Sorted and once each: equal facts are equal records, whatever order they were read in.
        object.__setattr__(self, "slices", tuple(sorted(set(self.slices))))
        object.__setattr__(self, "divergences", tuple(sorted(set(self.divergences))))
        object.__setattr__(self, "claims", tuple(sorted(set(self.claims))))
        if not self.node:
            raise ValueError("a node's adoption facts need the node's name")
        for what, items, limit in (
            ("slices", self.slices, MAX_SLICES),
            ("divergences", self.divergences, MAX_DIVERGENCES),
            ("claims", self.claims, MAX_CLAIMS),
        ):
            if len(items) > limit:
                raise ValueError(f"at most {limit} {what} per node ({len(items)} given)")
        if any(d.node != self.node for d in self.divergences) or any(
            c.node != self.node for c in self.claims
        ):
            raise ValueError(f"adoption facts of node {self.node} name another node")


def adoption_facts_to_dict(record: NodeAdoptionFacts) -> dict[str, Any]:
    """The record's JSON object (camelCase, schema 1, ``version`` :data:`FACTS_VERSION`)."""
    return {
        "schema": SCHEMA_VERSION,
        "type": record.type,
        "version": FACTS_VERSION,
        "node": record.node,
        "observedAt": format_time(record.observed_at),
        "slices": [{"driver": d, "pool": p} for d, p in record.slices],
        "divergences": [
            {
                "resourceName": d.resource_name,
                "sliceDevices": d.slice_devices,
                "nodeCapacity": d.node_capacity,
            }
            for d in record.divergences
        ],
        "claims": [
            {
                "namespace": c.namespace,
                "name": c.name,
                "devices": [{"driver": d, "pool": p} for d, p in c.devices],
                "allocatedAt": None if c.allocated_at is None else format_time(c.allocated_at),
                "reserved": c.reserved,
                **({"tenantBoundary": True} if c.tenant_boundary else {}),
            }
            for c in record.claims
        ],
    }


def _objects(obj: dict[str, Any], name: str) -> list[dict[str, Any]]:
    value = obj.get(name, [])
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise EventDecodeError(f"field {name!r} must be a list of objects")
    return value


def _pairs(obj: dict[str, Any], name: str) -> tuple[tuple[str, str], ...]:
    return tuple(
        (str_field(o, "driver"), str_field(o, "pool", empty=True)) for o in _objects(obj, name)
    )


def adoption_facts_from_dict(obj: dict[str, Any]) -> NodeAdoptionFacts:
    """Parse the record (any version up to :data:`FACTS_VERSION`; without ``version``: 1);
    raises :class:`EventDecodeError` naming the bad field."""
    version = obj.get("version", 1)
    if type(version) is not int or not 1 <= version <= FACTS_VERSION:
        raise EventDecodeError(
            f"field 'version' must be an integer from 1 to {FACTS_VERSION}, not {version!r}"
        )
    node = str_field(obj, "node")
    try:
        return NodeAdoptionFacts(
            node=node,
            observed_at=event_time_field(obj, "observedAt"),
            slices=_pairs(obj, "slices"),
            divergences=tuple(
                DivergenceFact(
                    node,
                    str_field(d, "resourceName"),
                    int_field(d, "sliceDevices"),
                    int_field(d, "nodeCapacity"),
                )
                for d in _objects(obj, "divergences")
            ),
            claims=tuple(
                ClaimFact(
                    namespace=str_field(c, "namespace"),
                    name=str_field(c, "name"),
                    node=node,
                    devices=tuple(sorted(set(_pairs(c, "devices")))),
                    allocated_at=optional_time_field(c, "allocatedAt"),
                    reserved=bool_field(c, "reserved"),
                    tenant_boundary=bool_field(c, "tenantBoundary"),
                )
                for c in _objects(obj, "claims")
            ),
        )
    except ValueError as exc:
        if isinstance(exc, EventDecodeError):
            raise
        raise EventDecodeError(str(exc)) from exc
