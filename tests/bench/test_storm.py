"""The storm workload (``--shape storm``, issue 12) and the scale rows of the verdict table,
without a stack: the generator's shape (a caught-up Healthy fleet, then whole nodes Unknown behind
one switch, schema-2 records as the watcher publishes them) and the rows that judge a run."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from bench.load_storm import burst_node_indexes, generate_storm
from bench.options import check_shape
from bench.report import verdicts
from bench.worker_group import decisions_by_kind, merged_metrics
from services.domain.events import Health
from services.domain.node_events import WatcherTick
from services.domain.observations import decode_observations
from services.domain.records import decode_record


def test_the_steady_state_is_every_node_healthy_in_one_schema_2_record_each() -> None:
    storm = generate_storm(800, 100, seed=7, partitions=6)
    steady = storm.steady
    assert storm.gpus_per_node == 8
    assert len(steady.values) == 100 and steady.observations == steady.new == 800
    assert (steady.duplicates, steady.stale) == (0, 0)
    records = [decode_observations(v) for v in steady.values]
    assert [k.decode() for k in steady.keys] == [r.node for r in records]
    assert len({r.node for r in records}) == 100
    assert all(len(r.observations) == 8 for r in records)
    assert {o.health for r in records for o in r.observations} == {Health.HEALTHY}
    assert len(steady.devices) == 800 == len(set(steady.devices))
    versions = [r.status_version for r in records]
    assert versions == sorted(versions) and len(set(versions)) == 100


def test_the_burst_turns_whole_nodes_behind_one_switch_unknown() -> None:
    storm = generate_storm(800, 100, seed=7, partitions=6)
    burst = storm.burst
    records = [decode_observations(v) for v in burst.values]
    assert len(records) == 10 == len(storm.burst_nodes)  # 10 % of 100 nodes
    assert burst.observations == burst.new == 80
    assert [r.node for r in records] == storm.burst_nodes
    assert all(len(r.observations) == 8 for r in records)
    assert {o.health for r in records for o in r.observations} == {Health.UNKNOWN}
    # The same devices as the steady state reported for those nodes, at newer versions, later.
    steady = {decode_observations(v).node: decode_observations(v) for v in storm.steady.values}
    for r in records:
        before = steady[r.node]
        assert [o.resource_id for o in r.observations] == [
            o.resource_id for o in before.observations
        ]
        assert r.pod_uid == before.pod_uid
        assert r.status_version is not None and before.status_version is not None
        assert r.status_version > max(s.status_version or 0 for s in steady.values())
        assert r.observed_at > max(s.observed_at for s in steady.values())
    assert set(burst.devices) <= set(storm.steady.devices)


def test_each_log_ends_with_a_tick_to_every_partition_after_its_last_change() -> None:
    storm = generate_storm(800, 100, seed=7, partitions=6)
    for ticks, log in ((storm.steady_ticks, storm.steady), (storm.burst_ticks, storm.burst)):
        assert [p for p, _, _ in ticks] == list(range(6))
        last = max(decode_observations(v).observed_at for v in log.values)
        for partition, key, value in ticks:
            tick = decode_record(value)
            assert isinstance(tick, WatcherTick)
            assert tick.partition == partition and key == tick.node.encode()
            assert tick.observed_at > last and tick.watch_seen_at == tick.observed_at
    first_burst = min(decode_observations(v).observed_at for v in storm.burst.values)
    assert all(decode_record(v).observed_at < first_burst for _, _, v in storm.steady_ticks)  # type: ignore[union-attr]


def test_the_switch_is_a_seeded_run_of_nodes_that_wraps() -> None:
    hit = burst_node_indexes(25_000, 0.1, seed=20261129)
    assert len(hit) == 2_500 == len(set(hit))
    assert all((b - a) % 25_000 == 1 for a, b in itertools.pairwise(hit))
    assert hit == burst_node_indexes(25_000, 0.1, seed=20261129)
    assert burst_node_indexes(5, 0.01, seed=1) != [] and burst_node_indexes(5, 0.0, seed=1) == []
    wrapped = burst_node_indexes(10, 0.5, seed=3)
    assert len(wrapped) == 5 and len(set(wrapped)) == 5 and max(wrapped) < 10
    with pytest.raises(ValueError, match="share"):
        burst_node_indexes(10, 1.5, seed=1)


def test_the_storm_is_the_same_log_from_the_same_seed_and_sizes_are_checked() -> None:
    a, b = generate_storm(160, 20, seed=11), generate_storm(160, 20, seed=11)
    assert a.steady.values == b.steady.values and a.burst.values == b.burst.values
    assert generate_storm(160, 20, seed=12).burst_nodes != a.burst_nodes or (
        generate_storm(160, 20, seed=12).steady.values != a.steady.values
    )
    with pytest.raises(ValueError, match="multiple of --nodes"):
        generate_storm(161, 20, seed=11)
    assert check_shape("storm", 161, 20) is not None
    assert check_shape("storm", 160, 20) is None
    assert check_shape("training", 801, 100) is not None
    assert check_shape("bogus", 800, 100) is not None


STORM: dict[str, Any] = {
    "burst_observations": 400,
    "backlog_cleared_seconds": 1.2,
    "health_committed_seconds": 0.9,
    "ingest_observations_per_second": 9000.0,
    "evicting_decisions": 0,
    "unknown_tolerance_started": 400,
    "projection": {
        "devices_by_health": {"Healthy": 3600, "Unknown": 400},
        "governance_by_state": {"Available": 3600, "UnknownTolerated": 400},
    },
}


def _verdict(results: dict[str, Any], start: str) -> dict[str, Any]:
    return next(r for r in verdicts(results, 0) if r["figure"].startswith(start))


def test_the_storm_rows_judge_the_backlog_the_evictions_and_the_projection() -> None:
    ok = {"storm": STORM}
    assert _verdict(ok, "(s) storm: backlog cleared")["verdict"] == "PASS"
    assert _verdict(ok, "(s) storm: restrict")["verdict"] == "PASS"
    assert _verdict(ok, "(s) storm: UnknownToleranceStarted")["verdict"] == "PASS"
    assert _verdict(ok, "(s) storm: projection")["value"] == "400 / 400"
    slow = {"storm": {**STORM, "backlog_cleared_seconds": 5.5}}
    assert _verdict(slow, "(s) storm: backlog cleared")["verdict"] == "MISS"
    evicted = {"storm": {**STORM, "evicting_decisions": 3}}
    assert _verdict(evicted, "(s) storm: restrict")["verdict"] == "MISS"
    short = {"storm": {**STORM, "projection": {"devices_by_health": {"Unknown": 399}}}}
    assert _verdict(short, "(s) storm: projection")["verdict"] == "MISS"
    assert not [r for r in verdicts({}, 0) if r["figure"].startswith(("(s)", "(b) 2"))]


def test_the_rows_of_two_workers_name_the_one_that_ran_the_governor() -> None:
    worker = {
        "events_per_second": 1.0,
        "peak_rss_mb": 1.0,
        "workers": 2,
        "governance": {"after_ingest_seconds": 0.4},
        "per_worker": [
            {"name": "worker-1", "consumed": 10.0, "cpu_seconds": 1.0, "governor_records": 0.0},
            {"name": "worker-2", "consumed": 12.0, "cpu_seconds": 2.0, "governor_records": 5.0},
        ],
    }
    results = {"worker": worker}
    assert _verdict(results, "(b) 2 workers: governor caught up")["verdict"] == "PASS"
    assert _verdict(results, "(b) 2 workers: the governor ran in")["value"] == "worker-2"
    assert _verdict(results, "(b) 2 workers: records consumed")["value"] == "10 / 12"
    worker["governance"] = {"after_ingest_seconds": 2.5}
    assert _verdict(results, "(b) 2 workers: governor caught up")["verdict"] == "MISS"


def test_the_metrics_of_several_workers_add_up_per_series_and_kind() -> None:
    one = {'devicestate_governor_decisions_total{kind="UnknownToleranceStarted"}': 3.0, "x": 1.0}
    two = {'devicestate_governor_decisions_total{kind="UnknownToleranceStarted"}': 2.0, "x": 2.0}
    merged = merged_metrics([one, two])
    assert merged["x"] == 3.0
    assert decisions_by_kind(merged) == {"UnknownToleranceStarted": 5.0}
