"""The executor's reports in the migration state machine: leases with fencing tokens, and each
step's report accepted only from the lease's holder with its current token, in the phase that
expects it -- so two executors racing make one eviction, and a repeated report changes nothing."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from services.domain.migration.book import DeviceKey, FailReason, Migration, MigrationBook, Phase
from services.domain.migration.limits import MigrationPolicy
from services.domain.migration.outcomes import Outcome, OutcomeKind, emit, fail, name
from services.domain.migration.records import MigrationClass, MigrationReport, ReportKind

CHECKPOINT_CLOCK_SKEW_SECONDS = 60.0
"""How much later than its report (the API's ``reportedAt``) a checkpoint's ``checkpointAt`` may
be: the workload's clock may run somewhat ahead of the API's, but a checkpoint cannot have been
taken after it was reported; one further ahead is a wrong clock or a bad answer, never a reason
to evict."""

EXPECTED: dict[ReportKind, frozenset[Phase]] = {
    ReportKind.CHECKPOINT_COMMITTED: frozenset({Phase.CHECKPOINT_REQUESTED}),
    ReportKind.CHECKPOINT_TIMED_OUT: frozenset({Phase.CHECKPOINT_REQUESTED}),
    ReportKind.EVICTED: frozenset({Phase.EVICTION_REQUESTED}),
    ReportKind.EVICTION_REFUSED: frozenset({Phase.EVICTION_REQUESTED}),
    ReportKind.REPLACEMENT_OBSERVED: frozenset({Phase.RELEASED}),
}
"""The phases in which a report moves the migration (the others: any unfinished phase)."""


def on_report(
    book: MigrationBook,
    r: MigrationReport,
    at: datetime,
    gate: str | None,
    restricted: Callable[[DeviceKey], bool],
    policy: MigrationPolicy,
) -> list[Outcome]:
    """Fold executor report ``r`` at event time ``at`` (see :func:`fold`); the book is reindexed."""
    out = fold(book, r, at, gate, restricted, policy)
    book.reindex()
    return out


def fold(
    book: MigrationBook,
    r: MigrationReport,
    at: datetime,
    gate: str | None,
    restricted: Callable[[DeviceKey], bool],
    policy: MigrationPolicy,
) -> list[Outcome]:
    """Fold executor report ``r`` at event time ``at``. ``restricted(device)``: whether the
    governor restricts a device (quarantined, restricted, deferred, recovering, or not known as
    available), for ``replacement-observed``. A refused report is one ``MigrationReportRejected``
    (or ``MigrationLeaseDenied``) with the reason, and changes nothing."""
    out: list[Outcome] = []
    m = book.migrations.get(r.migration_id)
    if m is None:
        known = "finished" if r.migration_id in book.finished_set else "unknown"
        out.append(
            Outcome(
                OutcomeKind.REPORT_REJECTED,
                at,
                r.migration_id,
                "",
                "",
                f"{r.kind.value} report from {r.holder} rejected: {known} migration {r.migration_id}",
                {
                    "migrationID": r.migration_id,
                    "holder": r.holder,
                    "report": r.kind.value,
                    "rejectReason": f"{known} migration",
                },
            )
        )
        return out

    def reject(reason: str) -> list[Outcome]:
        emit(
            out,
            OutcomeKind.LEASE_DENIED
            if r.kind is ReportKind.LEASE_REQUESTED
            else OutcomeKind.REPORT_REJECTED,
            m,
            at,
            f"{r.kind.value} from {r.holder} refused for {name(m)}: {reason}",
            report=r.kind.value,
            reportHolder=r.holder,
            reportFencingToken=r.fencing_token,
            rejectReason=reason,
        )
        return out

    if m.finished:
        return reject(f"the migration is {m.phase.value}")
    if r.kind is ReportKind.LEASE_REQUESTED:
        return lease(m, r, at, gate, policy, out, reject)
    if r.holder != m.holder or r.fencing_token != m.fencing_token:
        return reject(
            f"stale lease: token {r.fencing_token} of {r.holder}, current {m.fencing_token} "
            f"held by {m.holder}"
        )
    if m.lease_expires_at is not None and at >= m.lease_expires_at:
        return reject("the lease expired")
    phases = EXPECTED.get(r.kind)
    if phases is not None and m.phase not in phases:
        return reject(f"not expected in phase {m.phase.value}")
    m.updated_at = at
    if r.kind is ReportKind.LEASE_RENEWED:
        m.lease_expires_at = at + timedelta(seconds=policy.lease_seconds)
        emit(
            out,
            OutcomeKind.LEASE_GRANTED,
            m,
            at,
            f"{name(m)}: lease of {r.holder} renewed",
            renewed=True,
        )
    elif r.kind is ReportKind.LEASE_RELEASED:
        m.holder = None
        m.lease_expires_at = None
        m.takeover_due = at + timedelta(seconds=policy.takeover_seconds)
        emit(out, OutcomeKind.LEASE_RELEASED, m, at, f"{name(m)}: {r.holder} released the lease")
    elif r.kind is ReportKind.CHECKPOINT_COMMITTED:
        return checkpoint(m, r, at, out, reject)
    elif r.kind is ReportKind.CHECKPOINT_TIMED_OUT:
        fail(out, m, at, FailReason.CHECKPOINT_TIMEOUT, r.detail or "the executor gave up waiting")
    elif r.kind is ReportKind.EVICTED:
        m.phase = Phase.RELEASED
        evicted = {uid for _, _, uid in m.pods}
        for device, pods in list(book.workloads.items()):  # evicted Pods hold no device any more
            for uid in evicted & pods.keys():
                book.drop(device, uid)
        emit(out, OutcomeKind.DEVICE_RELEASED, m, at, f"{name(m)}: Pods evicted, device released")
    elif r.kind is ReportKind.EVICTION_REFUSED:
        fail(
            out,
            m,
            at,
            FailReason.PDB_REFUSED,
            r.detail or "a PodDisruptionBudget refused the eviction",
        )
    elif r.kind is ReportKind.REPLACEMENT_OBSERVED:
        if not r.devices:
            return reject("a replacement-observed report needs the devices it holds")
        replaced(m, r, at, restricted, out)
    else:  # workload-gone
        fail(out, m, at, FailReason.WORKLOAD_GONE, r.detail)
    return out


def lease(
    m: Migration,
    r: MigrationReport,
    at: datetime,
    gate: str | None,
    policy: MigrationPolicy,
    out: list[Outcome],
    reject: Callable[[str], list[Outcome]],
) -> list[Outcome]:
    """Grant the lease to a new holder (the next fencing token) or renew the holder's; a
    migration not started, or (still ``planned``) held back by the gate, is denied."""
    if m.phase is Phase.WAITING:
        return reject(f"not started: {m.waiting_reason}")
    if m.phase is Phase.PLANNED and gate is not None:
        return reject(f"not started: {gate}")
    held = m.holder is not None and m.lease_expires_at is not None and at < m.lease_expires_at
    if held and m.holder != r.holder:
        return reject(f"the lease is held by {m.holder}")
    renewed = held
    if not held:
        m.fencing_token += 1
        m.holder = r.holder
        m.takeover_due = None
    m.lease_expires_at = at + timedelta(seconds=policy.lease_seconds)
    m.updated_at = at
    emit(
        out,
        OutcomeKind.LEASE_GRANTED,
        m,
        at,
        f"{name(m)}: lease granted to {r.holder} (token {m.fencing_token})",
        renewed=renewed,
    )
    if m.phase is Phase.PLANNED:
        if m.migration_class is MigrationClass.CHECKPOINTED:
            m.phase = Phase.CHECKPOINT_REQUESTED
            m.checkpoint_requested_at = at
            m.checkpoint_due = at + timedelta(seconds=policy.checkpoint_timeout_seconds)
            emit(out, OutcomeKind.CHECKPOINT_REQUESTED, m, at, f"{name(m)}: checkpoint requested")
        else:  # a shard moves without a checkpoint of the whole job
            m.phase = Phase.EVICTION_REQUESTED
            emit(
                out, OutcomeKind.EVICTION_REQUESTED, m, at, f"{name(m)}: evict {len(m.pods)} Pod(s)"
            )
    return out


def checkpoint(
    m: Migration,
    r: MigrationReport,
    at: datetime,
    out: list[Outcome],
    reject: Callable[[str], list[Outcome]],
) -> list[Outcome]:
    """A committed checkpoint, fresh enough: within ``checkpoint_max_age_seconds`` of ``at``
    (or, without a declared age, taken after the request), and not from the future (at most
    :data:`CHECKPOINT_CLOCK_SKEW_SECONDS` after its report)."""
    if r.checkpoint_id is None or r.checkpoint_at is None:
        return reject("a checkpoint-committed report needs checkpointID and checkpointAt")
    if m.checkpoint_max_age_seconds is not None:
        oldest = at - timedelta(seconds=m.checkpoint_max_age_seconds)
    else:
        assert m.checkpoint_requested_at is not None
        oldest = m.checkpoint_requested_at
    if r.checkpoint_at < oldest:
        return reject(f"checkpoint {r.checkpoint_id} of {r.checkpoint_at} is older than {oldest}")
    latest = r.reported_at + timedelta(seconds=CHECKPOINT_CLOCK_SKEW_SECONDS)
    if r.checkpoint_at > latest:
        return reject(
            f"checkpoint {r.checkpoint_id} of {r.checkpoint_at} is in the future: later than "
            f"its report ({r.reported_at}) by more than {CHECKPOINT_CLOCK_SKEW_SECONDS:g} s"
        )
    m.checkpoint_id = r.checkpoint_id
    m.checkpoint_at = r.checkpoint_at
    m.phase = Phase.EVICTION_REQUESTED
    emit(
        out,
        OutcomeKind.CHECKPOINT_COMMITTED,
        m,
        at,
        f"{name(m)}: checkpoint {r.checkpoint_id} committed",
    )
    emit(out, OutcomeKind.EVICTION_REQUESTED, m, at, f"{name(m)}: evict {len(m.pods)} Pod(s)")
    return out


def replaced(
    m: Migration,
    r: MigrationReport,
    at: datetime,
    restricted: Callable[[DeviceKey], bool],
    out: list[Outcome],
) -> None:
    m.replacement_devices = tuple(sorted(set(r.devices)))
    bad = [d for d in m.replacement_devices if restricted(d)]
    if bad:
        listed = ", ".join(f"{n}/{d}" for n, d in bad)
        fail(out, m, at, FailReason.REPLACEMENT_RESTRICTED, f"landed on restricted {listed}")
    else:
        m.phase = Phase.COMPLETED
        m.lease_expires_at = None
        emit(
            out,
            OutcomeKind.COMPLETED,
            m,
            at,
            f"{name(m)} completed on {len(m.replacement_devices)} healthy device(s)",
        )
