"""The migration state machine, planning and event time: a pure fold of the governor's records.

``planned -> lease granted (fencing token) -> checkpoint requested -> checkpoint committed ->
eviction requested -> device released (Pods evicted) -> replacement observed on unrestricted
devices -> completed``; or ``failed`` with a :class:`~.book.FailReason`. A ``sharded`` workload's
migration skips the checkpoint and moves only the shard on the device; a ``non-recoverable``
one is decided ``evidence-kept`` at once (nothing evicted). The executor reports are folded by
:mod:`.reports`.

Every function takes the event time ``at``/``now`` (UTC) and the governor's ``gate``: ``None``
when automation may act, else why not (``breaker-open``, ``automation-paused``). It mutates the
book and appends the decisions it made to the returned list.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from services.domain.directory import version_rank
from services.domain.migration import limits
from services.domain.migration.book import (
    DeviceKey,
    FailReason,
    Migration,
    MigrationBook,
    Phase,
    migration_id,
)
from services.domain.migration.limits import MigrationPolicy
from services.domain.migration.outcomes import Outcome, OutcomeKind, emit, fail, name
from services.domain.migration.records import MigrationClass, WorkloadOnDevice, migration_class

RATE_LIMITED = "rate-limited"


def on_workload(
    book: MigrationBook,
    fact: WorkloadOnDevice,
    at: datetime,
    gate: str | None,
    policy: MigrationPolicy,
) -> list[Outcome]:
    """A Pod holds (``present``) or left a device: remember it; plan its migration when the device
    is quarantined. A fact older (by ``status_version``) than the one held is ignored."""
    out: list[Outcome] = []
    held = book.workloads.get(fact.device_key, {}).get(fact.pod_uid)
    if held is not None and version_rank(fact.status_version) < version_rank(held.status_version):
        return out
    if fact.present:
        book.put(fact)
    else:
        book.drop(fact.device_key, fact.pod_uid)
    plan_device(book, fact.device_key, at, gate, policy, out)
    return out


def on_quarantine(
    book: MigrationBook,
    device: DeviceKey,
    version: int | None,
    active: bool,
    at: datetime,
    gate: str | None,
    policy: MigrationPolicy,
) -> list[Outcome]:
    """The governor quarantined ``device`` (``active``; ``version``: the device's status version
    then), or released it: plan the migrations of its workloads, or cancel the ones still
    waiting to start."""
    out: list[Outcome] = []
    if active:
        book.quarantined[device] = version
        plan_device(book, device, at, gate, policy, out)
        return out
    book.quarantined.pop(device, None)
    for m in book.waiting():
        if m.device_key == device:
            m.phase = Phase.CANCELLED
            m.updated_at = at
            emit(out, OutcomeKind.CANCELLED, m, at, f"{name(m)} cancelled: the quarantine ended")
    book.reindex()
    return out


def plan_device(
    book: MigrationBook,
    device: DeviceKey,
    at: datetime,
    gate: str | None,
    policy: MigrationPolicy,
    out: list[Outcome],
) -> None:
    """One migration per workload (per shard for ``sharded``) on a quarantined ``device``, unless
    its idempotency key (device, workload, shard, the quarantine's status version) was planned
    already or another migration owns its scope."""
    if device not in book.quarantined:
        return
    version = book.quarantined[device]
    groups: dict[tuple[str, str], list[WorkloadOnDevice]] = {}
    for fact in book.workloads.get(device, {}).values():
        cls, _ = migration_class(fact.migration_class)
        shard = fact.shard_name if cls is MigrationClass.SHARDED else ""
        groups.setdefault((fact.workload_uid, shard), []).append(fact)
    for scope, facts in sorted(groups.items()):
        facts.sort(key=lambda f: f.pod_uid)
        first = facts[0]
        cls, class_reason = migration_class(first.migration_class)
        shard_name = scope[1] or None
        mid = migration_id(device, scope[0], shard_name, version)
        if book.known(mid) or scope in book.owners:
            continue  # the same key decided once; one migration at a time per workload (shard)
        m = Migration(
            migration_id=mid,
            node=device[0],
            resource_id=device[1],
            workload_uid=scope[0],
            migration_class=cls,
            class_reason=class_reason,
            shard=shard_name,
            status_version=version,
            pods=scope_pods(book, scope, cls),
            checkpoint_max_age_seconds=first.checkpoint_max_age_seconds,
            planned_at=at,
            phase=Phase.WAITING,
            updated_at=at,
        )
        book.migrations[mid] = m
        if cls is MigrationClass.NON_RECOVERABLE:
            m.phase = Phase.EVIDENCE_KEPT
            emit(
                out,
                OutcomeKind.EVIDENCE_KEPT,
                m,
                at,
                f"{name(m)}: not recoverable ({class_reason or 'declared'}); no eviction, evidence kept",
            )
        else:
            try_start(book, m, at, gate, policy, out)
        book.reindex()


def scope_pods(
    book: MigrationBook, scope: tuple[str, str], cls: MigrationClass
) -> tuple[tuple[str, str, str], ...]:
    """``(namespace, name, uid)`` of the Pods a migration moves: the whole workload (its devices
    are a fixed topology), or the shard's Pods only."""
    found = {
        (f.namespace, f.pod_name, f.pod_uid)
        for pods in book.workloads.values()
        for f in pods.values()
        if f.workload_uid == scope[0]
        and (cls is not MigrationClass.SHARDED or f.shard_name == scope[1])
    }
    return tuple(sorted(found))


def try_start(
    book: MigrationBook,
    m: Migration,
    at: datetime,
    gate: str | None,
    policy: MigrationPolicy,
    out: list[Outcome],
) -> None:
    """Start ``m`` (tokens from its node's and the fleet's bucket) or keep it waiting, with one
    ``MigrationDeferred`` per new reason."""
    reason = gate
    if reason is None:
        book.fleet_bucket, ready = limits.take(
            book.fleet_bucket, book.node_buckets, m.node, at, policy
        )
        if ready is not None:
            reason = RATE_LIMITED
            book.retry_at = ready if book.retry_at is None else min(book.retry_at, ready)
    if reason is not None:
        if m.waiting_reason != reason:
            m.waiting_reason = reason
            m.updated_at = at
            emit(out, OutcomeKind.DEFERRED, m, at, f"{name(m)} waits: {reason}", waitingFor=reason)
        return
    m.phase = Phase.PLANNED
    m.waiting_reason = None
    m.updated_at = at
    m.takeover_due = at + timedelta(seconds=policy.takeover_seconds)
    emit(out, OutcomeKind.PLANNED, m, at, f"{name(m)} planned: {len(m.pods)} Pod(s) to move")


def advance(
    book: MigrationBook, now: datetime, gate: str | None, policy: MigrationPolicy
) -> list[Outcome]:
    """Event time reached ``now``: fire the lease, takeover and checkpoint deadlines due (dated at
    their due time), then start the waiting migrations the gate and the buckets allow."""
    out: list[Outcome] = []
    if book.next_due is not None and now >= book.next_due:
        for m in book.active():
            expire(m, now, policy, out)
        book.reindex()
    if gate is None and book.waiting_count and (book.retry_at is None or now >= book.retry_at):
        book.retry_at = None
        for m in book.waiting():
            try_start(book, m, now, gate, policy, out)
        book.reindex()
    return out


def expire(m: Migration, now: datetime, policy: MigrationPolicy, out: list[Outcome]) -> None:
    if (
        m.phase is Phase.CHECKPOINT_REQUESTED
        and m.checkpoint_due is not None
        and now >= m.checkpoint_due
    ):
        fail(out, m, m.checkpoint_due, FailReason.CHECKPOINT_TIMEOUT, "no checkpoint in time")
        return
    if m.holder is not None and m.lease_expires_at is not None and now >= m.lease_expires_at:
        expired, holder = m.lease_expires_at, m.holder
        m.holder = None
        m.lease_expires_at = None
        m.takeover_due = expired + timedelta(seconds=policy.takeover_seconds)
        m.updated_at = expired
        emit(
            out,
            OutcomeKind.LEASE_EXPIRED,
            m,
            expired,
            f"{name(m)}: lease of {holder} (token {m.fencing_token}) expired",
            expiredHolder=holder,
        )
    if m.holder is None and m.takeover_due is not None and now >= m.takeover_due:
        fail(out, m, m.takeover_due, FailReason.LEASE_LOST, "no executor held the lease in time")
