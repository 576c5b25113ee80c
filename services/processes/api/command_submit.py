"""Governance writes are commands: appending an operator command and answering with its outcome.

``POST`` routes never change the projection: :func:`submit` appends an ``OperatorCommand`` (actor
= the token's name, its role, the reason) to the governance topic and answers
``202 {commandID, status: "pending"}`` once Kafka acknowledged it (``acks=all``); Kafka being
unreachable raises :class:`~services.processes.api.commands.CommandLogUnavailable` (503 by the
app's handler). The governor decides every command (``CommandAccepted`` or ``CommandRejected``)
and records the outcome, which ``GET /v1/commands/{commandID}`` serves. With ``?wait=<seconds>``
(:mod:`services.processes.api.command_wait`) the answer is the outcome: 201 for an accepted
quarantine, 200 for another accepted command, 409 with the governor's reason for a rejection,
202 if still undecided. An ``Idempotency-Key`` header is scoped to the principal: the commandID
is ``<token name>~<key>`` (:mod:`services.processes.api.idempotency`), so a client retry does
not make a second command (the governor ignores a repeated commandID). A repeat of the first
request (same method, path and JSON body) gets that request's command: its outcome when decided,
else 202 with its commandID; concurrent repeats wait for the first one's append and share its
command. Another request with the key is 409 naming the conflict.

Also here: the route building blocks the governance routers share (the ``Idempotency-Key``
dependency, the error and write response tables, the ``writes``/``reads`` router settings) and
the rendering of a :class:`~services.adapters.projection.reads_governance.CommandOutcome` as a
:class:`~services.processes.api.schemas_governance.CommandOut`.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Annotated, Any, Final
from uuid import uuid4

import structlog
from fastapi import APIRouter, Depends, Header, HTTPException, Request
from fastapi.responses import JSONResponse

from services.adapters.projection.reads_governance import CommandOutcome, GovernanceReads
from services.domain.governance.adoption import AdoptionDeclaration, AdoptionRetirement
from services.domain.governance.inputs import CommandAction, OperatorCommand
from services.processes.api.auth import Principal, read_access
from services.processes.api.command_wait import wait_for_outcome
from services.processes.api.commands import CommandLogUnavailable, CommandPublisher
from services.processes.api.idempotency import (
    KeyConflict,
    KeyRegistry,
    KeyUse,
    conflict_message,
    fingerprint,
    scoped_command_id,
)
from services.processes.api.routing import ServiceRoute
from services.processes.api.schemas import ErrorOut
from services.processes.api.schemas_governance import CommandOut

log = structlog.get_logger(__name__)

RECENT_COMMANDS: Final = 10_000
"""Command IDs this process published and remembers (``GET /v1/commands`` says pending)."""
IDEMPOTENCY_KEY_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
_IDEMPOTENCY_KEY: Final = re.compile(IDEMPOTENCY_KEY_PATTERN)

Clock = Callable[[], datetime]

IdempotencyKeyHeader = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        description="Client-chosen key of the request (1-128 of letters, digits, `._:-`; e.g. a "
        "UUID), scoped to the token's principal: the commandID is `<token name>~<key>`. A retry "
        "with the same key and the same request (method, path, JSON body) makes no second "
        "command and gets the first one's commandID and outcome (concurrent retries too); the "
        "same key with another request is 409. Another principal's key is independent.",
        # Documented only: the dependency below answers 422 with a message of its own.
        json_schema_extra={"pattern": IDEMPOTENCY_KEY_PATTERN},
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


IdempotencyKey = Annotated[str | None, Depends(_idempotency_key)]

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
    409: {
        "model": CommandOut | ErrorOut,
        "description": "Rejected by the governor (with `wait`; a `CommandOut`), or an "
        "`Idempotency-Key` this principal already used for another request (an `ErrorOut` whose "
        "`detail` names the key and that request).",
    },
}


def writes_router() -> APIRouter:
    """A router of governance commands (``POST``; each route names the role it needs)."""
    return APIRouter(prefix="/v1", tags=["governance: commands"], route_class=ServiceRoute)


def reads_router() -> APIRouter:
    """A router of governance reads (read access; the :data:`ERRORS` responses)."""
    return APIRouter(
        prefix="/v1",
        tags=["governance"],
        dependencies=[Depends(read_access)],
        responses=ERRORS,
        route_class=ServiceRoute,
    )


def clock_now(request: Request) -> datetime:
    """The app's wall clock (UTC) now."""
    clock: Clock = request.app.state.clock
    return clock()


def recent_commands(request: Request) -> OrderedDict[str, None]:
    """Command IDs this API process appended, oldest first (at most :data:`RECENT_COMMANDS`)."""
    recent: OrderedDict[str, None] = request.app.state.recent_commands
    return recent


def command_response(model: CommandOut, status: int) -> JSONResponse:
    """``model`` as JSON with ``status`` and ``Location: /v1/commands/<commandID>``."""
    headers = {"Location": f"/v1/commands/{model.command_id}"}
    return JSONResponse(
        model.model_dump(mode="json", by_alias=True), status_code=status, headers=headers
    )


def outcome_out(outcome: CommandOutcome, quarantine_id: str | None) -> CommandOut:
    """The ``CommandOut`` of a decided command (``status`` accepted or rejected)."""
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


async def quarantine_of(
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
    adoption: AdoptionDeclaration | None = None,
    retire: AdoptionRetirement | None = None,
    precheck: Callable[[], Awaitable[None]] | None = None,
    query: Mapping[str, object] | None = None,
) -> JSONResponse:
    """Append one command; answer 202 pending, or its outcome when known (see the module doc).
    With an ``Idempotency-Key`` (:mod:`services.processes.api.idempotency`): 409 for a key this
    principal used for another request, the first request's command for a repeat. ``precheck``
    runs before a new command is appended (not for a repeat, which gets the first one's
    answer) and may refuse it with an ``HTTPException`` (e.g. 404 for an unknown pool).
    ``query``: the query parameters that change the command, part of the key's fingerprint
    (:func:`~services.processes.api.idempotency.fingerprint`)."""
    reads: GovernanceReads = request.app.state.reads
    if idempotency_key is None:
        use = None
        command_id = str(uuid4())
    else:
        await _idempotency_key(idempotency_key)
        command_id = scoped_command_id(principal.name, idempotency_key)
        use = KeyUse(
            command_id,
            fingerprint(request.method, request.url.path, await request.body(), query),
            action.value,
            f"{request.method} {request.url.path}",
        )
        replay = await _replay(request, principal, action, use, wait, quarantine_id)
        if replay is not None:
            return replay
    if precheck is not None:
        try:
            await precheck()
        except HTTPException as exc:
            if use is not None:
                request.app.state.idempotency_keys.failed(use, str(exc.detail), exc.status_code)
            raise
        except BaseException:
            if use is not None:
                request.app.state.idempotency_keys.failed(use, "the command was not appended")
            raise
    command = OperatorCommand(
        command_id=command_id,
        action=action,
        actor=principal.name,
        role=principal.role,
        requested_at=clock_now(request),
        reason=reason,
        node=node,
        resource_id=resource_id,
        expires_at=expires_at,
        break_glass=break_glass,
        quarantine_id=quarantine_id,
        request_fingerprint=None if use is None else use.fingerprint,
        adoption=adoption,
        retire=retire,
    )
    await _append(request, command, use)
    log.info(
        "command appended",
        command_id=command_id,
        action=action.value,
        actor=principal.name,
        role=principal.role.value,
        node=node,
        resource_id=resource_id,
    )
    return await _answer(
        reads,
        command_id,
        action,
        principal,
        wait,
        quarantine_id,
        look=False,
        use=use,
        registry=request.app.state.idempotency_keys,
    )


async def _replay(
    request: Request,
    principal: Principal,
    action: CommandAction,
    use: KeyUse,
    wait: float,
    quarantine_id: str | None,
) -> JSONResponse | None:
    """The answer to a key already used (its first command, or 409), or None when ``use`` is
    the first (claimed: the caller appends, then calls :func:`_append`)."""
    registry: KeyRegistry = request.app.state.idempotency_keys
    reads: GovernanceReads = request.app.state.reads
    try:
        first = registry.claim(use)
    except KeyConflict as exc:
        _log_conflict(principal, use, str(exc))
        raise HTTPException(409, str(exc)) from None
    if first is not None:
        await first.appended.wait()
        if first.failure is not None:
            status, message = first.failure
            if status == 503:
                raise CommandLogUnavailable(message)
            raise HTTPException(status, message)
        log.info("idempotent repeat", command_id=use.command_id, actor=principal.name)
        return await _answer(
            reads,
            use.command_id,
            action,
            principal,
            wait,
            quarantine_id,
            look=True,
            use=use,
            registry=registry,
        )
    try:
        done = await reads.command(use.command_id)
    except BaseException:
        registry.failed(use, "the command outcomes could not be read")
        raise
    if done is None:
        return None  # new here; the caller appends
    # The governor records the request's fingerprint with its decision: an API process that
    # did not see the first request (restarted, another replica) still tells another request.
    if done.action != action.value or done.request_fingerprint not in (None, use.fingerprint):
        message = conflict_message(use.command_id, done.action, None)
        registry.failed(use, message, 409)
        _log_conflict(principal, use, message)
        raise HTTPException(409, message)
    registry.appended(use)
    log.info("idempotent repeat", command_id=use.command_id, actor=principal.name, decided=True)
    quarantine = await quarantine_of(reads, done, quarantine_id)
    return command_response(outcome_out(done, quarantine), _decided_status(done))


async def _append(request: Request, command: OperatorCommand, use: KeyUse | None) -> None:
    """Publish ``command`` and remember it as recent; tell the waiters of ``use`` how it went."""
    publisher: CommandPublisher = request.app.state.publisher
    registry: KeyRegistry = request.app.state.idempotency_keys
    try:
        await publisher.publish(command)  # CommandLogUnavailable -> 503 (app handler)
    except CommandLogUnavailable as exc:
        if use is not None:
            registry.failed(use, str(exc))
        raise
    except BaseException:
        if use is not None:
            registry.failed(use, "the command was not appended")
        raise
    recent = recent_commands(request)
    recent[command.command_id] = None
    while len(recent) > RECENT_COMMANDS:
        recent.popitem(last=False)
    if use is not None:
        registry.appended(use)


async def _answer(
    reads: GovernanceReads,
    command_id: str,
    action: CommandAction,
    principal: Principal,
    wait: float,
    quarantine_id: str | None,
    *,
    look: bool,
    use: KeyUse | None = None,
    registry: KeyRegistry | None = None,
) -> JSONResponse:
    """The outcome of an appended command if decided (waiting up to ``wait`` s; with ``look``
    reading it once even when ``wait`` is 0, as a repeated key does), else 202 pending. ``use``:
    the key this request appended under; a decision recorded for another request with that key
    (another API process appended first, and the governor decides a commandID once) is a 409,
    and ``registry`` forgets ``use``."""
    outcome = None
    if wait > 0 or look:
        outcome = await wait_for_outcome(reads, command_id, wait)
    if (
        outcome is not None
        and use is not None
        and outcome.request_fingerprint not in (None, use.fingerprint)
    ):
        message = conflict_message(command_id, outcome.action, None)
        if registry is not None:
            registry.forget(use)
        _log_conflict(principal, use, message)
        raise HTTPException(409, message)
    if outcome is not None:
        quarantine = await quarantine_of(reads, outcome, quarantine_id)
        return command_response(outcome_out(outcome, quarantine), _decided_status(outcome))
    pending = CommandOut(
        command_id=command_id,
        status="pending",
        action=action.value,
        actor=principal.name,
        quarantine_id=quarantine_id,
        detail=f"{action.value} appended to the governance log; not decided yet "
        f"(GET /v1/commands/{command_id})",
    )
    return command_response(pending, 202)


def _log_conflict(principal: Principal, use: KeyUse, message: str) -> None:
    log.warning(
        "idempotency key conflict",
        command_id=use.command_id,
        actor=principal.name,
        role=principal.role.value,
        request=use.request_line,
        detail=message,
    )
