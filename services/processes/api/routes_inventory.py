"""Inventory directory, conflicts, capacity views and the reconcile check (issue 4, items 2, 3 and
5c), and their Prometheus gauges.

- ``GET /v1/inventory/devices``: every device, idle ones included (DRA devices of the
  ResourceSlices, device-plugin devices of ``device_identities``), keyset-paginated like
  ``/v1/devices``;
- ``GET /v1/inventory/unseen``: per node and device-plugin resource, the capacity no reported ID
  accounts for (plugins publish no IDs for idle devices);
- ``GET /v1/inventory/conflicts``: data-quality findings (``inventory_conflicts``);
- ``GET /v1/capacity?view=node|pool|deviceClass|namespace``: total, allocated, idle, unavailable,
  fragmented;
- ``GET /v1/capacity/divergence``: what ResourceSlices advertise for a DeviceClass with an
  ``extendedResourceName`` versus what the Node exposes.

Each request computes its answer from one consistent read of the projection (no cache); the
``/metrics`` gauges reuse one computation for :data:`INVENTORY_CACHE_SECONDS`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any, Final

import structlog
from fastapi import APIRouter, Depends, HTTPException, Query, Request
from prometheus_client import CollectorRegistry, Gauge

from services.adapters.projection.reads_inventory import InventoryReads
from services.domain.events import DeviceSource, Health
from services.domain.governance.device_state import GovState
from services.domain.inventory.capacity import VIEWS
from services.domain.inventory.capacity_report import (
    CapacityReport,
    build_capacity,
    plugin_resources,
)
from services.domain.inventory.directory import DirectoryFilters, build_directory, page
from services.domain.inventory.reconcile import Divergence, divergence
from services.domain.inventory.state import ConflictKind
from services.processes.api.auth import read_access
from services.processes.api.routes_devices import (
    MAX_PAGE,
    UNPROCESSABLE,
    NodeFilter,
    decode_cursor,
    encode_cursor,
)
from services.processes.api.routing import ServiceRoute
from services.processes.api.schemas_inventory import (
    CapacityOut,
    ConflictOut,
    ConflictsOut,
    DivergenceOut,
    DivergencesOut,
    InventoryDeviceOut,
    InventoryPageOut,
    PluginResourceOut,
    PluginResourcesOut,
)
from services.runtime.config import ApiFeatureSettings

log = structlog.get_logger(__name__)

INVENTORY_CACHE_SECONDS: Final = 5.0
"""How long the capacity and divergence gauges' computation is reused between scrapes."""
CAPACITY_NODE_VIEW_METRICS: Final = True
"""Default of ``/metrics?capacityNodeView=``: export the per-node capacity series (5 per node).
Large fleets can turn them off per scrape job (``params: {capacityNodeView: ["false"]}``) or here;
the pool, deviceClass and namespace views stay small."""
CAPACITY_KINDS: Final = ("total", "allocated", "idle", "unavailable", "fragmented")


class View(StrEnum):
    NODE = "node"
    POOL = "pool"
    DEVICE_CLASS = "deviceClass"
    NAMESPACE = "namespace"


assert tuple(v.value for v in View) == VIEWS


async def get_inventory(request: Request) -> InventoryReads:
    """The inventory reads the app's lifespan created."""
    reads: InventoryReads = request.app.state.inventory
    return reads


Inventory = Annotated[InventoryReads, Depends(get_inventory)]

router = APIRouter(
    prefix="/v1",
    tags=["inventory"],
    dependencies=[Depends(read_access)],
    route_class=ServiceRoute,
)


@router.get("/inventory/devices", response_model=InventoryPageOut, responses=UNPROCESSABLE)
async def list_inventory(
    inventory: Inventory,
    node: NodeFilter = None,
    owner: Annotated[DeviceSource | None, Query(description="dra or device-plugin.")] = None,
    pool: Annotated[str | None, Query(description="DRA pool name, or `<driver>/<pool>`.")] = None,
    device_class: Annotated[
        str | None, Query(alias="deviceClass", description="DeviceClass (DRA devices).")
    ] = None,
    resource_name: Annotated[
        str | None,
        Query(alias="resourceName", description="Extended resource (device-plugin devices)."),
    ] = None,
    state: Annotated[
        GovState | None,
        Query(
            description="Governance state; Available also matches devices the governor never saw."
        ),
    ] = None,
    health: Annotated[
        Health | None, Query(description="Latest observed health (never-reported devices: none).")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="Page size.")] = 100,
    cursor: Annotated[str | None, Query(description="`nextCursor` of the previous page.")] = None,
) -> InventoryPageOut:
    """Every device, idle ones included, sorted by (node, deviceID); devices of pool-scoped
    slices (no node) come first.

    DRA devices come from the current ResourceSlices; device-plugin devices from the IDs Pods
    reported (plugins publish none for idle devices: see `/v1/inventory/unseen` for the rest of
    the Node's capacity). Each device carries its owner, pool/driver, UUID, DeviceClass, slice
    taints, the claims and Pods holding it, the latest observed health through its reported IDs,
    its governance state and why it is unavailable, if it is. Keyset pagination: follow
    `nextCursor` until it is null.
    """
    after = None
    if cursor is not None:
        try:
            after = decode_cursor(cursor)
        except ValueError as exc:
            raise HTTPException(422, f"malformed cursor: {exc}") from None
    snapshot = await inventory.snapshot(
        node=node, from_node=None if after is None or node is not None else after[0]
    )
    filters = DirectoryFilters(
        node=node,
        owner=None if owner is None else owner.value,
        pool=pool,
        device_class=device_class,
        resource_name=resource_name,
        state=None if state is None else state.value,
        health=None if health is None else health.value,
    )
    items, next_after = page(build_directory(snapshot), filters, limit, after)
    return InventoryPageOut(
        items=[InventoryDeviceOut.of(d) for d in items],
        next_cursor=None if next_after is None else encode_cursor(next_after),
    )


@router.get("/inventory/unseen", response_model=PluginResourcesOut)
async def unseen_plugin_devices(
    inventory: Inventory,
    node: Annotated[str | None, Query(description="Only this node.")] = None,
) -> PluginResourcesOut:
    """Per node and extended resource (Node capacity): capacity, allocatable, the distinct
    resourceIDs ever reported (`seen`) and `unseen` = capacity - seen: device-plugin devices
    that exist but whose IDs devicestate has never seen (plugins publish no IDs for idle
    devices)."""
    rows = plugin_resources(await inventory.snapshot(node=node))
    return PluginResourcesOut(
        items=[PluginResourceOut.of(r) for r in rows], unseen=sum(r.unseen for r in rows)
    )


@router.get("/inventory/conflicts", response_model=ConflictsOut, responses=UNPROCESSABLE)
async def list_conflicts(
    inventory: Inventory,
    active: Annotated[
        bool | None, Query(description="true: only active ones, false: only cleared ones.")
    ] = None,
    node: Annotated[str | None, Query(description="Only this node (or pool:... key).")] = None,
    kind: Annotated[ConflictKind | None, Query(description="Only this kind.")] = None,
) -> ConflictsOut:
    """Inventory conflicts, flagged and never merged: an ambiguous resourceID, one resourceID
    reported for two devices, a resource or GPU offered by both a device plugin and DRA, a device
    that vanished from its slice. Sorted by (node, kind, subject)."""
    rows = await inventory.conflicts(active, node, None if kind is None else kind.value)
    return ConflictsOut(items=[ConflictOut.of(c) for c in rows])


def _settings(request: Request) -> ApiFeatureSettings:
    settings: ApiFeatureSettings = request.app.state.settings
    return settings


@router.get("/capacity", response_model=CapacityOut, responses=UNPROCESSABLE)
async def capacity(
    request: Request,
    inventory: Inventory,
    view: Annotated[View, Query(description="node, pool, deviceClass or namespace.")] = View.NODE,
) -> CapacityOut:
    """Capacity per node, pool (`driver/pool`, DRA), DeviceClass (DRA; the extended resource name
    for device plugins) or namespace (allocated devices only).

    `total` devices known (DRA devices of node-scoped slices, and the Nodes' device-plugin
    capacity); `allocated` held by a claim or Pod; `unavailable` not allocated and quarantined,
    recovering, restricted, deferred, observed Unhealthy, tainted NoSchedule/NoExecute, or lost by
    the device plugin (capacity > allocatable); `idle` the rest (a quarantined device is never
    idle); `fragmented` idle devices on a node whose idle count (per class) is below
    `requestSize`.
    """
    report = build_capacity(await inventory.snapshot(), _settings(request).capacity_request_size)
    return CapacityOut.of(view.value, report)


@router.get("/capacity/divergence", response_model=DivergencesOut)
async def capacity_divergence(
    inventory: Inventory,
    node: Annotated[str | None, Query(description="Only this node.")] = None,
    diverging: Annotated[
        bool, Query(description="Only rows where both sides offer the resource and differ.")
    ] = False,
) -> DivergencesOut:
    """Reconcile check per node and extended resource named by a DeviceClass's
    `extendedResourceName`: devices the node's ResourceSlices advertise through the class's
    drivers versus the Node's capacity of that resource (`difference` = slices - capacity).
    `status` is match/mismatch when both offer it; dra-only or plugin-only otherwise (an
    extended resource served by DRA does not appear in Node capacity, KEP-5004)."""
    rows = divergence(await inventory.snapshot(node=node))
    if diverging:
        rows = [r for r in rows if r.status == "mismatch"]
    return DivergencesOut(items=[DivergenceOut.of(r) for r in rows])


# --- /metrics ----------------------------------------------------------------------------------


@dataclass(slots=True)
class InventoryGaugeCache:
    """The last capacity report and divergence rows computed for ``/metrics`` and when
    (monotonic seconds)."""

    report: CapacityReport | None = None
    divergence: list[Divergence] = field(default_factory=list)
    read_at: float = float("-inf")

    async def get(
        self, inventory: InventoryReads, request_size: int
    ) -> tuple[CapacityReport, list[Divergence]]:
        """The cached computation while younger than :data:`INVENTORY_CACHE_SECONDS`, else a new
        one (errors propagate and are not cached)."""
        now = time.monotonic()
        if self.report is None or now - self.read_at > INVENTORY_CACHE_SECONDS:
            snapshot = await inventory.snapshot()
            self.report = build_capacity(snapshot, request_size)
            self.divergence = divergence(snapshot)
            self.read_at = now
        return self.report, self.divergence


async def inventory_gauges(
    request: Request,
    registry: CollectorRegistry,
    node_view: bool,
    errors: tuple[type[BaseException], ...],
) -> None:
    """Add the capacity and divergence gauges to ``registry``:

    - ``devicestate_capacity_devices{view,key,kind}``: kind total, allocated, idle, unavailable,
      fragmented, for the pool, deviceClass and namespace views, and the node view unless
      ``node_view`` is false;
    - ``devicestate_capacity_request_size``: the request size of the fragmented count;
    - ``devicestate_inventory_divergence{node,resource}``: ResourceSlice devices minus Node
      capacity, for nodes where both offer the resource;
    - ``devicestate_api_inventory_up``: 1 when the inventory could be read (0 also while its
      tables do not exist yet).
    """
    up = Gauge(
        "devicestate_api_inventory_up",
        "1 when the API could read the inventory projection for this scrape.",
        registry=registry,
    )
    cache: InventoryGaugeCache = request.app.state.inventory_gauges
    try:
        report, rows = await cache.get(
            request.app.state.inventory, _settings(request).capacity_request_size
        )
    except errors as exc:
        log.warning("inventory metrics read failed", error=repr(exc))
        up.set(0)
        return
    up.set(1)
    devices = Gauge(
        "devicestate_capacity_devices",
        "Devices per capacity view and key: total, allocated, idle, unavailable (quarantined, "
        "restricted, Unhealthy, ...), fragmented (idle on a node that cannot fit the common "
        "request size).",
        ["view", "key", "kind"],
        registry=registry,
    )
    for view, view_rows in report.views.items():
        if view == View.NODE.value and not node_view:
            continue
        for row in view_rows:
            values: dict[str, Any] = {
                "total": row.total,
                "allocated": row.allocated,
                "idle": row.idle,
                "unavailable": row.unavailable,
                "fragmented": row.fragmented,
            }
            for kind in CAPACITY_KINDS:
                devices.labels(view, row.key, kind).set(values[kind])
    Gauge(
        "devicestate_capacity_request_size",
        "Request size of the fragmented count (setting, else the most common claim request).",
        registry=registry,
    ).set(report.request_size)
    diverged = Gauge(
        "devicestate_inventory_divergence",
        "Per node and extended resource offered by both: devices its ResourceSlices advertise "
        "(DeviceClass extendedResourceName) minus the Node's capacity.",
        ["node", "resource"],
        registry=registry,
    )
    for d in rows:
        if d.both_sides:
            diverged.labels(d.node, d.resource_name).set(d.difference)
