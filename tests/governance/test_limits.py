"""Blast-radius limits (services/domain/governance/limits.py): token buckets on event time, the
circuit breaker's reading and the signal window."""

from __future__ import annotations

from dataclasses import replace

import pytest

from services.domain.governance.limits import (
    BreakerReading,
    record_signal,
    refill,
    take_restriction_tokens,
)
from services.domain.governance.policy import GovernancePolicy
from services.domain.governance.state import FleetGov, TokenBucket
from tests.governance.strategies import at

POLICY = GovernancePolicy(
    restrict_node_burst=2,
    restrict_node_refill_seconds=60.0,
    restrict_fleet_burst=3,
    restrict_fleet_refill_seconds=10.0,
    breaker_window_seconds=60.0,
    breaker_device_share=0.2,
    breaker_min_devices=3,
    breaker_node_share=0.5,
    breaker_min_nodes=2,
)


# --- refill --------------------------------------------------------------------------------------


def test_refill_earns_one_token_per_refill_period() -> None:
    bucket = TokenBucket(0.0, at(0))
    refill(bucket, at(30), burst=5, refill_seconds=60.0)
    assert bucket.tokens == pytest.approx(0.5)
    assert bucket.updated_at == at(30)
    refill(bucket, at(150), burst=5, refill_seconds=60.0)
    assert bucket.tokens == pytest.approx(2.5)


def test_refill_stops_at_the_burst() -> None:
    bucket = TokenBucket(1.0, at(0))
    refill(bucket, at(10_000), burst=5, refill_seconds=60.0)
    assert bucket.tokens == 5.0
    assert bucket.updated_at == at(10_000)


def test_an_earlier_time_earns_nothing_and_does_not_move_the_bucket_back() -> None:
    bucket = TokenBucket(1.0, at(100))
    refill(bucket, at(40), burst=5, refill_seconds=10.0)
    assert (bucket.tokens, bucket.updated_at) == (1.0, at(100))
    refill(bucket, at(100), burst=5, refill_seconds=10.0)  # the same time: nothing either
    assert (bucket.tokens, bucket.updated_at) == (1.0, at(100))
    refill(bucket, at(110), burst=5, refill_seconds=10.0)
    assert bucket.tokens == pytest.approx(2.0)


def test_a_bucket_without_time_starts_its_clock() -> None:
    bucket = TokenBucket(0.0, None)
    refill(bucket, at(5), burst=5, refill_seconds=10.0)
    assert (bucket.tokens, bucket.updated_at) == (0.0, at(5))


# --- take ------------------------------------------------------------------------------------------


def test_new_buckets_start_full() -> None:
    fleet = FleetGov()
    assert take_restriction_tokens(fleet, "n1", at(0), POLICY)
    assert fleet.node_buckets["n1"].tokens == 1.0
    assert fleet.fleet_bucket is not None
    assert fleet.fleet_bucket.tokens == 2.0


def test_the_node_bucket_limits_one_node_and_refills() -> None:
    fleet = FleetGov()
    assert take_restriction_tokens(fleet, "n1", at(0), POLICY)
    assert take_restriction_tokens(fleet, "n1", at(0), POLICY)
    assert not take_restriction_tokens(fleet, "n1", at(59), POLICY)
    assert take_restriction_tokens(fleet, "n1", at(60), POLICY)


def test_a_refused_take_takes_nothing_from_the_other_bucket() -> None:
    """Both or neither: an empty node bucket leaves the fleet's tokens, and vice versa."""
    fleet = FleetGov()
    assert take_restriction_tokens(fleet, "n1", at(0), POLICY)
    assert take_restriction_tokens(fleet, "n1", at(0), POLICY)
    assert fleet.fleet_bucket is not None
    fleet_tokens = fleet.fleet_bucket.tokens
    assert not take_restriction_tokens(fleet, "n1", at(0), POLICY)  # node empty
    assert fleet.fleet_bucket.tokens == fleet_tokens == 1.0

    assert take_restriction_tokens(fleet, "n2", at(0), POLICY)  # the fleet's last token
    assert fleet.fleet_bucket.tokens == 0.0
    assert not take_restriction_tokens(fleet, "n3", at(0), POLICY)  # fleet empty
    assert fleet.node_buckets["n3"].tokens == float(POLICY.restrict_node_burst)
    assert fleet.node_buckets["n2"].tokens == 1.0


def test_the_fleet_bucket_limits_all_nodes_together() -> None:
    fleet = FleetGov()
    taken = [take_restriction_tokens(fleet, f"n{i}", at(0), POLICY) for i in range(5)]
    assert taken == [True, True, True, False, False]
    assert take_restriction_tokens(fleet, "n9", at(10), POLICY)  # one fleet token per 10 s
    assert not take_restriction_tokens(fleet, "n8", at(10), POLICY)


def test_takes_at_an_earlier_time_earn_nothing() -> None:
    fleet = FleetGov()
    assert take_restriction_tokens(fleet, "n1", at(100), POLICY)
    assert take_restriction_tokens(fleet, "n1", at(100), POLICY)
    assert not take_restriction_tokens(fleet, "n1", at(0), POLICY)
    assert not take_restriction_tokens(fleet, "n1", at(159), POLICY)
    assert take_restriction_tokens(fleet, "n1", at(160), POLICY)


# --- breaker reading -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("devices", "known", "tripped"),
    [
        (2, 5, False),  # 40 % but fewer than 3 devices
        (3, 15, False),  # 3 devices but exactly 20 %: not more than the share
        (3, 14, True),  # 3 of 14 > 20 %
        (4, 100, False),  # 4 % of a large fleet
        (20, 100, False),  # exactly 20 %
        (21, 100, True),
    ],
)
def test_the_device_share_and_minimum(devices: int, known: int, tripped: bool) -> None:
    reading = BreakerReading(devices=devices, nodes=1, known_devices=known, known_nodes=10)
    assert reading.tripped(POLICY) is tripped


@pytest.mark.parametrize(
    ("nodes", "known", "tripped"),
    [
        (1, 1, False),  # 100 % but fewer than 2 nodes
        (2, 4, False),  # exactly 50 %
        (2, 3, True),
        (3, 10, False),
        (6, 10, True),
    ],
)
def test_the_node_share_and_minimum(nodes: int, known: int, tripped: bool) -> None:
    reading = BreakerReading(devices=0, nodes=nodes, known_devices=1000, known_nodes=known)
    assert reading.tripped(POLICY) is tripped


def test_either_share_trips() -> None:
    both_low = BreakerReading(devices=2, nodes=1, known_devices=4, known_nodes=4)
    assert not both_low.tripped(POLICY)
    assert replace(both_low, devices=3).tripped(POLICY)
    assert replace(both_low, nodes=3).tripped(POLICY)


# --- signals ---------------------------------------------------------------------------------------


def test_record_signal_counts_distinct_devices_and_nodes() -> None:
    fleet = FleetGov()
    record_signal(fleet, at(0), "n1", "GPU-0", POLICY, 10, 4)
    record_signal(fleet, at(1), "n1", "GPU-0", POLICY, 10, 4)  # the same device again
    record_signal(fleet, at(2), "n1", "GPU-1", POLICY, 10, 4)
    reading = record_signal(fleet, at(3), "n2", "", POLICY, 10, 4)  # a whole node
    assert (reading.devices, reading.nodes) == (2, 2)
    assert (reading.known_devices, reading.known_nodes) == (10, 4)


def test_record_signal_drops_signals_older_than_the_window() -> None:
    fleet = FleetGov()
    record_signal(fleet, at(0), "n1", "GPU-0", POLICY, 10, 4)
    record_signal(fleet, at(30), "n2", "GPU-0", POLICY, 10, 4)
    reading = record_signal(fleet, at(60), "n3", "GPU-0", POLICY, 10, 4)
    # at(0) is exactly one window old: out.
    assert (reading.devices, reading.nodes) == (2, 2)
    assert [s[0] for s in fleet.signals] == [at(30), at(60)]
    reading = record_signal(fleet, at(200), "n3", "GPU-1", POLICY, 10, 4)
    assert (reading.devices, reading.nodes) == (1, 1)
    assert len(fleet.signals) == 1


def test_record_signal_prunes_by_the_latest_signal_not_the_new_one() -> None:
    """A late signal (earlier event time) does not bring old signals back or drop recent ones."""
    fleet = FleetGov()
    record_signal(fleet, at(100), "n1", "GPU-0", POLICY, 10, 4)
    reading = record_signal(fleet, at(10), "n2", "GPU-0", POLICY, 10, 4)  # older than the window
    assert (reading.devices, reading.nodes) == (1, 1)
    assert [s[0] for s in fleet.signals] == [at(100)]


def test_record_signal_never_divides_by_zero() -> None:
    reading = record_signal(FleetGov(), at(0), "n1", "GPU-0", POLICY, 0, 0)
    assert (reading.known_devices, reading.known_nodes) == (1, 1)


def test_a_tripping_sequence() -> None:
    """Three of ten devices within the window trip the breaker (> 20 %, >= 3)."""
    fleet = FleetGov()
    readings = [
        record_signal(fleet, at(t), "n1", rid, POLICY, 10, 5)
        for t, rid in ((0, "GPU-0"), (10, "GPU-1"), (20, "GPU-2"))
    ]
    assert [r.tripped(POLICY) for r in readings] == [False, False, True]
    spread = FleetGov()
    readings = [
        record_signal(spread, at(t), "n1", rid, POLICY, 10, 5)
        for t, rid in ((0, "GPU-0"), (70, "GPU-1"), (140, "GPU-2"))
    ]
    assert not any(r.tripped(POLICY) for r in readings)
