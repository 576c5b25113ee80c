"""Reading Lease and Node objects (raw JSON as the API serves them) into what the node tracker
keeps: :func:`read_lease` (coordination.k8s.io/v1 ``Lease``: name, namespace, ``spec.renewTime``),
:func:`read_node` (the extended-resource counts of ``status.capacity`` and
``status.allocatable``, names with a ``/``), and :func:`parse_quantity` for Kubernetes quantities.

Pure. Never raises on odd input: what cannot be read is a :class:`NodeProblem` in the reading
(every code is dead-lettered by the watcher).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from typing import Any, Final, TypeAlias

from services.domain.codec import parse_resource_version, parse_time
from services.domain.node_events import TICK_KEY_PREFIX

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


def object_metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """``obj["metadata"]`` when it is an object, else an empty mapping."""
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
    metadata = object_metadata(obj)
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
    metadata = object_metadata(obj)
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
