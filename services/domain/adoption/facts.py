"""The facts the adoption gate reads (:mod:`.gate`), as plain records, and how they are read from
an inventory :class:`~services.domain.inventory.snapshot.Snapshot` and its active conflicts.

Sources: ResourceSlices (``spec.driver``, ``spec.pool.name``, ``spec.nodeName``), the inventory's
conflicts (``plugin-and-dra``), the reconcile check (:mod:`services.domain.inventory.reconcile`:
slices against Node capacity), the governor's device rows (quarantines) and ResourceClaims
(``status.allocation``, ``status.reservedFor``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from services.domain.inventory.reconcile import divergence
from services.domain.inventory.snapshot import Snapshot
from services.domain.inventory.state import ConflictKind

QUARANTINED_STATES = frozenset({"Quarantined", "Recovering"})
"""Governance states (``GovState`` values) that hold an active quarantine."""


@dataclass(frozen=True, slots=True, order=True)
class SliceFact:
    """A ResourceSlice's driver, pool and node (node-local slices only)."""

    driver: str
    pool: str
    node: str


@dataclass(frozen=True, slots=True, order=True)
class ConflictFact:
    """An active inventory conflict: ``kind`` (``plugin-and-dra``...), node, subject."""

    kind: str
    node: str
    subject: str


@dataclass(frozen=True, slots=True, order=True)
class DivergenceFact:
    """A node and extended resource where slices and Node capacity both offer devices and
    disagree (devices advertised by slices, and the Node's capacity)."""

    node: str
    resource_name: str
    slice_devices: int
    node_capacity: int


@dataclass(frozen=True, slots=True, order=True)
class DeviceFact:
    """A device the governor knows on ``node`` (``resource_id`` its key) and whether it is
    quarantined."""

    node: str
    resource_id: str
    quarantined: bool


@dataclass(frozen=True, slots=True, order=True)
class ClaimFact:
    """A ResourceClaim ``namespace/name`` with its allocation: ``node`` (of the allocation),
    ``devices`` ``(driver, pool)`` of its results, ``allocated_at`` (UTC, when the inventory saw the
    allocation; ``None``: not allocated) and ``reserved`` (``status.reservedFor`` not empty)."""

    namespace: str
    name: str
    node: str | None
    devices: tuple[tuple[str, str], ...]
    allocated_at: datetime | None
    reserved: bool


@dataclass(frozen=True, slots=True)
class InventoryFacts:
    """Everything the gate reads about the fleet. Each field is a set: the order facts arrive in
    never changes the gate's answer."""

    slices: frozenset[SliceFact] = field(default_factory=frozenset)
    conflicts: frozenset[ConflictFact] = field(default_factory=frozenset)
    divergences: frozenset[DivergenceFact] = field(default_factory=frozenset)
    devices: frozenset[DeviceFact] = field(default_factory=frozenset)
    claims: frozenset[ClaimFact] = field(default_factory=frozenset)


def read_facts(snapshot: Snapshot, conflicts: Iterable[ConflictFact]) -> InventoryFacts:
    """The gate's facts from one read of the projection: ``snapshot`` (the whole fleet) and the
    active inventory conflicts."""
    inv = snapshot.inventory
    return InventoryFacts(
        slices=frozenset(
            SliceFact(s.driver, s.pool, s.node) for s in inv.slices.values() if s.node
        ),
        conflicts=frozenset(conflicts),
        divergences=frozenset(
            DivergenceFact(d.node, d.resource_name, d.slice_devices, d.node_capacity)
            for d in divergence(snapshot)
            if d.status == "mismatch"
        ),
        devices=frozenset(
            DeviceFact(g.node, g.resource_id, g.state in QUARANTINED_STATES)
            for g in snapshot.governance
        ),
        claims=frozenset(
            ClaimFact(
                namespace=c.namespace,
                name=c.name,
                node=c.node,
                devices=tuple(sorted({(r.driver, r.pool) for r in c.results})),
                allocated_at=c.allocated_at if c.results else None,
                reserved=bool(c.reserved_for),
            )
            for c in inv.claims.values()
        ),
    )


OWNERSHIP_CONFLICTS = frozenset({ConflictKind.PLUGIN_AND_DRA.value})
"""Conflict kinds that say two paths own the same hardware."""
