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

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from typing import Any, Final, TypeAlias

from services.domain.events import parse_resource_version, parse_time
from services.domain.node_events import TICK_KEY_PREFIX, NodeHeartbeat, NodeResourcesChanged
from services.domain.watch.pod_tracker import WatchKind

DEFAULT_LEASE_NAMESPACE: Final = "kube-node-lease"
"""Where kubelet keeps its node Lease (``kube-node-lease``, Lease name = node name)."""

NODE_NAME_MAX_BYTES: Final = 253
"""A Node name is a DNS-1123 subdomain: at most 253 characters."""

RESOURCE_NAME_MAX_BYTES: Final = 1024
"""Most UTF-8 bytes of a resource name kept (as ``services.domain.limits``)."""

COUNT_MAX: Final = 2**63 - 1
"""Largest device count kept (a signed 64-bit integer, what consumers store)."""

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

# Kubernetes resource.Quantity (k8s.io/apimachinery/pkg/api/resource): a signed decimal number and
# a suffix: binary SI (Ki..Ei), decimal SI (m, k, M, G, T, P, E) or a decimal exponent (e3, E-2).
_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>[eE][+-]?[0-9]{1,3}|Ki|Mi|Gi|Ti|Pi|Ei|[mkMGTPE])?"
)
_SUFFIX_FACTOR: Final[dict[str, Decimal]] = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}

Counts: TypeAlias = tuple[tuple[str, int], ...]
"""Extended-resource counts, sorted by resource name."""

NodeFact: TypeAlias = NodeHeartbeat | NodeResourcesChanged


class NodeProblemCode(StrEnum):
    """What :func:`read_lease` / :func:`read_node` could not read. Every code is dead-lettered."""

    MISSING_NAME = "object-without-name"
    INVALID_NAME = "invalid-node-name"  # control characters, too long, or the tick key prefix
    BAD_RENEW_TIME = "bad-renew-time"  # missing or not an RFC 3339 time with an offset
    BAD_QUANTITY = "bad-quantity"  # not a whole, non-negative number of devices
    BAD_RESOURCE_NAME = "bad-resource-name"
    MALFORMED_STATUS = "malformed-node-status"  # status.capacity/allocatable not an object


@dataclass(frozen=True, slots=True)
class NodeProblem:
    """One thing wrong with a Lease or Node object; ``message`` is human-readable."""

    code: NodeProblemCode
    message: str


@dataclass(frozen=True, slots=True)
class LeaseReading:
    """What a Lease says: the node (Lease name), its namespace, ``renewed_at`` (``None`` when
    missing or unreadable, see ``problems``) and the Lease's resourceVersion as an integer."""

    name: str | None
    namespace: str | None
    renewed_at: datetime | None
    lease_version: int | None
    problems: tuple[NodeProblem, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeReading:
    """What a Node says about extended resources: sorted ``(name, count)`` pairs of
    ``status.capacity`` and ``status.allocatable`` (unreadable entries left out, see
    ``problems``) and its resourceVersion as an integer."""

    name: str | None
    capacity: Counts
    allocatable: Counts
    status_version: int | None
    problems: tuple[NodeProblem, ...] = ()


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


# --- reading objects --------------------------------------------------------------------------


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, Mapping) else {}


def _name(metadata: Mapping[str, Any], what: str) -> tuple[str | None, list[NodeProblem]]:
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        return None, [NodeProblem(NodeProblemCode.MISSING_NAME, f"{what} without metadata.name")]
    if (
        _CONTROL.search(name)
        or len(name.encode()) > NODE_NAME_MAX_BYTES
        or name.startswith(TICK_KEY_PREFIX[0])
    ):
        return None, [NodeProblem(NodeProblemCode.INVALID_NAME, f"{what} name {name[:80]!r}")]
    return name, []


def parse_quantity(raw: object) -> int:
    """A Kubernetes quantity of whole devices as an ``int`` (``"8"``, ``"1k"``, ``"2Ki"``,
    ``"1e3"``). Raises ``ValueError`` for anything that is not a whole number from 0 to
    :data:`COUNT_MAX` (``"100m"``, ``"1.5"``, ``"-1"``, ``"lots"``)."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        value = Decimal(raw)
    elif isinstance(raw, str) and (match := _QUANTITY.fullmatch(raw)):
        suffix = match["suffix"] or ""
        try:
            number = Decimal(match["number"])
            if suffix[:1] in ("e", "E") and len(suffix) > 1:
                value = number.scaleb(int(suffix[1:]))
            else:
                value = number * _SUFFIX_FACTOR[suffix]
        except (InvalidOperation, ValueError):  # pragma: no cover - the pattern admits only these
            raise ValueError(f"not a quantity: {raw!r}") from None
    else:
        raise ValueError(f"not a quantity: {str(raw)[:40]!r}")
    if value != value.to_integral_value():
        raise ValueError(f"{raw!r} is not a whole number")
    if value < 0 or value > COUNT_MAX:
        raise ValueError(f"{raw!r} is out of range")
    return int(value)


def _counts(status: Mapping[str, Any], field_name: str, problems: list[NodeProblem]) -> Counts:
    raw = status.get(field_name)
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        problems.append(
            NodeProblem(NodeProblemCode.MALFORMED_STATUS, f"status.{field_name} is not an object")
        )
        return ()
    counts = []
    for name, quantity in raw.items():
        if not isinstance(name, str) or "/" not in name:
            continue  # cpu, memory, pods, hugepages-*, ephemeral-storage: not devices
        if _CONTROL.search(name) or len(name.encode()) > RESOURCE_NAME_MAX_BYTES:
            problems.append(
                NodeProblem(
                    NodeProblemCode.BAD_RESOURCE_NAME, f"status.{field_name}: name {name[:80]!r}"
                )
            )
            continue
        try:
            counts.append((name, parse_quantity(quantity)))
        except ValueError as exc:
            problems.append(
                NodeProblem(NodeProblemCode.BAD_QUANTITY, f"status.{field_name}[{name}]: {exc}")
            )
    return tuple(sorted(counts))


def read_node(obj: Mapping[str, Any]) -> NodeReading:
    """Read a core/v1 Node: its name, resourceVersion and extended-resource counts. Never
    raises; what it could not read is in ``problems``."""
    metadata = _metadata(obj)
    name, problems = _name(metadata, "Node")
    status = obj.get("status")
    if status is None:
        status = {}
    elif not isinstance(status, Mapping):
        problems.append(NodeProblem(NodeProblemCode.MALFORMED_STATUS, "status is not an object"))
        status = {}
    capacity = _counts(status, "capacity", problems)
    allocatable = _counts(status, "allocatable", problems)
    return NodeReading(
        name=name,
        capacity=capacity,
        allocatable=allocatable,
        status_version=parse_resource_version(metadata.get("resourceVersion")),
        problems=tuple(problems),
    )


def read_lease(obj: Mapping[str, Any]) -> LeaseReading:
    """Read a coordination.k8s.io/v1 Lease: name (= node), namespace, ``spec.renewTime`` and
    resourceVersion. Never raises; what it could not read is in ``problems``."""
    metadata = _metadata(obj)
    name, problems = _name(metadata, "Lease")
    namespace = metadata.get("namespace")
    spec = obj.get("spec")
    renew = spec.get("renewTime") if isinstance(spec, Mapping) else None
    renewed_at = None
    if not isinstance(renew, str):
        problems.append(NodeProblem(NodeProblemCode.BAD_RENEW_TIME, "no spec.renewTime"))
    else:
        try:
            renewed_at = parse_time(renew)
        except ValueError as exc:
            problems.append(
                NodeProblem(NodeProblemCode.BAD_RENEW_TIME, f"spec.renewTime {renew[:64]!r}: {exc}")
            )
    return LeaseReading(
        name=name,
        namespace=namespace if isinstance(namespace, str) else None,
        renewed_at=renewed_at,
        lease_version=parse_resource_version(metadata.get("resourceVersion")),
        problems=tuple(problems),
    )


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
        self._versions: dict[tuple[str, str], int] = {}
        self._reported: dict[tuple[str, str], str] = {}

    @property
    def nodes(self) -> int:
        """Nodes with a remembered heartbeat or resource counts."""
        return len(self._beats.keys() | self._counts.keys())

    # --- the two decisions, on already-read values ---------------------------------------------

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
        return outcome

    def _relisted(
        self, kind: str, objs: Iterable[Mapping[str, Any]], observed_at: datetime
    ) -> list[NodeOutcome]:
        handle = self.lease_event if kind == "Lease" else self.node_event
        outcomes = []
        listed: set[str] = set()
        for obj in objs:
            outcomes.append(handle(WatchKind.ADDED, obj, observed_at))
            name = _metadata(obj).get("name")
            if isinstance(name, str):
                listed.add(name)
        known = {name for k, name in self._versions if k == kind}
        known |= set(self._beats if kind == "Lease" else self._counts)
        for name in known - listed:
            self._forget(kind, name)
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
        Nodes not listed any more are forgotten."""
        return self._relisted("Node", objs, observed_at)
