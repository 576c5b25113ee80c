"""The inventory directory, capacity views and the reconcile check, computed from projection rows
(issue 4, items 2, 3 and 5c). Pure: :class:`Snapshot` holds plain rows read by
:mod:`services.adapters.projection.reads_inventory`; nothing here touches the database or the clock.

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
  (:func:`unseen_plugin_devices`), never invented rows.

``devices`` rows without an identity row yet (written before identity resolution existed) get one
by the same pure rules (:func:`services.domain.inventory.identity.plugin_identity`; a DRA
resourceID of the documented form is its own identity, a CDI name stays unresolved and is left
out).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Final

from services.domain.events import DeviceSource, Health
from services.domain.governance.state import GovState
from services.domain.inventory.capacity import (
    CapacityDevice,
    CapacityRow,
    capacity_views,
    common_request_size,
)
from services.domain.inventory.identity import IdentityStatus, plugin_identity, split_device_id
from services.domain.inventory.objects import DeviceTaint
from services.domain.inventory.state import InventoryState

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
PLUGIN_LOST: Final = "device-plugin-lost"
"""Unavailable reason of plugin capacity that is not allocatable (the plugin lost devices)."""
_RESOLVED: Final = frozenset({IdentityStatus.REPORTED.value, IdentityStatus.RESOLVED.value})


# --- rows ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ObservedDevice:
    """The part of a ``devices`` row the inventory needs; ``pods`` are ``(namespace, podName)``
    of its allocations."""

    node: str
    resource_id: str
    resource_name: str
    source: str
    health: str
    last_observed_at: datetime
    pods: tuple[tuple[str, str], ...] = ()

    @property
    def allocated(self) -> bool:
        return bool(self.pods)


@dataclass(frozen=True, slots=True)
class IdentityRow:
    """A ``device_identities`` row (or one derived for a ``devices`` row without one)."""

    node: str
    resource_id: str
    device_id: str
    owner: str
    status: str
    uuid: str | None = None


@dataclass(frozen=True, slots=True)
class GovernanceRow:
    """The part of a ``device_governance`` row the inventory needs."""

    node: str
    resource_id: str
    resource_name: str
    source: str
    state: str
    observed_health: str
    state_since: datetime
    quarantine_id: str | None = None


@dataclass(frozen=True, slots=True)
class NodeResources:
    """A ``node_resources`` row: extended-resource counts of a Node."""

    node: str
    capacity: Mapping[str, int]
    allocatable: Mapping[str, int]


@dataclass(slots=True)
class Snapshot:
    """What the inventory views are computed from. ``inventory`` holds the current DRA objects
    (its ``slices``, ``claims`` and ``classes``)."""

    inventory: InventoryState = field(default_factory=InventoryState)
    node_resources: dict[str, NodeResources] = field(default_factory=dict)
    identities: list[IdentityRow] = field(default_factory=list)
    devices: list[ObservedDevice] = field(default_factory=list)
    governance: list[GovernanceRow] = field(default_factory=list)


# --- the directory ------------------------------------------------------------------------------


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


# --- unseen device-plugin devices ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PluginResource:
    """A node's device-plugin resource: capacity and allocatable (Node status), ``seen`` the
    distinct resourceIDs ever reported for it there, ``unseen`` = capacity - seen (>= 0)."""

    node: str
    resource_name: str
    capacity: int
    allocatable: int
    seen: int

    @property
    def unseen(self) -> int:
        return max(0, self.capacity - self.seen)


def plugin_resources(snapshot: Snapshot) -> list[PluginResource]:
    """Per node and extended resource of ``node_resources``, sorted."""
    seen: Counter[tuple[str, str]] = Counter(
        (d.node, d.resource_name)
        for d in snapshot.devices
        if d.source == DeviceSource.DEVICE_PLUGIN.value
    )
    rows = []
    for node, resources in sorted(snapshot.node_resources.items()):
        for name, capacity in sorted(resources.capacity.items()):
            rows.append(
                PluginResource(
                    node,
                    name,
                    capacity,
                    resources.allocatable.get(name, 0),
                    seen[(node, name)],
                )
            )
    return rows


# --- capacity -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CapacityReport:
    """Rows per view (:data:`services.domain.inventory.capacity.VIEWS`), the request size used for
    ``fragmented`` and where it came from (``setting``, ``claims``, ``pods`` or ``default``)."""

    views: dict[str, list[CapacityRow]]
    request_size: int
    request_size_source: str
    unavailable: dict[tuple[str, str], str]


def request_size(snapshot: Snapshot, configured: int) -> tuple[int, str]:
    """``configured`` when set (> 0); else the most common ResourceClaim request count; else, with
    no counted claim request, the most common number of one resource's devices per Pod in the
    directory (device plugins); else 1."""
    if configured > 0:
        return configured, "setting"
    counts = [
        r.count
        for claim in snapshot.inventory.claims.values()
        for r in claim.requests
        if r.count is not None and r.count > 0
    ]
    if counts:
        return common_request_size(counts), "claims"
    per_pod: Counter[tuple[str, str, str, str]] = Counter()
    for d in snapshot.devices:
        if d.source == DeviceSource.DEVICE_PLUGIN.value:
            for ns, pod in set(d.pods):
                per_pod[(d.node, ns, pod, d.resource_name)] += 1
    if per_pod:
        return common_request_size(per_pod.values()), "pods"
    return 1, "default"


def _plugin_capacity_devices(
    snapshot: Snapshot,
    directory: Mapping[tuple[str, str], InventoryDevice],
    identities: Mapping[tuple[str, str], IdentityRow],
    unavailable: dict[tuple[str, str], str],
) -> list[CapacityDevice]:
    """Device-plugin capacity in kubelet's units (one per advertised resourceID: a time-sliced
    replica is one unit). Per node and resource the total is the Node's capacity: the reported
    IDs (allocated ones first, then unavailable, then the rest) and, for capacity never reported,
    idle placeholders ``<resource>#unseen-<n>``; allocated IDs beyond capacity still count.
    Capacity that is not allocatable (the plugin lost devices) makes that many otherwise idle
    units unavailable (``device-plugin-lost``)."""
    known: dict[tuple[str, str], list[ObservedDevice]] = defaultdict(list)
    for d in snapshot.devices:
        if d.source == DeviceSource.DEVICE_PLUGIN.value:
            known[(d.node, d.resource_name)].append(d)

    def reason(row: ObservedDevice) -> str | None:
        identity = identities.get((row.node, row.resource_id))
        device_id = identity.device_id if identity else plugin_identity(row.resource_id).device_id
        device = directory.get((row.node, device_id))
        return None if device is None else device.unavailable

    result: list[CapacityDevice] = []
    keys = set(known) | {
        (node, name) for node, r in snapshot.node_resources.items() for name in r.capacity
    }
    for node, name in sorted(keys):
        rows = sorted(known.get((node, name), []), key=lambda r: r.resource_id)
        resources = snapshot.node_resources.get(node)
        capacity = None if resources is None else resources.capacity.get(name, 0)
        allocatable = None if resources is None else resources.allocatable.get(name, 0)
        reasons = {r.resource_id: reason(r) for r in rows}
        busy = [r for r in rows if r.allocated]
        down = [r for r in rows if not r.allocated and reasons[r.resource_id]]
        free = [r for r in rows if not r.allocated and not reasons[r.resource_id]]
        chosen = busy + down + free
        if capacity is not None:
            chosen = busy + (down + free)[: max(0, capacity - len(busy))]
        units = [
            CapacityDevice(
                node=node,
                device_id=r.resource_id,
                device_class=name,
                namespaces=tuple(sorted({ns for ns, _ in r.pods})),
            )
            for r in chosen
        ]
        for r in chosen:
            why = reasons[r.resource_id]
            if why and not r.allocated:
                unavailable[(node, r.resource_id)] = why
        if capacity is not None:
            units += [
                CapacityDevice(node=node, device_id=f"{name}#unseen-{i}", device_class=name)
                for i in range(1, capacity - len(units) + 1)
            ]
            assert allocatable is not None
            lost = max(0, capacity - allocatable)
            already = sum(
                1 for u in units if not u.allocated and (node, u.device_id) in unavailable
            )
            if lost > already:
                idle = [
                    u for u in units if not u.allocated and (node, u.device_id) not in unavailable
                ]
                for unit in idle[-(lost - already) :]:  # placeholders (never reported) first
                    unavailable[(node, unit.device_id)] = PLUGIN_LOST
        result.extend(units)
    return result


def build_capacity(
    snapshot: Snapshot,
    configured_request_size: int = 0,
    directory: Sequence[InventoryDevice] | None = None,
) -> CapacityReport:
    """Capacity views over every device with a node: DRA devices of node-scoped slices
    (:meth:`InventoryState.dra_capacity_devices`) and device-plugin capacity
    (:func:`_plugin_capacity_devices`). ``unavailable``: quarantined, recovering, restricted,
    deferred, observed Unhealthy, tainted NoSchedule/NoExecute, or lost by the plugin; an
    allocated device counts as allocated whatever its state, and a quarantined one is never
    idle."""
    listed = build_directory(snapshot) if directory is None else directory
    by_key = {(d.node, d.device_id): d for d in listed if d.node}
    unavailable: dict[tuple[str, str], str] = {}
    dra = snapshot.inventory.dra_capacity_devices()
    for device in dra:
        entry = by_key.get((device.node, device.device_id))
        if entry is not None and entry.unavailable:
            unavailable[(device.node, device.device_id)] = entry.unavailable
    plugin = _plugin_capacity_devices(snapshot, by_key, effective_identities(snapshot), unavailable)
    size, source = request_size(snapshot, configured_request_size)
    return CapacityReport(
        capacity_views([*dra, *plugin], unavailable, size), size, source, unavailable
    )


# --- reconcile: ResourceSlices vs Node capacity ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class Divergence:
    """Per node and extended resource named by a DeviceClass's ``extendedResourceName``: the
    devices that node's ResourceSlices advertise through the class's drivers, and what the Node
    exposes (``node_resources``). ``status``: ``match``/``mismatch`` when both sides offer it,
    ``dra-only`` or ``plugin-only`` when one side does (KEP-5004: an extended resource served by
    DRA does not appear in Node capacity, so a DRA-only node is not a divergence)."""

    node: str
    resource_name: str
    slice_devices: int
    node_capacity: int
    node_allocatable: int
    device_classes: tuple[str, ...]

    @property
    def difference(self) -> int:
        return self.slice_devices - self.node_capacity

    @property
    def status(self) -> str:
        if self.slice_devices and self.node_capacity:
            return "match" if self.difference == 0 else "mismatch"
        return "dra-only" if self.slice_devices else "plugin-only"

    @property
    def both_sides(self) -> bool:
        return bool(self.slice_devices and self.node_capacity)


def divergence(snapshot: Snapshot) -> list[Divergence]:
    """The reconcile check, sorted by (node, resource)."""
    drivers_of: dict[str, set[str]] = defaultdict(set)
    classes_of: dict[str, set[str]] = defaultdict(set)
    for device_class in snapshot.inventory.classes.values():
        if device_class.extended_resource_name:
            drivers_of[device_class.extended_resource_name].update(device_class.drivers)
            classes_of[device_class.extended_resource_name].add(device_class.name)
    if not drivers_of:
        return []
    advertised: Counter[tuple[str, str]] = Counter()
    for resource_slice in snapshot.inventory.slices.values():
        if not resource_slice.node:
            continue
        for resource, drivers in drivers_of.items():
            if resource_slice.driver in drivers:
                advertised[(resource_slice.node, resource)] += len(resource_slice.devices)
    keys = {k for k, n in advertised.items() if n > 0}
    for node, resources in snapshot.node_resources.items():
        for resource in drivers_of:
            if resources.capacity.get(resource, 0) > 0:
                keys.add((node, resource))
    rows = []
    for node, resource in sorted(keys):
        counts = snapshot.node_resources.get(node)
        rows.append(
            Divergence(
                node=node,
                resource_name=resource,
                slice_devices=advertised[(node, resource)],
                node_capacity=0 if counts is None else counts.capacity.get(resource, 0),
                node_allocatable=0 if counts is None else counts.allocatable.get(resource, 0),
                device_classes=tuple(sorted(classes_of[resource])),
            )
        )
    return rows
