"""The watcher's memory of driver and claim failures (issue 16 item 3): which core/v1 Events
about Pods and which ``PodScheduled`` conditions it published as ``DRAFailureObserved``.

Pure: raw JSON in, records out, no I/O, no clock (``observed_at`` is the caller's). Rules:

- an Event (``involvedObject.kind=Pod``) whose ``reason`` and ``message``
  :func:`~services.domain.adoption.failure_classes.classify` classifies is published once per
  count: again only when its count (``count``, or ``series.count``) grew, so a re-LIST or a
  MODIFIED with the same count publishes nothing (``seen``); DELETED forgets it;
- a Pod's ``PodScheduled=False`` condition with reason ``Unschedulable`` and a DRA message is
  published once per ``lastTransitionTime``; a Pod DELETED is forgotten;
- what classify does not classify is ``unclassified``; an Event about another kind ``not-a-pod``;
  an Event of a Pod that cannot be read (no uid, no Pod name or namespace, a field the record
  cannot store) is a *problem*, reported, never raised: the watch goes on.

Memory is bounded: at most ``max_remembered`` Events and as many Pods, least recently seen out
first (one forgotten and seen again is published again: the projection keeps one row per
``sourceUID``, so it is not counted twice), and a complete LIST forgets what it no longer has.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from services.domain.adoption.failure_classes import UNSCHEDULABLE, classify
from services.domain.adoption.failure_events import (
    OCCURRENCES_MAX,
    DRAFailureObserved,
    FailureOrigin,
    cut_message,
    failure_violations,
)
from services.domain.limits import node_name_problem
from services.domain.watch.pod_tracker import WatchKind

EVENT_KIND: Final = "Event"
"""The object kind of a core/v1 Event (watch lines, the watcher's streams)."""

MAX_REMEMBERED: Final = 50_000
"""Default of the most Events (and, apart, Pods) the tracker remembers."""


@dataclass(slots=True)
class FailureOutcome:
    """What one Event, Pod or LIST gave: ``records`` to publish, ``ignored`` (why nothing, one
    short reason each: ``seen``, ``unclassified``, ``not-a-pod``, ``deleted``) and ``problems``
    (objects that could not be read, with the reason)."""

    records: list[DRAFailureObserved] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def extend(self, other: FailureOutcome) -> None:
        self.records.extend(other.records)
        self.ignored.extend(other.ignored)
        self.problems.extend(other.problems)


def _text(obj: Mapping[str, Any], name: str) -> str | None:
    value = obj.get(name)
    return value if isinstance(value, str) and value else None


def _mapping(obj: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = obj.get(name)
    return value if isinstance(value, Mapping) else {}


def _count(value: object) -> int:
    return value if type(value) is int and value >= 1 else 1


def occurrences(event: Mapping[str, Any]) -> int:
    """How many times the Event happened: the larger of ``count`` (core/v1) and ``series.count``
    (events.k8s.io/v1 series), at least 1, at most the record's bound."""
    series = _mapping(event, "series")
    return min(max(_count(event.get("count")), _count(series.get("count"))), OCCURRENCES_MAX)


def _node(name: object) -> str | None:
    return name if isinstance(name, str) and name and node_name_problem(name) is None else None


class FailureTracker:
    """See the module doc. ``max_remembered`` bounds each of its two memories."""

    def __init__(self, max_remembered: int = MAX_REMEMBERED) -> None:
        self._max = max_remembered
        self._events: OrderedDict[str, int] = OrderedDict()
        """Event uid -> the count published last."""
        self._pods: OrderedDict[str, str] = OrderedDict()
        """Pod uid -> the ``sourceUID`` of its condition published last."""

    @property
    def remembered(self) -> tuple[int, int]:
        """``(Events, Pods)`` remembered now."""
        return len(self._events), len(self._pods)

    def _remember(self, memory: OrderedDict[str, Any], key: str, value: Any) -> None:
        memory[key] = value
        memory.move_to_end(key)
        while len(memory) > self._max:
            memory.popitem(last=False)

    def event(
        self, kind: WatchKind, obj: Mapping[str, Any], observed_at: datetime
    ) -> FailureOutcome:
        """One watched Event (ADDED, MODIFIED or DELETED)."""
        outcome = FailureOutcome()
        metadata = _mapping(obj, "metadata")
        uid = _text(metadata, "uid")
        if kind is WatchKind.DELETED:
            if uid is not None:
                self._events.pop(uid, None)
            outcome.ignored.append("deleted")
            return outcome
        involved = _mapping(obj, "involvedObject")
        if involved.get("kind") != "Pod":
            outcome.ignored.append("not-a-pod")
            return outcome
        reason = obj.get("reason")
        message = obj.get("message")
        found = classify(
            reason if isinstance(reason, str) else "",
            message if isinstance(message, str) else "",
        )
        if found is None or not isinstance(reason, str):
            outcome.ignored.append("unclassified")
            return outcome
        namespace = _text(involved, "namespace") or _text(metadata, "namespace")
        pod_name = _text(involved, "name")
        if uid is None or namespace is None or pod_name is None:
            outcome.problems.append(
                f"Event {reason} without metadata.uid, involvedObject.name or namespace"
            )
            return outcome
        count = occurrences(obj)
        if self._events.get(uid, 0) >= count:
            self._events.move_to_end(uid)
            outcome.ignored.append("seen")
            return outcome
        record = DRAFailureObserved(
            source_uid=uid,
            occurrences=count,
            origin=FailureOrigin.EVENT,
            namespace=namespace,
            pod_name=pod_name,
            pod_uid=_text(involved, "uid"),
            node_name=_node(_mapping(obj, "source").get("host")),
            reason=reason,
            message=cut_message(message if isinstance(message, str) else ""),
            failure_class=found.failure_class,
            why=found.why,
            observed_at=observed_at,
        )
        problems = failure_violations(record)
        if problems:
            outcome.problems.append(f"Event {uid}: " + "; ".join(problems))
            return outcome
        self._remember(self._events, uid, count)
        outcome.records.append(record)
        return outcome

    def events_listed(
        self, items: Iterable[Mapping[str, Any]], observed_at: datetime
    ) -> FailureOutcome:
        """A complete LIST of Events: each read as ADDED, then the Events it no longer has
        forgotten."""
        outcome = FailureOutcome()
        listed: set[str] = set()
        for item in items:
            uid = _text(_mapping(item, "metadata"), "uid")
            if uid is not None:
                listed.add(uid)
            outcome.extend(self.event(WatchKind.ADDED, item, observed_at))
        for uid in [u for u in self._events if u not in listed]:
            del self._events[uid]
        return outcome

    def pod(self, kind: WatchKind, pod: Mapping[str, Any], observed_at: datetime) -> FailureOutcome:
        """One watched Pod: its ``PodScheduled`` condition (see the module doc)."""
        outcome = FailureOutcome()
        metadata = _mapping(pod, "metadata")
        uid = _text(metadata, "uid")
        if uid is None:
            return outcome  # the pod tracker reports an unreadable Pod
        if kind is WatchKind.DELETED:
            self._pods.pop(uid, None)
            return outcome
        conditions = _mapping(pod, "status").get("conditions")
        condition = next(
            (
                c
                for c in (conditions if isinstance(conditions, list) else ())
                if isinstance(c, Mapping) and c.get("type") == "PodScheduled"
            ),
            None,
        )
        if (
            condition is None
            or condition.get("status") != "False"
            or condition.get("reason") != UNSCHEDULABLE
        ):
            return outcome
        message = condition.get("message")
        text = message if isinstance(message, str) else ""
        found = classify(UNSCHEDULABLE, text)
        if found is None:
            outcome.ignored.append("unclassified")
            return outcome
        namespace, name = _text(metadata, "namespace"), _text(metadata, "name")
        if namespace is None or name is None:
            outcome.problems.append(f"Pod {uid} without a name or namespace")
            return outcome
        transition = condition.get("lastTransitionTime")
        source_uid = f"{uid}/PodScheduled/{transition if isinstance(transition, str) else ''}"
        if self._pods.get(uid) == source_uid:
            self._pods.move_to_end(uid)
            outcome.ignored.append("seen")
            return outcome
        record = DRAFailureObserved(
            source_uid=source_uid,
            occurrences=1,
            origin=FailureOrigin.POD_CONDITION,
            namespace=namespace,
            pod_name=name,
            pod_uid=uid,
            node_name=_node(_mapping(pod, "spec").get("nodeName")),
            reason=UNSCHEDULABLE,
            message=cut_message(text),
            failure_class=found.failure_class,
            why=found.why,
            observed_at=observed_at,
        )
        problems = failure_violations(record)
        if problems:
            outcome.problems.append(f"Pod {uid}: " + "; ".join(problems))
            return outcome
        self._remember(self._pods, uid, source_uid)
        outcome.records.append(record)
        return outcome

    def pods_listed(
        self, pods: Iterable[Mapping[str, Any]], observed_at: datetime
    ) -> FailureOutcome:
        """A complete LIST of Pods: each read as ADDED, then the Pods it no longer has
        forgotten."""
        outcome = FailureOutcome()
        listed: set[str] = set()
        for pod in pods:
            uid = _text(_mapping(pod, "metadata"), "uid")
            if uid is not None:
                listed.add(uid)
            outcome.extend(self.pod(WatchKind.ADDED, pod, observed_at))
        for uid in [u for u in self._pods if u not in listed]:
            del self._pods[uid]
        return outcome
