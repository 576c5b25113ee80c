"""The snapshot a LIST of Pods makes: per node, the UIDs of the Pods listed there (issue 11
item 7).

The watcher's memory (:mod:`services.domain.watch.pod_tracker`) lives in the process: a watcher
that restarts does not know which Pods were deleted while it was down, so it cannot release them.
After every LIST it therefore also publishes one :class:`~services.domain.events.PodsListed` per
node, and the directory fold releases the allocations of the Pods that vanished
(:func:`services.domain.directory.apply_snapshot`). Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from services.domain.events import PodsListed
from services.domain.pod_status import PodReading


def snapshots(
    readings: Iterable[PodReading],
    list_version: int | None,
    observed_at: datetime,
    nodes: Iterable[str] = (),
) -> list[PodsListed]:
    """One :class:`PodsListed` per node, sorted by node: every node a listed Pod is bound to
    (``spec.nodeName``; Pods without one hold no device), plus ``nodes`` (those the watcher knew
    before the LIST, from its tracked Pods, Nodes and Leases: a node whose Pods all vanished gets
    an empty snapshot). Every listed Pod with a UID counts, terminal or rejected ones too: they
    still exist. ``list_version`` is the LIST's resourceVersion, ``observed_at`` its watcher time
    (UTC). The events are unchunked: :func:`services.domain.record_size.fit_events` splits them.
    """
    listed: dict[str, set[str]] = {node: set() for node in nodes if node}
    for reading in readings:
        if reading.node and reading.uid:
            listed.setdefault(reading.node, set()).add(reading.uid)
    return [
        PodsListed(
            node=node,
            list_version=list_version,
            observed_at=observed_at,
            pod_uids=tuple(sorted(listed[node])),
        )
        for node in sorted(listed)
    ]
