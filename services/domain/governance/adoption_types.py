"""The adoption gate's records and the pool's nodes and claims (issue 16 item 2): the verdicts, the
thresholds (settings ``DEVICESTATE_ADOPTION_*``), one signal's :class:`Reason`, a pool's
:class:`PoolGate`, and which nodes and allocated claims a pool holds. The rules are in
:mod:`.adoption_gate` (which re-exports these names) and :mod:`.adoption_tenancy`. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from services.domain.governance.adoption import Phase, PoolState
from services.domain.governance.adoption_facts import ClaimFact, InventoryFacts


class Verdict(StrEnum):
    EXPAND = "expand"
    HOLD = "hold"
    ROLLBACK = "rollback"


RANK: Final = {Verdict.EXPAND: 0, Verdict.HOLD: 1, Verdict.ROLLBACK: 2}
PLUGIN_PATH: Final = frozenset({Phase.PLUGIN, Phase.ROLLED_BACK})


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
    tenant_hold: int = 1
    """Claims with admin access in Namespaces without the admin-access label at which it holds."""
    tenant_rollback: int = 0
    """... and at which it rolls back (0: never; the plugin path has no admin access to go back
    to, so a rollback would only hide the finding)."""


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
    """The gate's answer for one pool: its phase, nodes (sorted), verdict and reasons.
    ``waiting``: a ``hold`` that is only the wait for the DRA driver's ResourceSlices of a pool
    declared in ``plugin`` (:data:`WAITING_DETAIL`): the pool cannot go to canary yet, but
    nothing is wrong, so it raises no alert."""

    pool: str
    phase: Phase
    nodes: tuple[str, ...]
    verdict: Verdict
    reasons: tuple[Reason, ...]
    waiting: bool = False


WAITING_DETAIL: Final = "waiting for the DRA driver's ResourceSlices"
"""The ``pool-empty`` detail of a pool in ``plugin`` (a plan declared before the driver runs)."""


def count_verdict(count: int, hold: int, rollback: int) -> Verdict:
    """``rollback`` at ``rollback`` or more, ``hold`` at ``hold`` or more (0 turns either off)."""
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
