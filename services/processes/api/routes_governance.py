"""Governance reads (issue 3): a command's outcome, a device's timeline, the fleet's status.

- ``GET /v1/commands/{commandID}``: the governor's decision of a command (200 accepted or
  rejected with its reason), 202 pending when this API process appended it and it is not decided
  yet, 404 otherwise (:mod:`services.processes.api.command_submit` appends commands).
- ``GET /v1/nodes/{node}/timeline/{resourceID}``: observations and governance decisions merged in
  time order (404 for an unknown device).
- ``GET /v1/governance``: the status document of
  :mod:`services.processes.api.governance_status`.

All need read access; 503 when the database cannot be read (app handler). ``router`` holds them.
Quarantines are in :mod:`services.processes.api.routes_quarantines`, the fleet-wide switches in
:mod:`services.processes.api.routes_automation`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, Request
from fastapi.responses import JSONResponse

from services.processes.api.command_submit import (
    clock_now,
    command_response,
    outcome_out,
    quarantine_of,
    reads_router,
    recent_commands,
)
from services.processes.api.governance_status import governance_status
from services.processes.api.routes_devices import MAX_PAGE, NodeName, Reads, ResourceID, Store
from services.processes.api.schemas import ErrorOut, HistoryEntryOut
from services.processes.api.schemas_governance import (
    CommandOut,
    GovernanceOut,
    TimelineItemOut,
    TimelineOut,
)
from services.runtime.config import TickSettings

read_routes = reads_router()


@read_routes.get(
    "/commands/{commandID}",
    response_model=CommandOut,
    responses={
        202: {"model": CommandOut, "description": "Published by this API, not decided yet."},
        404: {"model": ErrorOut, "description": "Unknown, or not decided yet."},
    },
)
async def get_command(
    request: Request,
    reads: Reads,
    command_id: Annotated[str, Path(alias="commandID")],
) -> CommandOut | JSONResponse:
    """A command's outcome: accepted or rejected (with the governor's reason); 202 pending when
    this API process appended it and the governor has not decided yet, 404 otherwise."""
    outcome = await reads.command(command_id)
    if outcome is not None:
        return outcome_out(outcome, await quarantine_of(reads, outcome, None))
    if command_id in recent_commands(request):
        pending = CommandOut(
            command_id=command_id, status="pending", detail="appended, not decided yet"
        )
        return command_response(pending, 202)
    raise HTTPException(
        404,
        f"command {command_id!r} has no outcome: unknown, or not decided by the governor yet",
    )


@read_routes.get(
    "/nodes/{node}/timeline/{resourceID:path}",
    response_model=TimelineOut,
    responses={404: {"model": ErrorOut, "description": "Unknown device."}},
)
async def timeline(
    store: Store,
    reads: Reads,
    node: NodeName,
    resource_id: ResourceID,
    limit: Annotated[
        int, Query(ge=1, le=MAX_PAGE, description="Most items (the newest are kept).")
    ] = 200,
) -> TimelineOut:
    """A device's observations (`device_history`) and governance decisions merged in time
    order, oldest first; the newest `limit` items. At the same time an observation comes before
    the decisions it caused."""
    history = await store.device_history(node, resource_id, limit)
    decisions = await reads.device_decisions(node, resource_id, limit)
    if not history and not decisions and not await reads.device_known(node, resource_id):
        raise HTTPException(404, f"device {resource_id!r} on node {node!r} is unknown")
    items: list[tuple[tuple[datetime, int, Any, Any, Any], TimelineItemOut]] = []
    for entry in history:
        fields = HistoryEntryOut.of(entry).model_dump(mode="json", by_alias=True)
        fields.pop("observedAt", None)
        p = entry.position
        key = (entry.observed_at, 0, p.topic, p.partition, p.offset)
        items.append(
            (key, TimelineItemOut(kind="observation", time=entry.observed_at, fields=fields))
        )
    for d in decisions:
        fields = {k: v for k, v in d.payload.items() if k not in ("schema", "node", "resourceID")}
        fields.pop("at", None)
        fields.update(id=f"{d.seq}.{d.idx}", type=d.kind, seq=d.seq, index=d.idx)
        if d.incident is not None:
            fields["incident"] = d.incident
        key = (d.at, 1, "", d.seq, d.idx)
        items.append((key, TimelineItemOut(kind="decision", time=d.at, fields=fields)))
    items.sort(key=lambda kv: kv[0])
    return TimelineOut(
        node=node, resource_id=resource_id, items=[item for _, item in items[-limit:]]
    )


@read_routes.get("/governance", response_model=GovernanceOut)
async def governance(request: Request, reads: Reads) -> GovernanceOut:
    """Fleet governance status: the governor's event-time watermark and whether observations are
    stale (watermark more than 2 x the watcher tick + 5 s behind the wall clock), the circuit
    breaker, the automation switch, active quarantines and devices by governance state."""
    settings: TickSettings = request.app.state.settings
    return governance_status(await reads.fleet_status(), clock_now(request), settings)


router = APIRouter()
router.include_router(read_routes)
