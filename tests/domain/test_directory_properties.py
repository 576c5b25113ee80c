"""Properties of the pure directory fold (services/domain/directory.py)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from services.domain.directory import Outcome, apply_event, fold, version_rank
from services.domain.events import DeviceHealthObserved, Event, Health
from services.domain.tombstones import Tombstone
from tests.domain.strategies import event_logs, observations


@given(event_logs, st.integers(min_value=0, max_value=40))
def test_replay_equals_incremental_processing(log: list[Event], cut: int) -> None:
    """Folding a log in two parts, carrying the state (devices and tombstones) over, equals
    folding it at once."""
    tombstones_whole: dict[str, Tombstone] = {}
    whole = fold(log, tombstones=tombstones_whole)
    tombstones: dict[str, Tombstone] = {}
    incremental = fold(log[cut:], fold(log[:cut], tombstones=tombstones), tombstones)
    assert incremental == whole
    assert tombstones == tombstones_whole


@given(event_logs)
def test_applying_every_event_twice_equals_once(log: list[Event]) -> None:
    doubled = [e for event in log for e in (event, event)]
    assert fold(doubled) == fold(log)


@given(event_logs, observations())
def test_older_status_version_is_a_no_op(log: list[Event], obs: DeviceHealthObserved) -> None:
    state = fold([*log, obs])
    current = state[obs.device_key]
    if current.status_version is None or current.status_version <= 1:
        return
    older = replace(
        obs,
        status_version=current.status_version - 1,
        health=Health.HEALTHY if current.health is not Health.HEALTHY else Health.UNHEALTHY,
    )
    [change] = apply_event(state, older)
    assert change.outcome is Outcome.STALE
    assert fold([older], dict(state)) == state


@given(event_logs, observations())
def test_unordered_observation_never_overwrites_ordered_state(
    log: list[Event], obs: DeviceHealthObserved
) -> None:
    ordered = replace(obs, status_version=7)
    state = fold([*log, ordered])
    unordered = replace(obs, status_version=None, health=Health.UNHEALTHY, message="late")
    after = fold([unordered], dict(state))
    assert after[obs.device_key] == state[obs.device_key]


@given(event_logs)
def test_transition_times_come_from_events_and_versions_only_grow(log: list[Event]) -> None:
    state: dict = {}
    for event in log:
        for change in apply_event(state, event):
            before = state.get(change.key)
            if change.outcome is Outcome.APPLIED and before is not None:
                assert version_rank(change.record.status_version) > version_rank(
                    before.status_version
                )
            if change.changed:
                state[change.key] = change.record
    observed_times = {e.observed_at for e in log}
    for record in state.values():
        assert record.last_transition_at in observed_times
        assert record.last_observed_at in observed_times
