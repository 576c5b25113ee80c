"""The facts the adoption gate reads (:mod:`.adoption_gate`), as plain records: a ResourceSlice's
driver, pool and node, the active ownership conflicts, slice/Node-capacity divergences, the
governor's devices and ResourceClaims' allocations. Read from the projection by
:func:`services.domain.adoption.facts.read_facts` (the API's view) and carried to the governor by
:class:`~services.domain.governance.inputs_adoption.NodeAdoptionFacts` records.

Sources: ResourceSlices (``spec.driver``, ``spec.pool.name``, ``spec.nodeName``), the inventory's
conflicts (``plugin-and-dra``), the reconcile check (slices against Node capacity), the governor's
device rows (quarantines), ResourceClaims (``status.allocation``, ``status.reservedFor``) and the
driver and claim failures of each node (``NodeFailureObserved`` records in the governor; the
``dra_failures`` rows in the API's view) and the Pods' bound-to-Ready latencies by path
(``NodeReadyObserved`` records in the governor; the ``pod_lifecycle_stages`` rows in the API's
view).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

QUARANTINED_STATES: Final = frozenset({"Quarantined", "Recovering"})
"""Governance states (``GovState`` values) that hold an active quarantine."""

OWNERSHIP_CONFLICTS: Final = frozenset({"plugin-and-dra"})
"""Conflict kinds that say two paths own the same hardware (``ConflictKind.PLUGIN_AND_DRA``)."""


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
    allocation; ``None``: not allocated), ``reserved`` (``status.reservedFor`` not empty) and
    ``tenant_boundary``: it got devices for administrative access (KEP-5018 ``adminAccess``) in a
    Namespace without the label ``resource.kubernetes.io/admin-access: "true"``."""

    namespace: str
    name: str
    node: str | None
    devices: tuple[tuple[str, str], ...]
    allocated_at: datetime | None
    reserved: bool
    tenant_boundary: bool = False


@dataclass(frozen=True, slots=True, order=True)
class FailureFact:
    """``count`` more occurrences of failure source ``source_uid`` on ``node`` at event time
    ``at`` (UTC), bringing it to ``occurrences`` (so two facts of one source are never equal),
    of ``failure_class`` (``retryable``, ``non-retryable``, ``needs-cleanup``)."""

    node: str
    at: datetime
    source_uid: str
    occurrences: int
    count: int
    failure_class: str


COUNTED_FAILURE_CLASSES: Final = frozenset({"retryable", "needs-cleanup"})
"""The failure classes the gate's ``claim-failures`` signal holds a pool on: the driver's or the
node's (transient errors, half-prepared claims), not the tenant's (``non-retryable``: a claim
that cannot be satisfied as written fails on every path; it is a figure, not a hold)."""


@dataclass(frozen=True, slots=True, order=True)
class ReadyFact:
    """One Pod's bound-to-Ready latency (``pod_ready``: ``PodScheduled`` to ``Ready``,
    ``seconds`` >= 0) on ``node``, seen at event time ``at`` (UTC), for ``device_class`` on
    ``path`` (``dra``: a DeviceClass; ``device-plugin``: an extended resource name).
    ``classes``: the DeviceClasses a plugin sample compares against (those whose
    ``extendedResourceName`` is ``device_class``; for a DRA sample ``(device_class,)``)."""

    node: str
    at: datetime
    pod_uid: str
    device_class: str
    path: str
    seconds: float
    classes: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, str, str]:
        """What makes a sample one Pod's: a Pod's latency of one class on one path counts once."""
        return (self.pod_uid, self.device_class, self.path)


@dataclass(frozen=True, slots=True, order=True)
class LabelsFact:
    """A Node's labels (sorted ``(key, value)``, ``metadata.labels``), from its newest
    ``NodeLabelsChanged`` record: what a pool's label selector matches."""

    node: str
    labels: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class InventoryFacts:
    """Everything the gate reads about the fleet. Each field is a set: the order facts arrive in
    never changes the gate's answer."""

    slices: frozenset[SliceFact] = field(default_factory=frozenset)
    conflicts: frozenset[ConflictFact] = field(default_factory=frozenset)
    divergences: frozenset[DivergenceFact] = field(default_factory=frozenset)
    devices: frozenset[DeviceFact] = field(default_factory=frozenset)
    claims: frozenset[ClaimFact] = field(default_factory=frozenset)
    failures: frozenset[FailureFact] = field(default_factory=frozenset)
    ready: frozenset[ReadyFact] = field(default_factory=frozenset)
    labels: frozenset[LabelsFact] = field(default_factory=frozenset)
    """One per node whose labels are known (a node with no record matches no label selector)."""
