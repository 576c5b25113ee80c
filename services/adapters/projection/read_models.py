"""Read models of the device directory: what :class:`~services.adapters.projection.reads_devices.DeviceReads`
returns (and the API serves), built from the ``devices``, ``device_history`` and
``partition_progress`` rows (:mod:`services.adapters.projection.tables`).

Times are aware ``datetime`` objects in UTC. Status versions are ``int`` (``NUMERIC(39,0)``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from services.domain.directory import DeviceKey, DeviceRecord
from services.domain.events import DeviceSource, Health
from services.domain.log import LogPosition


@dataclass(frozen=True, slots=True)
class DeviceFilters:
    """Filters of :meth:`DeviceReads.list_devices <services.adapters.projection.reads_devices.DeviceReads.list_devices>`; ``None`` means any. ``namespace`` and
    ``pod_uid`` match devices with an allocation of a Pod in that namespace / with that UID."""

    node: str | None = None
    health: Health | None = None
    resource_name: str | None = None
    source: DeviceSource | None = None
    namespace: str | None = None
    pod_uid: str | None = None


@dataclass(frozen=True, slots=True)
class DevicePage:
    """One page of devices sorted by ``(node, resource_id)``; ``next_after`` is the key to pass as
    ``after`` for the next page (``None``: this is the last page)."""

    items: list[DeviceRecord]
    next_after: DeviceKey | None


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One ``device_history`` row: a change one event made to one device (see
    :data:`services.adapters.projection.tables.device_history`)."""

    position: LogPosition
    node: str
    resource_id: str
    kind: str
    health: Health
    status_version: int | None
    observed_at: datetime
    transition: bool
    pod_uid: str
    namespace: str
    pod_name: str
    message: str | None
    raw_health: str | None
    frozen: bool = False


def zero_health() -> dict[Health, int]:
    """Every :class:`Health` mapped to 0."""
    return dict.fromkeys(Health, 0)


@dataclass(frozen=True, slots=True)
class NodeCounts:
    """Device counts of one node, by health (every :class:`Health` present, zeros included)."""

    node: str
    devices: int
    by_health: dict[Health, int] = field(default_factory=zero_health)


@dataclass(frozen=True, slots=True)
class NodeSummary:
    """A node's counts and its devices sorted by resource ID."""

    counts: NodeCounts
    devices: list[DeviceRecord]


@dataclass(frozen=True, slots=True)
class FleetCounts:
    """Device counts of the whole fleet by health and by source (zeros included)."""

    devices: int
    nodes: int
    by_health: dict[Health, int]
    by_source: dict[DeviceSource, int]


@dataclass(frozen=True, slots=True)
class PartitionProgress:
    """Progress of the projection on one Kafka partition.

    ``offset`` is the last applied offset (``None``: none yet); ``highwater`` the partition's end
    offset the worker last saw (the offset of the next record); ``last_event_at`` the newest
    ``observedAt`` applied (event time, UTC); ``updated_at`` the wall-clock time of the last write.
    """

    topic: str
    partition: int
    offset: int | None
    highwater: int | None
    last_event_at: datetime | None
    updated_at: datetime

    @property
    def lag(self) -> int | None:
        """Records not yet applied: ``highwater - offset - 1`` (never negative); ``None`` when the
        highwater is unknown."""
        if self.highwater is None:
            return None
        applied_through = -1 if self.offset is None else self.offset
        return max(0, self.highwater - applied_through - 1)
