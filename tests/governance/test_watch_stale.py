"""A silent watch (issue 15 item 3), through ``machine.step`` on event time.

Stream shape (kubernetes/kubernetes and client-go reports of half-open watches): the watcher keeps
ticking, but its Pod watch delivers neither events nor BOOKMARKs, so every tick reports the same
``watchSeenAt``. Past ``watch_stale_seconds`` (75 s: a little over the ~60 s bookmark interval
measured on the test kube-apiserver) the governor says the watch is stale, once; the next tick
that reports a delivery makes it fresh. No device changes state because of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from services.domain.governance.decisions import AlertAction, Decision, DecisionKind
from services.domain.governance.device_state import GovState
from services.domain.governance.inputs import GovernanceInput, MergeKey
from services.domain.governance.machine import step
from services.domain.governance.policy import GovernancePolicy
from services.domain.governance.state import GovernorState
from services.domain.governance.watch_freshness import delivered_at
from services.domain.node_events import WatcherTick
from tests.governance.harness import GovernanceRun
from tests.governance.strategies import at, transition, watermark
from tests.governance.test_machine import G0, G1, N1, H, U

K = DecisionKind
POLICY = GovernancePolicy()  # watch_stale_seconds=75 by default


def tick(t: float, seen: float | None, partition: int = 0) -> WatcherTick:
    return WatcherTick(partition, at(t), watch_seen_at=None if seen is None else at(seen))


@dataclass
class Keyed:
    """Records through ``step`` with their merge keys (one partition), as the intake folds them."""

    policy: GovernancePolicy = POLICY
    state: GovernorState = field(default_factory=GovernorState)
    seq: int = 0
    decided: list[Decision] = field(default_factory=list)

    def feed(self, record: GovernanceInput, t: datetime) -> list[DecisionKind]:
        decisions = step(self.state, record, self.seq, self.policy, MergeKey(t, 0, self.seq, 0))
        self.seq += 1
        self.decided.extend(decisions)
        return [d.kind for d in decisions]


def test_the_default_is_a_little_over_the_bookmark_interval() -> None:
    assert GovernancePolicy().watch_stale_seconds == 75.0


def test_a_silent_watch_is_stale_once_then_fresh_on_the_next_delivery() -> None:
    run = Keyed()
    run.feed(transition(N1, G0, H, 1, 0), at(0))
    run.feed(transition(N1, G1, H, 2, 0), at(0))
    for t in range(0, 76, 5):  # the watcher ticks every 5 s; the watch last delivered at 0
        assert run.feed(tick(t, 0), at(t)) == [], t
    assert run.feed(tick(75, 0), at(75)) == []  # 75 s: not longer than the setting
    decided = run.feed(tick(80, 0), at(80))
    assert decided == [K.WATCH_STALE]
    stale = run.decided[-1]
    assert stale.alert is AlertAction.FIRING
    assert stale.incident == "watch-stale/2026-11-29T12:00:00Z"
    assert stale.at == at(80) and stale.details["lastSeenAt"] == "2026-11-29T12:00:00Z"
    assert stale.details["silentSeconds"] == 80.0
    assert run.state.fleet.watch_stale_incident == stale.incident
    for t in range(85, 600, 5):  # once per silence, however long it lasts
        assert run.feed(tick(t, 0), at(t)) == []
    # no device turned Unknown (or anything else) because the watch went quiet
    assert {d.state for d in run.state.devices.values()} == {GovState.AVAILABLE}
    assert [d.kind for d in run.decided if d.at > at(0)] == [K.WATCH_STALE]
    # a BOOKMARK at 601 (the watcher reports it on its next tick): fresh again
    assert run.feed(tick(605, 601), at(605)) == [K.WATCH_FRESH]
    fresh = run.decided[-1]
    assert fresh.alert is AlertAction.RESOLVED and fresh.incident == stale.incident
    assert run.state.fleet.watch_stale_incident is None
    # a second silence is a new incident
    assert run.feed(tick(700, 601), at(700)) == [K.WATCH_STALE]
    assert run.decided[-1].incident == "watch-stale/2026-11-29T12:10:01Z"


def test_no_device_turns_unknown_from_a_stale_watch() -> None:
    run = Keyed()
    run.feed(transition(N1, G0, H, 1, 0), at(0))
    run.feed(transition(N1, G1, U, 2, 1), at(1))  # quarantined: stays exactly so
    before = {k: (d.state, d.observed_health) for k, d in run.state.devices.items()}
    for t in range(5, 3600, 5):
        run.feed(tick(t, 1), at(t))
    after = {k: (d.state, d.observed_health) for k, d in run.state.devices.items()}
    assert after == before
    late = [d.kind for d in run.decided if d.at > at(1)]
    assert late == [K.WATCH_STALE]


def test_a_watcher_back_after_our_outage_raises_nothing() -> None:
    # Nothing arrived for ten minutes (the watcher was down): event time stood still. Its first
    # tick reports a delivery at its own start, so the watch is not stale.
    run = Keyed()
    run.feed(tick(0, 0), at(0))
    assert run.feed(tick(600, 599), at(600)) == []
    assert run.state.fleet.watch_seen_at == at(599)


def test_ticks_of_an_older_watcher_and_legacy_watermarks_count_as_deliveries() -> None:
    assert delivered_at(tick(10, None)) == at(10)
    assert delivered_at(watermark(20)) == at(20)
    assert delivered_at(transition(N1, G0, U, 1, 30)) is None  # one watch live says nothing
    run = Keyed()
    for t in range(0, 1000, 100):  # long gaps, but each tick is all such a watcher says
        assert run.feed(tick(t, None), at(t)) == []
    legacy = GovernanceRun()
    legacy.feed(watermark(0))
    assert legacy.feed(watermark(10_000)) == []


def test_the_watch_state_survives_a_snapshot() -> None:
    run = Keyed()
    run.feed(tick(0, 0), at(0))
    run.feed(tick(100, 0), at(100))
    snap = run.state.snapshot()
    restored = GovernorState.restore(
        snap["devices"], snap["nodes"], snap["fleet"], POLICY.heartbeat_grace_seconds
    )
    assert restored.snapshot() == snap
    assert restored.fleet.watch_stale_incident == run.state.fleet.watch_stale_incident
    again = Keyed(state=restored, seq=run.seq)
    assert again.feed(tick(105, 0), at(105)) == []  # still the same silence
    assert again.feed(tick(110, 100), at(110)) == [K.WATCH_FRESH]


def test_a_tick_reporting_a_delivery_in_its_future_does_not_hide_later_silences() -> None:
    """The new user's find: one tick saying the watch delivered in 9999 made every later silence
    go unnoticed. A delivery counts at most at the time of the record that reports it."""
    run = Keyed()
    run.feed(transition(N1, G0, H, 1, 0), at(0))
    assert run.feed(tick(5, 10**9), at(5)) == []  # watchSeenAt ~31 years ahead of its tick
    assert run.state.fleet.watch_seen_at == at(5)
    for t in range(10, 81, 5):
        assert run.feed(tick(t, 5), at(t)) == [], t
    assert run.feed(tick(85, 5), at(85)) == [K.WATCH_STALE]
