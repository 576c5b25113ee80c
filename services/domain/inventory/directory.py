"""The inventory directory: every known device with its identity, health, governance state and
holders, computed from projection rows (issue 4, item 2), with its filters and keyset pages.
Pure: :class:`~.snapshot.Snapshot` holds plain rows read by
:mod:`services.adapters.projection.reads_inventory`; nothing here touches the database or the
clock. Capacity views are in :mod:`.capacity_report`, the reconcile check in :mod:`.reconcile`.

Devices come from two places:

- **DRA**: every device of every current ResourceSlice (``inventory_objects``, tombstones
  excluded), idle ones included; pool-scoped slices (no ``nodeName``) give devices with no node.
  A device's identity is ``<driver>/<pool>/<device>``; reported resourceIDs (CDI names, the
  documented form) map to it through ``device_identities``. A DRA identity reported on a node but
  absent from every slice is listed too, with ``in_slice`` false (its slice lost it: see the
  ``vanished-from-slice`` conflicts).
- **Device plugins**: the physical devices ``device_identities`` knows (``owner device-plugin``:
  replicas ``<id>::<n>`` map to ``<id>``). Plugins publish no IDs for idle devices, so what Node
  capacity holds beyond the IDs ever reported is an aggregate per node and resource
  (:func:`.capacity_report.plugin_resources`), never invented rows.

``devices`` rows without an identity row yet (written before identity resolution existed) get one
by the same pure rules (:func:`services.domain.inventory.identity.plugin_identity`; a DRA
resourceID of the documented form is its own identity, a CDI name stays unresolved and is left
out).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Final

from services.domain.events import DeviceSource, Health
from services.domain.governance.device_state import GovState
from services.domain.inventory.identity import IdentityStatus, plugin_identity, split_device_id
from services.domain.inventory.objects import DeviceTaint
from services.domain.inventory.snapshot import (
    GovernanceRow,
    IdentityRow,
    ObservedDevice,
    Snapshot,
)

UNAVAILABLE_STATES: Final = frozenset(
    {
        GovState.QUARANTINED.value,
        GovState.RECOVERING.value,
        GovState.RESTRICTED.value,
        GovState.DEFERRED.value,
    }
)
"""Governance states whose devices are unavailable in the capacity views (issue 4, items 3, 5c):
a Deferred device is due for a restriction that a blast-radius limit holds back."""
BLOCKING_TAINT_EFFECTS: Final = frozenset({"NoSchedule", "NoExecute"})
"""ResourceSlice device taints that keep new (non-tolerating) claims away."""
_RESOLVED: Final = frozenset({IdentityStatus.REPORTED.value, IdentityStatus.RESOLVED.value})


@dataclass(frozen=True, slots=True)
class InventoryDevice:
    """One physical device of the inventory directory.

    ``node`` is ``None`` for a device of a pool-scoped slice. ``claims`` are ``namespace/name`` of
    the ResourceClaims allocated the device; ``pods`` are ``namespace/name`` of the Pods holding it
    (the directory's allocations of its reported IDs, and the claims' ``reservedFor``). ``health``
    is the latest observation of any of its reported IDs (``None``: never reported);
    ``state``/``quarantine_id`` its governance; ``unavailable`` why new work cannot use it
    (``None``: usable).
    """

    node: str | None
    device_id: str
    owner: str
    pool: str | None = None
    driver: str | None = None
    uuid: str | None = None
    device_class: str | None = None
    resource_name: str | None = None
    taints: tuple[DeviceTaint, ...] = ()
    claims: tuple[str, ...] = ()
    pods: tuple[str, ...] = ()
    health: str | None = None
    health_observed_at: datetime | None = None
    state: str | None = None
    quarantine_id: str | None = None
    reported_ids: tuple[str, ...] = ()
    in_slice: bool = True
    unavailable: str | None = None

    @property
    def sort_key(self) -> tuple[str, str]:
        """``(node, deviceID)``; pool-scoped devices (no node) sort first, under ``""``."""
        return (self.node or "", self.device_id)

    @property
    def allocated(self) -> bool:
        return bool(self.claims or self.pods)


def _derived_identity(row: ObservedDevice) -> IdentityRow | None:
    if row.source == DeviceSource.DEVICE_PLUGIN.value:
        identity = plugin_identity(row.resource_id)
        return IdentityRow(
            row.node,
            row.resource_id,
            identity.device_id,
            identity.owner.value,
            identity.status.value,
            identity.uuid,
        )
    if split_device_id(row.resource_id) is not None:
        return IdentityRow(
            row.node,
            row.resource_id,
            row.resource_id,
            DeviceSource.DRA.value,
            IdentityStatus.REPORTED.value,
        )
    return None


def effective_identities(snapshot: Snapshot) -> dict[tuple[str, str], IdentityRow]:
    """``(node, resourceID)`` -> identity: the ``device_identities`` rows, plus one derived for
    each ``devices`` row that has none. Only resolved identities (as reported or resolved through
    the claim) are kept: an ambiguous or unresolved ID names no single device."""
    identities = {(i.node, i.resource_id): i for i in snapshot.identities}
    for row in snapshot.devices:
        if (row.node, row.resource_id) not in identities:
            derived = _derived_identity(row)
            if derived is not None:
                identities[(row.node, row.resource_id)] = derived
    return {key: i for key, i in identities.items() if i.status in _RESOLVED}


_HEALTH_RANK: Final = {Health.UNHEALTHY.value: 0, Health.UNKNOWN.value: 1, Health.HEALTHY.value: 2}


def _latest(rows: Sequence[ObservedDevice]) -> ObservedDevice | None:
    """The most recent observation; among equally recent ones the worst health."""
    if not rows:
        return None
    return max(rows, key=lambda r: (r.last_observed_at, -_HEALTH_RANK.get(r.health, 1)))


def _governance_for(
    device_id: str,
    reported: Sequence[tuple[str, str]],
    nodes: Sequence[str],
    by_key: Mapping[tuple[str, str], GovernanceRow],
) -> GovernanceRow | None:
    """The governance row of the physical device (keyed by its identity on one of ``nodes``),
    else the newest one of its reported IDs (rows written before identities were resolved)."""
    for node in nodes:
        row = by_key.get((node, device_id))
        if row is not None:
            return row
    found = [by_key[key] for key in reported if key in by_key]
    return max(found, key=lambda r: r.state_since) if found else None


def unavailable_reason(
    state: str | None,
    health: str | None,
    observed_health: str | None,
    taints: Iterable[DeviceTaint],
) -> str | None:
    """Why new work cannot use a device: its governance state (Quarantined, Recovering,
    Restricted, Deferred), ``Unhealthy`` (observed), or ``taint:<key>`` (a NoSchedule/NoExecute
    slice taint); ``None`` when usable."""
    if state in UNAVAILABLE_STATES:
        return state
    if Health.UNHEALTHY.value in (health, observed_health):
        return Health.UNHEALTHY.value
    for taint in taints:
        if taint.effect in BLOCKING_TAINT_EFFECTS:
            return f"taint:{taint.key}"
    return None


def build_directory(snapshot: Snapshot) -> list[InventoryDevice]:
    """Every device of the inventory (see the module docstring), sorted by ``(node, deviceID)``."""
    inventory = snapshot.inventory
    identities = effective_identities(snapshot)
    observed = {(d.node, d.resource_id): d for d in snapshot.devices}
    governance = {(g.node, g.resource_id): g for g in snapshot.governance}

    # DRA: reported IDs by device (device IDs are global: driver/pool/device).
    dra_reported: dict[str, list[tuple[str, str]]] = defaultdict(list)
    plugin_reported: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)
    for key, identity in sorted(identities.items()):
        if identity.owner == DeviceSource.DRA.value:
            dra_reported[identity.device_id].append(key)
        else:
            plugin_reported[(identity.node, identity.device_id)].append(key)

    claims_of: dict[str, set[str]] = defaultdict(set)
    reserved_pods: dict[str, set[str]] = defaultdict(set)
    for claim in inventory.claims.values():
        for result in claim.results:
            claims_of[result.device_id].add(f"{claim.namespace}/{claim.name}")
            reserved_pods[result.device_id].update(
                f"{claim.namespace}/{pod}" for pod, _ in claim.reserved_for if pod
            )
    class_of_driver: dict[str, str] = {}
    for device_class in sorted(inventory.classes.values(), key=lambda c: c.name):
        for driver in device_class.drivers:
            class_of_driver.setdefault(driver, device_class.name)

    def observations(reported: Sequence[tuple[str, str]]) -> list[ObservedDevice]:
        return [observed[key] for key in reported if key in observed]

    def complete(device: InventoryDevice, reported: Sequence[tuple[str, str]]) -> InventoryDevice:
        rows = observations(reported)
        latest = _latest(rows)
        pods = {f"{ns}/{pod}" for row in rows for ns, pod in row.pods}
        nodes = [device.node] if device.node else sorted({node for node, _ in reported})
        gov = _governance_for(device.device_id, reported, nodes, governance)
        health = None if latest is None else latest.health
        plugin_resource = (
            latest.resource_name
            if latest is not None and device.owner == DeviceSource.DEVICE_PLUGIN.value
            else None
        )
        return replace(
            device,
            pods=tuple(sorted(pods | set(device.pods))),
            health=health,
            health_observed_at=None if latest is None else latest.last_observed_at,
            state=None if gov is None else gov.state,
            quarantine_id=None if gov is None else gov.quarantine_id,
            reported_ids=tuple(sorted({rid for _, rid in reported})),
            resource_name=device.resource_name or plugin_resource,
            unavailable=unavailable_reason(
                None if gov is None else gov.state,
                health,
                None if gov is None else gov.observed_health,
                device.taints,
            ),
        )

    found: dict[tuple[str, str], InventoryDevice] = {}
    in_slices: set[str] = set()
    for (driver, pool, _), resource_slice in sorted(inventory.slices.items()):
        for slice_device in resource_slice.devices:
            device_id = f"{driver}/{pool}/{slice_device.name}"
            if device_id in in_slices:
                continue  # listed by two slices of the pool: shown once
            in_slices.add(device_id)
            device = InventoryDevice(
                node=resource_slice.node,
                device_id=device_id,
                owner=DeviceSource.DRA.value,
                pool=pool,
                driver=driver,
                uuid=slice_device.uuid,
                device_class=class_of_driver.get(driver),
                taints=slice_device.taints,
                claims=tuple(sorted(claims_of.get(device_id, ()))),
                pods=tuple(sorted(reserved_pods.get(device_id, ()))),
            )
            device = complete(device, dra_reported.get(device_id, []))
            found[device.sort_key] = device
    for device_id, reported in sorted(dra_reported.items()):
        if device_id in in_slices:
            continue
        parts = split_device_id(device_id)
        lost_driver = parts[0] if parts else None
        uuids = sorted({u for key in reported if (u := identities[key].uuid)})
        device = InventoryDevice(
            node=reported[0][0],
            device_id=device_id,
            owner=DeviceSource.DRA.value,
            pool=parts[1] if parts else None,
            driver=lost_driver,
            uuid=uuids[0] if uuids else None,
            device_class=None if lost_driver is None else class_of_driver.get(lost_driver),
            claims=tuple(sorted(claims_of.get(device_id, ()))),
            pods=tuple(sorted(reserved_pods.get(device_id, ()))),
            in_slice=False,
        )
        device = complete(device, reported)
        found.setdefault(device.sort_key, device)
    for (node, device_id), reported in sorted(plugin_reported.items()):
        uuids = sorted({u for key in reported if (u := identities[key].uuid)})
        device = InventoryDevice(
            node=node,
            device_id=device_id,
            owner=DeviceSource.DEVICE_PLUGIN.value,
            uuid=uuids[0] if uuids else None,
        )
        device = complete(device, reported)
        found.setdefault(device.sort_key, device)
    return [found[key] for key in sorted(found)]


@dataclass(frozen=True, slots=True)
class DirectoryFilters:
    node: str | None = None
    owner: str | None = None
    pool: str | None = None
    device_class: str | None = None
    resource_name: str | None = None
    state: str | None = None
    health: str | None = None


def matches(device: InventoryDevice, f: DirectoryFilters) -> bool:
    """Whether ``device`` passes every given filter. ``pool`` matches the pool name or
    ``<driver>/<pool>``; ``state=Available`` also matches devices the governor never saw;
    ``health`` matches the latest observation (never-reported devices have none)."""
    if f.node is not None and device.node != f.node:
        return False
    if f.owner is not None and device.owner != f.owner:
        return False
    if f.pool is not None and f.pool not in (device.pool, f"{device.driver}/{device.pool}"):
        return False
    if f.device_class is not None and device.device_class != f.device_class:
        return False
    if f.resource_name is not None and device.resource_name != f.resource_name:
        return False
    if f.state is not None and (device.state or GovState.AVAILABLE.value) != f.state:
        return False
    return f.health is None or device.health == f.health


def page(
    devices: Sequence[InventoryDevice],
    filters: DirectoryFilters,
    limit: int,
    after: tuple[str, str] | None,
) -> tuple[list[InventoryDevice], tuple[str, str] | None]:
    """One keyset page (items after ``after``, sorted) and the key to continue after (``None``
    on the last page)."""
    items = [d for d in devices if (after is None or d.sort_key > after) and matches(d, filters)][
        : limit + 1
    ]
    if len(items) > limit:
        return items[:limit], items[limit - 1].sort_key
    return items, None
