"""What the governor keeps for the adoption gate (issue 16): each pool's current declaration, the
active ownership conflicts, each node's inventory facts (:class:`~.inputs_adoption.NodeAdoptionFacts`),
each node's recent driver and claim failures (:class:`~.inputs_failures.NodeFailureObserved`, at
most :data:`MAX_FAILURES_PER_NODE`, dropped once out of the gate's window of event time), each
node's labels (:class:`~services.domain.node_labels.NodeLabelsChanged`, the newest in event
time), each node's recent bound-to-Ready samples (:class:`~.inputs_ready.NodeReadyObserved`, at
most :data:`MAX_READY_PER_NODE`, likewise) and the verdict last recorded per pool, with its JSON
snapshot form (part of the fleet's snapshot, so a restored governor continues exactly like one
that never stopped). The labels are not in the fleet's snapshot, which is rewritten every batch,
but one row per node (:meth:`AdoptionGov.label_row`), written only when that node's labels change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from services.domain.codec import parse_time
from services.domain.events import format_time
from services.domain.governance.adoption import (
    Declared,
    PoolState,
    declaration_from_dict,
    declaration_to_dict,
)
from services.domain.governance.adoption_facts import ConflictFact, FailureFact, ReadyFact
from services.domain.governance.inputs_adoption import (
    NodeAdoptionFacts,
    adoption_facts_from_dict,
    adoption_facts_to_dict,
)
from services.domain.node_labels import NodeLabelsChanged

MAX_FAILURES_PER_NODE: Final = 256
"""Most failure facts the governor keeps per node (the oldest in event time go first): with the
default hold at 5 in 600 s, a node past it holds its pool whatever else it had."""

MAX_READY_PER_NODE: Final = 512
"""Most bound-to-Ready samples the governor keeps per node (the oldest in event time go first):
more Pods turning Ready on one node in the window than this is a batch of short Pods; the p95
of its newest 512 is the gate's figure."""


def _prune(
    held: dict[str, list[Any]], now: datetime, window_seconds: float, node: str | None
) -> None:
    for name in sorted(held) if node is None else [node]:
        kept = [f for f in held.get(name, []) if (now - f.at).total_seconds() <= window_seconds]
        if kept:
            held[name] = kept
        else:
            held.pop(name, None)


@dataclass(slots=True)
class AdoptionGov:
    """The gate's inputs and last verdicts. ``verdicts`` maps a pool to the verdict the last
    ``AdoptionVerdictChanged`` recorded; ``next_due`` is the earliest event time (UTC) at which a
    claim of a pool turns leaked (the gate is evaluated again then); ``timed`` says the last
    evaluation had an event time. ``failures`` maps a node to its failure facts, sorted (oldest
    first), each unique per ``(source_uid, occurrences)``; ``ready`` a node to its bound-to-Ready
    samples, sorted (oldest first), each unique per :attr:`ReadyFact.key` (the smallest kept)."""

    pools: dict[str, Declared] = field(default_factory=dict)
    conflicts: set[ConflictFact] = field(default_factory=set)
    node_facts: dict[str, NodeAdoptionFacts] = field(default_factory=dict)
    verdicts: dict[str, str] = field(default_factory=dict)
    next_due: datetime | None = None
    timed: bool = False
    failures: dict[str, list[FailureFact]] = field(default_factory=dict)
    ready: dict[str, list[ReadyFact]] = field(default_factory=dict)
    waiting: set[str] = field(default_factory=set)
    """The pools whose recorded ``hold`` is only the wait for the driver's slices (a ``plugin``
    pool matching no node: :attr:`.adoption_gate.PoolGate.waiting`), which raises no alert."""
    labels: dict[str, NodeLabelsChanged] = field(default_factory=dict)
    """Each node's newest labels in event time (``observed_at`` its merge key's time). Not part
    of :meth:`to_json` (the fleet's snapshot, rewritten every batch): each node's labels are its
    own row (:meth:`label_row`, ``governor_node_labels``), written when they change."""
    dirty_labels: set[str] = field(default_factory=set)
    """Nodes whose labels changed (or went) since the last write (not snapshotted)."""

    def recorded(self, pool: str) -> tuple[str, bool] | None:
        """The pool's recorded verdict and whether it is a wait (``None``: none recorded)."""
        verdict = self.verdicts.get(pool)
        return None if verdict is None else (verdict, pool in self.waiting)

    def forget(self, pool: str) -> None:
        """Drop a retired pool whole: its declaration and its recorded verdict."""
        self.pools.pop(pool, None)
        self.verdicts.pop(pool, None)
        self.waiting.discard(pool)

    def empty(self) -> bool:
        return not (
            self.pools
            or self.conflicts
            or self.node_facts
            or self.verdicts
            or self.failures
            or self.ready
        )

    def add_ready(self, fact: ReadyFact) -> bool:
        """Keep ``fact`` (``False`` when the node holds one of its key already that is not
        larger: a repeat); past :data:`MAX_READY_PER_NODE` the oldest is dropped."""
        held = self.ready.setdefault(fact.node, [])
        same = [f for f in held if f.key == fact.key]
        if same and min(same) <= fact:
            return False
        held[:] = sorted([f for f in held if f.key != fact.key] + [fact])
        del held[:-MAX_READY_PER_NODE]
        return True

    def prune_ready(self, now: datetime, window_seconds: float, node: str | None = None) -> None:
        """Drop the samples (of ``node``; ``None``: of every node) older than ``window_seconds``
        before event time ``now``."""
        _prune(self.ready, now, window_seconds, node)

    def add_failure(self, fact: FailureFact) -> bool:
        """Keep ``fact`` (``False`` when the node already holds one of its source with the same
        occurrences: a repeat); past :data:`MAX_FAILURES_PER_NODE` the oldest is dropped."""
        held = self.failures.setdefault(fact.node, [])
        if any(f.source_uid == fact.source_uid and f.occurrences == fact.occurrences for f in held):
            return False
        held.append(fact)
        held.sort()
        del held[:-MAX_FAILURES_PER_NODE]
        return True

    def prune_failures(self, now: datetime, window_seconds: float, node: str | None = None) -> None:
        """Drop the failures (of ``node``; ``None``: of every node) older than
        ``window_seconds`` before event time ``now``."""
        _prune(self.failures, now, window_seconds, node)

    def pool_states(self) -> dict[str, PoolState]:
        """The pools as the gate reads them (the current declaration; the history is the
        decisions' and ``GET /v1/adoption``'s)."""
        return {name: PoolState(current=d, history=(d,)) for name, d in sorted(self.pools.items())}

    def to_json(self) -> dict[str, Any]:
        return {
            "pools": [
                {
                    "seq": d.seq,
                    "at": format_time(d.at),
                    "actor": d.actor,
                    "reason": d.reason,
                    "declaration": declaration_to_dict(d.declaration),
                }
                for _, d in sorted(self.pools.items())
            ],
            "conflicts": [[c.kind, c.node, c.subject] for c in sorted(self.conflicts)],
            "nodeFacts": [adoption_facts_to_dict(f) for _, f in sorted(self.node_facts.items())],
            "verdicts": dict(sorted(self.verdicts.items())),
            "nextDue": None if self.next_due is None else format_time(self.next_due),
            "timed": self.timed,
            **({"failures": self._failures_json()} if self.failures else {}),
            **({"ready": self._ready_json()} if self.ready else {}),
            **({"waiting": sorted(self.waiting)} if self.waiting else {}),
        }

    def set_labels(self, record: NodeLabelsChanged) -> None:
        """Hold ``record`` as its node's labels; the node's label row is written with the batch."""
        self.labels[record.node] = record
        self.dirty_labels.add(record.node)

    def drop_labels(self, node: str) -> None:
        """Forget ``node``'s labels; its label row is deleted with the batch."""
        if self.labels.pop(node, None) is not None:
            self.dirty_labels.add(node)

    def label_row(self, node: str) -> dict[str, Any] | None:
        """``node``'s label snapshot, ``{"node", "observedAt", "labels": {key: value}}`` (the
        ``governor_node_labels.snapshot`` form; ``None``: the node has no labels)."""
        r = self.labels.get(node)
        if r is None:
            return None
        return {"node": node, "observedAt": format_time(r.observed_at), "labels": dict(r.labels)}

    def label_rows(self) -> list[dict[str, Any]]:
        """Every node's :meth:`label_row`, by node."""
        return [row for node in sorted(self.labels) if (row := self.label_row(node)) is not None]

    def load_labels(self, rows: list[dict[str, Any]]) -> None:
        """Hold the labels of ``rows`` (:meth:`label_row` objects) after a restore; they are
        already written (not dirty). A node's row wins over the same node's labels of an older
        fleet snapshot (``nodeLabels``), which :meth:`from_json` read and marked dirty."""
        for row in rows:
            node = str(row["node"])
            labels = tuple(sorted((str(k), str(v)) for k, v in (row.get("labels") or {}).items()))
            self.labels[node] = NodeLabelsChanged(node, labels, parse_time(row["observedAt"]))
            self.dirty_labels.discard(node)

    def _ready_json(self) -> list[list[Any]]:
        return [
            [
                f.node,
                format_time(f.at),
                f.pod_uid,
                f.device_class,
                f.path,
                f.seconds,
                list(f.classes),
            ]
            for node in sorted(self.ready)
            for f in self.ready[node]
        ]

    def _failures_json(self) -> list[list[Any]]:
        return [
            [f.node, format_time(f.at), f.source_uid, f.occurrences, f.count, f.failure_class]
            for node in sorted(self.failures)
            for f in self.failures[node]
        ]

    @classmethod
    def from_json(cls, obj: dict[str, Any] | None) -> AdoptionGov:
        if not obj:
            return cls()
        pools = {}
        for p in obj.get("pools") or ():
            declaration = declaration_from_dict(p["declaration"])
            pools[declaration.pool] = Declared(
                int(p["seq"]), parse_time(p["at"]), p["actor"], p["reason"], declaration
            )
        facts = (adoption_facts_from_dict(f) for f in obj.get("nodeFacts") or ())
        failures: dict[str, list[FailureFact]] = {}
        for node, t, uid, occurrences, count, failure_class in obj.get("failures") or ():
            failures.setdefault(node, []).append(
                FailureFact(node, parse_time(t), uid, int(occurrences), int(count), failure_class)
            )
        ready: dict[str, list[ReadyFact]] = {}
        for node, t, uid, device_class, path, seconds, classes in obj.get("ready") or ():
            ready.setdefault(node, []).append(
                ReadyFact(
                    node, parse_time(t), uid, device_class, path, float(seconds), tuple(classes)
                )
            )
        gov = cls(
            pools=pools,
            conflicts={ConflictFact(k, n, s) for k, n, s in obj.get("conflicts") or ()},
            node_facts={f.node: f for f in facts},
            verdicts=dict(obj.get("verdicts") or {}),
            next_due=None if obj.get("nextDue") is None else parse_time(obj["nextDue"]),
            timed=bool(obj.get("timed")),
            failures={node: sorted(held) for node, held in failures.items()},
            ready={node: sorted(held) for node, held in ready.items()},
            waiting=set(obj.get("waiting") or ()),
        )
        # A fleet snapshot written before the labels had their own rows holds them all under
        # ``nodeLabels``: they move to the nodes' rows with the next batch (dirty).
        for node, t, labels in obj.get("nodeLabels") or ():
            gov.set_labels(NodeLabelsChanged(node, tuple(labels.items()), parse_time(t)))
        return gov
