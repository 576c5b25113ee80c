"""Retention of the inventory's claim aliases and cleared conflicts (issue 11 item 9): pure, on
event time.

A DRA resourceID of the CDI form names its claim's UID (:func:`claim_alias`), so every claim
leaves one ``device_identities`` row. :class:`AliasExpiry` keeps, per claim alias, the event time
of its last applied observation and the health-topic partition it came from (its node's: the
topic's key is the node). An alias is **lapsed** once that time is older than
:data:`IDENTITY_RETENTION` before its partition's watermark (the newest event time folded from
the partition, ``partition_progress.last_event_at``). At the end of each batch the fold forgets
the lapsed aliases of the batch's partitions whose ``devices`` row holds no allocation
(:meth:`services.domain.inventory.fold.InventoryFold.expire`): their identity row is deleted,
what the resolutions remember of them is dropped, and their ``ambiguous-resource-id`` and
``resource-id-reused`` conflicts are cleared (dated when the alias lapsed).

Why the batch split does not matter: the watermark and the allocations of a node's devices are
functions of its partition's records up to the batch's end, and an observation's event time is the
partition's running maximum (:func:`services.domain.event_time.effective_times`), never earlier
than any earlier watermark. So an alias forgotten at one batch's end is, at its next observation,
lapsed in every batching: the fold forgets a lapsed alias before resolving that observation
(:meth:`InventoryFold.fold`), and the alias starts again (its ``observed_at`` is the new
observation's) whether its row was deleted or not. One thing still depends on what was read
meanwhile: a ResourceClaim or ResourceSlice record of another partition, read between the moment
an alias lapses and the end of that batch, re-resolves it (its row is deleted anyway at the
batch's end) and may raise a conflict that is then cleared, as conflicts may differ between
interleavings (``docs/inventory.md``).

Cleared conflicts are dropped :data:`CONFLICT_RETENTION` before the log's newest event time
(:func:`conflicts_kept`; the highest ``partition_progress.last_event_at``), at the end of every
batch. That time never decreases, so a row dropped at the end of one batch would be dropped at the
end of any later one, and the rows left after any sequence of batches are the same. (Measured
from the newest conflict's ``last_seen`` instead, a conflict raised again with an earlier time
than the cleared row it replaces lowered the horizon, and a row dropped in one split of the log
was kept in another: found by the property test.) The fold holds only active conflicts, so a
dropped row changes no later write, and a conflict raised again after its row went starts a new
row as it would over the cleared one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final

from services.domain.events import DeviceSource
from services.domain.inventory.identity import split_device_id
from services.domain.inventory.resolution import Alias
from services.domain.inventory.rows import ConflictRow

IDENTITY_RETENTION: Final = timedelta(days=7)
"""How long (event time, before its partition's watermark) an unallocated claim alias is kept
after its last observation. A week: longer than any outage a watcher is expected to come back
from, so an alias is only forgotten once its claim is long gone."""

CONFLICT_RETENTION: Final = timedelta(days=7)
"""How long (event time, before the log's newest event time) a cleared conflict is kept:
the same week as the Pod tombstones (:data:`services.domain.tombstones.TOMBSTONE_RETENTION`)."""


def claim_alias(resource_id: str, source: DeviceSource) -> bool:
    """Whether ``resource_id`` is a claim alias: a DRA resourceID of the CDI form (it names the
    claim's UID, so a new one comes with every claim). Device-plugin IDs and the documented
    ``driver/pool/device`` form name a physical device, are bounded by the fleet, and are kept."""
    return source is DeviceSource.DRA and split_device_id(resource_id) is None


def conflicts_kept(rows: Iterable[ConflictRow], newest: datetime | None) -> list[ConflictRow]:
    """``rows`` without the cleared ones whose ``last_seen`` is more than
    :data:`CONFLICT_RETENTION` before ``newest`` (the log's newest event time, UTC; ``None``: no
    event yet, all kept), in the order given. Active rows are always kept. The projection's
    statement is the same (``services.adapters.projection.retention_sql``)."""
    rows = list(rows)
    if newest is None:
        return rows
    cut = newest - CONFLICT_RETENTION
    return [r for r in rows if r.active or r.last_seen >= cut]


@dataclass(slots=True)
class AliasExpiry:
    """Per claim alias: the event time of its last applied observation (UTC) and its partition
    (``device_identities.last_observed_at`` and ``partition``), indexed by partition."""

    last_seen: dict[Alias, datetime] = field(default_factory=dict)
    partition: dict[Alias, int] = field(default_factory=dict)
    _on: dict[int, set[Alias]] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        for alias, partition in self.partition.items():
            self._on.setdefault(partition, set()).add(alias)

    def touch(self, alias: Alias, partition: int, at: datetime) -> None:
        """``alias`` observed at event time ``at`` on ``partition``."""
        held = self.last_seen.get(alias)
        self.last_seen[alias] = at if held is None or at > held else held
        old = self.partition.get(alias)
        if old != partition:
            if old is not None:
                self._on[old].discard(alias)
            self.partition[alias] = partition
            self._on.setdefault(partition, set()).add(alias)

    def lapsed(self, alias: Alias, now: datetime) -> bool:
        """Whether ``alias`` is known and lapsed at event time ``now``."""
        held = self.last_seen.get(alias)
        return held is not None and held < now - IDENTITY_RETENTION

    def lapsed_at(self, alias: Alias) -> datetime:
        """When ``alias`` lapses (its last observation plus :data:`IDENTITY_RETENTION`)."""
        return self.last_seen[alias] + IDENTITY_RETENTION

    def candidates(self, watermarks: Mapping[int, datetime]) -> list[Alias]:
        """The aliases lapsed under their partition's watermark, of the partitions of
        ``watermarks``, sorted."""
        out: list[Alias] = []
        for partition, watermark in watermarks.items():
            cut = watermark - IDENTITY_RETENTION
            out.extend(a for a in self._on.get(partition, ()) if self.last_seen[a] < cut)
        return sorted(out)

    def forget(self, alias: Alias) -> None:
        """Drop what is held of ``alias``."""
        self.last_seen.pop(alias, None)
        partition = self.partition.pop(alias, None)
        if partition is not None:
            held = self._on.get(partition)
            if held is not None:
                held.discard(alias)
                if not held:
                    del self._on[partition]
