"""Row <-> record conversion of the device directory's tables (:mod:`services.adapters.projection.tables`):
``devices`` rows to :class:`~services.domain.directory.DeviceRecord` and back to the JSON of
``devices.allocations``, ``device_history`` rows to
:class:`~services.adapters.projection.read_models.HistoryEntry`.

Enum columns hold the model's values (``Health``, ``DeviceSource``, ``ContainerKind``); status
versions are decimal integers (``NUMERIC(39,0)``, decimal strings inside JSON).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import orjson

from services.adapters.projection.read_models import HistoryEntry
from services.domain.directory import Allocation, DeviceRecord
from services.domain.events import ClaimRef, ContainerKind, ContainerRef, DeviceSource, Health
from services.domain.log import LogPosition

HEALTH: dict[str, Health] = {h.value: h for h in Health}
"""Column value -> :class:`Health`."""
SOURCE: dict[str, DeviceSource] = {s.value: s for s in DeviceSource}
"""Column value -> :class:`DeviceSource`."""
_KIND: dict[str, ContainerKind] = {k.value: k for k in ContainerKind}


def _version_text(version: int | None) -> str | None:
    return None if version is None else str(version)


def allocation_to_json(allocation: Allocation) -> dict[str, Any]:
    """The JSON object of one allocation in ``devices.allocations`` (camelCase, statusVersion as a
    decimal string; the container kind is the enum member, which orjson writes as its value)."""
    claim = allocation.claim
    return {
        "podUID": allocation.pod_uid,
        "namespace": allocation.namespace,
        "podName": allocation.pod_name,
        "containers": [{"name": c.name, "kind": c.kind} for c in allocation.containers],
        "claim": None
        if claim is None
        else {
            "podClaimName": claim.pod_claim_name,
            "request": claim.request,
            "resourceClaimName": claim.resource_claim_name,
        },
        "statusVersion": _version_text(allocation.status_version),
    }


def _allocation_from_json(obj: dict[str, Any]) -> Allocation:
    claim = obj.get("claim")
    version = obj.get("statusVersion")
    return Allocation(
        pod_uid=obj["podUID"],
        namespace=obj["namespace"],
        pod_name=obj["podName"],
        containers=tuple(ContainerRef(c["name"], _KIND[c["kind"]]) for c in obj["containers"]),
        claim=None
        if claim is None
        else ClaimRef(claim["podClaimName"], claim.get("request"), claim.get("resourceClaimName")),
        status_version=None if version is None else int(version),
    )


def record_from_row(row: Sequence[Any]) -> DeviceRecord:
    """A :class:`DeviceRecord` from a ``devices`` row in column order (``allocations`` as JSON text
    or already parsed). Raises ``KeyError`` for a health, source or container kind value the model
    lacks (the projection only ever writes model values)."""
    allocations = row[11]
    parsed = orjson.loads(allocations) if isinstance(allocations, str) else allocations
    return _record(row, tuple(_allocation_from_json(a) for a in parsed))


def records_from_rows(rows: Iterable[Sequence[Any]]) -> list[DeviceRecord]:
    """:func:`record_from_row` of each of ``rows``, the ``allocations`` JSON text decoded once per
    distinct value (a Pod's devices share one: their ``Allocation`` objects are then shared too,
    which is safe, they are immutable). Raises what :func:`record_from_row` raises."""
    decoded: dict[str, tuple[Allocation, ...]] = {}
    out: list[DeviceRecord] = []
    for row in rows:
        allocations = row[11]
        if not isinstance(allocations, str):
            out.append(record_from_row(row))
            continue
        held = decoded.get(allocations)
        if held is None:
            held = decoded[allocations] = tuple(
                _allocation_from_json(a) for a in orjson.loads(allocations)
            )
        out.append(_record(row, held))
    return out


def _record(row: Sequence[Any], allocations: tuple[Allocation, ...]) -> DeviceRecord:
    """The :class:`DeviceRecord` of a ``devices`` row (column order) with its allocations decoded."""
    (
        node,
        resource_id,
        resource_name,
        source,
        health,
        raw_health,
        message,
        status_version,
        _ordered,
        last_observed_at,
        last_transition_at,
        _allocations,
        flags,
    ) = row
    return DeviceRecord(
        node=node,
        resource_id=resource_id,
        resource_name=resource_name,
        source=SOURCE[source],
        health=HEALTH[health],
        raw_health=raw_health,
        message=message,
        status_version=None if status_version is None else int(status_version),
        last_observed_at=last_observed_at,
        last_transition_at=last_transition_at,
        allocations=allocations,
        flags=tuple(flags),
    )


def history_from_row(row: Any) -> HistoryEntry:
    """A :class:`HistoryEntry` from a ``device_history`` row (SQLAlchemy ``Row``, by column name)."""
    m = row._mapping
    return HistoryEntry(
        position=LogPosition(m["topic"], m["partition"], m["offset"]),
        node=m["node"],
        resource_id=m["resource_id"],
        kind=m["kind"],
        health=HEALTH[m["health"]],
        status_version=None if m["status_version"] is None else int(m["status_version"]),
        observed_at=m["observed_at"],
        transition=m["transition"],
        pod_uid=m["pod_uid"],
        namespace=m["namespace"],
        pod_name=m["pod_name"],
        message=m["message"],
        raw_health=m["raw_health"],
        frozen=m["frozen"],
    )
