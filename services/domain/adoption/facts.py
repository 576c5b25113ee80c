"""How the facts the adoption gate reads (records in
:mod:`services.domain.governance.adoption_facts`, re-exported here) are read from an inventory :class:`~services.domain.inventory.snapshot.Snapshot` and its active conflicts.

Sources: ResourceSlices (``spec.driver``, ``spec.pool.name``, ``spec.nodeName``), the inventory's
conflicts (``plugin-and-dra``), the reconcile check (:mod:`services.domain.inventory.reconcile`:
slices against Node capacity), the governor's device rows (quarantines), ResourceClaims
(``status.allocation``, ``status.reservedFor``) and the ``pod_ready`` rows of
``pod_lifecycle_stages`` (:func:`ready_facts`).
"""

from __future__ import annotations

from collections.abc import Iterable

from services.domain.adoption.ready_forward import extended_classes
from services.domain.adoption.report_rows import StageRow
from services.domain.governance.adoption_facts import (
    OWNERSHIP_CONFLICTS,
    QUARANTINED_STATES,
    ClaimFact,
    ConflictFact,
    DeviceFact,
    DivergenceFact,
    FailureFact,
    InventoryFacts,
    LabelsFact,
    ReadyFact,
    SliceFact,
)
from services.domain.inventory.reconcile import divergence
from services.domain.inventory.snapshot import Snapshot

__all__ = [
    "OWNERSHIP_CONFLICTS",
    "QUARANTINED_STATES",
    "ClaimFact",
    "ConflictFact",
    "DeviceFact",
    "DivergenceFact",
    "FailureFact",
    "InventoryFacts",
    "LabelsFact",
    "ReadyFact",
    "SliceFact",
    "read_facts",
    "ready_facts",
]


def read_facts(
    snapshot: Snapshot,
    conflicts: Iterable[ConflictFact],
    failures: Iterable[FailureFact] = (),
    ready: Iterable[ReadyFact] = (),
) -> InventoryFacts:
    """The gate's facts from one read of the projection: ``snapshot`` (the whole fleet), the
    active inventory conflicts and the recent driver and claim failures on nodes."""
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
                tenant_boundary=c.tenant_boundary,
            )
            for c in inv.claims.values()
        ),
        failures=frozenset(failures),
        ready=frozenset(ready),
        labels=frozenset(LabelsFact(n, labels) for n, labels in snapshot.node_labels.items()),
    )


def ready_facts(snapshot: Snapshot, rows: Iterable[StageRow]) -> list[ReadyFact]:
    """The gate's bound-to-Ready samples from ``pod_ready`` stage ``rows``: a plugin sample
    names the DeviceClasses whose ``extendedResourceName`` is its resource in ``snapshot`` now
    (the governor's, when the worker forwarded it)."""
    classes = extended_classes(
        {c.name: c.extended_resource_name for c in snapshot.inventory.classes.values()}
    )
    return [
        ReadyFact(
            r.node,
            r.observed_at,
            r.pod_uid,
            r.device_class,
            r.path,
            r.seconds,
            (r.device_class,) if r.path == "dra" else classes.get(r.device_class, ()),
        )
        for r in rows
        if r.stage == "pod_ready"
    ]
