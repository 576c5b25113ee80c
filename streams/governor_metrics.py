"""The governor's gauges and counters (:mod:`streams.governor`), kept from the folded state.

:class:`GovernorGauges` keeps the per-state device counts (``devices_by_state{state}``), the
active quarantines, those needing an operator, the breaker and automation switches and the watermark up to date from the
devices each batch touched (all of them after a load), and follows Unknown periods (entering
:data:`UNKNOWN_STATES` starts one, leaving them ends it) for the ``unknown_seconds`` histogram.
:func:`record_decision` counts one decision (``decisions{kind}``, recovery stages, false
quarantines). Nothing here raises or does I/O.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import Final

from services.adapters.projection.governance_store import active_quarantine
from services.domain.governance.decisions import Decision, DecisionKind
from services.domain.governance.device_state import DeviceKey, GovState
from services.domain.governance.state import GovernorState
from streams.metrics import WorkerMetrics

ADOPTION_SERIES: Final = (
    ("expand", "false"),
    ("hold", "false"),
    ("hold", "true"),
    ("rollback", "false"),
)
"""``devicestate_governor_adoption_pools{verdict, waiting}``: every series, exported from the
start (0 when no pool); ``waiting="true"`` only for a plugin pool's hold that waits for the DRA
driver's slices, which ``DevicestateAdoptionHold`` leaves out."""
UNKNOWN_STATES: Final = frozenset({GovState.UNKNOWN_TOLERATED.value, GovState.RESTRICTED.value})
"""Leaving one of these for another state ends an Unknown period (the duration histogram)."""


class GovernorGauges:
    """The gauges of one governor's state in ``metrics``, and the Unknown periods it follows."""

    def __init__(self, metrics: WorkerMetrics) -> None:
        self.metrics = metrics
        self._views: dict[DeviceKey, tuple[GovState, bool, bool]] = {}
        self._shared_views: dict[tuple[GovState, bool, bool], tuple[GovState, bool, bool]] = {}
        self._unknown_since: dict[DeviceKey, datetime] = {}

    def reset(self, state: GovernorState) -> None:
        """After the state was (re)loaded: recount every device, restart the Unknown periods from
        the devices' ``unknownSince`` (else ``stateSince``)."""
        self._views = {}
        self._unknown_since = {
            key: device.unknown_since or device.state_since
            for key, device in state.devices.items()
            if device.state.value in UNKNOWN_STATES
        }
        self.update(state, every=True)

    def track_unknown(
        self, state: GovernorState, decisions: Sequence[Decision], ended: list[float]
    ) -> None:
        """Follow Unknown periods through the decisions: entering UnknownTolerated/Restricted
        starts one, leaving them ends it (``details.unknownSeconds`` when the decision has it,
        else since the device's ``unknownSince``); the durations of the periods that ended (event
        time, seconds) are appended to ``ended``."""
        for decision in decisions:
            if decision.kind is not DecisionKind.STATE_CHANGED or decision.resource_id is None:
                continue
            key = (decision.node or "", decision.resource_id)
            details = decision.details
            entering = details.get("state") in UNKNOWN_STATES
            leaving = details.get("previous") in UNKNOWN_STATES
            if entering and not leaving:
                device = state.devices.get(key)
                since = device.unknown_since if device is not None else None
                self._unknown_since[key] = since or decision.at
            elif leaving and not entering:
                started = self._unknown_since.pop(key, None)
                seconds = details.get("unknownSeconds")
                if isinstance(seconds, int | float) and not isinstance(seconds, bool):
                    ended.append(float(seconds))
                elif started is not None:
                    ended.append((decision.at - started).total_seconds())

    def update(self, state: GovernorState, *, every: bool = False) -> None:
        """Keep the per-state device counts and the active-quarantine count up to date from the
        devices the batch touched (all of them after a load)."""
        metrics = self.metrics
        keys = list(state.devices) if every else state.dirty_devices
        counts: dict[GovState, int] = {}
        active = needing = 0
        for key in keys:
            old = self._views.pop(key, None)
            if old is not None:
                counts[old[0]] = counts.get(old[0], 0) - 1
                active -= old[1]
                needing -= old[2]
            device = state.devices.get(key)
            if device is None:
                continue
            q = device.quarantine
            view = (device.state, active_quarantine(device), q is not None and q.needs_operator)
            # One tuple per distinct view (a few dozen), not one per device.
            view = self._shared_views.setdefault(view, view)
            self._views[key] = view
            counts[view[0]] = counts.get(view[0], 0) + 1
            active += view[1]
            needing += view[2]
        if every:
            for gov_state in GovState:
                metrics.devices_by_state.labels(gov_state.value).set(counts.get(gov_state, 0))
            metrics.active_quarantines.set(active)
            metrics.quarantines_needing_operator.set(needing)
        else:
            for gov_state, delta in counts.items():
                if delta:
                    metrics.devices_by_state.labels(gov_state.value).inc(delta)
            if active:
                metrics.active_quarantines.inc(active)
            if needing:
                metrics.quarantines_needing_operator.inc(needing)
        fleet = state.fleet
        adoption = fleet.adoption  # a few pools: counted whole
        by_verdict = Counter(
            (verdict, "true" if pool in adoption.waiting else "false")
            for pool, verdict in adoption.verdicts.items()
        )
        for series in ADOPTION_SERIES:
            metrics.adoption_pools.labels(*series).set(by_verdict.get(series, 0))
        metrics.breaker_open.set(1 if fleet.breaker_open else 0)
        metrics.automation_paused.set(1 if fleet.automation_paused else 0)
        metrics.watch_stale.set(1 if fleet.watch_stale_incident is not None else 0)
        metrics.node_incidents_open.set(len(fleet.node_faults))
        if fleet.watermark is not None:
            metrics.watermark.set(fleet.watermark.timestamp())


def record_decision(metrics: WorkerMetrics, decision: Decision) -> None:
    """Count one decision in the governor's metrics."""
    kind, details = decision.kind, decision.details
    metrics.decisions.labels(kind.value).inc()
    if kind is DecisionKind.RECOVERY_STAGE_PASSED:
        metrics.recovery_stages.labels(str(details.get("stage") or ""), "passed").inc()
    elif kind is DecisionKind.RECOVERY_FAILED:
        metrics.recovery_stages.labels(str(details.get("stage") or ""), "failed").inc()
    elif kind is DecisionKind.QUARANTINE_RELEASED and details.get("confirmedFault") is False:
        metrics.false_quarantines.inc()


def record_batch(
    metrics: WorkerMetrics, decisions: Sequence[Decision], unknown: Sequence[float], started: float
) -> None:
    """Count one committed governance batch: its decisions, the Unknown periods that ended in it
    (``unknown``, seconds of event time) and its duration since ``started``
    (``time.perf_counter()``)."""
    for decision in decisions:
        record_decision(metrics, decision)
    for seconds in unknown:
        metrics.unknown_seconds.observe(seconds)
    metrics.governor_batch_seconds.observe(time.perf_counter() - started)
