"""A node's adoption-gate facts from the worker's inventory state (issue 16): what
:class:`~services.domain.governance.inputs_adoption.NodeAdoptionFacts` carries to the governor.

The same reading as the API's on-read view (:func:`services.domain.adoption.facts.read_facts`),
for one node: the ``(driver, pool)`` of the ResourceSlices naming it, the reconcile check's
mismatches on it (:mod:`.reconcile`: devices its slices advertise through a DeviceClass's drivers
against the Node's capacity of the class's ``extendedResourceName``, both sides offering it), and
the ResourceClaims allocated on it with no consumer reserved (``status.reservedFor`` empty: the
claims the gate's ``leaked-claims`` rule counts) or with admin access in a Namespace without the
admin-access label (``tenant_boundary``: the ``tenant-boundary`` rule's). Pure; O(the node's
slices + the fleet's claims and classes).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime

from services.domain.governance.adoption_facts import ClaimFact, DivergenceFact
from services.domain.governance.inputs_adoption import (
    MAX_CLAIMS,
    MAX_DIVERGENCES,
    MAX_SLICES,
    NodeAdoptionFacts,
)
from services.domain.inventory.state import InventoryState
from services.domain.log import LogPosition


def node_divergences(state: InventoryState, node: str) -> list[DivergenceFact]:
    """The node's extended resources whose slices and Node capacity both offer devices and
    disagree (status ``mismatch`` of :func:`.reconcile.divergence`)."""
    drivers_of: dict[str, set[str]] = defaultdict(set)
    for device_class in state.classes.values():
        if device_class.extended_resource_name:
            drivers_of[device_class.extended_resource_name].update(device_class.drivers)
    capacity = state.node_capacity.get(node, {})
    slices = [s for s in state.slices.values() if s.node == node]
    out = []
    for resource, drivers in sorted(drivers_of.items()):
        advertised = sum(len(s.devices) for s in slices if s.driver in drivers)
        offered = capacity.get(resource, 0)
        if advertised and offered and advertised != offered:
            out.append(DivergenceFact(node, resource, advertised, offered))
    return out


def node_adoption_facts(state: InventoryState, node: str, at: datetime) -> NodeAdoptionFacts:
    """The gate's facts of ``node`` at event time ``at`` (UTC). A node with more facts than a
    record holds (:data:`MAX_CLAIMS`...) carries the first ones in sort order."""
    claims = sorted(
        ClaimFact(
            namespace=c.namespace,
            name=c.name,
            node=node,
            devices=tuple(sorted({(r.driver, r.pool) for r in c.results})),
            allocated_at=c.allocated_at,
            reserved=bool(c.reserved_for),
            tenant_boundary=c.tenant_boundary,
        )
        for c in state.claims.values()
        # Only claims with no consumer can leak, and only admin-access claims outside a labelled
        # Namespace cross a tenant boundary (the rules that read claims): the governor keeps
        # these facts in its snapshot, so the other bound claims are left out.
        if c.node == node and c.results and (not c.reserved_for or c.tenant_boundary)
    )
    pools = sorted({(s.driver, s.pool) for s in state.slices.values() if s.node == node})
    return NodeAdoptionFacts(
        node=node,
        observed_at=at,
        slices=tuple(pools[:MAX_SLICES]),
        divergences=tuple(node_divergences(state, node)[:MAX_DIVERGENCES]),
        claims=tuple(claims[:MAX_CLAIMS]),
    )


class FactsTold:
    """What the worker's inventory fold last told the governor of each node's facts, so that it
    forwards a node's facts only when they change (a restarted worker tells them again: the
    governor finds them equal and records nothing)."""

    def __init__(self) -> None:
        self._told: dict[str, tuple[object, ...]] = {}

    def changed(
        self, state: InventoryState, nodes: Iterable[str], position: LogPosition, at: datetime
    ) -> list[tuple[LogPosition, NodeAdoptionFacts]]:
        """The facts of those of ``nodes`` (sorted) that changed since last told, as of the
        record at ``position`` (event time ``at``, UTC)."""
        out = []
        for node in sorted(nodes):
            facts = node_adoption_facts(state, node, at)
            content = (facts.slices, facts.divergences, facts.claims)
            if self._told.get(node) != content:
                self._told[node] = content
                out.append((position, facts))
        return out
