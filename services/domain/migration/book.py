"""The migrations the governor holds: each one's record (:class:`Migration`), the workloads known
on each device, which device each active migration owns, the token buckets, and the snapshot form
(times RFC 3339 ``Z``; round-trips exactly, so a governor restored from PostgreSQL continues as
one that never stopped)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Final

from services.domain.codec import parse_time
from services.domain.events import format_time
from services.domain.migration.limits import Bucket
from services.domain.migration.records import MigrationClass, WorkloadOnDevice

DeviceKey = tuple[str, str]
"""``(node, resourceID)`` as the governor keys devices."""
WorkloadKey = tuple[str, str, str]
"""``(node, resourceID, Pod UID)``: one workload fact."""

FINISHED_REMEMBERED: Final = 100
"""How many finished migrations the snapshot keeps whole (the fleet snapshot is written with
every batch); ``GET /v1/migrations`` reads the decisions, which keep them all."""
FINISHED_IDS_REMEMBERED: Final = 10_000
"""How many IDs of finished migrations are kept beyond those: the same key is not planned
again (as the governor remembers command IDs)."""


class Phase(StrEnum):
    """Where a migration is (stable names: on the wire and in the projection)."""

    WAITING = "waiting"  # key taken; held back by the breaker, paused automation or the buckets
    PLANNED = "planned"  # started (tokens taken): an executor may take the lease
    CHECKPOINT_REQUESTED = "checkpoint-requested"
    EVICTION_REQUESTED = "eviction-requested"  # checkpoint committed (or none needed): evict
    RELEASED = "released"  # the Pods were evicted: the device is free, the replacement is awaited
    COMPLETED = "completed"
    FAILED = "failed"
    EVIDENCE_KEPT = "evidence-kept"  # non-recoverable: no eviction
    CANCELLED = "cancelled"  # the quarantine ended while it was still waiting: nothing to move


FINISHED: Final = frozenset({Phase.COMPLETED, Phase.FAILED, Phase.EVIDENCE_KEPT, Phase.CANCELLED})


class FailReason(StrEnum):
    PDB_REFUSED = "pdb-refused"
    CHECKPOINT_TIMEOUT = "checkpoint-timeout"
    LEASE_LOST = "lease-lost"
    REPLACEMENT_RESTRICTED = "replacement-restricted"
    WORKLOAD_GONE = "workload-gone"


def migration_id(
    device: DeviceKey, workload_uid: str, shard: str | None, status_version: int | None
) -> str:
    """``m-`` and 20 hex digits of the SHA-256 of the idempotency key (device, workload UID,
    shard for a sharded workload, status version): the same key always names the same migration,
    and the id is safe in a URL path."""
    key = "\x1f".join([device[0], device[1], workload_uid, shard or "", str(status_version or "")])
    return "m-" + hashlib.sha256(key.encode()).hexdigest()[:20]


def _t(value: datetime | None) -> str | None:
    return None if value is None else format_time(value)


def _pt(value: str | None) -> datetime | None:
    return None if value is None else parse_time(value)


@dataclass(slots=True)
class Migration:
    """One migration: the workload (or, sharded, the one shard) moved off device ``(node,
    resource_id)``. ``pods`` are the ``(namespace, name, uid)`` of the Pods to evict. ``holder``,
    ``fencing_token`` (grows by one per grant to a new holder) and ``lease_expires_at`` are the
    lease; ``takeover_due`` the time the migration fails ``lease-lost`` with no holder."""

    migration_id: str
    node: str
    resource_id: str
    workload_uid: str
    migration_class: MigrationClass
    status_version: int | None
    pods: tuple[tuple[str, str, str], ...]
    planned_at: datetime
    phase: Phase
    updated_at: datetime
    shard: str | None = None
    class_reason: str | None = None
    checkpoint_max_age_seconds: int | None = None
    waiting_reason: str | None = None
    holder: str | None = None
    fencing_token: int = 0
    lease_expires_at: datetime | None = None
    takeover_due: datetime | None = None
    checkpoint_requested_at: datetime | None = None
    checkpoint_due: datetime | None = None
    checkpoint_id: str | None = None
    checkpoint_at: datetime | None = None
    replacement_devices: tuple[DeviceKey, ...] = ()
    reason: FailReason | None = None
    detail: str = ""

    @property
    def device_key(self) -> DeviceKey:
        return (self.node, self.resource_id)

    @property
    def scope(self) -> tuple[str, str]:
        """``(workload UID, shard or "")``: what one migration at a time may own."""
        return (self.workload_uid, self.shard or "")

    @property
    def finished(self) -> bool:
        return self.phase in FINISHED

    def deadlines(self) -> list[datetime]:
        """Event times at which the migration may change without a report."""
        if self.finished:
            return []
        due = [t for t in (self.lease_expires_at, self.takeover_due) if t is not None]
        if self.phase is Phase.CHECKPOINT_REQUESTED and self.checkpoint_due is not None:
            due.append(self.checkpoint_due)
        return due

    def to_json(self) -> dict[str, Any]:
        return {
            "migrationID": self.migration_id,
            "node": self.node,
            "resourceID": self.resource_id,
            "workloadUID": self.workload_uid,
            "migrationClass": self.migration_class.value,
            "classReason": self.class_reason,
            "shard": self.shard,
            "statusVersion": None if self.status_version is None else str(self.status_version),
            "pods": [{"namespace": n, "name": p, "uid": u} for n, p, u in self.pods],
            "checkpointMaxAgeSeconds": self.checkpoint_max_age_seconds,
            "plannedAt": format_time(self.planned_at),
            "phase": self.phase.value,
            "updatedAt": format_time(self.updated_at),
            "waitingReason": self.waiting_reason,
            "holder": self.holder,
            "fencingToken": self.fencing_token,
            "leaseExpiresAt": _t(self.lease_expires_at),
            "takeoverDue": _t(self.takeover_due),
            "checkpointRequestedAt": _t(self.checkpoint_requested_at),
            "checkpointDue": _t(self.checkpoint_due),
            "checkpointID": self.checkpoint_id,
            "checkpointAt": _t(self.checkpoint_at),
            "replacementDevices": [list(d) for d in self.replacement_devices],
            "reason": None if self.reason is None else self.reason.value,
            "detail": self.detail,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Migration:
        version = obj.get("statusVersion")
        return cls(
            migration_id=obj["migrationID"],
            node=obj["node"],
            resource_id=obj["resourceID"],
            workload_uid=obj["workloadUID"],
            migration_class=MigrationClass(obj["migrationClass"]),
            class_reason=obj.get("classReason"),
            shard=obj.get("shard"),
            status_version=None if version is None else int(version),
            pods=tuple((p["namespace"], p["name"], p["uid"]) for p in obj.get("pods") or ()),
            checkpoint_max_age_seconds=obj.get("checkpointMaxAgeSeconds"),
            planned_at=parse_time(obj["plannedAt"]),
            phase=Phase(obj["phase"]),
            updated_at=parse_time(obj["updatedAt"]),
            waiting_reason=obj.get("waitingReason"),
            holder=obj.get("holder"),
            fencing_token=int(obj.get("fencingToken") or 0),
            lease_expires_at=_pt(obj.get("leaseExpiresAt")),
            takeover_due=_pt(obj.get("takeoverDue")),
            checkpoint_requested_at=_pt(obj.get("checkpointRequestedAt")),
            checkpoint_due=_pt(obj.get("checkpointDue")),
            checkpoint_id=obj.get("checkpointID"),
            checkpoint_at=_pt(obj.get("checkpointAt")),
            replacement_devices=tuple((d[0], d[1]) for d in obj.get("replacementDevices") or ()),
            reason=None if obj.get("reason") is None else FailReason(obj["reason"]),
            detail=obj.get("detail") or "",
        )


def fact_to_json(fact: WorkloadOnDevice) -> dict[str, Any]:
    return {
        "workloadUID": fact.workload_uid,
        "podUID": fact.pod_uid,
        "namespace": fact.namespace,
        "podName": fact.pod_name,
        "migrationClass": fact.migration_class,
        "checkpointMaxAgeSeconds": fact.checkpoint_max_age_seconds,
        "shard": fact.shard,
        "statusVersion": None if fact.status_version is None else str(fact.status_version),
        "observedAt": format_time(fact.observed_at),
    }


def fact_from_json(device: DeviceKey, obj: dict[str, Any]) -> WorkloadOnDevice:
    version = obj.get("statusVersion")
    return WorkloadOnDevice(
        node=device[0],
        resource_id=device[1],
        workload_uid=obj["workloadUID"],
        pod_uid=obj["podUID"],
        namespace=obj["namespace"],
        pod_name=obj["podName"],
        migration_class=obj.get("migrationClass"),
        checkpoint_max_age_seconds=obj.get("checkpointMaxAgeSeconds"),
        shard=obj.get("shard"),
        status_version=None if version is None else int(version),
        observed_at=parse_time(obj["observedAt"]),
    )


@dataclass(slots=True)
class MigrationBook:
    """All the migration policy knows. ``migrations`` in the order they were planned (ids are
    hashes, the dict's order is the log's); ``owners`` (scope -> active migration id) and
    ``next_due`` are derived, rebuilt by :meth:`reindex`."""

    workloads: dict[DeviceKey, dict[str, WorkloadOnDevice]] = field(default_factory=dict)
    """Per device, the Pods (by UID) that hold it."""
    quarantined: dict[DeviceKey, int | None] = field(default_factory=dict)
    """Devices whose quarantine is active, as the governor last said, with the status version
    of the device when it began: the idempotency key's version, the same for the whole
    quarantine (a Pod's resourceVersion changes with every status update)."""
    migrations: dict[str, Migration] = field(default_factory=dict)
    fleet_bucket: Bucket | None = None
    node_buckets: dict[str, Bucket] = field(default_factory=dict)
    retry_at: datetime | None = None
    """When a waiting migration may get its tokens (``None``: at the next look)."""
    owners: dict[tuple[str, str], str] = field(default_factory=dict)
    next_due: datetime | None = None
    waiting_count: int = 0
    finished_ids: list[str] = field(default_factory=list)
    """IDs of finished migrations no longer kept whole, oldest first."""
    finished_set: set[str] = field(default_factory=set)
    """Derived from ``finished_ids``."""
    dirty_workloads: set[WorkloadKey] = field(default_factory=set)
    """Facts added, changed or removed since the last write (their rows are written with the
    batch: the facts are rows of their own, not part of the fleet snapshot)."""
    evidence: dict[str, list[str]] = field(default_factory=dict)
    """Per migration kept whole, the Pod UIDs whose evidence is stored (the first accepted per
    Pod is kept: :mod:`.evidence`)."""
    pending_evidence: list[dict[str, Any]] = field(default_factory=list)
    """``migration_evidence`` rows accepted since the last write (written with the batch)."""

    def empty(self) -> bool:
        return not (self.workloads or self.quarantined or self.migrations or self.finished_ids)

    def known(self, migration_id: str) -> bool:
        """Whether the migration was planned (kept whole, or finished and remembered by ID)."""
        return migration_id in self.migrations or migration_id in self.finished_set

    def active(self) -> list[Migration]:
        return [m for m in self.migrations.values() if not m.finished]

    def waiting(self) -> list[Migration]:
        return [m for m in self.migrations.values() if m.phase is Phase.WAITING]

    def reindex(self) -> None:
        """Rebuild ``owners`` and ``next_due`` from the migrations (after a change or a
        restore), and forget the oldest finished migrations past :data:`FINISHED_REMEMBERED`."""
        finished = [k for k, m in self.migrations.items() if m.finished]
        for key in finished[: max(0, len(finished) - FINISHED_REMEMBERED)]:
            del self.migrations[key]
            self.finished_ids.append(key)
        del self.finished_ids[: max(0, len(self.finished_ids) - FINISHED_IDS_REMEMBERED)]
        self.finished_set = set(self.finished_ids)
        for key in [k for k in self.evidence if k not in self.migrations]:
            del self.evidence[key]
        self.owners = {m.scope: m.migration_id for m in self.active()}
        due = [t for m in self.active() for t in m.deadlines()]
        self.next_due = min(due) if due else None
        self.waiting_count = len(self.waiting())

    def put(self, fact: WorkloadOnDevice) -> None:
        """Hold ``fact`` (its Pod on its device)."""
        self.workloads.setdefault(fact.device_key, {})[fact.pod_uid] = fact
        self.dirty_workloads.add((fact.node, fact.resource_id, fact.pod_uid))

    def drop(self, device: DeviceKey, pod_uid: str) -> None:
        """Forget that Pod ``pod_uid`` holds ``device``."""
        pods = self.workloads.get(device)
        if pods is None or pods.pop(pod_uid, None) is None:
            return
        self.dirty_workloads.add((device[0], device[1], pod_uid))
        if not pods:
            del self.workloads[device]

    def workload_row(self, key: WorkloadKey) -> dict[str, Any] | None:
        """The snapshot of fact ``key`` (``None``: no longer held)."""
        fact = self.workloads.get((key[0], key[1]), {}).get(key[2])
        return None if fact is None else fact_to_json(fact)

    def workload_rows(self) -> list[dict[str, Any]]:
        """Every fact as ``{node, resourceID, ...}`` (:meth:`load_workloads` reads them back)."""
        return [
            {"node": node, "resourceID": rid, **fact_to_json(f)}
            for (node, rid), pods in sorted(self.workloads.items())
            for _, f in sorted(pods.items())
        ]

    def load_workloads(self, rows: list[dict[str, Any]]) -> None:
        for row in rows:
            fact = fact_from_json((row["node"], row["resourceID"]), row)
            self.workloads.setdefault(fact.device_key, {})[fact.pod_uid] = fact

    def to_json(self) -> dict[str, Any]:
        """The book without its workload facts (:meth:`workload_rows`)."""
        return {
            "quarantined": [
                [n, r, None if v is None else str(v)]
                for (n, r), v in sorted(self.quarantined.items())
            ],
            "migrations": [m.to_json() for m in self.migrations.values()],
            "fleetBucket": None if self.fleet_bucket is None else self.fleet_bucket.to_json(),
            "nodeBuckets": {n: b.to_json() for n, b in sorted(self.node_buckets.items())},
            "retryAt": _t(self.retry_at),
            "finishedIDs": list(self.finished_ids),
        } | ({"evidence": dict(sorted(self.evidence.items()))} if self.evidence else {})

    @classmethod
    def from_json(cls, obj: dict[str, Any] | None) -> MigrationBook:
        if obj is None:
            return cls()
        bucket = obj.get("fleetBucket")
        book = cls(
            quarantined={
                (k[0], k[1]): None if k[2] is None else int(k[2])
                for k in obj.get("quarantined") or ()
            },
            migrations={
                m.migration_id: m for m in map(Migration.from_json, obj.get("migrations") or ())
            },
            fleet_bucket=None if bucket is None else Bucket.from_json(bucket),
            node_buckets={
                n: Bucket.from_json(b) for n, b in (obj.get("nodeBuckets") or {}).items()
            },
            retry_at=_pt(obj.get("retryAt")),
            finished_ids=list(obj.get("finishedIDs") or ()),
            evidence={k: list(v) for k, v in (obj.get("evidence") or {}).items()},
        )
        book.reindex()
        return book
