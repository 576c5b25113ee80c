"""What the watcher does with each Pod, node Lease, Node and DRA object it sees, without doing
any I/O.

:class:`WatchProcessor` reads a Pod (:func:`~services.domain.pod_reader.read_pod`), asks the
:class:`~services.domain.watch.pod_tracker.PodTracker` what changed and says what to publish and what to
dead-letter. :class:`NodeProcessor` does the same for Leases and Nodes with the
:class:`~services.domain.watch.node_tracker.NodeTracker`, :class:`InventoryProcessor` for ResourceSlices,
ResourceClaims and DeviceClasses with the
:class:`~services.domain.watch.inventory_tracker.InventoryTracker`. The file and Kubernetes sources and
the run loop (``run.py``) do the I/O around them; the golden tests drive them directly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

import orjson

from services.domain.codec import parse_resource_version
from services.domain.events import DeviceHealthObserved, Event, PodDevicesReleased
from services.domain.inventory.events import InventoryKind, InventoryObserved
from services.domain.limits import field_violations
from services.domain.node_labels import DroppedLabel, NodeLabelsChanged
from services.domain.observations import DeviceHealthObservations, group_pod_changes
from services.domain.pod_reader import read_pod
from services.domain.pod_status import DEAD_LETTER_CODES, PodReading, Problem, ProblemCode
from services.domain.record_size import event_budget, fit_events
from services.domain.watch.inventory_tracker import InventoryOutcome, InventoryTracker
from services.domain.watch.namespace_tracker import NAMESPACE_KIND
from services.domain.watch.node_objects import NodeProblem
from services.domain.watch.node_tracker import NodeFact, NodeOutcome, NodeTracker
from services.domain.watch.pod_snapshot import snapshots
from services.domain.watch.pod_tracker import PodTracker, WatchKind
from services.domain.watch.taint_rule_tracker import TAINT_RULE_KIND

STAGE_WATCH_LINE: Final = "watch-line"
"""Dead-letter stage of a line that is not a readable watch event."""

STAGE_POD_STATUS: Final = "pod-status"
"""Dead-letter stage of a Pod whose device health could not be keyed or was contradictory."""

STAGE_NODE_LEASE: Final = "node-lease"
"""Dead-letter stage of a node Lease that could not be read (no name, bad renewTime)."""

STAGE_NODE_STATUS: Final = "node-status"
"""Dead-letter stage of a Node whose name or extended-resource counts could not be read."""

STAGE_DRA_INVENTORY: Final = "dra-inventory"
"""Dead-letter stage of a ResourceSlice, ResourceClaim or DeviceClass that could not be read."""

_NODE_STAGES: Final = {"Lease": STAGE_NODE_LEASE, "Node": STAGE_NODE_STATUS}


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """Original bytes to park on the dead-letter topic, with why (``reason``), where in the
    pipeline (``stage``) and where they came from (``source``, e.g. ``file:path:line``)."""

    original: bytes
    reason: str
    stage: str
    source: str


@dataclass(slots=True)
class Outcome:
    """What to do after one Pod event or one LIST: publish ``events`` in order, dead-letter
    ``dead_letters``, and count ``problems``."""

    events: list[Event | DeviceHealthObservations] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)


def _dead_letter(reading: PodReading, original: bytes, source: str) -> DeadLetter | None:
    reasons = [
        f"{p.code.value}: {p.message}" for p in reading.problems if p.code in DEAD_LETTER_CODES
    ]
    if not reasons:
        return None
    return DeadLetter(
        original=original,
        reason=f"Pod {reading.ref}: " + "; ".join(reasons),
        stage=STAGE_POD_STATUS,
        source=source,
    )


def _unfitted(outcome: Outcome) -> list[Event]:
    """``outcome.events`` before :meth:`WatchProcessor._fit` (no schema-2 record yet)."""
    events = [e for e in outcome.events if not isinstance(e, DeviceHealthObservations)]
    assert len(events) == len(outcome.events), "the outcome's events are fitted already"
    return events


def _refuse_unstorable(outcome: Outcome, reading: PodReading, original: bytes, source: str) -> None:
    """Move events the projection could not store (``limits.field_violations``) from
    ``outcome.events`` to one dead letter of the Pod's original bytes."""
    kept: list[Event | DeviceHealthObservations] = []
    reasons: list[str] = []
    for event in _unfitted(outcome):
        violations = field_violations(event)
        if violations:
            reasons.extend(violations)
        else:
            kept.append(event)
    if not reasons:
        return
    reason = f"Pod {reading.ref}: invalid-field: " + "; ".join(dict.fromkeys(reasons))
    outcome.events = kept
    outcome.problems.append(Problem(ProblemCode.INVALID_FIELD, reason))
    outcome.dead_letters.append(DeadLetter(original, reason, STAGE_POD_STATUS, source))


DEFAULT_MAX_MESSAGE_BYTES: Final = 1_048_576
"""``KafkaSettings.max_message_bytes``'s default: the record size a processor fits events to."""


class WatchProcessor:
    """Pod events in, actions out. Holds the tracker (the only state). Every event is made to
    fit a record of ``max_message_bytes`` bytes (:func:`~services.domain.record_size.fit_events`:
    a large release split, a large observation's containers cut and flagged, counted as a
    ``containers-truncated`` problem). With ``record_schema`` 2 (``DEVICESTATE_WATCHER_RECORD_SCHEMA``)
    the observations of one Pod status change then go as one schema-2 record
    (:func:`~services.domain.observations.group_pod_changes`: split in records that fit, a
    change of one device stays a schema-1 record); with 1 each is its own record."""

    def __init__(
        self,
        tracker: PodTracker | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        record_schema: int = 1,
    ) -> None:
        if record_schema not in (1, 2):
            raise ValueError(f"record_schema must be 1 or 2, not {record_schema!r}")
        self.tracker = tracker if tracker is not None else PodTracker()
        self._budget = event_budget(max_message_bytes)
        self.record_schema = record_schema

    def _fit(self, outcome: Outcome) -> Outcome:
        fitted = fit_events(_unfitted(outcome), self._budget)
        outcome.events = (
            group_pod_changes(fitted.events, self._budget, fitted.sizes)
            if self.record_schema == 2
            else list(fitted.events)
        )
        outcome.problems.extend(fitted.problems)
        return outcome

    def pod_event(
        self,
        kind: WatchKind,
        pod: Mapping[str, Any],
        original: bytes,
        source: str,
        observed_at: datetime,
    ) -> Outcome:
        """One ADDED/MODIFIED/DELETED. ``original`` is the line as read (dead-lettered when the
        Pod is rejected); ``observed_at`` is the watcher time (UTC) stamped on the events."""
        reading = read_pod(pod, observed_at)
        outcome = Outcome(events=list(self.tracker.apply(kind, reading)))
        _refuse_unstorable(outcome, reading, original, source)
        if kind is not WatchKind.DELETED:
            # A DELETED object is not read for health, so its problems are not news either.
            outcome.problems.extend(reading.problems)
            letter = _dead_letter(reading, original, source)
            if letter is not None:
                outcome.dead_letters.append(letter)
        return self._fit(outcome)

    def relisted(
        self,
        pods: Iterable[Mapping[str, Any]],
        list_version: str | None,
        source: str,
        observed_at: datetime,
        known_nodes: Iterable[str] = (),
    ) -> Outcome:
        """A complete LIST (``list_version``: its ``metadata.resourceVersion``): re-emit every
        listed Pod's devices, release the tracked Pods that are gone, then one ``PodsListed``
        snapshot per node (:func:`~services.domain.watch.pod_snapshot.snapshots`: the listed
        Pods' nodes, the tracked Pods' and ``known_nodes``, e.g. the nodes of the Leases and
        Nodes the watcher tracks), so the projection releases what a restarted watcher no longer
        remembers."""
        outcome = Outcome()
        before = self.tracker.nodes()
        readings = []
        by_uid: dict[str, tuple[PodReading, Mapping[str, Any]]] = {}
        for pod in pods:
            reading = read_pod(pod, observed_at)
            readings.append(reading)
            by_uid[reading.uid] = (reading, pod)
            outcome.problems.extend(reading.problems)
            if reading.rejected:
                letter = _dead_letter(reading, orjson.dumps(pod), source)
                if letter is not None:
                    outcome.dead_letters.append(letter)
        # The tracker makes observations and releases only (the snapshots come below).
        events = [
            e
            for e in self.tracker.reconcile(
                readings, parse_resource_version(list_version), observed_at
            )
            if isinstance(e, DeviceHealthObserved | PodDevicesReleased)
        ]
        # Unstorable events (limits.field_violations): one dead letter per Pod, its own bytes.
        # Grouped by Pod in one pass (a LIST of 20k Pods of 8 GPUs is 160k events).
        per_pod: dict[str, list[Event | DeviceHealthObservations]] = {}
        for e in events:
            per_pod.setdefault(e.pod_uid, []).append(e)
        for uid, pod_events in per_pod.items():
            pod_outcome = Outcome(events=pod_events)
            if uid in by_uid:
                reading, raw = by_uid[uid]
                _refuse_unstorable(pod_outcome, reading, orjson.dumps(raw), source)
            outcome.events.extend(pod_outcome.events)
            outcome.problems.extend(pod_outcome.problems)
            outcome.dead_letters.extend(pod_outcome.dead_letters)
        outcome.events.extend(
            snapshots(
                readings,
                parse_resource_version(list_version),
                observed_at,
                [*before, *known_nodes],
            )
        )
        return self._fit(outcome)


@dataclass(slots=True)
class NodeActions:
    """What to do after one Lease/Node event or one LIST of them: publish ``events`` in order,
    dead-letter ``dead_letters``, count ``problems``, ``coarsened`` heartbeats and ``ignored``
    objects (the reason of each)."""

    events: list[NodeFact] = field(default_factory=list)
    problems: list[NodeProblem] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    coarsened: int = 0
    ignored: list[str] = field(default_factory=list)
    dropped_labels: list[tuple[str, DroppedLabel]] = field(default_factory=list)
    """``(node, label)`` left out of a published ``NodeLabelsChanged`` (issue 16)."""

    def add(self, outcome: NodeOutcome, object_kind: str, original: bytes, source: str) -> None:
        self.events.extend(outcome.events)
        nodes = [e.node for e in outcome.events if isinstance(e, NodeLabelsChanged)]
        self.dropped_labels.extend((nodes[0], d) for d in outcome.dropped_labels if nodes)
        self.problems.extend(outcome.problems)
        self.coarsened += outcome.coarsened
        if outcome.ignored is not None:
            self.ignored.append(outcome.ignored)
        if outcome.reject_reason is not None:
            self.dead_letters.append(
                DeadLetter(original, outcome.reject_reason, _NODE_STAGES[object_kind], source)
            )


class NodeProcessor:
    """Lease and Node events in, actions out. Holds the :class:`NodeTracker` (the only state)."""

    def __init__(self, tracker: NodeTracker) -> None:
        self.tracker = tracker

    def object_event(
        self,
        kind: WatchKind,
        object_kind: str,
        obj: Mapping[str, Any],
        original: bytes,
        source: str,
        observed_at: datetime,
    ) -> NodeActions:
        """One ADDED/MODIFIED/DELETED of a Lease or a Node (``object_kind``); ``original`` is the
        line as read (dead-lettered when the object is malformed)."""
        if object_kind == "Lease":
            outcome = self.tracker.lease_event(kind, obj, observed_at)
        elif object_kind == "Node":
            outcome = self.tracker.node_event(kind, obj, observed_at)
        else:
            raise ValueError(f"not a node object kind: {object_kind!r}")
        actions = NodeActions()
        actions.add(outcome, object_kind, original, source)
        return actions

    def listed(
        self,
        object_kind: str,
        objs: list[dict[str, Any]],
        source: str,
        observed_at: datetime,
    ) -> NodeActions:
        """A complete LIST of Leases or Nodes: each read as ADDED, the unlisted forgotten."""
        if object_kind == "Lease":
            outcomes = self.tracker.leases_listed(objs, observed_at)
        elif object_kind == "Node":
            outcomes = self.tracker.nodes_listed(objs, observed_at)
        else:
            raise ValueError(f"not a node object kind: {object_kind!r}")
        actions = NodeActions()
        for obj, outcome in zip(objs, outcomes[: len(objs)], strict=True):
            original = orjson.dumps(obj) if outcome.reject_reason is not None else b""
            actions.add(outcome, object_kind, original, source)
        for outcome in outcomes[len(objs) :]:  # the unlisted Nodes' label removals (issue 16)
            actions.add(outcome, object_kind, b"", source)
        return actions


@dataclass(slots=True)
class InventoryActions:
    """What to do after one DRA object event or one LIST of them: publish ``events`` in order,
    dead-letter ``dead_letters`` and count ``ignored`` objects (the reason of each: ``stale``,
    ``unchanged``, ``unknown``)."""

    events: list[InventoryObserved] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)

    def add(self, outcome: InventoryOutcome, original: bytes, source: str) -> None:
        self.events.extend(outcome.events)
        if outcome.ignored is not None:
            self.ignored.append(outcome.ignored)
        if outcome.reject_reason is not None:
            self.dead_letters.append(
                DeadLetter(original, outcome.reject_reason, STAGE_DRA_INVENTORY, source)
            )


class InventoryProcessor:
    """ResourceSlice, ResourceClaim and DeviceClass events in, actions out. Holds the
    :class:`InventoryTracker` (the only state)."""

    def __init__(self, tracker: InventoryTracker | None = None) -> None:
        self.tracker = tracker if tracker is not None else InventoryTracker()

    def object_event(
        self,
        kind: WatchKind,
        object_kind: str,
        obj: Mapping[str, Any],
        original: bytes,
        source: str,
        observed_at: datetime,
    ) -> InventoryActions:
        """One ADDED/MODIFIED/DELETED of a DRA object (``object_kind``); ``original`` is the line
        as read (dead-lettered when the object is malformed). Raises ``ValueError`` for a kind
        that is not a DRA inventory kind."""
        if object_kind == TAINT_RULE_KIND:  # folded into the slices (issue 15)
            outcome = self.tracker.rule_event(kind, obj, observed_at)
        elif object_kind == NAMESPACE_KIND:  # folded into the admin-access claims (issue 16)
            outcome = self.tracker.namespace_event(kind, obj, observed_at)
        else:
            outcome = self.tracker.event(kind, InventoryKind(object_kind), obj, observed_at)
        actions = InventoryActions()
        actions.add(outcome, original, source)
        return actions

    def listed(
        self,
        object_kind: str,
        objs: list[dict[str, Any]],
        source: str,
        observed_at: datetime,
    ) -> InventoryActions:
        """A complete LIST of one DRA kind: each object read as ADDED, then ``deleted=True`` for
        the tracked ones it no longer has."""
        if object_kind == TAINT_RULE_KIND:
            relist = self.tracker.rules_listed(objs, observed_at)
        elif object_kind == NAMESPACE_KIND:
            relist = self.tracker.namespaces_listed(objs, observed_at)
        else:
            relist = self.tracker.listed(InventoryKind(object_kind), objs, observed_at)
        actions = InventoryActions()
        for obj, outcome in zip(objs, relist.outcomes, strict=True):
            original = orjson.dumps(obj) if outcome.reject_reason is not None else b""
            actions.add(outcome, original, source)
        actions.events.extend(relist.deleted)
        # slices a LIST of DeviceTaintRules changed, claims a LIST of Namespaces changed
        actions.events.extend(relist.republished)
        return actions

    def tracked(self) -> dict[str, int]:
        """Tracked objects by kind (every kind, zeros included)."""
        return {kind.value: self.tracker.tracked(kind) for kind in InventoryKind}
