"""Device directory endpoints: ``/v1/devices``, ``/v1/nodes``, ``/v1/fleet``.

URL scheme: a device is ``(node, resourceID)``. Node names never contain ``/``; resourceIDs often
do (``driver/pool/device``, CDI names), so the resourceID is always the LAST path segment group
and may contain ``/`` unescaped: ``/v1/nodes/{node}/devices/{resourceID}``. Percent-encode only
what URLs require (``%``, ``?``, ``#``, spaces).
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request, Response
from pydantic import AfterValidator

from services.adapters.projection.read_models import DeviceFilters
from services.adapters.projection.reads_devices import DeviceReads
from services.adapters.projection.reads_governance import GovernanceReads
from services.domain.directory import DeviceKey
from services.domain.events import DeviceSource, Health
from services.domain.governance.device_state import GovState
from services.domain.limits import (
    DNS1123_SUBDOMAIN_PATTERN,
    NODE_NAME_MAX_LENGTH,
    node_name_problem,
)
from services.processes.api.auth import read_access
from services.processes.api.governance_status import fleet_governance
from services.processes.api.routing import ServiceRoute
from services.processes.api.schemas import (
    DeviceOut,
    DevicePageOut,
    ErrorOut,
    FleetOut,
    HistoryEntryOut,
    HistoryOut,
    NodeCountsOut,
    NodesOut,
    NodeSummaryOut,
)
from services.processes.api.schemas_governance import FleetStatusOut
from services.processes.api.warm_devices import WarmDevices, device_body

MAX_PAGE = 1000
"""Largest ``limit`` of one page."""


async def get_store(request: Request) -> DeviceReads:
    """The directory reads the app's lifespan created (async: a sync dependency would run in
    a thread)."""
    store: DeviceReads = request.app.state.store
    return store


async def get_reads(request: Request) -> GovernanceReads:
    """The governance read helpers the app's lifespan created."""
    reads: GovernanceReads = request.app.state.reads
    return reads


Store = Annotated[DeviceReads, Depends(get_store)]
Reads = Annotated[GovernanceReads, Depends(get_reads)]


def _node_name(value: str | None) -> str | None:
    # The worker never stores another name (services.domain.limits), so say what a name is
    # rather than answer 404 or an empty page; the pattern stays in the OpenAPI document.
    problem = None if value is None else node_name_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


NodeName = Annotated[
    str,
    Path(
        description="Node name: a DNS-1123 subdomain (never contains `/`); another is a 422.",
        json_schema_extra={"pattern": DNS1123_SUBDOMAIN_PATTERN, "maxLength": NODE_NAME_MAX_LENGTH},
    ),
    AfterValidator(_node_name),
]
NodeFilter = Annotated[
    str | None,
    Query(
        description="Only this node (a DNS-1123 subdomain; another is a 422).",
        json_schema_extra={"pattern": DNS1123_SUBDOMAIN_PATTERN, "maxLength": NODE_NAME_MAX_LENGTH},
    ),
    AfterValidator(_node_name),
]
ResourceID = Annotated[
    str,
    Path(
        alias="resourceID",
        description="Device ID as the Pod status reports it; may contain `/`, always last in the "
        "path.",
    ),
]

router = APIRouter(
    prefix="/v1",
    tags=["devices"],
    dependencies=[Depends(read_access)],
    route_class=ServiceRoute,
)
NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorOut, "description": "Unknown device or node."}
}
UNPROCESSABLE: dict[int | str, dict[str, Any]] = {
    422: {"model": ErrorOut, "description": "Invalid query parameter."}
}


def _not_found(node: str, resource_id: str) -> str:
    return f"device {resource_id!r} on node {node!r} is not in the directory"


def encode_cursor(key: DeviceKey) -> str:
    """Opaque page cursor for the key ``(node, resourceID)`` of the last item of a page."""
    return base64.urlsafe_b64encode(orjson.dumps(list(key))).rstrip(b"=").decode()


def decode_cursor(cursor: str) -> DeviceKey:
    """The key a cursor from :func:`encode_cursor` holds. Raises ``ValueError`` when malformed."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value = orjson.loads(raw)
    except (binascii.Error, ValueError) as exc:
        raise ValueError("not a cursor returned by this API") from exc
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)):
        raise ValueError("not a cursor returned by this API")
    return (value[0], value[1])


@router.get("/devices", response_model=DevicePageOut, responses=UNPROCESSABLE)
async def list_devices(
    reads: Reads,
    node: NodeFilter = None,
    health: Annotated[Health | None, Query(description="Only devices with this health.")] = None,
    resource_name: Annotated[
        str | None, Query(alias="resourceName", description="e.g. nvidia.com/gpu.")
    ] = None,
    namespace: Annotated[
        str | None, Query(description="Only devices allocated to a Pod in this namespace.")
    ] = None,
    pod_uid: Annotated[
        str | None, Query(alias="podUID", description="Only devices allocated to this Pod.")
    ] = None,
    source: Annotated[DeviceSource | None, Query(description="device-plugin or dra.")] = None,
    state: Annotated[
        GovState | None,
        Query(description="Only devices in this governance state (e.g. Quarantined)."),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="Page size.")] = 100,
    cursor: Annotated[str | None, Query(description="`nextCursor` of the previous page.")] = None,
) -> DevicePageOut:
    """Devices matching every given filter, sorted by (node, resourceID), one page at a time,
    each with its `governance` (null when the governor has not seen the device).

    Follow `nextCursor` until it is null; cursors stay valid while devices change (keyset
    pagination: a page starts after the last key of the previous one).
    """
    after = None
    if cursor is not None:
        try:
            after = decode_cursor(cursor)
        except ValueError as exc:
            raise HTTPException(422, f"malformed cursor: {exc}") from None
    filters = DeviceFilters(
        node=node,
        health=health,
        resource_name=resource_name,
        source=source,
        namespace=namespace,
        pod_uid=pod_uid,
    )
    page = await reads.list_devices(filters, state, limit, after)
    return DevicePageOut(
        items=[DeviceOut.of(d.record, d.governance) for d in page.items],
        next_cursor=None if page.next_after is None else encode_cursor(page.next_after),
    )


@router.get("/nodes", response_model=NodesOut, responses=UNPROCESSABLE)
async def list_nodes(
    store: Store,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="Page size.")] = MAX_PAGE,
    cursor: Annotated[str | None, Query(description="`nextCursor` of the previous page.")] = None,
) -> NodesOut:
    """Nodes with devices, with their device counts by health, sorted by node name, one page at
    a time (follow `nextCursor` until it is null; keyset pagination, valid while devices
    change)."""
    after = None
    if cursor is not None:
        try:
            after, _ = decode_cursor(cursor)
        except ValueError as exc:
            raise HTTPException(422, f"malformed cursor: {exc}") from None
    nodes = await store.list_nodes(limit + 1, after)
    more = len(nodes) > limit
    nodes = nodes[:limit]
    return NodesOut(
        items=[NodeCountsOut.of(n) for n in nodes],
        next_cursor=encode_cursor((nodes[-1].node, "")) if more else None,
    )


@router.get("/nodes/{node}", response_model=NodeSummaryOut, responses=NOT_FOUND)
async def get_node(store: Store, reads: Reads, node: NodeName) -> NodeSummaryOut:
    """One node's device counts by health and its devices (with their governance)."""
    summary = await store.node_summary(node)
    if summary is None:
        raise HTTPException(404, f"node {node!r} has no devices in the directory")
    return NodeSummaryOut.of(summary, await reads.node_governance(node))


@router.get(
    "/nodes/{node}/devices/{resourceID:path}", response_model=DeviceOut, responses=NOT_FOUND
)
async def get_device(
    request: Request, reads: Reads, node: NodeName, resource_id: ResourceID
) -> Response:
    """One device with its governance. The resourceID is the rest of the path and may contain
    `/`."""
    # The body is DeviceOut (response_model, for the document), encoded once per change of the
    # device: from the warm copy (warm_devices) when it holds the device.
    warm: WarmDevices | None = request.app.state.warm_devices
    key = (node, resource_id)
    if warm is not None:
        body = warm.get(key)
        if body is not None:
            return Response(body, media_type="application/json")
        if warm.complete:  # not in the directory as of the last refresh
            raise HTTPException(404, _not_found(node, resource_id))
        generation = warm.generation
    found = await reads.get_device(node, resource_id)
    if found is None:
        raise HTTPException(404, _not_found(node, resource_id))
    body = device_body(found)
    if warm is not None:
        warm.put(key, body, generation)
    return Response(body, media_type="application/json")


@router.get(
    "/nodes/{node}/history/{resourceID:path}",
    response_model=HistoryOut,
    responses={**NOT_FOUND, **UNPROCESSABLE},
)
async def get_history(
    store: Store,
    node: NodeName,
    resource_id: ResourceID,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="Most entries returned.")] = 100,
) -> HistoryOut:
    """A device's history, newest first: applied observations and releases, each with the log
    position of its event. The resourceID is the rest of the path and may contain `/`."""
    if await store.get_device(node, resource_id) is None:
        raise HTTPException(404, f"device {resource_id!r} on node {node!r} is not in the directory")
    entries = await store.device_history(node, resource_id, limit)
    return HistoryOut(
        node=node, resource_id=resource_id, items=[HistoryEntryOut.of(e) for e in entries]
    )


@router.get("/fleet", response_model=FleetStatusOut)
async def fleet(store: Store, reads: Reads) -> FleetStatusOut:
    """Device counts over all nodes, by health and by source, and the fleet-level governance
    state: circuit breaker, automation pause, the watch's freshness (stale on event time) and the
    open node incidents (devices of a node that faulted together)."""
    counts = FleetOut.of(await store.fleet_counts())
    governance = fleet_governance(await reads.fleet_status())
    return FleetStatusOut(**dict(counts), governance=governance)
