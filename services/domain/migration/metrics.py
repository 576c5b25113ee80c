"""The migration metrics (issue 13 item 5), a pure fold of the governor's decisions.

Every number here is computed from the decisions in log order (``seq``, ``idx``) and their event
times (``at``, UTC), never from the wall clock or from how the decisions were batched: the API
computes them from the projection's ``governance_decisions`` when scraped, so every replica
serves the same values, a restart loses nothing and ``replay --governance`` rebuilds them whole.

What is counted (``docs/migration.md``, "Metrics and alerts"):

- **outcomes**: finished migrations by ``(outcome, reason, namespace)``: ``completed``,
  ``failed`` (``reason`` the :class:`~services.domain.migration.book.FailReason`),
  ``evidence-kept`` (a non-recoverable workload: nothing evicted, the tenant is told),
  ``cancelled``; ``namespace`` the first Pod's (a workload's Pods share one).
- **deferred**: ``MigrationDeferred`` decisions by ``waitingFor`` (one per migration per new
  reason: ``rate-limited``, ``breaker-open``, ``automation-paused``); **waiting**: the
  migrations whose latest decision is a ``MigrationDeferred``, by its ``waitingFor``.
- **checkpoint seconds**: ``MigrationCheckpointRequested`` (the first lease grant of a
  checkpointed migration) to its ``MigrationCheckpointCommitted``, event time.
- **rebuild seconds**: ``MigrationDeviceReleased`` (the Pods evicted) to ``MigrationCompleted``
  (the replacement observed on unrestricted devices), event time.
- **quarantined idle GPU-seconds**: per device (node, resourceID as the governor keys it), the
  event time it spent quarantined (``DeviceQuarantined`` to ``QuarantineReleased``) while no
  migration of it was under way (from ``MigrationPlanned`` to its ``MigrationDeviceReleased`` or
  its end); a quarantine still open counts up to the governor's watermark (its event time, from
  the log; the newest decision's time if later). A device whose
  workload is non-recoverable, or whose migration waits for tokens, counts whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from services.domain.migration.outcomes import OutcomeKind

QUARANTINED: Final = "DeviceQuarantined"
QUARANTINE_RELEASED: Final = "QuarantineReleased"
"""The governor's device decisions that open and close a quarantine (``DecisionKind`` values;
named here so this module does not import the governor)."""

FACT_KINDS: Final = (
    QUARANTINED,
    QUARANTINE_RELEASED,
    OutcomeKind.PLANNED.value,
    OutcomeKind.DEFERRED.value,
    OutcomeKind.CHECKPOINT_REQUESTED.value,
    OutcomeKind.CHECKPOINT_COMMITTED.value,
    OutcomeKind.DEVICE_RELEASED.value,
    OutcomeKind.COMPLETED.value,
    OutcomeKind.FAILED.value,
    OutcomeKind.EVIDENCE_KEPT.value,
    OutcomeKind.CANCELLED.value,
)
"""The decision kinds :func:`fold` reads (the projection adapter selects only these)."""

OUTCOMES: Final = {
    OutcomeKind.COMPLETED.value: "completed",
    OutcomeKind.FAILED.value: "failed",
    OutcomeKind.EVIDENCE_KEPT.value: "evidence-kept",
    OutcomeKind.CANCELLED.value: "cancelled",
}
"""A finishing decision kind -> the ``outcome`` label (the migration's final phase)."""

WAITING_REASONS: Final = ("rate-limited", "breaker-open", "automation-paused")
"""The ``waitingFor`` values of ``MigrationDeferred`` (``machine``, the governor's gate): the
deferral series are exported for each, 0 when none."""

CHECKPOINT_BUCKETS: Final = (5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0)
"""Upper bounds (seconds) of the time-to-checkpoint histogram."""

REBUILD_BUCKETS: Final = (10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0)
"""Upper bounds (seconds) of the time-to-rebuild histogram."""


@dataclass(frozen=True, slots=True)
class MigrationFact:
    """One decision as :func:`fold` reads it: ``kind`` (a value of :data:`FACT_KINDS`), event
    time ``at`` (UTC), the device ``(node, resource_id)``, ``migration_id`` (empty for the
    quarantine decisions), ``namespace`` of the first Pod, ``reason`` (``MigrationFailed``) and
    ``waiting_for`` (``MigrationDeferred``); empty strings where the decision has none."""

    kind: str
    at: datetime
    node: str
    resource_id: str
    migration_id: str = ""
    namespace: str = ""
    reason: str = ""
    waiting_for: str = ""


@dataclass(frozen=True, slots=True)
class Histogram:
    """Observations in seconds: cumulative ``(upper bound, count)`` pairs ending with ``+Inf``,
    their ``total`` (sum) and ``count``, as a Prometheus histogram exposes them."""

    buckets: tuple[tuple[float, int], ...]
    total: float
    count: int


def histogram(values: Sequence[float], bounds: Sequence[float]) -> Histogram:
    """The histogram of ``values`` (seconds) with upper bounds ``bounds`` (ascending)."""
    cumulative = tuple((b, sum(1 for v in values if v <= b)) for b in bounds)
    return Histogram((*cumulative, (float("inf"), len(values))), float(sum(values)), len(values))


@dataclass(slots=True)
class MigrationMetrics:
    """What :func:`fold` computes (module docstring: the definitions)."""

    outcomes: dict[tuple[str, str, str], int] = field(default_factory=dict)
    deferred: dict[str, int] = field(default_factory=dict)
    waiting: dict[str, int] = field(default_factory=dict)
    checkpoint_seconds: list[float] = field(default_factory=list)
    rebuild_seconds: list[float] = field(default_factory=list)
    idle_gpu_seconds: float = 0.0

    @property
    def checkpoint(self) -> Histogram:
        return histogram(self.checkpoint_seconds, CHECKPOINT_BUCKETS)

    @property
    def rebuild(self) -> Histogram:
        return histogram(self.rebuild_seconds, REBUILD_BUCKETS)


@dataclass(slots=True)
class _Device:
    quarantined: bool = False
    idle_since: datetime | None = None
    under_way: set[str] = field(default_factory=set)
    ended: set[str] = field(default_factory=set)


class _Idle:
    """The quarantined idle GPU-seconds, device by device."""

    def __init__(self) -> None:
        self.devices: dict[tuple[str, str], _Device] = {}
        self.seconds = 0.0

    def _stop(self, d: _Device, at: datetime) -> None:
        if d.idle_since is not None:
            self.seconds += max(0.0, (at - d.idle_since).total_seconds())
            d.idle_since = None

    def see(self, f: MigrationFact) -> None:
        d = self.devices.setdefault((f.node, f.resource_id), _Device())
        if f.kind == QUARANTINED:
            if not d.quarantined:
                d.quarantined = True
                d.idle_since = None if d.under_way else f.at
        elif f.kind == QUARANTINE_RELEASED:
            self._stop(d, f.at)
            d.quarantined = False
        elif f.kind == OutcomeKind.PLANNED.value:
            if f.migration_id not in d.ended:
                d.under_way.add(f.migration_id)
                self._stop(d, f.at)
        elif f.kind == OutcomeKind.DEVICE_RELEASED.value or f.kind in OUTCOMES:
            d.ended.add(f.migration_id)
            if f.migration_id in d.under_way:
                d.under_way.discard(f.migration_id)
                if not d.under_way and d.quarantined:
                    d.idle_since = f.at

    def close(self, until: datetime | None) -> float:
        """The seconds counted, the open idle periods counted up to ``until``."""
        total = self.seconds
        if until is not None:
            for d in self.devices.values():
                if d.idle_since is not None:
                    total += max(0.0, (until - d.idle_since).total_seconds())
        return total


class MetricsFold:
    """The fold of :func:`fold`, fed in parts: :meth:`add` the decisions in log order, as they
    are written, and :meth:`metrics` at any time; the API keeps one and reads only the decisions
    after the last it read (a scrape costs the new decisions, not the whole log). Feeding the
    facts in any number of parts gives the same metrics as one :func:`fold` of all of them."""

    def __init__(self) -> None:
        self._out = MigrationMetrics()
        self._idle = _Idle()
        self._requested: dict[str, datetime] = {}
        self._released: dict[str, datetime] = {}
        self._waiting: dict[str, str] = {}
        self._newest: datetime | None = None

    def add(self, facts: Iterable[MigrationFact]) -> None:
        """Fold ``facts``, the decisions after those already added, in log order. Kinds outside
        :data:`FACT_KINDS` are ignored; nothing raises."""
        out, requested, released, waiting = (
            self._out,
            self._requested,
            self._released,
            self._waiting,
        )
        for f in facts:
            self._newest = f.at if self._newest is None or f.at > self._newest else self._newest
            self._idle.see(f)
            if not f.migration_id:
                continue
            mid, kind = f.migration_id, f.kind
            waiting.pop(mid, None)
            if kind == OutcomeKind.DEFERRED.value:
                out.deferred[f.waiting_for] = out.deferred.get(f.waiting_for, 0) + 1
                waiting[mid] = f.waiting_for
            elif kind == OutcomeKind.CHECKPOINT_REQUESTED.value:
                requested.setdefault(mid, f.at)
            elif kind == OutcomeKind.CHECKPOINT_COMMITTED.value and mid in requested:
                out.checkpoint_seconds.append((f.at - requested.pop(mid)).total_seconds())
            elif kind == OutcomeKind.DEVICE_RELEASED.value:
                released.setdefault(mid, f.at)
            elif kind in OUTCOMES:
                if kind == OutcomeKind.COMPLETED.value and mid in released:
                    out.rebuild_seconds.append((f.at - released[mid]).total_seconds())
                released.pop(mid, None)
                requested.pop(mid, None)
                reason = f.reason if kind == OutcomeKind.FAILED.value else ""
                key = (OUTCOMES[kind], reason, f.namespace)
                out.outcomes[key] = out.outcomes.get(key, 0) + 1

    def metrics(self, watermark: datetime | None = None) -> MigrationMetrics:
        """The metrics of the decisions added so far (a copy: later :meth:`add` calls do not
        change it); ``watermark``: the governor's event time (UTC), up to which open idle
        periods count (the newest decision's time if later)."""
        newest = self._newest
        if watermark is not None and (newest is None or watermark > newest):
            newest = watermark
        waiting: dict[str, int] = {}
        for reason in self._waiting.values():
            waiting[reason] = waiting.get(reason, 0) + 1
        out = self._out
        return MigrationMetrics(
            outcomes=dict(out.outcomes),
            deferred=dict(out.deferred),
            waiting=waiting,
            checkpoint_seconds=list(out.checkpoint_seconds),
            rebuild_seconds=list(out.rebuild_seconds),
            idle_gpu_seconds=self._idle.close(newest),
        )


def fold(facts: Iterable[MigrationFact], watermark: datetime | None = None) -> MigrationMetrics:
    """The metrics of ``facts``, given in log order (``governance_decisions`` ``seq``, ``idx``);
    ``watermark``: the governor's event time (UTC), up to which open idle periods count. Kinds
    outside :data:`FACT_KINDS` are ignored; nothing raises."""
    folded = MetricsFold()
    folded.add(facts)
    return folded.metrics(watermark)


def namespace_of(pods: object) -> str:
    """The namespace of the first ``namespace/name`` of a decision's ``pods`` ("" if none)."""
    if isinstance(pods, str) and "/" in pods:
        return pods.split("/", 1)[0]
    return ""
