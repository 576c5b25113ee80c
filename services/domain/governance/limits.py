"""Blast-radius limits on event time: token buckets and the circuit breaker (issue 3, item 4).

Pure functions over :class:`~services.domain.governance.state.TokenBucket` and
:class:`~services.domain.governance.state.FleetGov`; the caller passes the event time.
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from services.domain.governance.policy import GovernancePolicy
from services.domain.governance.state import FleetGov, TokenBucket


def refill(bucket: TokenBucket, at: datetime, burst: int, refill_seconds: float) -> None:
    """Add the tokens earned since ``bucket.updated_at`` (one per ``refill_seconds``), at most
    ``burst``. Time never runs backwards for a bucket: an earlier ``at`` earns nothing."""
    if bucket.updated_at is not None and at > bucket.updated_at:
        earned = (at - bucket.updated_at).total_seconds() / refill_seconds
        bucket.tokens = min(float(burst), bucket.tokens + earned)
    if bucket.updated_at is None or at > bucket.updated_at:
        bucket.updated_at = at


def take_restriction_tokens(
    fleet: FleetGov, node: str, at: datetime, policy: GovernancePolicy
) -> bool:
    """Take one token from the node's bucket and one from the fleet's, both or neither.

    Returns False (taking nothing) when either bucket has less than one token.
    """
    if fleet.fleet_bucket is None:
        fleet.fleet_bucket = TokenBucket(float(policy.restrict_fleet_burst), at)
    node_bucket = fleet.node_buckets.get(node)
    if node_bucket is None:
        node_bucket = fleet.node_buckets[node] = TokenBucket(float(policy.restrict_node_burst), at)
    refill(
        fleet.fleet_bucket, at, policy.restrict_fleet_burst, policy.restrict_fleet_refill_seconds
    )
    refill(node_bucket, at, policy.restrict_node_burst, policy.restrict_node_refill_seconds)
    if fleet.fleet_bucket.tokens < 1.0 or node_bucket.tokens < 1.0:
        return False
    fleet.fleet_bucket.tokens -= 1.0
    node_bucket.tokens -= 1.0
    return True


@dataclass(frozen=True, slots=True)
class BreakerReading:
    """Distinct devices and nodes that turned bad within the breaker window, and the shares."""

    devices: int
    nodes: int
    known_devices: int
    known_nodes: int

    def tripped(self, policy: GovernancePolicy) -> bool:
        """True when more than the configured share of devices (or nodes) turned bad, with at
        least the configured minimum count."""
        devices = (
            self.devices >= policy.breaker_min_devices
            and self.devices > policy.breaker_device_share * self.known_devices
        )
        nodes = (
            self.nodes >= policy.breaker_min_nodes
            and self.nodes > policy.breaker_node_share * self.known_nodes
        )
        return devices or nodes


def record_signal(
    fleet: FleetGov,
    at: datetime,
    node: str,
    resource_id: str,
    policy: GovernancePolicy,
    known_devices: int,
    known_nodes: int,
) -> BreakerReading:
    """Count a device (``resource_id``) or a whole node (``resource_id == ""``) turning
    Unknown/Unhealthy at ``at``; drop signals at or before (newest signal - window); return the
    reading. Amortised O(log n) per signal: the window is kept sorted and counted."""
    entry = (at, node, resource_id)
    bisect.insort(fleet.signals, entry)
    if resource_id:
        fleet.signal_devices[(node, resource_id)] += 1
    fleet.signal_nodes[node] += 1
    horizon = fleet.signals[-1][0] - timedelta(seconds=policy.breaker_window_seconds)
    drop = bisect.bisect_right(fleet.signals, (horizon, "\U0010ffff", "\U0010ffff"))
    for _, old_node, old_resource in fleet.signals[:drop]:
        if old_resource:
            _decrement(fleet.signal_devices, (old_node, old_resource))
        _decrement(fleet.signal_nodes, old_node)
    del fleet.signals[:drop]
    return BreakerReading(
        len(fleet.signal_devices),
        len(fleet.signal_nodes),
        max(known_devices, 1),
        max(known_nodes, 1),
    )


def _decrement(counter: Counter[Any], key: Any) -> None:
    counter[key] -= 1
    if counter[key] <= 0:
        del counter[key]
