"""The migration metrics (issue 13 item 5) as a pure fold of the governor's decisions
(``services.domain.migration.metrics``): each number of the shared scenario, the waiting gauge
while a migration is held back, the idle GPU-seconds of a quarantine that ends, and the same
numbers from a governor restored in the middle of the run (a restart, a replay)."""

from __future__ import annotations

import random

from services.domain.governance.state import GovernorState
from services.domain.migration.metrics import (
    CHECKPOINT_BUCKETS,
    QUARANTINE_RELEASED,
    QUARANTINED,
    MetricsFold,
    MigrationFact,
    fold,
    histogram,
)
from services.domain.migration.outcomes import OutcomeKind
from tests.governance.harness import GovernanceRun
from tests.governance.migration_builders import POLICY
from tests.governance.migration_metrics_scenario import IDLE_GPU_SECONDS, facts_of, scenario
from tests.governance.strategies import at


def test_the_scenario_s_outcomes_durations_deferrals_and_idle_seconds() -> None:
    m = fold(facts_of(scenario().decisions))
    assert m.outcomes == {
        ("completed", "", "team-a"): 1,
        ("evidence-kept", "", "team-b"): 1,
        ("failed", "checkpoint-timeout", "team-c"): 1,
    }
    assert m.deferred == {"rate-limited": 1}
    assert m.waiting == {}
    assert m.checkpoint_seconds == [30.0]  # requested at 12, committed at 42
    assert m.rebuild_seconds == [10.0]  # released at 50, completed at 60
    assert m.idle_gpu_seconds == IDLE_GPU_SECONDS
    # With the governor's watermark at 200: the three quarantines, all idle since 120 at the
    # latest, count 80 s more each.
    later = fold(facts_of(scenario().decisions), watermark=at(200))
    assert later.idle_gpu_seconds == IDLE_GPU_SECONDS + 3 * 80
    assert m.checkpoint.buckets[:3] == ((5.0, 0), (15.0, 0), (30.0, 1))
    assert m.checkpoint.buckets[-1] == (float("inf"), 1) and m.checkpoint.total == 30.0


def test_a_migration_held_back_by_the_node_bucket_is_waiting_until_it_starts() -> None:
    seen: dict[str, dict[str, int]] = {}
    run = GovernanceRun(policy=POLICY)

    def pause(step_name: str) -> None:
        seen[step_name] = fold(facts_of(run.decisions)).waiting

    scenario(run, pause)
    assert seen == {"deferred": {"rate-limited": 1}, "done": {}}


def test_a_quarantine_that_ends_stops_counting_idle_seconds() -> None:
    facts = [
        MigrationFact(QUARANTINED, at(0), "n", "GPU-0"),
        MigrationFact(OutcomeKind.PLANNED.value, at(20), "n", "GPU-0", "m-1"),
        MigrationFact(OutcomeKind.DEVICE_RELEASED.value, at(30), "n", "GPU-0", "m-1"),
        MigrationFact(OutcomeKind.COMPLETED.value, at(35), "n", "GPU-0", "m-1", "ns"),
        MigrationFact(QUARANTINE_RELEASED, at(50), "n", "GPU-0"),
        MigrationFact(QUARANTINED, at(60), "n", "GPU-1"),  # open: counted up to the newest, 100
        MigrationFact(OutcomeKind.CANCELLED.value, at(100), "n", "GPU-9", "m-2", "ns"),
    ]
    m = fold(facts)
    assert m.idle_gpu_seconds == 20 + 20 + 40
    assert m.rebuild_seconds == [5.0]
    assert m.outcomes == {("completed", "", "ns"): 1, ("cancelled", "", "ns"): 1}


def test_a_governor_restored_mid_run_decides_the_same_metrics() -> None:
    whole = scenario()
    half = GovernanceRun(policy=POLICY)
    restarts: list[int] = []

    def restart(step_name: str) -> None:
        if step_name != "deferred":
            return
        snapshot = half.state.snapshot()
        half.state = GovernorState.restore(
            snapshot["devices"], snapshot["nodes"], snapshot["fleet"], 120.0, snapshot["workloads"]
        )
        restarts.append(len(half.decisions))

    scenario(half, restart)
    assert restarts and 0 < restarts[0] < len(half.decisions)  # in the middle of the run
    assert fold(facts_of(half.decisions)) == fold(facts_of(whole.decisions))


def test_histogram_buckets_are_cumulative() -> None:
    h = histogram([1.0, 30.0, 5000.0], CHECKPOINT_BUCKETS)
    assert h.buckets[0] == (5.0, 1) and h.buckets[2] == (30.0, 2)
    assert h.buckets[-2] == (3600.0, 2) and h.buckets[-1] == (float("inf"), 3)
    assert (h.total, h.count) == (5031.0, 3)


def test_the_decisions_fed_in_any_parts_give_the_metrics_of_one_fold() -> None:
    """The API folds only the decisions written since its last scrape (MetricsFold): cut the
    scenario's decisions at random places, read the metrics between the parts (a scrape), and
    the last read equals one fold of them all, the watermark included."""
    facts = facts_of(scenario().decisions)
    whole = fold(facts, watermark=at(200))
    for seed in range(20):
        rng = random.Random(seed)
        cuts = sorted(rng.sample(range(len(facts) + 1), rng.randint(1, min(6, len(facts)))))
        folded, start = MetricsFold(), 0
        for cut in [*cuts, len(facts)]:
            folded.add(facts[start:cut])
            folded.metrics(watermark=at(100))  # a scrape between the parts changes nothing
            start = cut
        assert folded.metrics(watermark=at(200)) == whole
    assert whole.outcomes and whole.checkpoint_seconds  # the scenario has something to count
