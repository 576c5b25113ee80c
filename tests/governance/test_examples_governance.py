"""Each shared stream through the pure governance pipeline reaches its expected governance states
and transitions, with the product's default policy (``GovernancePolicy()``: Unknown tolerance 300 s,
recovery hold-down 900 s -- the same numbers as the examples' ``assumedPolicy``).

State names: the examples propose ``HEALTHY``, ``UNKNOWN_TOLERATED``, ``SUSPECT``, ``QUARANTINED``.
devicestate separates observed health from governance state, so ``HEALTHY`` maps to the governance
state ``Available`` (observed Healthy), ``UNKNOWN_TOLERATED`` to ``UnknownTolerated``, ``SUSPECT`` to
``Restricted`` (Unknown past its window: allocation restricted, no fault confirmed) and
``QUARANTINED`` to ``Quarantined``.

DRA devices are keyed by the resourceID the Pod reports until ResourceClaim resolution exists
(issue 4); ``tests/golden/test_examples.py`` holds that mapping.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from services.domain.codec import parse_time
from services.domain.events import Health
from services.domain.governance.decisions import AlertAction, DecisionKind
from services.domain.governance.device_state import GovState
from tests.golden.test_examples import device_key
from tests.governance.harness import EXAMPLES, GovernanceRun, run_stream

STATE = {
    "HEALTHY": GovState.AVAILABLE,
    "UNKNOWN_TOLERATED": GovState.UNKNOWN_TOLERATED,
    "SUSPECT": GovState.RESTRICTED,
    "QUARANTINED": GovState.QUARANTINED,
}

STREAMS = sorted(p.stem for p in EXAMPLES.glob("stream-*.jsonl"))


def expected(stem: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((EXAMPLES / f"{stem}.expected.json").read_text())
    return result


def directory_of(stem: str) -> dict[str, Any]:
    spec = expected(stem)
    result: dict[str, Any] = (
        spec.get("expectedDirectory") or spec.get("expectedDirectoryAfterStream") or {}
    )
    return result


def quarantines(run: GovernanceRun) -> list[str]:
    return [d.details["quarantineID"] for d in run.decisions if d.kind is DecisionKind.QUARANTINED]


@pytest.mark.parametrize("stem", [s for s in STREAMS if directory_of(s)])
def test_final_governance_states(stem: str) -> None:
    run = run_stream(EXAMPLES / f"{stem}.jsonl")
    entries = directory_of(stem)
    assert {device_key(k) for k in entries} <= set(run.state.devices)
    for key, want in entries.items():
        device = run.state.devices[device_key(key)]
        assert device.state is STATE[want["state"]], key
        if "since" in want:
            assert device.state_since == parse_time(want["since"]), key
        if want.get("allocatedTo"):
            assert sorted(device.pods) == sorted(want["allocatedTo"]), key


@pytest.mark.parametrize("stem", STREAMS)
def test_one_quarantine_per_unhealthy_device_whatever_the_repeats(stem: str) -> None:
    """Duplicates, reorders, shuffled resources[] and a second Pod reporting the same device make
    no second quarantine record (stream-02, -05b, -08, -09 mustNot)."""
    run = run_stream(EXAMPLES / f"{stem}.jsonl")
    ids = quarantines(run)
    assert len(ids) == len(set(ids))
    unhealthy = {k for k, d in run.state.devices.items() if d.observed_health is Health.UNHEALTHY}
    assert {
        (d.node, d.resource_id) for d in run.decisions if d.kind is DecisionKind.QUARANTINED
    } == unhealthy


def test_stream_03_unknown_within_tolerance_quarantines_nothing_and_alerts_once() -> None:
    run = run_stream(EXAMPLES / "stream-03-plugin-unregistered-unknown.jsonl")
    assert not quarantines(run)
    started = [d for d in run.decisions if d.kind is DecisionKind.UNKNOWN_TOLERANCE_STARTED]
    assert len(started) == 8
    firing = [d for d in run.decisions if d.alert is AlertAction.FIRING]
    resolved = [d for d in run.decisions if d.alert is AlertAction.RESOLVED]
    # One node incident, not eight device faults.
    assert len(firing) == 1 and firing[0].incident is not None
    assert firing[0].incident.startswith("node-unknown/gpu-node-c/")
    assert [d.incident for d in resolved] == [firing[0].incident]
    assert firing[0].kind is DecisionKind.INCIDENT_OPENED
    assert firing[0].details["devices"] == [started[0].resource_id]
    assert all(d.state is GovState.AVAILABLE for d in run.state.devices.values())


def test_stream_03_variant_tolerance_elapsed_restricts_all_eight_as_one_incident() -> None:
    """alsoTest: drop the last line; at 11:25:05Z all 8 become SUSPECT (Restricted here), not
    quarantined, grouped as one node-level incident."""
    path = EXAMPLES / "stream-03-plugin-unregistered-unknown.jsonl"
    before = run_stream(path, drop_last_lines=1)
    unknown_since = {d.unknown_since for d in before.state.devices.values()}
    assert len(unknown_since) == 1
    (since,) = unknown_since
    assert since is not None
    deadline = since + timedelta(seconds=before.policy.unknown_tolerance_seconds)
    assert deadline == parse_time("2026-11-29T11:25:05Z")

    early = run_stream(path, drop_last_lines=1, then_clock=[deadline - timedelta(seconds=1)])
    assert all(d.state is GovState.UNKNOWN_TOLERATED for d in early.state.devices.values())

    run = run_stream(path, drop_last_lines=1, then_clock=[deadline])
    assert all(d.state is GovState.RESTRICTED for d in run.state.devices.values())
    assert not quarantines(run)
    assert len([d for d in run.decisions if d.kind is DecisionKind.RESTRICTED]) == 8
    assert len([d for d in run.decisions if d.alert is AlertAction.FIRING]) == 1
    assert not run.state.fleet.breaker_open


def test_stream_03b_plugin_loss_reads_unknown_as_one_node_incident_then_recovers() -> None:
    run = run_stream(EXAMPLES / "stream-03b-plugin-unregistered-observed-kubelet.jsonl")
    (signal,) = expected("stream-03b-plugin-unregistered-observed-kubelet")["expectedSignals"]
    opened = [d for d in run.decisions if d.kind is DecisionKind.NODE_INCIDENT_OPENED]
    closed = [d for d in run.decisions if d.kind is DecisionKind.NODE_INCIDENT_CLOSED]
    assert [(d.node, d.details["resourceName"], d.at) for d in opened] == [
        (signal["node"], signal["resourceName"], parse_time(signal["from"]))
    ]
    assert [d.at for d in closed] == [parse_time(signal["to"])]
    assert opened[0].incident == closed[0].incident
    # Pod status never changed: the devices read Unknown only through the node fact, without a
    # per-device alert, and are Available again at the end.
    tolerated = [d for d in run.decisions if d.kind is DecisionKind.UNKNOWN_TOLERANCE_STARTED]
    assert len(tolerated) == 8
    assert {d.details["reason"] for d in tolerated} == {"device-plugin-lost"}
    assert all(d.alert is None for d in tolerated)
    assert all(d.observed_health is Health.HEALTHY for d in run.state.devices.values())
    assert all(d.state is GovState.AVAILABLE for d in run.state.devices.values())


def test_stream_07_pod_deletion_keeps_the_quarantine() -> None:
    run = run_stream(EXAMPLES / "stream-07-pod-deletion.jsonl")
    assert len(quarantines(run)) == 1
    assert not [d for d in run.decisions if d.kind is DecisionKind.QUARANTINE_RELEASED]


def test_stream_08_stale_healthy_starts_no_recovery() -> None:
    run = run_stream(EXAMPLES / "stream-08-out-of-order-rv.jsonl")
    assert not [d for d in run.decisions if d.kind is DecisionKind.RECOVERY_STAGE_STARTED]


def test_the_governance_pipeline_is_deterministic_on_every_stream() -> None:
    from services.domain.governance.decisions import encode_decision

    for stem in STREAMS:
        first = run_stream(EXAMPLES / f"{stem}.jsonl")
        second = run_stream(EXAMPLES / f"{stem}.jsonl")
        assert [encode_decision(d) for d in first.decisions] == [
            encode_decision(d) for d in second.decisions
        ], stem
        assert first.state.snapshot() == second.state.snapshot(), stem
