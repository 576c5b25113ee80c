"""The watcher's memory per node: Leases into coarsened heartbeats, Nodes into resource changes.

Pure: no I/O and no wall clock. Times come from the objects (a Lease's ``spec.renewTime``) and from
the caller (``observed_at``, the watcher's clock). Objects are raw JSON as the API serves them.

Sources (``../shared/notes/kubernetes-device-health.md``, "Where Unknown comes from"):

- kubelet renews its coordination.k8s.io/v1 ``Lease`` in ``kube-node-lease`` (name = node name,
  ``spec.renewTime`` a MicroTime, RFC 3339 with microseconds) every 10 s by default. That is far
  more than governance needs, so :meth:`NodeTracker.heartbeat` keeps at most one heartbeat per
  node per ``heartbeat_interval``, measured on ``renewTime`` (event time): the first renewal seen
  for a node is always published, later ones only when they are at least the interval away from
  the last published one. A renewTime that went *back* by at least the interval (kubelet's clock
  was corrected, the Lease was recreated) is published too and becomes the new reference.
- on the device-plugin path kubelet never writes ``Unknown`` in Pod status; the signal of a lost
  plugin is the Node's ``status.allocatable[<resource>]`` dropping below ``status.capacity``
  (stream-03b). :meth:`NodeTracker.resources` publishes the extended-resource counts (names with
  a ``/``) of a Node when they changed, and on its first sighting.
- a pool may be selected by node labels (issue 16): :meth:`NodeTracker.labels` publishes a
  Node's valid labels (``metadata.labels``; :func:`services.domain.node_labels.clean_labels`
  drops invalid and excess ones, with reasons, in :attr:`NodeOutcome.dropped_labels`) when they
  changed and on its first sighting; a complete LIST publishes every listed Node's labels again
  (stale or not), so a consumer that missed a change is set right at the next re-LIST. A Node
  DELETED, or one whose labels were published that a complete re-LIST no longer has, gets a
  removal (``NodeLabelsChanged`` with ``removed``): it leaves every label pool.

Rules shared by both kinds:

- an ADDED/MODIFIED whose resourceVersion is older than or equal to the newest one seen for that
  object is stale and ignored (out-of-order input, a re-LIST of an unchanged object);
- DELETED forgets the object: a later one of the same name starts afresh (first sighting);
- a malformed object (no name, a bad ``renewTime``, a quantity of an extended resource that is not
  a whole number) is a :class:`NodeProblem`; ``NodeOutcome.reject_reason`` asks the caller to
  dead-letter it. The same problem of the same object is reported once, not at every renewal
  (kubelet renews every 10 s), until the object is read without it again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeAlias

from services.domain.node_events import NodeHeartbeat, NodeResourcesChanged
from services.domain.node_labels import DroppedLabel, NodeLabelsChanged, clean_labels
from services.domain.watch.node_objects import (
    DEFAULT_LEASE_NAMESPACE,
    Counts,
    NodeProblem,
    object_metadata,
    read_lease,
    read_node,
)
from services.domain.watch.pod_tracker import WatchKind

NodeFact: TypeAlias = NodeHeartbeat | NodeResourcesChanged | NodeLabelsChanged


@dataclass(slots=True)
class NodeOutcome:
    """What to do after one Lease or Node object: publish ``events``; count ``problems``;
    dead-letter the object with ``reject_reason`` when set. ``coarsened`` is 1 when a heartbeat
    was dropped because one was published less than the interval before; ``ignored`` says why an
    object was skipped without a problem (stale, another namespace)."""

    events: list[NodeFact] = field(default_factory=list)
    problems: list[NodeProblem] = field(default_factory=list)
    reject_reason: str | None = None
    coarsened: int = 0
    ignored: str | None = None
    dropped_labels: list[DroppedLabel] = field(default_factory=list)
    """Labels left out of a published ``NodeLabelsChanged`` (invalid, or over the limit)."""


# --- the tracker -------------------------------------------------------------------------------


def _reason(what: str, name: str | None, problems: Iterable[NodeProblem]) -> str:
    return f"{what} {name or '<no name>'}: " + "; ".join(
        f"{p.code.value}: {p.message}" for p in problems
    )


class NodeTracker:
    """Per node: the renewTime of the last published heartbeat, the last published resource
    counts, the newest resourceVersions seen, and the last problem reported.

    ``heartbeat_interval``: least event time between two published heartbeats of a node.
    ``lease_namespace``: Leases elsewhere (leader election in ``kube-system``...) are ignored.
    """

    def __init__(
        self,
        heartbeat_interval: timedelta,
        lease_namespace: str = DEFAULT_LEASE_NAMESPACE,
    ) -> None:
        if heartbeat_interval <= timedelta(0):
            raise ValueError("heartbeat_interval must be positive")
        self.heartbeat_interval = heartbeat_interval
        self.lease_namespace = lease_namespace
        self._beats: dict[str, datetime] = {}
        self._counts: dict[str, tuple[Counts, Counts]] = {}
        self._labels: dict[str, tuple[tuple[str, str], ...]] = {}
        self._versions: dict[tuple[str, str], int] = {}
        self._reported: dict[tuple[str, str], str] = {}

    @property
    def nodes(self) -> int:
        """Nodes with a remembered heartbeat or resource counts."""
        return len(self._beats.keys() | self._counts.keys())

    # --- the two decisions, on already-read values ---------------------------------------------

    def known_nodes(self) -> set[str]:
        """The nodes with a Lease or a Node object currently tracked."""
        return set(self._beats) | set(self._counts)

    def heartbeat(
        self,
        node: str,
        renewed_at: datetime,
        observed_at: datetime,
        lease_version: int | None = None,
    ) -> NodeHeartbeat | None:
        """The heartbeat to publish for this renewal, or ``None`` if it is coarsened away (a
        heartbeat of ``node`` was published less than the interval away, in event time)."""
        last = self._beats.get(node)
        if last is not None and abs(renewed_at - last) < self.heartbeat_interval:
            return None
        self._beats[node] = renewed_at
        return NodeHeartbeat(
            node=node, renewed_at=renewed_at, observed_at=observed_at, lease_version=lease_version
        )

    def resources(
        self,
        node: str,
        capacity: Counts,
        allocatable: Counts,
        status_version: int | None,
        observed_at: datetime,
    ) -> NodeResourcesChanged | None:
        """The change to publish, or ``None`` when ``node`` last published the same counts."""
        counts = (tuple(sorted(capacity)), tuple(sorted(allocatable)))
        if self._counts.get(node) == counts:
            return None
        self._counts[node] = counts
        return NodeResourcesChanged(
            node=node,
            capacity=counts[0],
            allocatable=counts[1],
            status_version=status_version,
            observed_at=observed_at,
        )

    def labels(
        self, node: str, raw: Any, observed_at: datetime, *, always: bool = False
    ) -> tuple[NodeLabelsChanged | None, list[DroppedLabel]]:
        """The labels record to publish (``None`` when ``node`` last published the same labels,
        unless ``always``) and the labels dropped from it. ``raw``: ``metadata.labels``."""
        kept, dropped = clean_labels(raw)
        if not always and self._labels.get(node) == kept:
            return None, []
        self._labels[node] = kept
        return NodeLabelsChanged(node, kept, observed_at), dropped

    def _node_labels(
        self, outcome: NodeOutcome, obj: Mapping[str, Any], observed_at: datetime, always: bool
    ) -> None:
        name = object_metadata(obj).get("name")
        if not isinstance(name, str) or not name:
            return
        record, dropped = self.labels(
            name, object_metadata(obj).get("labels"), observed_at, always=always
        )
        if record is not None:
            outcome.events.append(record)
            outcome.dropped_labels.extend(dropped)

    def _removed(self, outcome: NodeOutcome, node: str, observed_at: datetime) -> None:
        """A removal of ``node``'s labels, when labels of it were published (issue 16)."""
        if node in self._labels:
            outcome.events.append(NodeLabelsChanged(node, (), observed_at, removed=True))

    # --- whole objects ----------------------------------------------------------------------

    def _stale(self, kind: str, name: str, version: int | None) -> bool:
        """True when ``version`` is not newer than the newest seen for the object; else remember
        it. An unordered (``None``) version is never stale."""
        if version is None:
            return False
        newest = self._versions.get((kind, name))
        if newest is not None and version <= newest:
            return True
        self._versions[(kind, name)] = version
        return False

    def _report(
        self, outcome: NodeOutcome, kind: str, name: str | None, problems: tuple[NodeProblem, ...]
    ) -> None:
        outcome.problems.extend(problems)
        if name is None:
            if problems:
                outcome.reject_reason = _reason(kind, name, problems)
            return
        if not problems:
            self._reported.pop((kind, name), None)
            return
        reason = _reason(kind, name, problems)
        if self._reported.get((kind, name)) != reason:
            self._reported[(kind, name)] = reason
            outcome.reject_reason = reason

    def _forget(self, kind: str, name: str) -> None:
        self._versions.pop((kind, name), None)
        self._reported.pop((kind, name), None)
        if kind == "Lease":
            self._beats.pop(name, None)
        else:
            self._counts.pop(name, None)
            self._labels.pop(name, None)

    def lease_event(
        self, kind: WatchKind, obj: Mapping[str, Any], observed_at: datetime
    ) -> NodeOutcome:
        """One ADDED/MODIFIED/DELETED of a Lease."""
        outcome = NodeOutcome()
        reading = read_lease(obj)
        if reading.namespace is not None and reading.namespace != self.lease_namespace:
            outcome.ignored = f"outside {self.lease_namespace}"
            return outcome
        if kind is WatchKind.DELETED:
            if reading.name is not None:
                self._forget("Lease", reading.name)
            return outcome
        if reading.name is not None and self._stale("Lease", reading.name, reading.lease_version):
            outcome.ignored = "stale"
            return outcome
        self._report(outcome, "Lease", reading.name, reading.problems)
        if reading.name is None or reading.renewed_at is None:
            return outcome
        beat = self.heartbeat(reading.name, reading.renewed_at, observed_at, reading.lease_version)
        if beat is None:
            outcome.coarsened = 1
        else:
            outcome.events.append(beat)
        return outcome

    def node_event(
        self, kind: WatchKind, obj: Mapping[str, Any], observed_at: datetime
    ) -> NodeOutcome:
        """One ADDED/MODIFIED/DELETED of a Node."""
        outcome = NodeOutcome()
        reading = read_node(obj)
        if kind is WatchKind.DELETED:
            if reading.name is not None:
                self._removed(outcome, reading.name, observed_at)
                self._forget("Node", reading.name)
            return outcome
        if reading.name is not None and self._stale("Node", reading.name, reading.status_version):
            outcome.ignored = "stale"
            return outcome
        self._report(outcome, "Node", reading.name, reading.problems)
        if reading.name is None:
            return outcome
        change = self.resources(
            reading.name,
            reading.capacity,
            reading.allocatable,
            reading.status_version,
            observed_at,
        )
        if change is not None:
            outcome.events.append(change)
        self._node_labels(outcome, obj, observed_at, always=False)
        return outcome

    def _relisted(
        self, kind: str, objs: Iterable[Mapping[str, Any]], observed_at: datetime
    ) -> list[NodeOutcome]:
        handle = self.lease_event if kind == "Lease" else self.node_event
        outcomes = []
        listed: set[str] = set()
        for obj in objs:
            outcome = handle(WatchKind.ADDED, obj, observed_at)
            outcomes.append(outcome)
            if kind == "Node" and not any(isinstance(e, NodeLabelsChanged) for e in outcome.events):
                self._node_labels(outcome, obj, observed_at, always=True)  # re-stated on a LIST
            name = object_metadata(obj).get("name")
            if isinstance(name, str):
                listed.add(name)
        known = {name for k, name in self._versions if k == kind}
        known |= set(self._beats if kind == "Lease" else self._counts)
        if kind == "Node":
            known |= set(self._labels)
        gone = NodeOutcome()
        for name in sorted(known - listed):
            if kind == "Node":
                self._removed(gone, name, observed_at)
            self._forget(kind, name)
        if gone.events:
            outcomes.append(gone)
        return outcomes

    def leases_listed(
        self, objs: Iterable[Mapping[str, Any]], observed_at: datetime
    ) -> list[NodeOutcome]:
        """A complete LIST of Leases: each one read as ADDED (one outcome per object, in order);
        nodes whose Lease is not listed any more are forgotten."""
        return self._relisted("Lease", objs, observed_at)

    def nodes_listed(
        self, objs: Iterable[Mapping[str, Any]], observed_at: datetime
    ) -> list[NodeOutcome]:
        """A complete LIST of Nodes: each one read as ADDED (one outcome per object, in order);
        Nodes not listed any more are forgotten, and when labels of any of them were published,
        one more outcome (last) carries their removals, by node name."""
        return self._relisted("Node", objs, observed_at)
