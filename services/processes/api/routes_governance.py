"""Governance endpoints (issue 3): operator commands, quarantines, the device timeline and the
fleet's governance status.

**Writes are commands.** ``POST`` routes never change the projection: each appends an
``OperatorCommand`` (actor = the token's name, its role, the reason) to the governance topic and
answers ``202 {commandID, status: "pending"}`` once Kafka acknowledged it (``acks=all``), or 503
when Kafka is unreachable. The governor decides every command (``CommandAccepted`` or
``CommandRejected``) and records the outcome, which ``GET /v1/commands/{commandID}`` serves. With
``?wait=<seconds>`` (at most 30) the API waits for the outcome: 201 for an accepted quarantine,
200 for another accepted command, 409 with the governor's reason for a rejection, 202 if still
undecided. An ``Idempotency-Key`` header becomes the commandID, so a client retry does not make a
second command (the governor ignores a repeated commandID; a key already decided gets its outcome).

**Quarantine IDs contain ``/`` and ``@``** (``<node>/<resourceID>@<statusVersion>`` for system
quarantines, ``manual/<commandID>`` for manual ones). They are written unescaped in the path, and
the action is the LAST segment: ``POST /v1/quarantines/{quarantineID}/extend`` and
``.../release``; ``GET /v1/quarantines/{quarantineID}`` reads one. Percent-encode only what URLs
require (``%``, ``?``, ``#``, spaces).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import re
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, Final
from uuid import uuid4

import orjson
import structlog
from fastapi import APIRouter, Depends, Header, HTTPException, Path, Query, Request
from fastapi.responses import JSONResponse

from services.adapters.projection.errors import DatabaseError
from services.adapters.projection.reads_governance import (
    CommandOutcome,
    FleetStatus,
    GovernanceReads,
    QuarantineCursor,
    QuarantineFilters,
)
from services.domain.codec import parse_time
from services.domain.events import format_time
from services.domain.governance.device_state import QuarantineKind, QuarantineStatus
from services.domain.governance.inputs import CommandAction, OperatorCommand, Role
from services.processes.api.auth import Admin, Operator, Principal, check_role, read_access
from services.processes.api.commands import CommandPublisher
from services.processes.api.hardening import QUARANTINE_ID_MAX_BYTES, text_problem
from services.processes.api.routes_devices import MAX_PAGE, NodeName, Reads, ResourceID, Store
from services.processes.api.schemas import ErrorOut, HistoryEntryOut
from services.processes.api.schemas_governance import (
    AutomationOut,
    BreakerOut,
    CommandOut,
    ExtendIn,
    GovernanceOut,
    QuarantineCreateIn,
    QuarantineOut,
    QuarantinePageOut,
    ReasonIn,
    ReleaseIn,
    ResumeIn,
    TimelineItemOut,
    TimelineOut,
)
from services.runtime.config import Settings

log = structlog.get_logger(__name__)

MAX_WAIT_SECONDS: Final = 30.0
STALE_SLACK_SECONDS: Final = 5.0
"""Added to twice the watcher's tick interval before observations count as stale."""
RECENT_COMMANDS: Final = 10_000
"""Command IDs this process published and remembers (``GET /v1/commands`` says pending)."""
_IDEMPOTENCY_KEY: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
_POLL_FIRST, _POLL_MAX = 0.05, 0.5

Clock = Callable[[], datetime]


QuarantineID = Annotated[
    str,
    Path(
        alias="quarantineID",
        description="Quarantine ID, unescaped (it contains `/` and `@`).",
    ),
]
Wait = Annotated[
    float,
    Query(
        ge=0,
        le=MAX_WAIT_SECONDS,
        allow_inf_nan=False,
        description="Seconds to wait for the governor's decision (at most 30; 0: do not wait).",
    ),
]
IdempotencyKeyHeader = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        description="Client-chosen commandID (1-128 of letters, digits, `._:-`; e.g. a UUID): a "
        "retry with the same key does not make a second command.",
    ),
]


async def _idempotency_key(idempotency_key: IdempotencyKeyHeader = None) -> str | None:
    """The ``Idempotency-Key`` header, checked before anything reads the database (422)."""
    if idempotency_key is not None and not _IDEMPOTENCY_KEY.fullmatch(idempotency_key):
        raise HTTPException(
            422,
            "Idempotency-Key must be 1-128 characters of letters, digits and ._:- "
            "(e.g. a UUID), starting with a letter or digit",
        )
    return idempotency_key


async def _write_quarantine_id(quarantine_id: QuarantineID) -> str:
    """The quarantine ID of a write: no control character (NUL above all), at most as long as
    the IDs the governor makes (422 before any database read)."""
    problem = text_problem("quarantineID", quarantine_id, max_bytes=QUARANTINE_ID_MAX_BYTES)
    if problem is not None:
        raise HTTPException(422, problem)
    return quarantine_id


IdempotencyKey = Annotated[str | None, Depends(_idempotency_key)]
WriteQuarantineID = Annotated[str, Depends(_write_quarantine_id)]

ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorOut, "description": "No token or an invalid one."},
    403: {"model": ErrorOut, "description": "The token's role is too weak."},
    422: {"model": ErrorOut, "description": "Invalid body or parameters."},
    503: {"model": ErrorOut, "description": "Kafka (command log) or the database unavailable."},
}
WRITE_RESPONSES: dict[int | str, dict[str, Any]] = {
    **ERRORS,
    200: {"model": CommandOut, "description": "Accepted (with `wait`)."},
    202: {"model": CommandOut, "description": "Appended to the log, not decided yet."},
    409: {"model": CommandOut, "description": "Rejected by the governor (with `wait`)."},
}

writes = APIRouter(prefix="/v1", tags=["governance: commands"])
reads_router = APIRouter(
    prefix="/v1", tags=["governance"], dependencies=[Depends(read_access)], responses=ERRORS
)


# --- helpers ----------------------------------------------------------------------------------


def _clock(request: Request) -> datetime:
    clock: Clock = request.app.state.clock
    return clock()


def _recent(request: Request) -> OrderedDict[str, None]:
    recent: OrderedDict[str, None] = request.app.state.recent_commands
    return recent


def _body(model: CommandOut, status: int) -> JSONResponse:
    headers = {"Location": f"/v1/commands/{model.command_id}"}
    return JSONResponse(
        model.model_dump(mode="json", by_alias=True), status_code=status, headers=headers
    )


def _outcome(outcome: CommandOutcome, quarantine_id: str | None) -> CommandOut:
    verdict = "accepted" if outcome.accepted else "rejected"
    detail = f"{outcome.action} {verdict}" + (f": {outcome.reason}" if outcome.reason else "")
    return CommandOut(
        command_id=outcome.command_id,
        status=verdict,
        action=outcome.action,
        actor=outcome.actor,
        accepted=outcome.accepted,
        reason=outcome.reason,
        quarantine_id=quarantine_id,
        seq=outcome.seq,
        detail=detail,
    )


async def _quarantine_of(
    reads: GovernanceReads, outcome: CommandOutcome, given: str | None
) -> str | None:
    """The quarantine an accepted command concerns: the one its ``CommandAccepted`` decision
    names, else the one named in the URL, else the manual quarantine a quarantine command creates
    (``manual/<commandID>``) if it exists."""
    if not outcome.accepted:
        return given
    named = await reads.command_quarantine_id(outcome.command_id)
    if named is not None or given is not None:
        return named or given
    if outcome.action != CommandAction.QUARANTINE.value:
        return None
    candidate = f"manual/{outcome.command_id}"
    return candidate if await reads.quarantine(candidate) is not None else None


def _decided_status(outcome: CommandOutcome) -> int:
    if not outcome.accepted:
        return 409
    return 201 if outcome.action == CommandAction.QUARANTINE.value else 200


async def _wait_for(
    reads: GovernanceReads, command_id: str, seconds: float
) -> CommandOutcome | None:
    """Poll ``governance_commands`` until the command is decided or ``seconds`` pass. A database
    error ends the wait (the command is in the log; it is merely undecided as far as we know)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    delay = _POLL_FIRST
    while True:
        try:
            outcome = await reads.command(command_id)
        except (DatabaseError, OSError) as exc:
            log.warning("cannot read the command outcome", command_id=command_id, error=repr(exc))
            return None
        if outcome is not None:
            return outcome
        left = deadline - loop.time()
        if left <= 0:
            return None
        await asyncio.sleep(min(delay, left))
        delay = min(delay * 2, _POLL_MAX)


async def submit(
    request: Request,
    principal: Principal,
    action: CommandAction,
    *,
    reason: str,
    wait: float,
    idempotency_key: str | None,
    node: str | None = None,
    resource_id: str | None = None,
    expires_at: datetime | None = None,
    break_glass: bool = False,
    quarantine_id: str | None = None,
) -> JSONResponse:
    """Append one command; answer 202 pending, or its outcome when known (see the module doc)."""
    reads: GovernanceReads = request.app.state.reads
    publisher: CommandPublisher = request.app.state.publisher
    if idempotency_key is not None:
        await _idempotency_key(idempotency_key)
        command_id = idempotency_key
        done = await reads.command(command_id)
        if done is not None:
            if done.action != action.value:
                raise HTTPException(
                    409,
                    f"Idempotency-Key {command_id!r} was already used for a {done.action!r} "
                    "command",
                )
            quarantine = await _quarantine_of(reads, done, quarantine_id)
            return _body(_outcome(done, quarantine), _decided_status(done))
    else:
        command_id = str(uuid4())
    command = OperatorCommand(
        command_id=command_id,
        action=action,
        actor=principal.name,
        role=principal.role,
        requested_at=_clock(request),
        reason=reason,
        node=node,
        resource_id=resource_id,
        expires_at=expires_at,
        break_glass=break_glass,
        quarantine_id=quarantine_id,
    )
    await publisher.publish(command)  # CommandLogUnavailable -> 503 (app handler)
    recent = _recent(request)
    recent[command_id] = None
    while len(recent) > RECENT_COMMANDS:
        recent.popitem(last=False)
    log.info(
        "command appended",
        command_id=command_id,
        action=action.value,
        actor=principal.name,
        role=principal.role.value,
        node=node,
        resource_id=resource_id,
    )
    if wait > 0:
        outcome = await _wait_for(reads, command_id, wait)
        if outcome is not None:
            quarantine = await _quarantine_of(reads, outcome, quarantine_id)
            return _body(_outcome(outcome, quarantine), _decided_status(outcome))
    pending = CommandOut(
        command_id=command_id,
        status="pending",
        action=action.value,
        actor=principal.name,
        quarantine_id=quarantine_id,
        detail=f"{action.value} appended to the governance log; not decided yet "
        f"(GET /v1/commands/{command_id})",
    )
    return _body(pending, 202)


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


# --- writes -------------------------------------------------------------------------------------


@writes.post(
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
        expires_at=body.expiry(_clock(request)),
    )


@writes.post(
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
        expires_at=body.expiry(_clock(request)),
        quarantine_id=quarantine_id,
    )


@writes.post(
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


@writes.post(
    "/automation/pause", status_code=202, response_model=CommandOut, responses=WRITE_RESPONSES
)
async def pause_automation(
    request: Request,
    principal: Operator,
    idempotency_key: IdempotencyKey,
    body: ReasonIn,
    wait: Wait = 0,
) -> JSONResponse:
    """Pause automatic restrictions and quarantines fleet-wide (operator)."""
    return await submit(
        request,
        principal,
        CommandAction.PAUSE,
        reason=body.reason,
        wait=wait,
        idempotency_key=idempotency_key,
    )


@writes.post(
    "/automation/resume", status_code=202, response_model=CommandOut, responses=WRITE_RESPONSES
)
async def resume_automation(
    request: Request,
    principal: Operator,
    idempotency_key: IdempotencyKey,
    body: ResumeIn | None = None,
    wait: Wait = 0,
) -> JSONResponse:
    """Resume automation (operator); the body and its reason are optional."""
    return await submit(
        request,
        principal,
        CommandAction.RESUME,
        reason="" if body is None else body.reason,
        wait=wait,
        idempotency_key=idempotency_key,
    )


@writes.post(
    "/breaker/reset", status_code=202, response_model=CommandOut, responses=WRITE_RESPONSES
)
async def reset_breaker(
    request: Request,
    principal: Admin,
    idempotency_key: IdempotencyKey,
    body: ReasonIn,
    wait: Wait = 0,
) -> JSONResponse:
    """Close the open circuit breaker (admin)."""
    return await submit(
        request,
        principal,
        CommandAction.RESET_BREAKER,
        reason=body.reason,
        wait=wait,
        idempotency_key=idempotency_key,
    )


# --- reads ---------------------------------------------------------------------------------------


@reads_router.get(
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
        return _outcome(outcome, await _quarantine_of(reads, outcome, None))
    if command_id in _recent(request):
        pending = CommandOut(
            command_id=command_id, status="pending", detail="appended, not decided yet"
        )
        return _body(pending, 202)
    raise HTTPException(
        404,
        f"command {command_id!r} has no outcome: unknown, or not decided by the governor yet",
    )


def encode_quarantine_cursor(after: QuarantineCursor) -> str:
    payload = orjson.dumps([format_time(after[0]), after[1]])
    return base64.urlsafe_b64encode(payload).rstrip(b"=").decode()


def decode_quarantine_cursor(cursor: str) -> QuarantineCursor:
    try:
        value = orjson.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if not (
            isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)
        ):
            raise ValueError
        return (parse_time(value[0]), value[1])
    except (binascii.Error, ValueError):
        raise ValueError("not a cursor returned by this API") from None


@reads_router.get("/quarantines", response_model=QuarantinePageOut)
async def list_quarantines(
    reads: Reads,
    status: Annotated[
        QuarantineStatus | None, Query(description="active, recovering or released.")
    ] = None,
    kind: Annotated[QuarantineKind | None, Query(description="system or manual.")] = None,
    node: Annotated[str | None, Query(description="Only quarantines on this node.")] = None,
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


@reads_router.get(
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


@reads_router.get(
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


def staleness_threshold(settings: Settings) -> float:
    """Seconds the watermark may lag the wall clock before observations count as stale: two of
    the watcher's ticks plus a few seconds."""
    return 2 * settings.tick_interval_seconds + STALE_SLACK_SECONDS


def governance_status(fleet: FleetStatus, now: datetime, settings: Settings) -> GovernanceOut:
    """The status document of ``GET /v1/governance`` at wall-clock time ``now``."""
    threshold = staleness_threshold(settings)
    snap = fleet.snapshot
    age = None if fleet.watermark is None else (now - fleet.watermark).total_seconds()
    stale = age is None or age > threshold
    if not fleet.seen:
        message = "the governor has not recorded any state yet"
    elif fleet.watermark is None:
        message = "no watermark yet: the governor has not received the watcher's ticks"
    elif stale:
        message = (
            f"observations stale since {format_time(fleet.watermark)}: the watermark is "
            f"{age:.0f} s behind the wall clock (threshold {threshold:.0f} s)"
        )
    else:
        message = (
            f"observations current (watermark {age:.0f} s behind the wall clock)"
            if age is None or age >= 0
            else f"observations current (watermark {-age:.0f} s ahead of the wall clock: a "
            "recorded stream or clock skew)"
        )
    if fleet.breaker_open:
        message += "; circuit breaker OPEN"
    if fleet.automation_paused:
        message += "; automation PAUSED"

    def opt_time(value: Any) -> datetime | None:
        return None if not isinstance(value, str) else parse_time(value)

    watermarks = snap.get("watermarks") or {}
    return GovernanceOut(
        governor_seen=fleet.seen,
        watermark=fleet.watermark,
        watermarks={str(p): t for p, t in ((p, opt_time(v)) for p, v in watermarks.items()) if t},
        watermark_age_seconds=age,
        stale=stale,
        stale_since=fleet.watermark if stale else None,
        stale_threshold_seconds=threshold,
        message=message,
        breaker=BreakerOut(
            open=fleet.breaker_open,
            opened_at=opt_time(snap.get("breakerOpenedAt")) if fleet.breaker_open else None,
            incident=snap.get("breakerIncident") if fleet.breaker_open else None,
        ),
        automation=AutomationOut(
            paused=fleet.automation_paused,
            paused_by=snap.get("pausedBy") if fleet.automation_paused else None,
            reason=snap.get("pauseReason") if fleet.automation_paused else None,
        ),
        active_quarantines=fleet.active_quarantines,
        deferred=len(snap.get("deferred") or ()),
        nodes_heartbeat_lost=fleet.nodes_heartbeat_lost,
        devices=sum(fleet.by_state.values()),
        devices_by_state=fleet.by_state,
    )


@reads_router.get("/governance", response_model=GovernanceOut)
async def governance(request: Request, reads: Reads) -> GovernanceOut:
    """Fleet governance status: the governor's event-time watermark and whether observations are
    stale (watermark more than 2 x the watcher tick + 5 s behind the wall clock), the circuit
    breaker, the automation switch, active quarantines and devices by governance state."""
    settings: Settings = request.app.state.settings
    return governance_status(await reads.fleet_status(), _clock(request), settings)
