"""What one batch does to the inventory tables and tells the governor (:class:`InventoryPlan`),
as :class:`~services.domain.inventory.fold.InventoryFold` makes it: rows to upsert, claim aliases
forgotten, identities resolved, conflicts raised or cleared, aliases identified late. Pure data."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from services.domain.governance.inputs_adoption import NodeAdoptionFacts
from services.domain.inventory.identity import Identity, IdentityStatus
from services.domain.inventory.rows import ConflictKey, ConflictRow, ObjectKey, Row
from services.domain.log import LogPosition


@dataclass(frozen=True, slots=True)
class ConflictChange:
    """A conflict raised (``row.active``) or cleared, by the record at ``position`` whose event
    time is ``at``; ``row`` is the conflict's row after the change."""

    position: LogPosition
    at: datetime
    row: ConflictRow


@dataclass(frozen=True, slots=True)
class IdentityResolved:
    """An alias that had been reported under its own resourceID now names a physical device:
    a DRA object read at ``position`` (event time ``at``) resolved it after its observations
    (:meth:`InventoryState.reresolve`). The worker forwards it to the governor, which merges what
    it held under the reported resourceID onto the device."""

    position: LogPosition
    at: datetime
    node: str
    resource_id: str
    identity: Identity


@dataclass(slots=True)
class InventoryPlan:
    """What one batch does to the inventory tables, and what it tells the governor.

    Rows are keyed by primary key (several changes to one row in a batch: the last wins)."""

    objects: dict[ObjectKey, Row] = field(default_factory=dict)
    node_resources: dict[str, Row] = field(default_factory=dict)
    node_labels: dict[str, Row] = field(default_factory=dict)
    """``node_labels`` rows (issue 16), by node."""
    node_labels_removed: set[str] = field(default_factory=set)
    """Nodes whose ``node_labels`` row is deleted (a removal, issue 16); never also in
    :attr:`node_labels`."""
    identities: dict[tuple[str, str], Row] = field(default_factory=dict)
    forgotten: set[tuple[str, str]] = field(default_factory=set)
    """Claim aliases whose identity row is deleted (retention, :mod:`.expiry`); never also in
    :attr:`identities`."""
    conflicts: dict[ConflictKey, ConflictRow] = field(default_factory=dict)
    resolved: dict[LogPosition, Identity] = field(default_factory=dict)
    """The identity :meth:`InventoryState.resolve` returned for each applied observation."""
    changes: list[ConflictChange] = field(default_factory=list)
    """Conflicts raised or cleared, in log order."""
    identified: list[IdentityResolved] = field(default_factory=list)
    """Aliases a DRA object resolved to a physical device after they were reported, in log
    order."""
    adoption: list[tuple[LogPosition, NodeAdoptionFacts]] = field(default_factory=list)
    """Nodes whose adoption-gate facts a record changed, after that record, in log order (the
    worker forwards them to the governor: issue 16)."""

    @property
    def writes(self) -> int:
        """Rows to write."""
        return (
            len(self.objects)
            + len(self.node_resources)
            + len(self.node_labels)
            + len(self.node_labels_removed)
            + len(self.identities)
            + len(self.forgotten)
            + len(self.conflicts)
        )


def forwards(identity: Identity) -> bool:
    """Whether a HealthTransition names the device by ``identity.device_id``: only for a resolved
    or as-reported identity (an ambiguous or unresolved one keeps the reported resourceID)."""
    return identity.status in (IdentityStatus.RESOLVED, IdentityStatus.REPORTED)
