"""``bench.poison`` on the stack's PostgreSQL, small: both agents write everything but the
refused records, the health agent in about 2 log2(n) writes per refused record."""

from __future__ import annotations

import math

import pytest

from bench.poison import measure

pytestmark = pytest.mark.integration


async def test_bench_poison_isolates_in_logarithmic_writes() -> None:
    results = {(r["agent"], r["poison"]): r["writes"] for r in await measure(64, [0, 2])}
    assert results[("health", 0)] == 1 and results[("governor", 0)] == 1
    bound = 2 * 2 * math.ceil(math.log2(64)) + 1 + 2  # bisection, and an offsets-only write each
    assert 2 < results[("health", 2)] <= bound
    # Per refused record: one refused attempt and about log2(n) rolled-back trials.
    assert 2 < results[("governor", 2)] <= 2 * (math.ceil(math.log2(64)) + 2) + 1
