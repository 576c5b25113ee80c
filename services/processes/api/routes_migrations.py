"""Workload migrations (issue 13 item 2).

- ``POST /v1/migrations/{migrationID}/reports`` (operator: the executor's token): appends the
  executor's :class:`~services.domain.migration.records.MigrationReport` to the governance topic
  and answers 202 once Kafka acknowledged it (503 when it cannot). The governor decides it on
  its event time (a stale fencing token, another holder or a report the phase does not expect is
  a ``MigrationReportRejected``); 404 for a migration the governor never decided about.
- ``GET /v1/migrations`` (``?phase=``, ``?limit=``): each migration as of the governor's latest
  decision about it, newest first.
- ``GET /v1/migrations/{migrationID}``: the migration and every decision about it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Path, Query, Request
from fastapi.responses import JSONResponse

from services.adapters.projection.reads_migrations import MigrationReads
from services.domain.migration.book import Phase
from services.processes.api.auth import Operator
from services.processes.api.command_submit import ERRORS, clock_now, reads_router, writes_router
from services.processes.api.commands import CommandPublisher
from services.processes.api.schemas import ErrorOut
from services.processes.api.schemas_migrations import (
    MIGRATION_ID_PATTERN,
    MigrationDecisionOut,
    MigrationHistoryOut,
    MigrationOut,
    MigrationReportIn,
    MigrationsOut,
    ReportAcceptedOut,
    report_of,
)

MAX_MIGRATIONS = 1000
MigrationID = Annotated[str, Path(alias="migrationID", pattern=MIGRATION_ID_PATTERN)]
PhaseName = Literal[
    "waiting",
    "planned",
    "checkpoint-requested",
    "eviction-requested",
    "released",
    "completed",
    "failed",
    "evidence-kept",
    "cancelled",
]
assert set(PhaseName.__args__) == {p.value for p in Phase}  # type: ignore[attr-defined]

write_routes = writes_router()
read_routes = reads_router()
UNKNOWN: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorOut, "description": "No decision about this migration."}
}


def _reads(request: Request) -> MigrationReads:
    reads: MigrationReads = request.app.state.migrations
    return reads


@write_routes.post(
    "/migrations/{migrationID}/reports",
    status_code=202,
    response_model=ReportAcceptedOut,
    responses={**ERRORS, **UNKNOWN, 202: {"model": ReportAcceptedOut}},
)
async def post_report(
    request: Request, principal: Operator, migration_id: MigrationID, body: MigrationReportIn
) -> JSONResponse:
    """Append an executor's report; the governor's decision follows in
    ``GET /v1/migrations/{migrationID}``."""
    if not await _reads(request).history(migration_id):
        raise HTTPException(404, f"migration {migration_id!r} is unknown to the governor")
    report = report_of(migration_id, body, clock_now(request))
    publisher: CommandPublisher = request.app.state.publisher
    await publisher.publish(report)  # CommandLogUnavailable -> 503 (app handler)
    out = ReportAcceptedOut(
        migration_id=migration_id, kind=body.kind, holder=body.holder, status="appended"
    )
    return JSONResponse(out.model_dump(mode="json", by_alias=True), status_code=202)


@read_routes.get("/migrations", response_model=MigrationsOut)
async def list_migrations(
    request: Request,
    phase: Annotated[PhaseName | None, Query(description="Only migrations in this phase.")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_MIGRATIONS)] = 100,
) -> MigrationsOut:
    """Migrations as of the governor's latest decision about each, newest first."""
    rows = await _reads(request).latest(phase, limit)
    return MigrationsOut(items=[MigrationOut.of(r.seq, r.idx, r.kind, r.details) for r in rows])


@read_routes.get("/migrations/{migrationID}", response_model=MigrationHistoryOut, responses=UNKNOWN)
async def get_migration(request: Request, migration_id: MigrationID) -> MigrationHistoryOut:
    """The migration and every decision about it (refused reports included), oldest first."""
    decisions = await _reads(request).history(migration_id)
    changed = [d for d in decisions if "phase" in d.details]
    if not changed:
        raise HTTPException(404, f"migration {migration_id!r} is unknown to the governor")
    last = changed[-1]
    return MigrationHistoryOut(
        migration=MigrationOut.of(last.seq, last.idx, last.kind, last.details),
        decisions=[
            MigrationDecisionOut(id=f"{d.seq}.{d.idx}", kind=d.kind, at=d.at, summary=d.summary)
            for d in decisions
        ],
    )


router = APIRouter()
router.include_router(write_routes)
router.include_router(read_routes)
