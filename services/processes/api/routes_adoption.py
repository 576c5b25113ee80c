"""DRA adoption pools (issue 16): ``POST /v1/adoption`` (operator) appends an ``adoption-set``
command to the governance log (202 pending, or with ``?wait=`` 200 accepted / 409 rejected);
``DELETE /v1/adoption/{pool}`` (operator) an ``adoption-retire`` one (404 for a pool not declared,
409 for one in canary or dra without ``?force=true``, checked on the projection first);
``GET /v1/adoption`` folds the accepted declarations and evaluates the gate on the governor's
event time over one read of the inventory (:mod:`services.domain.adoption`)."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import JSONResponse

from services.adapters.projection.failure_sql import FailureReads
from services.adapters.projection.reads_adoption import AdoptionReads
from services.adapters.projection.reads_adoption_report import AdoptionReportReads
from services.adapters.projection.reads_inventory import InventoryReads
from services.domain.adoption.facts import ConflictFact, read_facts, ready_facts
from services.domain.adoption.gate import Thresholds, Verdict, evaluate
from services.domain.governance.adoption import AdoptionRetirement, fold, retire_problem
from services.domain.governance.inputs import CommandAction
from services.processes.api.auth import Operator
from services.processes.api.command_submit import (
    WRITE_RESPONSES,
    IdempotencyKey,
    reads_router,
    submit,
    writes_router,
)
from services.processes.api.command_wait import Wait
from services.processes.api.schemas import ErrorOut
from services.processes.api.schemas_adoption import (
    AdoptionIn,
    AdoptionOut,
    PoolOut,
    RecordedVerdictOut,
)
from services.processes.api.schemas_governance import CommandOut, ReasonIn
from services.runtime.config import AdoptionSettings

write_routes = writes_router()
read_routes = reads_router()


def thresholds(settings: AdoptionSettings) -> Thresholds:
    """The gate's thresholds from the ``DEVICESTATE_ADOPTION_*`` settings."""
    return Thresholds(
        conflicts_rollback=settings.adoption_conflicts_rollback,
        divergence_hold=settings.adoption_divergence_hold,
        divergence_rollback=settings.adoption_divergence_rollback,
        quarantined_hold=settings.adoption_quarantined_hold,
        quarantined_rollback_fraction=settings.adoption_quarantined_rollback_fraction,
        leaked_claim_seconds=settings.adoption_leaked_claim_seconds,
        leaked_hold=settings.adoption_leaked_hold,
        leaked_rollback=settings.adoption_leaked_rollback,
        failure_window_seconds=settings.adoption_failure_window_seconds,
        failures_hold=settings.adoption_failures_hold,
        failures_rollback=settings.adoption_failures_rollback,
        ready_window_seconds=settings.adoption_ready_window_seconds,
        ready_min_samples=settings.adoption_ready_min_samples,
        ready_hold_ratio=settings.adoption_ready_hold_ratio,
        ready_rollback_ratio=settings.adoption_ready_rollback_ratio,
        tenant_hold=settings.adoption_tenant_hold,
        tenant_rollback=settings.adoption_tenant_rollback,
    )


@write_routes.post(
    "/adoption", status_code=202, response_model=CommandOut, responses=WRITE_RESPONSES
)
async def declare_pool(
    request: Request,
    principal: Operator,
    idempotency_key: IdempotencyKey,
    body: AdoptionIn,
    wait: Wait = 0,
) -> JSONResponse:
    """Declare a pool's path and phase (operator): plugin, canary, dra or rolled-back."""
    return await submit(
        request,
        principal,
        CommandAction.ADOPTION_SET,
        reason=body.reason,
        wait=wait,
        idempotency_key=idempotency_key,
        adoption=body.declaration(),
    )


RETIRE_RESPONSES = {
    **WRITE_RESPONSES,
    404: {"model": ErrorOut, "description": "No pool of this name is declared."},
    409: {
        **WRITE_RESPONSES[409],
        "description": "The pool is in canary or dra and `force` is not set (an `ErrorOut`), "
        "or as for every command: " + str(WRITE_RESPONSES[409]["description"]),
    },
}


@write_routes.delete(
    "/adoption/{pool}", status_code=202, response_model=CommandOut, responses=RETIRE_RESPONSES
)
async def retire_pool(
    request: Request,
    principal: Operator,
    idempotency_key: IdempotencyKey,
    pool: str,
    body: ReasonIn,
    force: Annotated[
        bool,
        Query(description="Retire a pool in canary or dra (its devices are still on DRA)."),
    ] = False,
    wait: Wait = 0,
) -> JSONResponse:
    """Retire a pool (operator): it leaves the gate and `GET /v1/adoption`, its alert is
    resolved, and the next `adoption enforce` pass removes its rollback policy. 404 for a pool
    not declared; 409 for a pool in canary or dra without `force`. Declaring the name again
    later starts a new pool."""
    reads: AdoptionReads = request.app.state.adoption

    async def declared() -> None:
        state = fold(await reads.declarations()).get(pool)
        problem = retire_problem(pool, None if state is None else state.phase, force)
        if problem is not None:
            raise HTTPException(404 if state is None else 409, problem)

    return await submit(
        request,
        principal,
        CommandAction.ADOPTION_RETIRE,
        reason=body.reason,
        wait=wait,
        idempotency_key=idempotency_key,
        retire=AdoptionRetirement(pool, force),
        precheck=declared,
        query={"force": force},  # a forced retirement is another request than one without
    )


@read_routes.get("/adoption", response_model=AdoptionOut)
async def adoption_status(request: Request) -> AdoptionOut:
    """Every declared pool: its phase, history, the nodes it matches and the gate's verdict with
    every reason and its figures, at the governor's event time."""
    reads: AdoptionReads = request.app.state.adoption
    inventory: InventoryReads = request.app.state.inventory
    pools = fold(await reads.declarations())
    now = await reads.event_time()
    snapshot = await inventory.snapshot()
    conflicts = [
        ConflictFact(c.kind, c.node, c.subject) for c in await inventory.conflicts(active=True)
    ]
    limits = thresholds(request.app.state.settings)
    failures: FailureReads = request.app.state.failures
    recent = (
        []
        if now is None
        else await failures.on_nodes(now - timedelta(seconds=limits.failure_window_seconds), now)
    )
    stages: AdoptionReportReads = request.app.state.adoption_report
    ready = (
        []
        if now is None
        else ready_facts(
            snapshot,
            await stages.ready_stages(now - timedelta(seconds=limits.ready_window_seconds), now),
        )
    )
    gates = evaluate(pools, read_facts(snapshot, conflicts, recent, ready), limits, now)
    recorded = {
        pool: RecordedVerdictOut(verdict=Verdict(v), at=at, decision_id=decision)
        for pool, (v, at, decision) in (await reads.verdicts()).items()
        if v in {m.value for m in Verdict}
    }
    return AdoptionOut(
        event_time=now,
        pools=[PoolOut.of(pools[g.pool], g, recorded.get(g.pool)) for g in gates],
    )


router = APIRouter()
router.include_router(write_routes)
router.include_router(read_routes)
