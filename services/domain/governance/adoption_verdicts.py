"""The adoption gate in the governor (issue 16): each pool's verdict recomputed on event time when
one of its inputs changes, and an ``AdoptionVerdictChanged`` decision when it changes.

Inputs, all from the governance log: the pools' accepted declarations (the step's
``AdoptionPhaseDeclared`` decisions), the ownership conflicts (``InventoryConflict`` records of
kind ``plugin-and-dra``), each node's inventory facts (:class:`.inputs_adoption.NodeAdoptionFacts`),
each node's driver and claim failures (:class:`.inputs_failures.NodeFailureObserved`), each
node's bound-to-Ready samples (:class:`.inputs_ready.NodeReadyObserved`), the
governor's own devices (quarantined or not) and its watermark (a claim turns leaked when event
time passes its allocation plus ``leaked_claim_seconds``; a failure leaves the window when it
passes the failure's time plus ``failure_window_seconds``, a sample its time plus
``ready_window_seconds``). The gate itself is
:func:`.adoption_gate.evaluate`; this module only feeds it and records its changes, so a replay of
the log gives the same verdicts and the same decisions.

Alerts: a pool whose verdict is ``hold`` has the incident ``adoption-hold/<pool>`` firing
(alertname ``AdoptionHold``, warning; not a ``plugin`` pool's hold that only waits for the DRA
driver's slices: ``waiting`` in the decision), ``rollback`` the incident ``adoption-rollback/<pool>``
(``AdoptionRollback``, critical); ``expand`` resolves the one that fired. A change between hold
and rollback is two decisions: the new incident firing, then the old one resolved.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Final

from services.domain.governance.adoption import Declared, declaration_from_dict
from services.domain.governance.adoption_facts import (
    OWNERSHIP_CONFLICTS,
    QUARANTINED_STATES,
    ClaimFact,
    ConflictFact,
    DeviceFact,
    DivergenceFact,
    FailureFact,
    InventoryFacts,
    LabelsFact,
    ReadyFact,
    SliceFact,
)
from services.domain.governance.adoption_gate import (
    PoolGate,
    Verdict,
    evaluate,
    pool_claims,
    pool_nodes,
)
from services.domain.governance.adoption_ready import counts_for
from services.domain.governance.adoption_state import AdoptionGov
from services.domain.governance.context import Ctx
from services.domain.governance.decisions import AlertAction, DecisionKind, Severity
from services.domain.governance.inputs import GovernanceInput, InventoryConflict, MergeKey
from services.domain.governance.inputs_adoption import NodeAdoptionFacts
from services.domain.governance.inputs_failures import NodeFailureObserved
from services.domain.governance.inputs_ready import NodeReadyObserved
from services.domain.node_labels import NodeLabelsChanged

_DEVICE_KINDS: Final = frozenset(
    {
        DecisionKind.STATE_CHANGED,
        DecisionKind.QUARANTINED,
        DecisionKind.QUARANTINE_RELEASED,
        DecisionKind.IDENTITY_MERGED,
    }
)
"""Decisions after which a pool's quarantined count may differ."""

_ALERTS: Final = {
    Verdict.HOLD: ("adoption-hold", Severity.WARNING),
    Verdict.ROLLBACK: ("adoption-rollback", Severity.CRITICAL),
}


def incident_of(pool: str, verdict: Verdict, waiting: bool = False) -> str | None:
    """The alert incident of a pool's verdict (``None`` for ``expand``, and for a ``hold`` that
    is only the wait for the driver's slices: ``waiting``)."""
    alert = None if waiting else _ALERTS.get(verdict)
    return None if alert is None else f"{alert[0]}/{pool}"


def take(ad: AdoptionGov, ctx: Ctx, record: GovernanceInput, key: MergeKey | None = None) -> bool:
    """Fold what ``record`` (its merge ``key``, if any) and the decisions it caused change in the
    gate's inputs; ``True`` when one changed."""
    changed = False
    for d in ctx.decisions:
        if d.kind is DecisionKind.ADOPTION_DECLARED:
            declaration = declaration_from_dict(d.details["adoption"])
            ad.pools[declaration.pool] = Declared(
                d.seq,
                d.at,
                str(d.details.get("actor", "")),
                str(d.details.get("reason", "")),
                declaration,
            )
            changed = True
        elif d.kind is DecisionKind.ADOPTION_RETIRED:
            # Gone whole: a declaration of the name later is a new pool, its first verdict new.
            ad.forget(str(d.details.get("pool")))
            changed = True
        elif d.kind in _DEVICE_KINDS and d.node is not None and _may_hold(ad, d.node):
            changed = True
    if isinstance(record, InventoryConflict) and record.kind in OWNERSHIP_CONFLICTS:
        fact = ConflictFact(record.kind, record.node, record.subject)
        if record.active:
            ad.conflicts.add(fact)
        else:
            ad.conflicts.discard(fact)
        changed = True
    elif isinstance(record, NodeAdoptionFacts):
        held = ad.node_facts.get(record.node)
        record = replace(record, observed_at=_time(record.observed_at, key))
        if held is None or held.observed_at <= record.observed_at:
            # Empty facts are forgotten: a node without slices or claims needs no memory.
            if record.slices or record.claims or record.divergences:
                ad.node_facts[record.node] = record
            else:
                ad.node_facts.pop(record.node, None)
            changed = held != ad.node_facts.get(record.node)
    elif isinstance(record, NodeLabelsChanged):
        held_labels = ad.labels.get(record.node)
        record = replace(record, observed_at=_time(record.observed_at, key))
        if record.removed:
            # The Node is gone: it leaves every label pool (the node's records share its
            # partition, so no older record of it follows in the merge order).
            if held_labels is not None and held_labels.observed_at <= record.observed_at:
                ad.drop_labels(record.node)
                changed = _label_pool_selects(ad, held_labels)
        elif held_labels is None or held_labels.observed_at <= record.observed_at:
            ad.set_labels(record)
            # A change moves a pool only if some label pool selects the node before or after.
            changed = (held_labels is None or held_labels.labels != record.labels) and (
                _label_pool_selects(ad, record)
                or (held_labels is not None and _label_pool_selects(ad, held_labels))
            )
    elif isinstance(record, NodeFailureObserved):
        failure = FailureFact(
            record.node,
            _time(record.observed_at, key),
            record.source_uid,
            record.occurrences,
            record.increase,
            record.failure_class,
        )
        changed = ad.add_failure(failure) and _may_hold(ad, record.node)
        if ctx.now is not None:  # bounded without pools too: what left the window goes
            ad.prune_failures(ctx.now, ctx.policy.adoption.failure_window_seconds, record.node)
    elif isinstance(record, NodeReadyObserved):
        samples = [
            ReadyFact(
                record.node,
                _time(record.observed_at, key),
                record.pod_uid,
                sample.device_class,
                sample.path,
                sample.seconds,
                sample.classes,
            )
            for sample in record.samples
        ]
        added = [f for f in samples if ad.add_ready(f)]
        changed = any(_may_compare(ad, f) for f in added)
        if ctx.now is not None:  # bounded without pools too: what left the window goes
            ad.prune_ready(ctx.now, ctx.policy.adoption.ready_window_seconds, record.node)
    return changed


def _time(observed_at: datetime, key: MergeKey | None) -> datetime:
    """An input's time in the gate: its record's event time, the merge key's (its ``observedAt``
    bounded by the broker's append time, never before the partition's earlier records), else its
    ``observedAt``. With the ``observedAt`` of a watcher whose clock jumped, a node's facts dated
    a year ahead would hide every later change of them (a year back: be ignored), and a failure
    or a sample so dated would stay in its window for a year (or never enter it)."""
    return key.event_time if key is not None else observed_at


def _may_compare(ad: AdoptionGov, fact: ReadyFact) -> bool:
    """Whether a pool may read ``fact``: a DRA sample on a node a pool may hold, or a plugin
    sample of a class some pool declares."""
    if fact.path == "dra":
        return _may_hold(ad, fact.node)
    return any(d.declaration.device_class in fact.classes for d in ad.pools.values())


def _label_pool_selects(ad: AdoptionGov, labels: NodeLabelsChanged) -> bool:
    """Whether some pool's label selector matches the node's ``labels``."""
    found = labels.as_dict
    return any(
        sel.labels is not None and sel.labels.matches(found)
        for sel in (d.declaration.selector for d in ad.pools.values())
    )


def _may_hold(ad: AdoptionGov, node: str) -> bool:
    """Whether some pool may hold ``node`` (its slices are known, a pool names it, or its
    labels match a pool's label selector): a device change elsewhere changes no
    verdict, and is not worth an evaluation on the hot path."""
    return (
        node in ad.node_facts
        or any(node in d.declaration.selector.nodes for d in ad.pools.values())
        or (node in ad.labels and _label_pool_selects(ad, ad.labels[node]))
    )


def facts_of(ctx: Ctx, ad: AdoptionGov) -> InventoryFacts:
    """The gate's facts: the nodes' inventory facts, the conflicts, and the governor's devices on
    the nodes that any pool may hold."""
    slices: set[tuple[str, str, str]] = set()
    claims: set[ClaimFact] = set()
    divergences: set[DivergenceFact] = set()
    for f in ad.node_facts.values():
        slices.update((d, p, f.node) for d, p in f.slices)
        claims.update(f.claims)
        divergences.update(f.divergences)
    nodes = {n for _, _, n in slices}
    for declared in ad.pools.values():
        sel = declared.declaration.selector
        nodes.update(sel.nodes)
        if sel.labels is not None:
            nodes.update(n for n, r in ad.labels.items() if sel.labels.matches(r.as_dict))
    devices = frozenset(
        DeviceFact(d.node, d.resource_id, d.state.value in QUARANTINED_STATES)
        for node in sorted(nodes)
        for d in ctx.state.devices_on(node)
    )
    return InventoryFacts(
        slices=frozenset(SliceFact(d, p, n) for d, p, n in slices),
        conflicts=frozenset(ad.conflicts),
        divergences=frozenset(divergences),
        devices=devices,
        claims=frozenset(claims),
        failures=frozenset(f for held in ad.failures.values() for f in held),
        ready=frozenset(f for held in ad.ready.values() for f in held),
        labels=frozenset(LabelsFact(n, r.labels) for n, r in ad.labels.items()),
    )


def next_leak_due(ad: AdoptionGov, ctx: Ctx, facts: InventoryFacts) -> datetime | None:
    """The latest event time at which the earliest of the pools' allocated, unreserved claims not
    yet leaked is still not leaked (the gate counts a claim leaked *after* its allocation plus
    ``leaked_claim_seconds``): once event time passes it, the gate is evaluated again."""
    now, seconds = ctx.now, ctx.policy.adoption.leaked_claim_seconds
    due: list[datetime] = []
    for state in ad.pool_states().values():
        for c in pool_claims(state, facts, pool_nodes(state, facts)):
            if c.reserved or c.allocated_at is None:
                continue
            at = c.allocated_at + timedelta(seconds=seconds)
            if now is None or at >= now:
                due.append(at)
    return min(due, default=None)


def next_failure_due(ad: AdoptionGov, ctx: Ctx, facts: InventoryFacts) -> datetime | None:
    """The latest event time at which the oldest failure on a pool's nodes is still in the
    window (the gate counts it while ``now - at <= failure_window_seconds``): once event time
    passes it, the gate is evaluated again and the pool's count drops."""
    now, seconds = ctx.now, ctx.policy.adoption.failure_window_seconds
    nodes = frozenset().union(*(pool_nodes(s, facts) for s in ad.pool_states().values()))
    due = [
        f.at + timedelta(seconds=seconds)
        for f in facts.failures
        if f.node in nodes and (now is None or f.at + timedelta(seconds=seconds) >= now)
    ]
    return min(due, default=None)


def next_ready_due(ad: AdoptionGov, ctx: Ctx, facts: InventoryFacts) -> datetime | None:
    """The latest event time at which the oldest sample a pool reads is still in the window
    (the gate counts it while ``now - at <= ready_window_seconds``): once event time passes
    it, the gate is evaluated again without it."""
    now, seconds = ctx.now, ctx.policy.adoption.ready_window_seconds
    read = [
        (s.current.declaration.device_class, pool_nodes(s, facts))
        for s in ad.pool_states().values()
        if s.current.declaration.device_class is not None
    ]
    due = [
        f.at + timedelta(seconds=seconds)
        for f in facts.ready
        if (now is None or f.at + timedelta(seconds=seconds) >= now)
        and any(counts_for(f, c, nodes) for c, nodes in read if c is not None)
    ]
    return min(due, default=None)


def _details(gate: PoolGate, previous: str | None, ad: AdoptionGov) -> dict[str, Any]:
    declaration = ad.pools[gate.pool].declaration
    return {
        "pool": gate.pool,
        "phase": gate.phase.value,
        "verdict": gate.verdict.value,
        "previous": previous,
        "deviceClass": declaration.device_class,
        "nodes": len(gate.nodes),
        **({"waiting": True} if gate.waiting else {}),
        "reasons": [
            {
                "code": r.code,
                "verdict": r.verdict.value,
                "detail": r.detail,
                "figures": dict(r.figures),
            }
            for r in gate.reasons
        ],
    }


def record_change(ctx: Ctx, ad: AdoptionGov, gate: PoolGate, at: datetime) -> None:
    """The decisions of a pool whose verdict changed (or was never recorded)."""
    previous = ad.verdicts.get(gate.pool)
    was_waiting = gate.pool in ad.waiting
    ad.verdicts[gate.pool] = gate.verdict.value
    if gate.waiting:
        ad.waiting.add(gate.pool)
    else:
        ad.waiting.discard(gate.pool)
    details = _details(gate, previous, ad)
    worst = [
        r.code
        for r in gate.reasons
        if r.verdict is gate.verdict and r.verdict is not Verdict.EXPAND
    ]
    summary = (
        f"pool {gate.pool} ({gate.phase.value}): {previous or 'none'} -> {gate.verdict.value}"
        + (f" ({', '.join(worst)})" if worst else "")
    )
    old = None if previous is None else incident_of(gate.pool, Verdict(previous), was_waiting)
    new = incident_of(gate.pool, gate.verdict, gate.waiting)
    if new is not None:
        ctx.emit(
            DecisionKind.ADOPTION_VERDICT_CHANGED,
            at,
            incident=new,
            alert=AlertAction.FIRING,
            severity=_ALERTS[gate.verdict][1],
            summary=summary,
            **details,
        )
    if old is not None:
        ctx.emit(
            DecisionKind.ADOPTION_VERDICT_CHANGED,
            at,
            incident=old,
            alert=AlertAction.RESOLVED,
            severity=Severity.INFO,
            summary=summary if new is None else f"pool {gate.pool}: {previous} superseded",
            **details,
        )
    if new is None and old is None:
        ctx.emit(DecisionKind.ADOPTION_VERDICT_CHANGED, at, summary=summary, **details)


def after_step(
    ctx: Ctx, record: GovernanceInput, at: datetime, key: MergeKey | None = None
) -> None:
    """Re-evaluate the gate when ``record`` changed one of its inputs, event time passed a claim's
    leak deadline or a failure's or a ready sample's exit from its window, or the governor got its first event
    time; record every pool whose verdict changed. ``at`` (UTC): the decisions' time when the
    governor has no watermark yet; ``key``: the record's merge key, if any."""
    ad = ctx.state.fleet.adoption
    changed = take(ad, ctx, record, key)
    if not ad.pools:
        return
    now = ctx.now
    due = ad.next_due is not None and now is not None and now > ad.next_due
    if not (changed or due or (now is not None and not ad.timed)):
        return
    if now is not None:
        ad.prune_failures(now, ctx.policy.adoption.failure_window_seconds)
        ad.prune_ready(now, ctx.policy.adoption.ready_window_seconds)
    facts = facts_of(ctx, ad)
    ad.timed = now is not None
    timers = (next_leak_due, next_failure_due, next_ready_due)
    dues = [d for d in (due_at(ad, ctx, facts) for due_at in timers) if d]
    ad.next_due = min(dues, default=None)
    for gate in evaluate(ad.pool_states(), facts, ctx.policy.adoption, now):
        if ad.recorded(gate.pool) != (gate.verdict.value, gate.waiting):
            record_change(ctx, ad, gate, now or at)
