"""The report's rows read from an inventory snapshot and the declared pools (the part of
:class:`~services.domain.adoption.report_rows.ReportInput` that is not a plain table read).

Sources: the inventory's ResourceClaims (first request's ``deviceClassName``,
``status.allocation``), its capacity devices (:func:`~services.domain.inventory.capacity_report.capacity_devices`:
DRA devices of node-scoped ResourceSlices, device-plugin capacity of Node status) and the nodes
of each declared adoption pool (:func:`~services.domain.governance.adoption_gate.pool_nodes`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from services.domain.adoption.facts import InventoryFacts
from services.domain.adoption.report_rows import ClaimRow, DeviceRow
from services.domain.governance.adoption import PoolState
from services.domain.governance.adoption_gate import pool_nodes
from services.domain.inventory.capacity_report import capacity_devices
from services.domain.inventory.snapshot import Snapshot


def claim_rows(snapshot: Snapshot) -> tuple[ClaimRow, ...]:
    """Every ResourceClaim of the inventory, sorted by namespace and name, with the UIDs of the
    Pods it is reserved for."""
    out = []
    for _, claim in sorted(snapshot.inventory.claims.items()):
        first = claim.requests[0].device_class if claim.requests else None
        allocated = bool(claim.results)
        reserved = tuple(sorted(uid for _, uid in claim.reserved_for if uid))
        node = claim.node if allocated else None
        out.append(ClaimRow(first, node, allocated, claim.created_at, reserved))
    return tuple(out)


def device_rows(snapshot: Snapshot) -> tuple[DeviceRow, ...]:
    """Every capacity device now: DRA when it has a ResourceSlice pool, else device plugin."""
    listed, unavailable = capacity_devices(snapshot)
    return tuple(
        DeviceRow(
            node=d.node,
            device_class=d.device_class,
            path="dra" if d.pool else "device-plugin",
            allocated=d.allocated,
            usable=(d.node, d.device_id) not in unavailable,
        )
        for d in listed
    )


def declared_pool_nodes(
    pools: Mapping[str, PoolState], facts: InventoryFacts
) -> dict[str, frozenset[str]]:
    """Each declared pool's nodes (those named, or those its driver's slices name)."""
    return {name: pool_nodes(state, facts) for name, state in sorted(pools.items())}


def plugin_resource_of(snapshot: Snapshot, device_class: str) -> str | None:
    """The DeviceClass's ``extendedResourceName`` (KEP-5004), ``None`` when unset or unknown."""
    for info in snapshot.inventory.classes.values():
        if info.name == device_class:
            return info.extended_resource_name
    return None


def known_class(snapshot: Snapshot, device_class: str, stage_classes: Iterable[str]) -> bool:
    """Whether ``device_class`` is a DeviceClass of the inventory or has lifecycle rows."""
    names = {info.name for info in snapshot.inventory.classes.values()}
    return device_class in names or device_class in set(stage_classes)
