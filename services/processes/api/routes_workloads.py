"""``GET /v1/workloads`` (issue 13 item 1): the Pods holding devices with their workload (the
controller chain from ownerReferences) and migration class, by default only those on a
quarantined device. Keyset-paginated by Pod UID with an opaque cursor (422 for a malformed
one); 503 while the database cannot be read (the app's handler).
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated

import orjson
from fastapi import APIRouter, Depends, HTTPException, Query, Request

from services.adapters.projection.reads_workloads import WorkloadFilters, WorkloadReads
from services.processes.api.auth import read_access
from services.processes.api.routes_devices import MAX_PAGE, UNPROCESSABLE, NodeFilter
from services.processes.api.routing import ServiceRoute
from services.processes.api.schemas_workloads import WorkloadOut, WorkloadPageOut


async def get_workloads(request: Request) -> WorkloadReads:
    """The workload reads the app's lifespan created."""
    reads: WorkloadReads = request.app.state.workloads
    return reads


Workloads = Annotated[WorkloadReads, Depends(get_workloads)]

router = APIRouter(
    prefix="/v1",
    tags=["workloads"],
    dependencies=[Depends(read_access)],
    route_class=ServiceRoute,
)


def encode_workload_cursor(pod_uid: str) -> str:
    """The cursor after the Pod ``pod_uid``: URL-safe base64 of ``["<podUID>"]``."""
    return base64.urlsafe_b64encode(orjson.dumps([pod_uid])).rstrip(b"=").decode()


def decode_workload_cursor(cursor: str) -> str:
    """The Pod UID of a cursor from :func:`encode_workload_cursor`; ``ValueError`` otherwise."""
    try:
        value = orjson.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (binascii.Error, ValueError):
        raise ValueError("not a cursor returned by this API") from None
    if not (isinstance(value, list) and len(value) == 1 and isinstance(value[0], str)):
        raise ValueError("not a cursor returned by this API")
    return value[0]


@router.get("/workloads", response_model=WorkloadPageOut, responses=UNPROCESSABLE)
async def list_workloads(
    reads: Workloads,
    quarantined: Annotated[
        bool,
        Query(description="true (default): only Pods holding a quarantined device; false: all."),
    ] = True,
    node: NodeFilter = None,
    namespace: Annotated[str | None, Query(description="Only Pods in this namespace.")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="Page size.")] = 100,
    cursor: Annotated[str | None, Query(description="`nextCursor` of the previous page.")] = None,
) -> WorkloadPageOut:
    """Pods holding devices now, each with its workload, controller chain, migration class and
    devices (with their governance state), sorted by Pod UID; follow `nextCursor`."""
    after = None
    if cursor is not None:
        try:
            after = decode_workload_cursor(cursor)
        except ValueError as exc:
            raise HTTPException(422, f"malformed cursor: {exc}") from None
    filters = WorkloadFilters(quarantined=quarantined, node=node, namespace=namespace)
    page = await reads.list_workloads(filters, limit, after)
    return WorkloadPageOut(
        items=[WorkloadOut.of(item) for item in page.items],
        next_cursor=None if page.next_after is None else encode_workload_cursor(page.next_after),
    )
