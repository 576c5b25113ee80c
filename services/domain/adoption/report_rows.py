"""The plain rows the DRA-against-plugin comparison report (:mod:`.report`) is computed from, as
the projection adapter reads them, and each figure's shape (:class:`Figure`).

Sources: ``pod_lifecycle_stages`` (:class:`StageRow`, from ``PodLifecycleObserved``), the
inventory's ResourceClaims (:class:`ClaimRow`), the capacity devices of the inventory
(:class:`DeviceRow`, :mod:`services.domain.inventory.capacity_report`), ``device_history``
joined with ``devices`` (:class:`HistoryRow`), ``pod_workloads`` (:class:`WorkloadRow`) and
``dra_failures`` (:class:`FailureRow`, from ``DRAFailureObserved``).
Times are UTC, event time (what the records say), never the reader's clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

ALL_POOLS: Final = "*"
"""The pool name of the fleet-wide row (every node, declared in a pool or not)."""
UNPOOLED: Final = "unpooled"
"""The pool name of the nodes no declared adoption pool holds."""
DEFAULT_MIN_SAMPLES: Final = 20
"""Fewest samples a rate or a quantile is computed from; below it the figure is
"insufficient data"."""


@dataclass(frozen=True, slots=True)
class StageRow:
    """One ``pod_lifecycle_stages`` row: ``seconds`` of ``stage`` (``claim_allocated``,
    ``pod_bound``, ``pod_ready``) for ``device_class`` on ``path`` (``dra``, ``device-plugin``)
    of Pod ``pod_uid`` on ``node``, first seen Ready at ``observed_at``."""

    pod_uid: str
    node: str
    stage: str
    device_class: str
    path: str
    seconds: float
    observed_at: datetime


@dataclass(frozen=True, slots=True)
class ClaimRow:
    """A ResourceClaim of the inventory: its first request's DeviceClass, the node it is
    allocated on (``None``: not allocated), whether it is allocated, when it was created, and
    the UIDs of the Pods ``status.reservedFor`` names (sorted)."""

    device_class: str | None
    node: str | None
    allocated: bool
    created_at: datetime | None = None
    reserved_for: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class FailureRow:
    """A ``dra_failures`` row: one failure source (an Event, or a Pod's ``PodScheduled``
    transition) of Pod ``pod_uid`` (``None`` when the Event did not name it) on ``node``
    (``None``: the Pod had no node, e.g. the scheduler could not place it), its ``reason``
    (``FailedScheduling``, ``Unschedulable``, ``FailedPrepareDynamicResources``...) and
    ``failure_class`` (``retryable``, ``non-retryable``, ``needs-cleanup``), first and last
    observed (UTC, the watcher's time of the records)."""

    pod_uid: str | None
    node: str | None
    reason: str
    failure_class: str
    first_observed_at: datetime
    observed_at: datetime


@dataclass(frozen=True, slots=True)
class DeviceRow:
    """A capacity device now: ``device_class`` (DeviceClass for DRA, extended resource name for
    a device plugin) on ``path``; ``usable`` false when quarantined, tainted, Unhealthy..."""

    node: str
    device_class: str
    path: str
    allocated: bool
    usable: bool = True


@dataclass(frozen=True, slots=True)
class HistoryRow:
    """A ``device_history`` row (``kind`` ``observed`` or ``released``) of device
    ``(node, resource_id)``, with its ``devices`` row's ``source`` (``dra``, ``device-plugin``)
    and ``resource_name`` (the extended resource name for a device plugin). In log order."""

    node: str
    resource_id: str
    kind: str
    pod_uid: str
    observed_at: datetime
    source: str
    resource_name: str


@dataclass(frozen=True, slots=True)
class WorkloadRow:
    """A ``pod_workloads`` row: the Pod's topmost controller (``workload_kind`` ``Pod`` for a
    bare Pod, whose ``workload_uid`` is its own)."""

    pod_uid: str
    workload_uid: str
    workload_kind: str


@dataclass(frozen=True, slots=True)
class ReportInput:
    """Everything :func:`~services.domain.adoption.report.build_report` reads.

    ``device_class``: the DeviceClass compared; ``plugin_resource``: the extended resource the
    plugin path serves it as (the DeviceClass's ``extendedResourceName``, KEP-5004; ``None``: no
    plugin rows). ``pools``: declared pool name -> its nodes. The window is
    ``[window_end - window_seconds, window_end]``. ``failures``: the ``dra_failures`` rows
    observed in the window (``None``: not available, the DRA success rate then uses what is
    projected; :mod:`.report_failures` says which count)."""

    device_class: str
    plugin_resource: str | None
    pools: Mapping[str, frozenset[str]]
    window_end: datetime
    window_seconds: float
    stages: tuple[StageRow, ...] = ()
    claims: tuple[ClaimRow, ...] = ()
    devices: tuple[DeviceRow, ...] = ()
    history: tuple[HistoryRow, ...] = ()
    workloads: tuple[WorkloadRow, ...] = ()
    failures: tuple[FailureRow, ...] | None = None
    min_samples: int = DEFAULT_MIN_SAMPLES


@dataclass(frozen=True, slots=True)
class Figure:
    """One figure: ``value`` (``None`` when it cannot be computed, ``note`` says why), the
    number of ``samples`` it is based on, and a ``note`` on what it does or does not count."""

    value: float | None
    samples: int
    note: str | None = None


@dataclass(frozen=True, slots=True)
class ReportRow:
    """The figures of one ``(device_class, pool, path)``. Seconds for the stage quantiles,
    device-hours for ``device_hours`` (keys ``allocated``, ``idle``, ``capacity``), fractions in
    [0, 1] for the rates and ``fragmentation``."""

    device_class: str
    pool: str
    path: str
    allocation_success: Figure
    pending_to_bound: dict[str, Figure] = field(default_factory=dict)
    bound_to_ready: dict[str, Figure] = field(default_factory=dict)
    fragmentation: Figure = Figure(None, 0)
    device_hours: dict[str, Figure] = field(default_factory=dict)
    retry_rate: Figure = Figure(None, 0)


@dataclass(frozen=True, slots=True)
class Report:
    """The comparison for one DeviceClass: a row per pool and path, the window (UTC) and the
    sample minimum used."""

    device_class: str
    plugin_resource: str | None
    window_start: datetime
    window_end: datetime
    min_samples: int
    rows: tuple[ReportRow, ...]
