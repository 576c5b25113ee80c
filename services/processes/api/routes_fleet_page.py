"""The fleet page (issue 14): ``GET /ui/fleet`` and ``GET /ui/fleet/devices/{node}/{resourceID}``.

Read-only HTML over the same reads as the JSON endpoints and with the same auth rules as every
GET (anonymous unless ``DEVICESTATE_API_ANONYMOUS_READ=false``, then a viewer token: 401 for a
browser without one). Rendering is :mod:`services.processes.api.fleet_html`.

**Size.** The page never reads the whole fleet: the counts by governance state are one
``GROUP BY`` (the same as ``GET /v1/governance``), the grid is one keyset page of at most
``limit`` devices (default 800: about 100 nodes of 8 GPUs; ``cursor`` links to the next page,
filters ``state`` and ``node`` narrow it: a count's link shows only that state), and the
quarantine table holds the newest :data:`QUARANTINES_SHOWN` active and recovering ones. A grid
page of 800 devices is about 250 KB of HTML whatever the fleet's size
(``tests/api/test_fleet_html.py``).

Errors: 422 for a malformed cursor or a bad parameter, 404 for an unknown device's timeline,
503 when the database cannot be read (JSON ``detail``, like the API).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import HTMLResponse

from services.adapters.projection.read_models import DeviceFilters
from services.adapters.projection.reads_governance import QuarantineFilters
from services.domain.governance.device_state import GovState, QuarantineStatus
from services.processes.api.auth import read_access
from services.processes.api.command_submit import clock_now
from services.processes.api.fleet_html import PAGE_PATH, fleet_page, timeline_page
from services.processes.api.governance_status import governance_status
from services.processes.api.routes_devices import (
    MAX_PAGE,
    NodeName,
    Reads,
    ResourceID,
    Store,
    decode_cursor,
    encode_cursor,
)
from services.processes.api.routes_governance import timeline
from services.processes.api.routing import ServiceRoute
from services.processes.api.schemas_governance import GovernanceOut
from services.runtime.config import TickSettings

QUARANTINES_SHOWN = 200
"""Most quarantines of each status (active, recovering) the page lists, newest first."""

router = APIRouter(
    prefix=PAGE_PATH,
    dependencies=[Depends(read_access)],
    route_class=ServiceRoute,
    include_in_schema=False,  # HTML for people; the JSON API is the documented interface
)


async def _status(request: Request, reads: Reads) -> GovernanceOut:
    settings: TickSettings = request.app.state.settings
    return governance_status(await reads.fleet_status(), clock_now(request), settings)


@router.get("", response_class=HTMLResponse)
async def fleet(
    request: Request,
    reads: Reads,
    state: Annotated[GovState | None, Query()] = None,
    node: Annotated[str | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 800,
    cursor: Annotated[str | None, Query()] = None,
) -> HTMLResponse:
    """The fleet page: banner, counts by state, one page of the grid, the quarantines."""
    after = None
    if cursor is not None:
        try:
            after = decode_cursor(cursor)
        except ValueError as exc:
            raise HTTPException(422, f"malformed cursor: {exc}") from None
    page = await reads.list_devices(DeviceFilters(node=node), state, limit, after)
    shown: list[dict[str, Any]] = []
    more = False
    for status in (QuarantineStatus.ACTIVE, QuarantineStatus.RECOVERING):
        found = await reads.list_quarantines(
            QuarantineFilters(status=status.value), QUARANTINES_SHOWN, None
        )
        shown.extend(found.items)
        more = more or found.next_after is not None
    html = fleet_page(
        await _status(request, reads),
        page.items,
        shown,
        state=None if state is None else state.value,
        node=node,
        next_cursor=None if page.next_after is None else encode_cursor(page.next_after),
        more_quarantines=more,
        limit=limit,
    )
    return HTMLResponse(html)


@router.get("/devices/{node}/{resourceID:path}", response_class=HTMLResponse)
async def device_timeline(
    request: Request, store: Store, reads: Reads, node: NodeName, resource_id: ResourceID
) -> HTMLResponse:
    """A device's timeline page: what ``GET /v1/nodes/{node}/timeline/{resourceID}`` returns
    (404 for an unknown device)."""
    found = await timeline(store, reads, node, resource_id, MAX_PAGE)
    return HTMLResponse(timeline_page(await _status(request, reads), found))
