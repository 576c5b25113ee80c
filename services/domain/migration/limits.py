"""The migration policy's knobs and its token buckets, on event time.

Every start of a migration that moves a workload (``checkpointed`` or ``sharded``) takes one
token from its node's bucket and one from the fleet's, both or neither; a bucket earns one token
per ``*_refill_seconds`` of event time, up to its burst.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from services.domain.codec import parse_time
from services.domain.events import format_time


@dataclass(frozen=True, slots=True)
class MigrationPolicy:
    """Seconds are event time. Defaults equal the ``DEVICESTATE_MIGRATION_*`` settings'.

    - ``node_burst``/``node_refill_seconds``, ``fleet_burst``/``fleet_refill_seconds``: the buckets.
    - ``lease_seconds``: how long a granted (or renewed) lease lasts.
    - ``takeover_seconds``: after a lease expires or is released, how long another executor has
      to take it before the migration fails ``lease-lost``.
    - ``checkpoint_timeout_seconds``: from the checkpoint request to ``checkpoint-timeout``.
    """

    node_burst: int = 1
    node_refill_seconds: float = 600.0
    fleet_burst: int = 8
    fleet_refill_seconds: float = 60.0
    lease_seconds: float = 120.0
    takeover_seconds: float = 600.0
    checkpoint_timeout_seconds: float = 900.0


@dataclass(slots=True)
class Bucket:
    """``tokens`` at ``updated_at`` (UTC)."""

    tokens: float
    updated_at: datetime

    def refill(self, at: datetime, burst: int, refill_seconds: float) -> None:
        """Earn the tokens since ``updated_at``, at most ``burst``; an earlier ``at`` earns
        nothing (time never runs back for a bucket)."""
        if at > self.updated_at:
            earned = (at - self.updated_at).total_seconds() / refill_seconds
            self.tokens = min(float(burst), self.tokens + earned)
            self.updated_at = at

    def ready_at(self, refill_seconds: float) -> datetime:
        """When the bucket holds one token (``updated_at`` when it already does)."""
        missing = max(0.0, 1.0 - self.tokens)
        return self.updated_at + timedelta(seconds=missing * refill_seconds)

    def to_json(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "updatedAt": format_time(self.updated_at)}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Bucket:
        return cls(float(obj["tokens"]), parse_time(obj["updatedAt"]))


def take(
    fleet: Bucket | None,
    nodes: dict[str, Bucket],
    node: str,
    at: datetime,
    policy: MigrationPolicy,
) -> tuple[Bucket, datetime | None]:
    """Take a token from ``node``'s bucket and the fleet's (``fleet``; made full when ``None``).

    Returns the fleet bucket and ``None`` when taken, or the event time at which both buckets
    will hold a token (nothing taken)."""
    if fleet is None:
        fleet = Bucket(float(policy.fleet_burst), at)
    bucket = nodes.get(node)
    if bucket is None:
        bucket = nodes[node] = Bucket(float(policy.node_burst), at)
    fleet.refill(at, policy.fleet_burst, policy.fleet_refill_seconds)
    bucket.refill(at, policy.node_burst, policy.node_refill_seconds)
    if fleet.tokens < 1.0 or bucket.tokens < 1.0:
        return fleet, max(
            fleet.ready_at(policy.fleet_refill_seconds), bucket.ready_at(policy.node_refill_seconds)
        )
    fleet.tokens -= 1.0
    bucket.tokens -= 1.0
    return fleet, None
