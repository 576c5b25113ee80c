"""Fleet-wide switches (issue 3): pause and resume automation, reset the circuit breaker.

Each ``POST`` is a command (:mod:`services.processes.api.command_submit`): 202 pending, or with
``?wait=`` 200 accepted / 409 rejected by the governor. Pause and resume need the operator role,
a breaker reset admin (403 otherwise). ``router`` holds them.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from services.domain.governance.inputs import CommandAction
from services.processes.api.auth import Admin, Operator
from services.processes.api.command_submit import (
    WRITE_RESPONSES,
    IdempotencyKey,
    submit,
    writes_router,
)
from services.processes.api.command_wait import Wait
from services.processes.api.schemas_governance import CommandOut, ReasonIn, ResumeIn

write_routes = writes_router()


@write_routes.post(
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


@write_routes.post(
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


@write_routes.post(
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


router = APIRouter()
router.include_router(write_routes)
