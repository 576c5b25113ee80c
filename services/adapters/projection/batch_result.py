"""What a batch write did (:class:`BatchStats`) and a batch folded but not written yet
(:class:`PreparedBatch`), for :class:`~services.adapters.projection.store.ProjectionStore`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from services.adapters.projection.batch_plan import BatchPlan
from services.domain.batch import Partition
from services.domain.directory import DeviceKey, DeviceRecord, Outcome
from services.domain.inventory.fold import InventoryPlan
from services.domain.tombstones import Tombstone


@dataclass(frozen=True, slots=True)
class BatchStats:
    """What one :meth:`ProjectionStore.apply_batch` did.

    ``applied``/``duplicates``/``stale`` count observations by outcome; ``released`` counts
    allocations removed (one per device a release touched); ``transitions`` counts applied
    observations that changed (or first set) a device's health; ``devices_written`` counts device
    rows inserted or updated (several changes to one device in a batch write it once).
    """

    applied: int = 0
    duplicates: int = 0
    stale: int = 0
    released: int = 0
    transitions: int = 0
    devices_written: int = 0
    redelivered: int = 0
    """Records at or before the partition's recorded offset: already applied, skipped whole."""
    over_ceiling: int = 0
    """Observations not applied: new devices of a node at the device ceiling."""
    tombstoned: int = 0
    """Applied observations of released Pods (older than the release) whose allocation was not
    added back (:mod:`services.domain.tombstones`)."""


def batch_stats(
    plan: BatchPlan, devices_written: int, redelivered: int, over_ceiling: int = 0
) -> BatchStats:
    return BatchStats(
        applied=plan.counts[Outcome.APPLIED],
        duplicates=plan.counts[Outcome.DUPLICATE],
        stale=plan.counts[Outcome.STALE],
        released=plan.counts[Outcome.RELEASED],
        transitions=plan.transitions,
        devices_written=devices_written,
        redelivered=redelivered,
        over_ceiling=over_ceiling,
        tombstoned=plan.tombstoned,
    )


@dataclass(frozen=True, slots=True)
class PreparedBatch:
    """A batch folded over a :class:`DeviceCache` and encoded for the database, not written yet
    (see :meth:`ProjectionStore.prepare_batch`)."""

    written: dict[DeviceKey, DeviceRecord]
    """The new state of each device the batch changes."""
    offsets: dict[Partition, int]
    """The partition offsets the batch records."""
    stats: BatchStats
    """What the batch does once written."""
    observed_rows: list[tuple[Any, ...]] | None
    """The observed devices' rows, COPY tuples (:func:`~.batch_copy.device_tuples`)."""
    released_rows: dict[str, str] | None
    """The released devices' rows, the JSON parameter of ``update_released``."""
    history_rows: list[tuple[Any, ...]] | None
    """The history rows, COPY tuples (:func:`~.batch_copy.history_tuples`)."""
    progress: dict[str, list[Any]]
    inventory: InventoryPlan | None = None
    """The inventory rows to write (when the batch carries :attr:`LoggedBatch.inventory`)."""
    tombstones: dict[str, Tombstone] | None = None
    """The tombstones the batch leaves (by Pod UID), when it leaves any."""
    watermarks: Mapping[Partition, datetime] | None = None
    """Each partition's watermark after the batch (``last_event_at``)."""
    workload_rows: dict[str, str] | None = None
    """The ``pod_workloads`` rows to upsert (:mod:`services.adapters.projection.workload_sql`)."""
    failure_rows: dict[str, str] | None = None
    """The ``dra_failures`` rows to upsert (:mod:`services.adapters.projection.failure_sql`)."""
    lifecycle_rows: dict[str, str] | None = None
    """The ``pod_lifecycle_stages`` rows to insert (:mod:`.lifecycle_sql`), first wins."""
