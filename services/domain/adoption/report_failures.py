"""Which DRA failures the comparison report counts as failed allocations, and where (issue 16
item 5 over the ``dra_failures`` rows of item 3).

The rules (``docs/dra-adoption.md``, "The comparison report"):

- **Which failures.** Reasons :data:`ALLOCATION_REASONS`: the scheduler's ``FailedScheduling``
  Event and the Pod's ``PodScheduled=False``/``Unschedulable`` condition naming claims (it could
  not allocate the claims), and the kubelet's ``FailedPrepareDynamicResources`` (the allocation
  was made but the driver could not prepare it: the Pod cannot start). Every class counts, the
  tenant's invalid claim (``non-retryable``) included: it is an attempt that did not allocate.
  ``FailedUnprepareDynamicResources`` is not an allocation failure (the Pod ran; it is a
  clean-up), nor is anything else.
- **Counted once per Pod.** A ``FailedScheduling`` Event and the Pod's ``Unschedulable``
  condition are the same failure seen twice, and a retried prepare is one failed start: a row
  counts the Pod (``pod_uid``), so the figure is the number of distinct Pods that had an
  allocation failure in the window (a Pod that failed and then ran is one failed and one
  successful attempt). A row without a Pod UID is not counted.
- **In the window.** A failure source counts when its observations overlap the window:
  ``first_observed_at <= end`` and ``observed_at >= start``.
- **Of the DeviceClass.** A failure record does not name the claim or its class: a Pod's
  failure counts for the DeviceClass its DRA lifecycle stages name (the Pod later ran), or that
  the first request of a claim reserved for it names (``status.reservedFor``: it was
  allocated). A Pod that is still pending has neither; its claims, not allocated, are already
  counted as failed attempts in the fleet row, so not counting its failure does not lose it and
  does not count it twice.
- **Of a pool.** By the failure's node (the kubelet's, or the Pod's ``spec.nodeName``). A
  failure with no node (a Pod the scheduler could not place) counts only in the fleet row
  (pool ``*``): the record does not say which pool's devices it was refused.
- **Path.** Every ``dra_failures`` row is a DRA failure: there are no device-plugin failures
  (Pending Pods of the plugin path are not projected).

Pure: plain rows in, a count out.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Final

from services.domain.adoption.failure_classes import (
    PREPARE_FAILED,
    SCHEDULING_FAILED,
    UNSCHEDULABLE,
)
from services.domain.adoption.report_rows import ClaimRow, FailureRow, StageRow

ALLOCATION_REASONS: Final = frozenset({SCHEDULING_FAILED, UNSCHEDULABLE, PREPARE_FAILED})
"""The failure reasons that are a failed allocation attempt."""


def pod_classes(stages: Iterable[StageRow], claims: Iterable[ClaimRow]) -> dict[str, set[str]]:
    """Pod UID -> the DeviceClasses of its DRA stage rows and of the claims reserved for it."""
    out: dict[str, set[str]] = defaultdict(set)
    for r in stages:
        if r.path == "dra":
            out[r.pod_uid].add(r.device_class)
    for c in claims:
        if c.device_class is not None:
            for uid in c.reserved_for:
                out[uid].add(c.device_class)
    return out


def failed_pods(
    failures: Iterable[FailureRow],
    device_class: str,
    classes: dict[str, set[str]],
    holds: Callable[[str | None], bool],
    start: datetime,
    end: datetime,
) -> frozenset[str]:
    """The UIDs of the Pods with an allocation failure of ``device_class`` in ``[start, end]``
    on a node ``holds`` accepts (``holds(None)``: whether a failure without a node counts)."""
    pods = set()
    for f in failures:
        if f.reason not in ALLOCATION_REASONS or f.pod_uid is None:
            continue
        if f.first_observed_at > end or f.observed_at < start:
            continue
        if device_class in classes.get(f.pod_uid, ()) and holds(f.node):
            pods.add(f.pod_uid)
    return frozenset(pods)
