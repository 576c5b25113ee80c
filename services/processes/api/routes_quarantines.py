"""Quarantine endpoints (issue 3): create, extend and release (commands), list and read.

**Quarantine IDs contain ``/`` and ``@``** (``<node>/<resourceID>@<statusVersion>`` for system
quarantines, ``manual/<commandID>`` for manual ones). They are written unescaped in the path, and
the action is the LAST segment: ``POST /v1/quarantines/{quarantineID}/extend`` and
``.../release``; ``GET /v1/quarantines/{quarantineID}`` reads one. Percent-encode only what URLs
require (``%``, ``?``, ``#``, spaces).

Writes are commands (:mod:`services.processes.api.command_submit`): 202 pending, or with
``?wait=`` the outcome (201 quarantined, 200 extended/released, 409 rejected). Extending or
releasing an unknown quarantine is 404, an already released one 409, before any command is
appended; a break-glass release needs the admin role (403). ``GET /v1/quarantines`` is
keyset-paginated with the cursor of :mod:`services.processes.api.quarantine_cursor` (422 for a
malformed one). ``router`` holds all of them.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request
from fastapi.responses import JSONResponse

from services.adapters.projection.reads_governance import GovernanceReads, QuarantineFilters
from services.domain.events import format_time
from services.domain.governance.device_state import QuarantineKind, QuarantineStatus
from services.domain.governance.inputs import CommandAction, Role
from services.processes.api.auth import Operator, check_role
from services.processes.api.command_submit import (
    WRITE_RESPONSES,
    IdempotencyKey,
    clock_now,
    reads_router,
    submit,
    writes_router,
)
from services.processes.api.command_wait import Wait
from services.processes.api.hardening import QUARANTINE_ID_MAX_BYTES, text_problem
from services.processes.api.quarantine_cursor import (
    decode_quarantine_cursor,
    encode_quarantine_cursor,
)
from services.processes.api.routes_devices import MAX_PAGE, NodeFilter, Reads
from services.processes.api.schemas import ErrorOut
from services.processes.api.schemas_governance import (
    CommandOut,
    ExtendIn,
    QuarantineCreateIn,
    QuarantineOut,
    QuarantinePageOut,
    ReleaseIn,
)

QuarantineID = Annotated[
    str,
    Path(
        alias="quarantineID",
        description="Quarantine ID, unescaped (it contains `/` and `@`).",
    ),
]


WritePathID = Annotated[
    str,
    Path(
        alias="quarantineID",
        description="Quarantine ID, unescaped (it contains `/` and `@`); no control character.",
        json_schema_extra={"pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]+$"},
    ),
]


async def _write_quarantine_id(quarantine_id: WritePathID) -> str:
    """The quarantine ID of a write: no control character (NUL above all), at most as long as
    the IDs the governor makes (422 before any database read)."""
    problem = text_problem("quarantineID", quarantine_id, max_bytes=QUARANTINE_ID_MAX_BYTES)
    if problem is not None:
        raise HTTPException(422, problem)
    return quarantine_id


WriteQuarantineID = Annotated[str, Depends(_write_quarantine_id)]

write_routes = writes_router()
read_routes = reads_router()


async def _active_quarantine(reads: GovernanceReads, quarantine_id: str) -> dict[str, Any]:
    row = await reads.quarantine(quarantine_id)
    if row is None:
        raise HTTPException(404, f"quarantine {quarantine_id!r} is unknown")
    if row["status"] == QuarantineStatus.RELEASED.value:
        when = row["released_at"]
        raise HTTPException(
            409,
            f"quarantine {quarantine_id!r} was already released"
            + (f" at {format_time(when)}" if when is not None else "")
            + (f" by {row['released_by']}" if row["released_by"] else ""),
        )
    return row


@write_routes.post(
    "/quarantines",
    status_code=202,
    response_model=CommandOut,
    responses={**WRITE_RESPONSES, 201: {"model": CommandOut, "description": "Quarantined."}},
)
async def create_quarantine(
    request: Request,
    principal: Operator,
    idempotency_key: IdempotencyKey,
    body: QuarantineCreateIn,
    wait: Wait = 0,
) -> JSONResponse:
    """Quarantine a device (operator). Without `expiresAt`/`ttlSeconds` it lasts until released.
    The manual quarantine's ID is `manual/<commandID>`."""
    return await submit(
        request,
        principal,
        CommandAction.QUARANTINE,
        reason=body.reason,
        wait=wait,
        idempotency_key=idempotency_key,
        node=body.node,
        resource_id=body.resource_id,
        expires_at=body.expiry(clock_now(request)),
    )


@write_routes.post(
    "/quarantines/{quarantineID:path}/extend",
    status_code=202,
    response_model=CommandOut,
    responses={**WRITE_RESPONSES, 404: {"model": ErrorOut, "description": "Unknown quarantine."}},
)
async def extend_quarantine(
    request: Request,
    principal: Operator,
    idempotency_key: IdempotencyKey,
    reads: Reads,
    quarantine_id: WriteQuarantineID,
    body: ExtendIn,
    wait: Wait = 0,
) -> JSONResponse:
    """Set a new expiry of a quarantine (operator): `expiresAt`, or `ttlSeconds` from now."""
    row = await _active_quarantine(reads, quarantine_id)
    return await submit(
        request,
        principal,
        CommandAction.EXTEND,
        reason=body.reason,
        wait=wait,
        idempotency_key=idempotency_key,
        node=row["node"],
        resource_id=row["resource_id"],
        expires_at=body.expiry(clock_now(request)),
        quarantine_id=quarantine_id,
    )


@write_routes.post(
    "/quarantines/{quarantineID:path}/release",
    status_code=202,
    response_model=CommandOut,
    responses={**WRITE_RESPONSES, 404: {"model": ErrorOut, "description": "Unknown quarantine."}},
)
async def release_quarantine(
    request: Request,
    principal: Operator,
    idempotency_key: IdempotencyKey,
    reads: Reads,
    quarantine_id: WriteQuarantineID,
    body: ReleaseIn,
    wait: Wait = 0,
) -> JSONResponse:
    """Release a quarantine (operator). `breakGlass: true` releases a system quarantine that has
    not passed recovery and needs the admin role."""
    if body.break_glass:
        check_role(principal, Role.ADMIN, "a break-glass release")
    row = await _active_quarantine(reads, quarantine_id)
    return await submit(
        request,
        principal,
        CommandAction.RELEASE,
        reason=body.reason,
        wait=wait,
        idempotency_key=idempotency_key,
        node=row["node"],
        resource_id=row["resource_id"],
        break_glass=body.break_glass,
        quarantine_id=quarantine_id,
    )


@read_routes.get("/quarantines", response_model=QuarantinePageOut)
async def list_quarantines(
    reads: Reads,
    status: Annotated[
        QuarantineStatus | None, Query(description="active, recovering or released.")
    ] = None,
    kind: Annotated[QuarantineKind | None, Query(description="system or manual.")] = None,
    node: NodeFilter = None,
    resource_id: Annotated[
        str | None, Query(alias="resourceID", description="Only quarantines of this device ID.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="Page size.")] = 100,
    cursor: Annotated[str | None, Query(description="`nextCursor` of the previous page.")] = None,
) -> QuarantinePageOut:
    """Quarantine records, newest first, keyset-paginated (follow `nextCursor`)."""
    after = None
    if cursor is not None:
        try:
            after = decode_quarantine_cursor(cursor)
        except ValueError as exc:
            raise HTTPException(422, f"malformed cursor: {exc}") from None
    filters = QuarantineFilters(
        status=None if status is None else status.value,
        kind=None if kind is None else kind.value,
        node=node,
        resource_id=resource_id,
    )
    page = await reads.list_quarantines(filters, limit, after)
    return QuarantinePageOut(
        items=[QuarantineOut.of(r) for r in page.items],
        next_cursor=None if page.next_after is None else encode_quarantine_cursor(page.next_after),
    )


@read_routes.get(
    "/quarantines/{quarantineID:path}",
    response_model=QuarantineOut,
    responses={404: {"model": ErrorOut, "description": "Unknown quarantine."}},
)
async def get_quarantine(reads: Reads, quarantine_id: QuarantineID) -> QuarantineOut:
    """One quarantine record (its ID unescaped, `/` and `@` included)."""
    row = await reads.quarantine(quarantine_id)
    if row is None:
        raise HTTPException(404, f"quarantine {quarantine_id!r} is unknown")
    return QuarantineOut.of(row)


router = APIRouter()
router.include_router(write_routes)
router.include_router(read_routes)
