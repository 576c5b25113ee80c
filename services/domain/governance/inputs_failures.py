"""The governance-topic record of a driver or claim failure on a node (issue 16 item 2, the
adoption gate's ``claim-failures`` signal), and its wire form.

The watcher publishes each failure it sees as a ``DRAFailureObserved`` on the health topic
(:mod:`services.domain.adoption.failure_events`); the worker projects it into ``dra_failures``
and, for one that has a node and raised the failure's projected ``occurrences``, forwards one
:class:`NodeFailureObserved` with the increase (:mod:`services.domain.adoption.failure_forward`),
with the health record's merge key: it takes its place in event time, a redelivery is dropped
like any forwarded record, and the same Event published again counts only what its count grew
by. The governor keeps each node's failures for a sliding window of event time
(:mod:`.adoption_state`).

JSON, camelCase: ``{"schema": 1, "type": "NodeFailureObserved", "node", "observedAt" (RFC 3339
UTC), "sourceUID", "occurrences" (the Event's count now), "increase" (what it grew by, >= 1,
<= occurrences), "failureClass" (``retryable``, ``non-retryable``, ``needs-cleanup``),
"reason"}``. :func:`failure_from_dict` raises :class:`~services.domain.codec.EventDecodeError`
naming the bad field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from services.domain.codec import EventDecodeError, event_time_field, int_field, str_field
from services.domain.events import SCHEMA_VERSION, format_time

RECORD_TYPE: Final = "NodeFailureObserved"
FAILURE_CLASSES: Final = frozenset({"retryable", "non-retryable", "needs-cleanup"})
"""The failure classes (``services.domain.adoption.failure_classes.FailureClass`` values)."""


@dataclass(frozen=True, slots=True)
class NodeFailureObserved:
    """``increase`` more occurrences (>= 1) of failure source ``source_uid`` (an Event's uid, or
    a Pod's ``PodScheduled`` transition) on ``node`` at event time ``observed_at`` (UTC), of
    ``failure_class`` and ``reason``; ``occurrences`` is the source's count after it.
    ``ValueError`` for an empty name, an unknown class or counts out of range."""

    node: str
    observed_at: datetime
    source_uid: str
    occurrences: int
    increase: int
    failure_class: str
    reason: str
    type: str = field(default=RECORD_TYPE, init=False)

    def __post_init__(self) -> None:
        if not (self.node and self.source_uid and self.reason):
            raise ValueError("a node failure needs its node, sourceUID and reason")
        if self.failure_class not in FAILURE_CLASSES:
            raise ValueError(f"unknown failureClass {self.failure_class!r}")
        if not 1 <= self.increase <= self.occurrences:
            raise ValueError(
                f"increase {self.increase} is not between 1 and occurrences {self.occurrences}"
            )


def failure_to_dict(record: NodeFailureObserved) -> dict[str, Any]:
    """The record's JSON object (schema 1)."""
    return {
        "schema": SCHEMA_VERSION,
        "type": record.type,
        "node": record.node,
        "observedAt": format_time(record.observed_at),
        "sourceUID": record.source_uid,
        "occurrences": record.occurrences,
        "increase": record.increase,
        "failureClass": record.failure_class,
        "reason": record.reason,
    }


def failure_from_dict(obj: dict[str, Any]) -> NodeFailureObserved:
    """Parse the record; raises :class:`EventDecodeError` naming the bad field."""
    try:
        return NodeFailureObserved(
            node=str_field(obj, "node"),
            observed_at=event_time_field(obj, "observedAt"),
            source_uid=str_field(obj, "sourceUID"),
            occurrences=int_field(obj, "occurrences", minimum=1),
            increase=int_field(obj, "increase", minimum=1),
            failure_class=str_field(obj, "failureClass"),
            reason=str_field(obj, "reason"),
        )
    except ValueError as exc:
        if isinstance(exc, EventDecodeError):
            raise
        raise EventDecodeError(str(exc)) from exc
