"""The migration policy's input records, carried on the governance topic.

- :class:`WorkloadOnDevice`: a Pod of a workload holds a device (item 1 of issue 13 derives it
  from the Pod, its ``ownerReferences`` chain and the annotations of the shared contract:
  ``devicestate.io/migration-class``, ``devicestate.io/checkpoint-max-age-seconds``,
  ``devicestate.io/shard``; ``docs/migration.md``).
- :class:`MigrationReport`: what a migration executor did (``POST /v1/migrations/{id}/reports``).
- :class:`MigrationEvidence`: the last status of a non-recoverable migration's Pods
  (``POST /v1/migrations/{id}/evidence``).

Times are UTC; durations seconds. Wire form in :mod:`.wire`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any


class MigrationClass(StrEnum):
    """Values of the ``devicestate.io/migration-class`` annotation (default ``non-recoverable``)."""

    CHECKPOINTED = "checkpointed"
    SHARDED = "sharded"
    NON_RECOVERABLE = "non-recoverable"


def migration_class(value: str | None) -> tuple[MigrationClass, str | None]:
    """The class an annotation value declares, and why it was not taken as written: absent is
    ``non-recoverable`` (no reason), an unknown value ``non-recoverable`` with a reason."""
    if value is None:
        return MigrationClass.NON_RECOVERABLE, None
    try:
        return MigrationClass(value), None
    except ValueError:
        return MigrationClass.NON_RECOVERABLE, f"unknown migration class {value!r}"


@dataclass(frozen=True, slots=True)
class WorkloadOnDevice:
    """Pod ``namespace/pod_name`` (UID ``pod_uid``) of workload ``workload_uid`` holds the device
    ``(node, resource_id)`` -- ``resource_id`` is the device as the governor keys it (its physical
    ``device_id`` when resolved, the reported resourceID otherwise).

    ``workload_uid`` is the UID of the top-level owner of the Pod's ``ownerReferences`` chain (Job,
    JobSet, StatefulSet, Deployment, LeaderWorkerSet), or the Pod's own UID for a bare Pod.
    ``migration_class`` is the annotation's string as written (``None`` when absent; read with
    :func:`migration_class`); ``checkpoint_max_age_seconds`` how fresh a checkpoint must be
    (``checkpointed`` only); ``shard`` the shard's name (``sharded``; default the Pod's name).
    ``status_version`` is the resourceVersion of the Pod status the fact was read from (it
    orders the facts of one Pod; the idempotency key takes the quarantine's version). ``present`` false: the Pod no longer holds the device.
    ``observed_at`` is the fact's event time (UTC)."""

    node: str
    resource_id: str
    workload_uid: str
    pod_uid: str
    namespace: str
    pod_name: str
    migration_class: str | None
    status_version: int | None
    observed_at: datetime
    checkpoint_max_age_seconds: int | None = None
    shard: str | None = None
    present: bool = True
    type: str = field(default="WorkloadOnDevice", init=False)

    @property
    def device_key(self) -> tuple[str, str]:
        return (self.node, self.resource_id)

    @property
    def shard_name(self) -> str:
        """The shard this Pod is (a ``sharded`` workload): ``shard``, or the Pod's name."""
        return self.shard or self.pod_name


class ReportKind(StrEnum):
    """What an executor reports (stable names: they are on the wire)."""

    LEASE_REQUESTED = "lease-requested"
    LEASE_RENEWED = "lease-renewed"
    LEASE_RELEASED = "lease-released"
    CHECKPOINT_COMMITTED = "checkpoint-committed"
    CHECKPOINT_TIMED_OUT = "checkpoint-timed-out"
    EVICTED = "evicted"
    EVICTION_REFUSED = "eviction-refused"  # by a PodDisruptionBudget (policy/v1 Eviction: 429)
    REPLACEMENT_OBSERVED = "replacement-observed"
    WORKLOAD_GONE = "workload-gone"


@dataclass(frozen=True, slots=True)
class MigrationReport:
    """Executor ``holder`` reports ``kind`` for migration ``migration_id`` at ``reported_at``
    (UTC), under lease ``fencing_token`` (``0`` for ``lease-requested``, which asks for one).

    ``checkpoint_id``/``checkpoint_at``: the committed checkpoint (``checkpoint-committed``);
    ``devices``: ``(node, resourceID)`` of the devices the replacement Pod holds
    (``replacement-observed``); ``detail``: free text (e.g. the PodDisruptionBudget's message)."""

    migration_id: str
    kind: ReportKind
    holder: str
    reported_at: datetime
    fencing_token: int = 0
    checkpoint_id: str | None = None
    checkpoint_at: datetime | None = None
    devices: tuple[tuple[str, str], ...] = ()
    detail: str = ""
    type: str = field(default="MigrationReport", init=False)


@dataclass(frozen=True, slots=True)
class EvidencePod:
    """One Pod's evidence: its identity and its last ``.status`` (core/v1 ``PodStatus`` as the
    API server served it, kept as JSON) at Pod ``resource_version``."""

    namespace: str
    name: str
    uid: str
    resource_version: str
    status: dict[str, Any]


@dataclass(frozen=True, slots=True)
class MigrationEvidence:
    """Executor ``holder`` collected the evidence of non-recoverable migration ``migration_id`` at
    ``collected_at`` (UTC, the executor's clock); the API received it at ``reported_at`` (UTC,
    the record's event time, as a report's). ``POST /v1/migrations/{id}/evidence``."""

    migration_id: str
    holder: str
    collected_at: datetime
    reported_at: datetime
    pods: tuple[EvidencePod, ...]
    type: str = field(default="MigrationEvidence", init=False)
