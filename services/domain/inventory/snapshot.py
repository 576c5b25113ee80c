"""The rows the inventory views are computed from (:class:`Snapshot`), as the API's reads load them
from the projection (:mod:`services.adapters.projection.reads_inventory`): observed devices, resolved
identities, governance rows, Node extended-resource counts and the DRA objects. Plain data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from services.domain.inventory.state import InventoryState


@dataclass(frozen=True, slots=True)
class ObservedDevice:
    """The part of a ``devices`` row the inventory needs; ``pods`` are ``(namespace, podName)``
    of its allocations."""

    node: str
    resource_id: str
    resource_name: str
    source: str
    health: str
    last_observed_at: datetime
    pods: tuple[tuple[str, str], ...] = ()

    @property
    def allocated(self) -> bool:
        return bool(self.pods)


@dataclass(frozen=True, slots=True)
class IdentityRow:
    """A ``device_identities`` row (or one derived for a ``devices`` row without one)."""

    node: str
    resource_id: str
    device_id: str
    owner: str
    status: str
    uuid: str | None = None


@dataclass(frozen=True, slots=True)
class GovernanceRow:
    """The part of a ``device_governance`` row the inventory needs."""

    node: str
    resource_id: str
    resource_name: str
    source: str
    state: str
    observed_health: str
    state_since: datetime
    quarantine_id: str | None = None


@dataclass(frozen=True, slots=True)
class NodeResources:
    """A ``node_resources`` row: extended-resource counts of a Node."""

    node: str
    capacity: Mapping[str, int]
    allocatable: Mapping[str, int]


@dataclass(slots=True)
class Snapshot:
    """What the inventory views are computed from. ``inventory`` holds the current DRA objects
    (its ``slices``, ``claims`` and ``classes``)."""

    inventory: InventoryState = field(default_factory=InventoryState)
    node_resources: dict[str, NodeResources] = field(default_factory=dict)
    node_labels: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    """Each Node's labels, sorted (``node_labels``, issue 16)."""
    identities: list[IdentityRow] = field(default_factory=list)
    devices: list[ObservedDevice] = field(default_factory=list)
    governance: list[GovernanceRow] = field(default_factory=list)
