"""The adoption gate (issue 16, item 2): per pool, ``expand``, ``hold`` or ``rollback``, with every
signal it read, its verdict and its figures.

A pure function of (the pools' declarations, the inventory's facts, the thresholds, the governor's
event time): the same inputs give the same answer whatever order the facts come in and whatever
the wall clock says. Each signal is one rule (``rule_*``) giving one :class:`Reason`; the pool's
verdict is the worst of them. A pool on the plugin path (``plugin``, ``rolled-back``) has
nothing to roll back: a rollback finding holds it (the reason keeps its own verdict).

Signals read: ownership conflicts (``plugin-and-dra``) on the pool's nodes, slice/Node-capacity
divergence, quarantined devices, leaked claims (allocated, no consumer reserved, for longer than
a threshold), driver and claim failures on the pool's nodes in a sliding window of event time,
the pool's DRA bound-to-Ready p95 against the plugin path's of the same class
(:mod:`.adoption_ready`). Not read yet: tenant-boundary findings.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Final

from services.domain.governance.adoption import Phase, PoolState
from services.domain.governance.adoption_facts import (
    COUNTED_FAILURE_CLASSES,
    OWNERSHIP_CONFLICTS,
    ClaimFact,
    InventoryFacts,
)
from services.domain.governance.adoption_ready import nearest_rank, ready_sides, side_figures


class Verdict(StrEnum):
    EXPAND = "expand"
    HOLD = "hold"
    ROLLBACK = "rollback"


_RANK: Final = {Verdict.EXPAND: 0, Verdict.HOLD: 1, Verdict.ROLLBACK: 2}
_PLUGIN_PATH: Final = frozenset({Phase.PLUGIN, Phase.ROLLED_BACK})


@dataclass(frozen=True, slots=True)
class Thresholds:
    """The gate's knobs (settings ``DEVICESTATE_ADOPTION_*``). A count threshold of 0 turns its
    verdict off."""

    conflicts_rollback: int = 1
    """Ownership conflicts on the pool's nodes at which the gate rolls back."""
    divergence_hold: int = 1
    """Node/resource pairs whose slices and Node capacity disagree at which the gate holds."""
    divergence_rollback: int = 0
    """... and at which it rolls back (0: divergence never rolls back by itself)."""
    quarantined_hold: int = 1
    """Quarantined devices on the pool's nodes at which the gate holds."""
    quarantined_rollback_fraction: float = 0.25
    """Fraction (0..1] of the pool's governed devices quarantined at which it rolls back."""
    leaked_claim_seconds: float = 900.0
    """How long (seconds of event time) an allocated claim with no consumer may stay so."""
    leaked_hold: int = 1
    """Leaked claims at which the gate holds."""
    leaked_rollback: int = 0
    """... and at which it rolls back (0: never)."""
    failure_window_seconds: float = 600.0
    """The sliding window (seconds of event time) of the driver and claim failures counted."""
    failures_hold: int = 5
    """Retryable and needs-cleanup failures on the pool's nodes in the window at which it holds."""
    failures_rollback: int = 0
    """... and at which it rolls back (0: never)."""
    ready_window_seconds: float = 3600.0
    """The sliding window (seconds of event time) of the bound-to-Ready samples compared."""
    ready_min_samples: int = 20
    """Samples needed on each side (the pool's DRA, the class's plugin path) to compare."""
    ready_hold_ratio: float = 2.0
    """DRA p95 above this times the plugin p95 holds (0: never)."""
    ready_rollback_ratio: float = 0.0
    """... and above this times it rolls back (0: never)."""


Figures = Mapping[str, int | float | str | None]


@dataclass(frozen=True, slots=True)
class Reason:
    """One signal's finding: ``code`` (stable, documented in ``docs/dra-adoption.md``), its
    ``verdict``, a sentence, and the figures it was decided on."""

    code: str
    verdict: Verdict
    detail: str
    figures: Figures = field(default_factory=dict, hash=False)


@dataclass(frozen=True, slots=True)
class PoolGate:
    """The gate's answer for one pool: its phase, nodes (sorted), verdict and reasons."""

    pool: str
    phase: Phase
    nodes: tuple[str, ...]
    verdict: Verdict
    reasons: tuple[Reason, ...]


def _count_verdict(count: int, hold: int, rollback: int) -> Verdict:
    if rollback and count >= rollback:
        return Verdict.ROLLBACK
    if hold and count >= hold:
        return Verdict.HOLD
    return Verdict.EXPAND


def pool_nodes(state: PoolState, facts: InventoryFacts) -> frozenset[str]:
    """The nodes a pool holds: those named, or those its driver's (and pool's) slices name, and
    (with a label selector) of those, or of all nodes whose labels are known, the ones whose
    labels match."""
    sel = state.current.declaration.selector
    if sel.nodes:
        return frozenset(sel.nodes)
    if sel.labels is not None:
        matching = {f.node for f in facts.labels if sel.labels.matches(dict(f.labels))}
        if sel.driver is None:
            return frozenset(matching)
    driven = frozenset(
        s.node
        for s in facts.slices
        if s.driver == sel.driver and (sel.pool is None or s.pool == sel.pool)
    )
    return driven if sel.labels is None else driven & matching


def pool_claims(state: PoolState, facts: InventoryFacts, nodes: frozenset[str]) -> list[ClaimFact]:
    """The allocated claims of a pool: allocated on its nodes, and (for a driver selector) of a
    device of its driver (and pool)."""
    sel = state.current.declaration.selector
    out = []
    for c in facts.claims:
        if c.allocated_at is None or c.node not in nodes:
            continue
        if sel.driver is not None and not any(
            d == sel.driver and (sel.pool is None or p == sel.pool) for d, p in c.devices
        ):
            continue
        out.append(c)
    return sorted(out)


Rule = Callable[[PoolState, InventoryFacts, frozenset[str], Thresholds, datetime | None], Reason]


def rule_ownership(
    state: PoolState,
    facts: InventoryFacts,
    nodes: frozenset[str],
    t: Thresholds,
    now: datetime | None,
) -> Reason:
    """Ownership conflicts on the pool's nodes: the plugin and DRA must never own the same
    hardware."""
    found = sorted(c for c in facts.conflicts if c.node in nodes and c.kind in OWNERSHIP_CONFLICTS)
    verdict = _count_verdict(len(found), 0, t.conflicts_rollback)
    subjects = ", ".join(f"{c.node}/{c.subject}" for c in found[:5])
    return Reason(
        "ownership-conflict",
        verdict,
        f"{len(found)} ownership conflicts on the pool's nodes"
        + (f": {subjects}" if found else ""),
        {"conflicts": len(found), "rollbackAt": t.conflicts_rollback},
    )


def rule_divergence(
    state: PoolState,
    facts: InventoryFacts,
    nodes: frozenset[str],
    t: Thresholds,
    now: datetime | None,
) -> Reason:
    """ResourceSlices against Node capacity: a canary does not expand on what nodes do not
    really expose."""
    found = sorted(d for d in facts.divergences if d.node in nodes)
    verdict = _count_verdict(len(found), t.divergence_hold, t.divergence_rollback)
    where = ", ".join(
        f"{d.node}/{d.resource_name} slices {d.slice_devices} vs capacity {d.node_capacity}"
        for d in found[:5]
    )
    return Reason(
        "slice-capacity-divergence",
        verdict,
        f"{len(found)} node resources where slices and Node capacity disagree"
        + (f": {where}" if found else ""),
        {
            "divergent": len(found),
            "sliceDevices": sum(d.slice_devices for d in found),
            "nodeCapacity": sum(d.node_capacity for d in found),
            "holdAt": t.divergence_hold,
            "rollbackAt": t.divergence_rollback,
        },
    )


def rule_quarantined(
    state: PoolState,
    facts: InventoryFacts,
    nodes: frozenset[str],
    t: Thresholds,
    now: datetime | None,
) -> Reason:
    """Devices quarantined on the pool's nodes, as a count and a fraction of its governed
    devices."""
    devices = [d for d in facts.devices if d.node in nodes]
    quarantined = sum(1 for d in devices if d.quarantined)
    fraction = quarantined / len(devices) if devices else 0.0
    if (
        quarantined
        and t.quarantined_rollback_fraction
        and fraction >= t.quarantined_rollback_fraction
    ):
        verdict = Verdict.ROLLBACK
    else:
        verdict = _count_verdict(quarantined, t.quarantined_hold, 0)
    return Reason(
        "devices-quarantined",
        verdict,
        f"{quarantined} of {len(devices)} governed devices on the pool's nodes quarantined",
        {
            "quarantined": quarantined,
            "devices": len(devices),
            "fraction": round(fraction, 4),
            "holdAt": t.quarantined_hold,
            "rollbackFraction": t.quarantined_rollback_fraction,
        },
    )


def rule_leaked_claims(
    state: PoolState,
    facts: InventoryFacts,
    nodes: frozenset[str],
    t: Thresholds,
    now: datetime | None,
) -> Reason:
    """Claims allocated with no consumer reserved for longer than ``leaked_claim_seconds`` of
    event time: they hold devices (and quota) nobody uses."""
    if now is None:
        return Reason(
            "no-event-time",
            Verdict.HOLD,
            "the governor has no event time yet: leaked claims cannot be timed",
            {"leakedClaimSeconds": t.leaked_claim_seconds},
        )
    leaked = [
        c
        for c in pool_claims(state, facts, nodes)
        if not c.reserved
        and c.allocated_at is not None
        and (now - c.allocated_at).total_seconds() > t.leaked_claim_seconds
    ]
    verdict = _count_verdict(len(leaked), t.leaked_hold, t.leaked_rollback)
    oldest = min((c.allocated_at for c in leaked if c.allocated_at is not None), default=None)
    names = ", ".join(f"{c.namespace}/{c.name}" for c in leaked[:5])
    return Reason(
        "leaked-claims",
        verdict,
        f"{len(leaked)} claims allocated with no consumer for over {t.leaked_claim_seconds:g} s"
        + (f": {names}" if leaked else ""),
        {
            "leaked": len(leaked),
            "oldestSeconds": None if oldest is None else round((now - oldest).total_seconds(), 3),
            "leakedClaimSeconds": t.leaked_claim_seconds,
            "holdAt": t.leaked_hold,
            "rollbackAt": t.leaked_rollback,
        },
    )


def in_failure_window(at: datetime, now: datetime | None, window_seconds: float) -> bool:
    """Whether a failure at ``at`` is in the window ``[now - window_seconds, now]`` (every
    failure held counts while there is no event time)."""
    return now is None or (now - at).total_seconds() <= window_seconds


def rule_claim_failures(
    state: PoolState,
    facts: InventoryFacts,
    nodes: frozenset[str],
    t: Thresholds,
    now: datetime | None,
) -> Reason:
    """Driver and claim failures (prepare errors, unschedulable claims, failed unprepares) on
    the pool's nodes in the last ``failure_window_seconds`` of event time: retryable and
    needs-cleanup ones hold the pool; non-retryable ones (the tenant's invalid claim) are a
    figure only."""
    recent = [
        f
        for f in facts.failures
        if f.node in nodes and in_failure_window(f.at, now, t.failure_window_seconds)
    ]
    counted = sum(f.count for f in recent if f.failure_class in COUNTED_FAILURE_CLASSES)
    tenant = sum(f.count for f in recent if f.failure_class not in COUNTED_FAILURE_CLASSES)
    by_class = {
        c: sum(f.count for f in recent if f.failure_class == c)
        for c in ("retryable", "needs-cleanup", "non-retryable")
    }
    verdict = _count_verdict(counted, t.failures_hold, t.failures_rollback)
    return Reason(
        "claim-failures",
        verdict,
        f"{counted} driver and claim failures on the pool's nodes in the last "
        f"{t.failure_window_seconds:g} s (and {tenant} non-retryable, not counted)",
        {
            "failures": counted,
            "retryable": by_class["retryable"],
            "needsCleanup": by_class["needs-cleanup"],
            "nonRetryable": by_class["non-retryable"],
            "windowSeconds": t.failure_window_seconds,
            "holdAt": t.failures_hold,
            "rollbackAt": t.failures_rollback,
        },
    )


def rule_ready_latency(
    state: PoolState,
    facts: InventoryFacts,
    nodes: frozenset[str],
    t: Thresholds,
    now: datetime | None,
) -> Reason:
    """The pool's DRA bound-to-Ready p95 (nearest rank) against the plugin path's of the same
    class in the last ``ready_window_seconds``: ``expand`` with fewer than
    ``ready_min_samples`` on either side, no declared DeviceClass, or a pool not in ``canary``
    or ``dra`` (its figures are still given)."""
    device_class = state.current.declaration.device_class
    dra, plugin = ready_sides(facts.ready, device_class or "", nodes, now, t.ready_window_seconds)
    figures = {"deviceClass": device_class, **side_figures(dra, plugin)}
    figures |= {
        "windowSeconds": t.ready_window_seconds,
        "minSamples": t.ready_min_samples,
        "holdRatio": t.ready_hold_ratio,
        "rollbackRatio": t.ready_rollback_ratio,
    }
    if state.phase in _PLUGIN_PATH or device_class is None:
        detail = (
            "the pool is on the plugin path: no DRA latency to gate"
            if state.phase in _PLUGIN_PATH
            else "the pool declares no deviceClass: no plugin samples to compare with"
        )
        return Reason("ready-latency", Verdict.EXPAND, detail, figures)
    least = max(1, t.ready_min_samples)
    if min(len(dra), len(plugin)) < least:
        detail = (
            f"not enough samples: {len(dra)} DRA on the pool, {len(plugin)} device-plugin of "
            f"{device_class}, {least} needed on each side"
        )
        return Reason("ready-latency", Verdict.EXPAND, detail, figures)
    d, p, verdict = nearest_rank(dra, 0.95), nearest_rank(plugin, 0.95), Verdict.EXPAND
    if t.ready_rollback_ratio and d > t.ready_rollback_ratio * p:
        verdict = Verdict.ROLLBACK
    elif t.ready_hold_ratio and d > t.ready_hold_ratio * p:
        verdict = Verdict.HOLD
    detail = (
        f"bound-to-Ready p95 {d:g} s on DRA against {p:g} s on the device plugin "
        f"({len(dra)} and {len(plugin)} samples in the last {t.ready_window_seconds:g} s)"
    )
    return Reason("ready-latency", verdict, detail, figures)


RULES: Final[tuple[Rule, ...]] = (
    rule_ownership,
    rule_divergence,
    rule_quarantined,
    rule_leaked_claims,
    rule_claim_failures,
    rule_ready_latency,
)


def evaluate_pool(
    state: PoolState, facts: InventoryFacts, thresholds: Thresholds, now: datetime | None
) -> PoolGate:
    """The gate of one pool at event time ``now`` (UTC; ``None`` before the governor has one)."""
    nodes = pool_nodes(state, facts)
    if not nodes:
        reasons: tuple[Reason, ...] = (
            Reason("pool-empty", Verdict.HOLD, "the pool's selector matches no node", {"nodes": 0}),
        )
    else:
        reasons = tuple(rule(state, facts, nodes, thresholds, now) for rule in RULES)
    verdict = max((r.verdict for r in reasons), key=_RANK.__getitem__)
    if verdict is Verdict.ROLLBACK and state.phase in _PLUGIN_PATH:
        verdict = Verdict.HOLD  # already on the plugin path: nothing to roll back
    return PoolGate(state.pool, state.phase, tuple(sorted(nodes)), verdict, reasons)


def evaluate(
    pools: Mapping[str, PoolState],
    facts: InventoryFacts,
    thresholds: Thresholds,
    now: datetime | None,
) -> list[PoolGate]:
    """The gate of every pool, sorted by pool name."""
    return [evaluate_pool(pools[name], facts, thresholds, now) for name in sorted(pools)]
