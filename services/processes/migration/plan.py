"""What the executor does next for one migration, from the governor's record alone (pure).

The record is an item of ``GET /v1/migrations`` (:class:`MigrationView` reads it). Every step
is decided from the recorded phase and lease, and each step checks the Kubernetes state before
it writes (:mod:`.executor`), so an executor restarted after a kill -9 resumes where the
governor's record says, without a second eviction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Final

WORKING_PHASES: Final = frozenset({"checkpoint-requested", "eviction-requested", "released"})
"""Phases in which the lease holder works (a lease is granted in ``planned``)."""
ACTIONABLE_PHASES: Final = ("planned", *sorted(WORKING_PHASES), "evidence-kept")
"""The phases the executor lists (``GET /v1/migrations?phase=``), in this order."""
LEASE_LOST: Final = ("stale lease", "the lease expired")
"""How the governor's ``rejectReason`` begins when the lease is no longer the reporter's
(``services/domain/migration/reports.py``)."""


class Step(StrEnum):
    REQUEST_LEASE = "request-lease"
    WAIT = "wait"  # another executor holds the lease, or our request is not decided yet
    CHECKPOINT = "checkpoint"
    EVICT = "evict"
    REPLACEMENT = "replacement"
    EVIDENCE = "evidence"
    NONE = "none"


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)


@dataclass(frozen=True, slots=True)
class MigrationView:
    """A migration as the governor last decided it (times UTC). ``pods``: ``(namespace, name,
    uid)`` of the Pods it moves (``uid`` empty when the record has none)."""

    migration_id: str
    phase: str
    node: str
    resource_id: str
    workload_uid: str
    migration_class: str
    pods: tuple[tuple[str, str, str], ...]
    holder: str | None
    fencing_token: int
    lease_expires_at: datetime | None
    checkpoint_max_age_seconds: int | None
    checkpoint_requested_at: datetime | None
    checkpoint_due: datetime | None
    shard: str | None = None
    """The shard a ``sharded`` migration moves (its replacement is the Pod of that shard)."""

    @classmethod
    def of(cls, item: dict[str, Any]) -> MigrationView:
        """From an item of ``GET /v1/migrations`` (its ``details`` carry the decision's fields).
        Raises ``KeyError``/``ValueError`` for an item without them."""
        details: dict[str, Any] = item.get("details") or item
        names = [str(p) for p in item.get("pods") or details.get("pods") or ()]
        uids = [str(u) for u in details.get("podUIDs") or ()]
        pods = []
        for i, ref in enumerate(names):
            namespace, _, name = ref.partition("/")
            pods.append((namespace, name, uids[i] if i < len(uids) else ""))
        max_age = details.get("checkpointMaxAgeSeconds")
        return cls(
            migration_id=str(item["migrationID"]),
            phase=str(item["phase"]),
            node=str(item["node"]),
            resource_id=str(item["resourceID"]),
            workload_uid=str(item["workloadUID"]),
            migration_class=str(item["migrationClass"]),
            pods=tuple(pods),
            holder=item.get("holder"),
            fencing_token=int(item.get("fencingToken") or 0),
            lease_expires_at=_time(item.get("leaseExpiresAt")),
            checkpoint_max_age_seconds=None if max_age is None else int(max_age),
            checkpoint_requested_at=_time(details.get("checkpointRequestedAt")),
            shard=None if details.get("shard") is None else str(details["shard"]),
            checkpoint_due=_time(details.get("checkpointDue")),
        )

    def leased_to(self, holder: str, now: datetime) -> bool:
        return (
            self.holder == holder
            and self.lease_expires_at is not None
            and self.lease_expires_at > now
        )

    def lease_free(self, now: datetime) -> bool:
        return self.holder is None or self.lease_expires_at is None or self.lease_expires_at <= now


def next_step(m: MigrationView, holder: str, now: datetime) -> Step:
    """The step ``holder`` takes for ``m`` at ``now`` (UTC, the executor's clock)."""
    if m.phase == "evidence-kept":
        return Step.EVIDENCE
    if m.phase != "planned" and m.phase not in WORKING_PHASES:
        return Step.NONE
    if not m.leased_to(holder, now):
        return Step.REQUEST_LEASE if m.lease_free(now) else Step.WAIT
    if m.phase == "checkpoint-requested":
        return Step.CHECKPOINT
    if m.phase == "eviction-requested":
        return Step.EVICT
    if m.phase == "released":
        return Step.REPLACEMENT
    return Step.WAIT  # planned and leased to us: the grant's next phase is not recorded yet


def renew_due(m: MigrationView, now: datetime, lease_seconds: float) -> bool:
    """Renew once half the lease period is left (``lease_seconds``: the governor's
    ``DEVICESTATE_MIGRATION_LEASE_SECONDS``)."""
    if m.lease_expires_at is None:
        return False
    return m.lease_expires_at - now <= timedelta(seconds=lease_seconds / 2)


def checkpoint_overdue(m: MigrationView, now: datetime) -> bool:
    """No fresh checkpoint by the governor's ``checkpointDue``: report ``checkpoint-timed-out``."""
    return m.checkpoint_due is not None and now >= m.checkpoint_due


def lease_lost(item: dict[str, Any], holder: str, token: int) -> bool:
    """Whether the governor's latest decision about the migration (an item of
    ``GET /v1/migrations``) refused a report of ``holder`` under lease ``token`` for a lease
    reason: the record may still name ``holder`` (the governor's event time is past the lease's
    expiry while the executor's clock is not), so the executor stops working on it."""
    details: dict[str, Any] = item.get("details") or {}
    return (
        item.get("lastDecision") == "MigrationReportRejected"
        and details.get("reportHolder") == holder
        and details.get("reportFencingToken") == token
        and str(details.get("rejectReason", "")).startswith(LEASE_LOST)
    )
