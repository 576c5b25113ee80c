"""Which projected driver and claim failures the worker forwards to the governor (issue 16 item
2, the gate's ``claim-failures`` signal), and by how much each counts.

A ``DRAFailureObserved`` is published again whenever the watcher re-LISTs, restarts or sees the
Event's count grow; the projection keeps each source's largest ``occurrences``. The governor
must count a source's *increase*, never the same occurrences twice: so the worker forwards, for
each record of a batch (log order) whose ``occurrences`` exceed what the projection held for its
``sourceUID`` before (and what earlier records of the batch raised it to), one
:class:`~services.domain.governance.inputs_failures.NodeFailureObserved` with the difference.
A record that raises nothing (a repeat, a smaller count read late) forwards nothing. A failure
with no node (a Pod the scheduler could not place) is not forwarded: a pool is a set of nodes;
it still raises the source's count, so the node's record later counts only what it adds.

Pure: the batch's fresh records and the projected counts in, the records to forward out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from services.domain.adoption.failure_events import DRAFailureObserved
from services.domain.governance.inputs_failures import NodeFailureObserved
from services.domain.log import LogPosition


def forwarded_failures(
    items: Sequence[tuple[LogPosition, DRAFailureObserved]], projected: Mapping[str, int]
) -> list[tuple[LogPosition, NodeFailureObserved]]:
    """The records to forward for ``items`` (the batch's records after their partition's
    recorded offset, in log order), given ``projected`` (``sourceUID`` -> the ``occurrences``
    the projection held before the batch; absent: none), each with its record's position."""
    seen = dict(projected)
    out = []
    for position, r in items:
        before = seen.get(r.source_uid, 0)
        if r.occurrences <= before:
            continue
        seen[r.source_uid] = r.occurrences
        if r.node_name is None:
            continue
        out.append(
            (
                position,
                NodeFailureObserved(
                    node=r.node_name,
                    observed_at=r.observed_at,
                    source_uid=r.source_uid,
                    occurrences=r.occurrences,
                    increase=r.occurrences - before,
                    failure_class=r.failure_class.value,
                    reason=r.reason,
                ),
            )
        )
    return out
