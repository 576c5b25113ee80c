"""The samples and the quantile of the adoption gate's ``ready-latency`` signal (issue 16 item 2):
a pool's DRA bound-to-Ready latencies against the device plugin's of the same class.

- **DRA side**: the ``dra`` samples of the pool's DeviceClass on the pool's nodes;
- **plugin side**: the ``device-plugin`` samples, on *any* node of the fleet, of an extended
  resource that the pool's DeviceClass names as its ``extendedResourceName`` (the sample's
  ``classes``): the plugin path is what the pool leaves, and during a migration most of it runs
  outside the pool (the canary's own nodes have few plugin Pods left);
- both within the window ``now - at <= window_seconds`` of event time (every sample while there
  is no event time); a Pod counts once per class and path (its smallest fact, so the order the
  copies come in does not matter).

The quantile is by **nearest rank** on the sorted values: ``q`` of ``n`` values is the
``ceil(q * n)``-th smallest (an observed value, the same whatever order the samples came in),
as the comparison report's (:func:`services.domain.adoption.report.nearest_rank`). Pure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from datetime import datetime

from services.domain.governance.adoption_facts import ReadyFact

DRA_PATH = "dra"
PLUGIN_PATH = "device-plugin"


def nearest_rank(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0 < q <= 1) of non-empty ``values`` by nearest rank: the
    ``ceil(q * len(values))``-th smallest. ``ValueError`` for no values or ``q`` out of range."""
    if not values or not 0 < q <= 1:
        raise ValueError("nearest_rank needs values and 0 < q <= 1")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def in_ready_window(at: datetime, now: datetime | None, window_seconds: float) -> bool:
    """Whether a sample seen at ``at`` counts at event time ``now`` (``None``: every one)."""
    return now is None or (now - at).total_seconds() <= window_seconds


def counts_for(fact: ReadyFact, device_class: str, nodes: frozenset[str]) -> bool:
    """Whether ``fact`` is a sample of a pool of ``device_class`` on ``nodes``: DRA on its nodes,
    or the plugin path anywhere for that class."""
    if fact.path == DRA_PATH:
        return fact.device_class == device_class and fact.node in nodes
    return fact.path == PLUGIN_PATH and device_class in fact.classes


def ready_sides(
    facts: Iterable[ReadyFact],
    device_class: str,
    nodes: frozenset[str],
    now: datetime | None,
    window_seconds: float,
) -> tuple[list[float], list[float]]:
    """The pool's (DRA, plugin) bound-to-Ready seconds in the window (see the module
    docstring), each Pod once per class and path, sorted."""
    kept: dict[tuple[str, str, str], ReadyFact] = {}
    for f in facts:
        if counts_for(f, device_class, nodes) and in_ready_window(f.at, now, window_seconds):
            held = kept.get(f.key)
            if held is None or f < held:
                kept[f.key] = f
    dra = sorted(f.seconds for f in kept.values() if f.path == DRA_PATH)
    plugin = sorted(f.seconds for f in kept.values() if f.path == PLUGIN_PATH)
    return dra, plugin


def side_figures(dra: Sequence[float], plugin: Sequence[float]) -> dict[str, float | int | None]:
    """The signal's sample figures: ``draP95``, ``pluginP95`` (seconds, nearest rank; ``None``
    without samples), ``draSamples``, ``pluginSamples`` and ``ratio`` (DRA p95 over plugin p95,
    4 decimals; ``None`` when either is missing or the plugin p95 is 0)."""
    d = nearest_rank(dra, 0.95) if dra else None
    p = nearest_rank(plugin, 0.95) if plugin else None
    return {
        "draP95": d,
        "pluginP95": p,
        "draSamples": len(dra),
        "pluginSamples": len(plugin),
        "ratio": None if d is None or not p else round(d / p, 4),
    }
