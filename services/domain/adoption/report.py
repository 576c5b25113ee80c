"""The DRA-against-plugin comparison report (issue 16 item 5): per DeviceClass, pool and path,
the figures that show whether moving a pool from device plugins to DRA lowered utilisation.

Pure: a function of plain rows (:mod:`.report_rows`) and the window; no I/O, no clock. A figure
based on fewer than ``min_samples`` samples (rates, quantiles) is ``None`` with "insufficient
data", never a made-up number. Definitions (``docs/dra-adoption.md``, "The comparison report"):

- **allocation success**: allocations that succeeded over those attempted. DRA: allocated
  ResourceClaims of the class (created in the window) over allocated + not allocated claims +
  the Pods with an allocation failure (:mod:`.report_failures`: which failures, once per Pod);
  the claims not allocated and the failures without a node have no node, so they count only in
  the fleet row (pool ``*``); without the failure counts (``failures`` ``None``) a pool row has
  no rate. Device plugin: no rate (no source of failed plugin allocations: Pending Pods are not
  projected).
- **pending_to_bound** (p50, p95, seconds): device plugin: the Pod's ``pod_bound`` (creation to
  ``PodScheduled``); DRA: the Pod's ``pod_bound`` (allocation to ``PodScheduled``) plus its
  latest ``claim_allocated`` of the class (claim creation to allocation; 0 when the claim was
  counted with another Pod). **bound_to_ready**: ``pod_ready`` (``PodScheduled`` to ``Ready``).
  Quantiles by nearest rank (an observed value). Pods first seen Ready in the window.
- **fragmentation**: ``1 - largest free count on one node / free devices of the pool``, free =
  usable and not allocated now; 0 when every free device is on one node; ``None`` with no free
  device. Samples: free devices.
- **device_hours** over the window: ``allocated`` = the time each (device, Pod) allocation of
  ``device_history`` covers in the window (from the Pod's first observation on the device to its
  release, to another Pod's observation of it, or to the window end); ``capacity`` = usable
  devices now x window hours; ``idle`` = capacity - allocated (>= 0).
- **retry_rate**: over the Pods of Job and CronJob workloads first seen Ready in the window,
  (Pods - workloads) / Pods: the share of Pods that were a second or later Pod of their job.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Final

from services.domain.adoption.report_failures import failed_pods, pod_classes
from services.domain.adoption.report_rows import (
    ALL_POOLS,
    UNPOOLED,
    Figure,
    HistoryRow,
    Report,
    ReportInput,
    ReportRow,
    StageRow,
)
from services.domain.governance.adoption_ready import nearest_rank

DRA: Final = "dra"
PLUGIN: Final = "device-plugin"
JOB_KINDS: Final = frozenset({"Job", "CronJob"})
QUANTILES: Final = (("p50", 0.5), ("p95", 0.95))
__all__ = ["build_report", "nearest_rank", "report_pools"]
"""``nearest_rank`` is the gate's (:mod:`services.domain.governance.adoption_ready`): one
quantile definition for the report and the ``ready-latency`` signal."""


def _insufficient(samples: int, minimum: int) -> Figure:
    return Figure(None, samples, f"insufficient data: {samples} samples, fewer than {minimum}")


def _quantiles(values: Sequence[float], minimum: int) -> dict[str, Figure]:
    if len(values) < max(1, minimum):
        return {name: _insufficient(len(values), minimum) for name, _ in QUANTILES}
    return {name: Figure(nearest_rank(values, q), len(values)) for name, q in QUANTILES}


def _rate(successes: int, attempts: int, minimum: int, note: str | None = None) -> Figure:
    if attempts < max(1, minimum):
        return _insufficient(attempts, minimum)
    return Figure(successes / attempts, attempts, note)


class _Scope:
    """Which nodes a row covers."""

    def __init__(self, pool: str, inp: ReportInput) -> None:
        self.pool = pool
        if pool in inp.pools:  # a declared pool (even one named "unpooled")
            nodes = inp.pools[pool]
            self.holds: Callable[[str | None], bool] = lambda node: node in nodes
        elif pool == ALL_POOLS:
            self.holds = lambda node: True
        elif pool == UNPOOLED:
            pooled = frozenset().union(*inp.pools.values()) if inp.pools else frozenset()
            self.holds = lambda node: node is not None and node not in pooled
        else:
            self.holds = lambda node: False


def _pending_to_bound(rows: Iterable[StageRow], path: str) -> list[float]:
    bound: dict[str, float] = {}
    allocated: dict[str, float] = defaultdict(float)
    for r in rows:
        if r.stage == "pod_bound":  # one per Pod and class; rows of several: the longest
            bound[r.pod_uid] = max(bound.get(r.pod_uid, 0.0), r.seconds)
        elif r.stage == "claim_allocated" and path == DRA:
            allocated[r.pod_uid] = max(allocated[r.pod_uid], r.seconds)
    return [seconds + allocated.get(uid, 0.0) for uid, seconds in sorted(bound.items())]


def _allocation_success(
    inp: ReportInput,
    scope: _Scope,
    path: str,
    start: datetime,
    classes: dict[str, set[str]],
) -> Figure:
    if path == PLUGIN:
        return Figure(None, 0, "no source of failed device-plugin allocations")
    claims = [
        c
        for c in inp.claims
        if c.device_class == inp.device_class
        and (c.created_at is None or start <= c.created_at <= inp.window_end)
    ]
    allocated = sum(1 for c in claims if c.allocated and scope.holds(c.node))
    pending = sum(1 for c in claims if not c.allocated) if scope.pool == ALL_POOLS else 0
    if inp.failures is None:
        if scope.pool != ALL_POOLS:
            return Figure(
                None, allocated, "needs the DRA failure counts: pending claims have no node"
            )
        return _rate(
            allocated,
            allocated + pending,
            inp.min_samples,
            "without DRA failure counts: pending claims only",
        )
    failed = failed_pods(
        inp.failures, inp.device_class, classes, scope.holds, start, inp.window_end
    )
    note = None if scope.pool == ALL_POOLS else "failures without a node count in pool * only"
    return _rate(allocated, allocated + pending + len(failed), inp.min_samples, note)


def _fragmentation(inp: ReportInput, scope: _Scope, path: str, device_class: str) -> Figure:
    free: dict[str, int] = defaultdict(int)
    for d in inp.devices:
        mine = d.path == path and d.device_class == device_class and scope.holds(d.node)
        if mine and d.usable and not d.allocated:
            free[d.node] += 1
    total = sum(free.values())
    if total == 0:
        return Figure(None, 0, "no free device")
    return Figure((total - max(free.values())) / total, total)


def _intervals(
    history: Iterable[HistoryRow], start: datetime, end: datetime
) -> list[tuple[HistoryRow, float]]:
    """Each (device, Pod) allocation's seconds within ``[start, end]``, with its first row."""
    opened: dict[tuple[str, str], tuple[HistoryRow, datetime]] = {}
    out: list[tuple[HistoryRow, float]] = []

    def close(key: tuple[str, str], at: datetime) -> None:
        row, since = opened.pop(key)
        seconds = (min(at, end) - max(since, start)).total_seconds()
        if seconds > 0:
            out.append((row, seconds))

    for h in history:
        key = (h.node, h.resource_id)
        held = opened.get(key)
        if h.kind == "released":
            if held is not None and held[0].pod_uid == h.pod_uid:
                close(key, h.observed_at)
        elif h.pod_uid and (held is None or held[0].pod_uid != h.pod_uid):
            if held is not None:  # another Pod holds it now: the previous allocation ended
                close(key, h.observed_at)
            opened[key] = (h, h.observed_at)
    for key in sorted(opened):
        close(key, end)
    return out


def _device_hours(
    inp: ReportInput,
    scope: _Scope,
    path: str,
    device_class: str,
    intervals: Sequence[tuple[HistoryRow, float]],
    pod_class: dict[str, str],
) -> dict[str, Figure]:
    def matches(row: HistoryRow) -> bool:
        if row.source != path or not scope.holds(row.node):
            return False
        got = row.resource_name if path == PLUGIN else pod_class.get(row.pod_uid)
        return got == device_class

    held = [seconds for row, seconds in intervals if matches(row)]
    usable = sum(
        1
        for d in inp.devices
        if d.path == path and d.device_class == device_class and d.usable and scope.holds(d.node)
    )
    allocated = sum(held) / 3600
    if usable == 0:
        none = Figure(None, 0, "no usable device of this class in the pool")
        return {"allocated": Figure(allocated, len(held)), "idle": none, "capacity": none}
    capacity = usable * inp.window_seconds / 3600
    return {
        "allocated": Figure(allocated, len(held)),
        "idle": Figure(max(0.0, capacity - allocated), usable),
        "capacity": Figure(capacity, usable),
    }


def _retry_rate(inp: ReportInput, stages: Sequence[StageRow]) -> Figure:
    kinds = {w.pod_uid: w for w in inp.workloads}
    pods = {r.pod_uid for r in stages if r.pod_uid in kinds}
    jobs = {uid for uid in pods if kinds[uid].workload_kind in JOB_KINDS}
    workloads = {kinds[uid].workload_uid for uid in jobs}
    return _rate(len(jobs) - len(workloads), len(jobs), inp.min_samples)


def report_pools(inp: ReportInput) -> list[str]:
    """The pools a report has rows for: every declared one (sorted), ``unpooled`` when some
    data is on nodes no pool holds, and ``*`` (the fleet)."""
    pooled = frozenset().union(*inp.pools.values()) if inp.pools else frozenset()
    nodes = {r.node for r in inp.stages} | {d.node for d in inp.devices}
    unpooled = UNPOOLED not in inp.pools and any(n not in pooled for n in nodes)
    extra = [UNPOOLED] if unpooled else []
    return [*sorted(inp.pools), *extra, ALL_POOLS]


def build_report(inp: ReportInput, pools: Sequence[str] | None = None) -> Report:
    """The report of ``inp.device_class`` for ``pools`` (default :func:`report_pools`): one row
    per pool and path (``dra``, and ``device-plugin`` when ``inp.plugin_resource`` is set)."""
    start = inp.window_end - timedelta(seconds=inp.window_seconds)
    in_window = [r for r in inp.stages if start <= r.observed_at <= inp.window_end]
    pod_class: dict[str, str] = {}
    for r in sorted(inp.stages, key=lambda s: (s.pod_uid, s.device_class)):
        if r.path == DRA:
            pod_class.setdefault(r.pod_uid, r.device_class)
    intervals = _intervals(inp.history, start, inp.window_end)
    classes = pod_classes(inp.stages, inp.claims)
    paths = [(DRA, inp.device_class)]
    if inp.plugin_resource:
        paths.append((PLUGIN, inp.plugin_resource))
    rows = []
    for pool in report_pools(inp) if pools is None else pools:
        scope = _Scope(pool, inp)
        for path, device_class in paths:
            stages = [
                r
                for r in in_window
                if r.path == path and r.device_class == device_class and scope.holds(r.node)
            ]
            ready = [r.seconds for r in stages if r.stage == "pod_ready"]
            rows.append(
                ReportRow(
                    device_class=device_class,
                    pool=pool,
                    path=path,
                    allocation_success=_allocation_success(inp, scope, path, start, classes),
                    pending_to_bound=_quantiles(_pending_to_bound(stages, path), inp.min_samples),
                    bound_to_ready=_quantiles(ready, inp.min_samples),
                    fragmentation=_fragmentation(inp, scope, path, device_class),
                    device_hours=_device_hours(
                        inp, scope, path, device_class, intervals, pod_class
                    ),
                    retry_rate=_retry_rate(inp, stages),
                )
            )
    return Report(
        inp.device_class, inp.plugin_resource, start, inp.window_end, inp.min_samples, tuple(rows)
    )
