"""``lag_problem``: which partitions make the API unready (records over the threshold, or the
oldest waiting record older than it), at a given wall-clock time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from services.adapters.kafka.lag import PartitionLag
from services.processes.api.readiness import lag_problem
from services.runtime.config import ApiSettings

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
SETTINGS = ApiSettings(ready_max_lag_records=100, ready_max_lag_seconds=60)


def lag(partition: int, records: int, waited: float | None) -> PartitionLag:
    oldest = None if waited is None else NOW - timedelta(seconds=waited)
    return PartitionLag("events", partition, 1000, 1000 - records, records, oldest)


def test_caught_up_or_within_both_thresholds_is_ready() -> None:
    assert lag_problem([lag(0, 0, None), lag(1, 100, 60.0)], NOW, SETTINGS) is None


def test_a_few_records_waiting_too_long_is_a_stopped_worker() -> None:
    problem = lag_problem([lag(0, 0, None), lag(1, 27, 62.0)], NOW, SETTINGS)
    assert problem == (
        "projection behind: the worker group has not consumed events[1]: 27 records, oldest "
        "62 s (thresholds 100 records, 60 s; is the worker running?)"
    )


def test_too_many_records_is_a_worker_behind_however_young() -> None:
    problem = lag_problem([lag(0, 101, 1.0), lag(2, 5000, 0.0)], NOW, SETTINGS)
    assert problem is not None
    assert "events[0]: 101 records, oldest 1 s; events[2]: 5000 records, oldest 0 s" in problem


def test_seconds_are_zero_when_nothing_waits_or_the_timestamp_is_ahead() -> None:
    assert lag(0, 0, 500.0).seconds(NOW) == 0.0
    assert lag(0, 3, -30.0).seconds(NOW) == 0.0
    assert lag(0, 3, None).seconds(NOW) == 0.0
    assert lag(0, 3, 12.5).seconds(NOW) == 12.5
