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
(:mod:`.adoption_ready`), claims with admin access in Namespaces without the admin-access label
(:mod:`.adoption_tenancy`). The records (verdicts, thresholds, reasons) and the pools' nodes and
claims are in :mod:`.adoption_types`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Final

from services.domain.governance.adoption import Phase, PoolState
from services.domain.governance.adoption_facts import (
    COUNTED_FAILURE_CLASSES,
    OWNERSHIP_CONFLICTS,
    InventoryFacts,
)
from services.domain.governance.adoption_ready import nearest_rank, ready_sides, side_figures
from services.domain.governance.adoption_tenancy import rule_tenant_boundary
from services.domain.governance.adoption_types import PLUGIN_PATH as _PLUGIN_PATH
from services.domain.governance.adoption_types import RANK as _RANK
from services.domain.governance.adoption_types import WAITING_DETAIL as WAITING_DETAIL
from services.domain.governance.adoption_types import Figures as Figures
from services.domain.governance.adoption_types import PoolGate as PoolGate
from services.domain.governance.adoption_types import Reason as Reason
from services.domain.governance.adoption_types import Thresholds as Thresholds
from services.domain.governance.adoption_types import Verdict as Verdict
from services.domain.governance.adoption_types import count_verdict as _count_verdict
from services.domain.governance.adoption_types import pool_claims as pool_claims
from services.domain.governance.adoption_types import pool_nodes as pool_nodes

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
    rule_tenant_boundary,
)


def evaluate_pool(
    state: PoolState, facts: InventoryFacts, thresholds: Thresholds, now: datetime | None
) -> PoolGate:
    """The gate of one pool at event time ``now`` (UTC; ``None`` before the governor has one)."""
    nodes = pool_nodes(state, facts)
    # Only a driver's pool waits, and only while no slice of the driver (and slice pool) names
    # a node: a label pool that matches no node has no slices to wait for, and a driver's pool
    # whose slices are there but whose labels exclude every node has nothing left to wait for.
    sel = state.current.declaration.selector
    waiting = (
        not nodes
        and state.phase is Phase.PLUGIN
        and sel.driver is not None
        and not any(
            s.driver == sel.driver and (sel.pool is None or s.pool == sel.pool)
            for s in facts.slices
        )
    )
    if not nodes:
        detail = (
            f"{WAITING_DETAIL}: no slice of driver {sel.driver}"
            + (f" (pool {sel.pool})" if sel.pool else "")
            + " names a node yet; the pool cannot go to canary before it does"
            if waiting
            else "the pool's selector matches no node"
        )
        reasons: tuple[Reason, ...] = (Reason("pool-empty", Verdict.HOLD, detail, {"nodes": 0}),)
    else:
        reasons = tuple(rule(state, facts, nodes, thresholds, now) for rule in RULES)
    verdict = max((r.verdict for r in reasons), key=_RANK.__getitem__)
    if verdict is Verdict.ROLLBACK and state.phase in _PLUGIN_PATH:
        verdict = Verdict.HOLD  # already on the plugin path: nothing to roll back
    return PoolGate(state.pool, state.phase, tuple(sorted(nodes)), verdict, reasons, waiting)


def evaluate(
    pools: Mapping[str, PoolState],
    facts: InventoryFacts,
    thresholds: Thresholds,
    now: datetime | None,
) -> list[PoolGate]:
    """The gate of every pool, sorted by pool name."""
    return [evaluate_pool(pools[name], facts, thresholds, now) for name in sorted(pools)]
