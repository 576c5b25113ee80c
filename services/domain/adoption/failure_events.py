"""``DRAFailureObserved``: one driver or claim failure the watcher saw (issue 16 item 3), on the
health topic, and its wire form.

A record type of its own (schema 1, like the device events), with its own ``version``
(:data:`FAILURE_RECORD_VERSION`). Where it comes from (``origin``):

- ``Event``: a core/v1 Event about a Pod (``involvedObject.kind=Pod``) whose ``reason`` and
  ``message`` :func:`~services.domain.adoption.failure_classes.classify` classifies;
  ``sourceUID`` is the Event's ``metadata.uid`` and ``occurrences`` its count (``count``, or
  ``series.count`` for an Event written through events.k8s.io/v1: the larger);
- ``PodCondition``: a Pod's ``PodScheduled=False`` condition, reason ``Unschedulable``, with a
  DRA message; ``sourceUID`` is ``<Pod UID>/PodScheduled/<lastTransitionTime>`` (one failure per
  time the Pod became unschedulable) and ``occurrences`` 1.

The projection keeps one row per ``sourceUID`` with the largest ``occurrences`` seen, so a record
published again (a re-LIST, a watcher restart, a redelivery) counts once.

Record key (:attr:`DRAFailureObserved.node`): the node the failure happened on (the kubelet's
Event ``source.host``, else the Pod's ``spec.nodeName``), or ``namespace:<namespace>`` when there
is no node yet (a Pod the scheduler could not place). Times are UTC (``observedAt``: the watcher
time it saw the Event or the Pod).

JSON, keys sorted, camelCase: ``{"schema": 1, "type": "DRAFailureObserved", "version": 1,
"sourceUID", "occurrences", "origin", "namespace", "podName", "podUID" (or null), "nodeName" (or
null), "reason", "message", "failureClass", "why", "observedAt"}``. :func:`decode_failure`
raises :class:`~services.domain.codec.EventDecodeError` naming the field for anything else (a
newer ``version`` included).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Final

import orjson

from services.domain.adoption.failure_classes import FailureClass
from services.domain.codec import (
    EventDecodeError,
    decode_record,
    int_field,
    optional_str_field,
    required_enum,
    str_field,
)
from services.domain.events import SCHEMA_VERSION, format_time
from services.domain.limits import node_name_problem

FAILURE_RECORD_VERSION: Final = 1
"""The ``version`` written in every ``DRAFailureObserved``; a reader refuses a newer one."""

FAILURE_EVENT_TYPE: Final = "DRAFailureObserved"

MESSAGE_MAX_LENGTH: Final = 1024
"""Most characters of a failure's message kept (the rest is cut, ``...`` added)."""


class FailureOrigin(StrEnum):
    """Where the watcher saw the failure."""

    EVENT = "Event"
    POD_CONDITION = "PodCondition"


@dataclass(frozen=True, slots=True)
class DRAFailureObserved:
    """One classified driver or claim failure of a Pod (see the module doc)."""

    source_uid: str
    occurrences: int
    origin: FailureOrigin
    namespace: str
    pod_name: str
    pod_uid: str | None
    node_name: str | None
    reason: str
    message: str
    failure_class: FailureClass
    why: str
    observed_at: datetime
    type: str = field(default=FAILURE_EVENT_TYPE, init=False)

    @property
    def node(self) -> str:
        """Record key (named ``node`` like every record of the topic): the node, or
        ``namespace:<namespace>`` when the failure has none."""
        return self.node_name if self.node_name else f"namespace:{self.namespace}"


def cut_message(text: str) -> str:
    """``text`` with control characters as spaces, at most :data:`MESSAGE_MAX_LENGTH` long."""
    clean = "".join(" " if ord(ch) < 0x20 or ord(ch) == 0x7F else ch for ch in text)
    if len(clean) <= MESSAGE_MAX_LENGTH:
        return clean
    return clean[: MESSAGE_MAX_LENGTH - 3] + "..."


def encode_failure(event: DRAFailureObserved) -> bytes:
    """The JSON bytes of ``event`` (keys sorted, stable)."""
    body: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "type": event.type,
        "version": FAILURE_RECORD_VERSION,
        "sourceUID": event.source_uid,
        "occurrences": event.occurrences,
        "origin": event.origin.value,
        "namespace": event.namespace,
        "podName": event.pod_name,
        "podUID": event.pod_uid,
        "nodeName": event.node_name,
        "reason": event.reason,
        "message": event.message,
        "failureClass": event.failure_class.value,
        "why": event.why,
        "observedAt": format_time(event.observed_at),
    }
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)


def decode_failure(payload: bytes) -> DRAFailureObserved:
    """Parse a ``DRAFailureObserved``; raises :class:`EventDecodeError` with the reason."""
    obj, observed_at = decode_record(
        payload, SCHEMA_VERSION, FAILURE_EVENT_TYPE, FAILURE_RECORD_VERSION
    )
    occurrences = int_field(obj, "occurrences", minimum=1)
    event = DRAFailureObserved(
        source_uid=str_field(obj, "sourceUID"),
        occurrences=occurrences,
        origin=required_enum(FailureOrigin, obj, "origin"),
        namespace=str_field(obj, "namespace"),
        pod_name=str_field(obj, "podName"),
        pod_uid=optional_str_field(obj, "podUID"),
        node_name=optional_str_field(obj, "nodeName"),
        reason=str_field(obj, "reason"),
        message=str_field(obj, "message", empty=True),
        failure_class=required_enum(FailureClass, obj, "failureClass"),
        why=str_field(obj, "why"),
        observed_at=observed_at,
    )
    problems = failure_violations(event)
    if problems:
        raise EventDecodeError("cannot be stored: " + "; ".join(problems))
    return event


OCCURRENCES_MAX: Final = 2**31 - 1
"""Most ``occurrences`` a record may carry (the projection's integer column)."""


def failure_violations(event: DRAFailureObserved) -> list[str]:
    """Why ``event`` cannot be stored, one reason per field (empty: it can be)."""
    problems: list[str] = []
    for name, value, limit in (
        ("sourceUID", event.source_uid, 400),
        ("namespace", event.namespace, 63),
        ("podName", event.pod_name, 253),
        ("podUID", event.pod_uid, 128),
        ("reason", event.reason, 128),
        ("why", event.why, 64),
    ):
        if value is None:
            continue
        if not value:
            problems.append(f"{name} is empty")
        elif any(ord(ch) < 0x20 for ch in value):
            problems.append(f"{name} contains a control character")
        elif len(value) > limit:
            problems.append(f"{name} is longer than {limit} characters")
    if event.node_name is not None and (problem := node_name_problem(event.node_name)):
        problems.append(problem)
    if "\x00" in event.message or len(event.message) > MESSAGE_MAX_LENGTH:
        problems.append(f"message contains a NUL or is longer than {MESSAGE_MAX_LENGTH}")
    if not 1 <= event.occurrences <= OCCURRENCES_MAX:
        problems.append(f"occurrences is not between 1 and {OCCURRENCES_MAX}")
    return problems
