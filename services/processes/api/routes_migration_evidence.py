"""A non-recoverable migration's evidence (issue 13 item 3; ``docs/migration.md`` "Evidence").

- ``POST /v1/migrations/{migrationID}/evidence`` (operator: the executor's token): appends a
  :class:`~services.domain.migration.records.MigrationEvidence` to the governance topic and answers
  202 once Kafka acknowledged it (503 when it cannot). 404 for a migration the governor never
  decided about, 422 for a bad body, 413 for a body above
  :data:`~.schemas_migration_evidence.MAX_EVIDENCE_BYTES` (256 KiB). The governor keeps the first
  accepted evidence per (migration, Pod UID): posting again is harmless
  (:mod:`services.domain.migration.evidence`).
- ``GET /v1/migrations/{migrationID}/evidence``: the migration (as ``GET /v1/migrations/{id}``),
  the stored Pods, and the device's timeline and governance decisions; 404 when none is stored.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import JSONResponse

from services.processes.api.auth import Operator
from services.processes.api.command_submit import ERRORS, clock_now, reads_router, writes_router
from services.processes.api.commands import CommandPublisher
from services.processes.api.routes_devices import Reads, Store
from services.processes.api.routes_governance import timeline
from services.processes.api.routes_migrations import UNKNOWN, MigrationID, _reads
from services.processes.api.schemas import ErrorOut
from services.processes.api.schemas_migration_evidence import (
    MAX_EVIDENCE_BYTES,
    EvidenceAcceptedOut,
    EvidenceDeviceOut,
    EvidencePodOut,
    MigrationEvidenceIn,
    MigrationEvidenceOut,
    evidence_of,
)
from services.processes.api.schemas_migrations import MigrationOut

DEVICE_ITEMS = 200
"""The newest timeline items and decisions of the device served with the evidence."""
write_routes = writes_router()
read_routes = reads_router()
TOO_LARGE: dict[int | str, dict[str, object]] = {
    413: {"model": ErrorOut, "description": f"Body larger than {MAX_EVIDENCE_BYTES} bytes."}
}


async def _bounded(request: Request) -> None:
    """413 for an evidence body above :data:`MAX_EVIDENCE_BYTES` (checked before the body is
    validated; the app's own limit, 1 MiB, has already refused larger ones)."""
    size = len(await request.body())
    if size > MAX_EVIDENCE_BYTES:
        raise HTTPException(
            413,
            f"the evidence body is {size} bytes, larger than {MAX_EVIDENCE_BYTES} bytes "
            "(256 KiB), the limit of this endpoint: post fewer Pods per request",
        )


@write_routes.post(
    "/migrations/{migrationID}/evidence",
    status_code=202,
    response_model=EvidenceAcceptedOut,
    responses={**ERRORS, **UNKNOWN, **TOO_LARGE, 202: {"model": EvidenceAcceptedOut}},
)
async def post_evidence(
    request: Request,
    principal: Operator,
    migration_id: MigrationID,
    _: Annotated[None, Depends(_bounded)],
    body: MigrationEvidenceIn,
) -> JSONResponse:
    """Append a non-recoverable migration's evidence; the governor stores the first per Pod
    (``GET /v1/migrations/{migrationID}/evidence``)."""
    if not await _reads(request).history(migration_id):
        raise HTTPException(404, f"migration {migration_id!r} is unknown to the governor")
    publisher: CommandPublisher = request.app.state.publisher
    await publisher.publish(evidence_of(migration_id, body, clock_now(request)))  # 503 if not
    out = EvidenceAcceptedOut(
        migration_id=migration_id, holder=body.holder, pods=len(body.pods), status="appended"
    )
    return JSONResponse(out.model_dump(mode="json", by_alias=True), status_code=202)


@read_routes.get(
    "/migrations/{migrationID}/evidence",
    response_model=MigrationEvidenceOut,
    responses={404: {"model": ErrorOut, "description": "No evidence stored."}},
)
async def get_evidence(
    request: Request, store: Store, reads: Reads, migration_id: MigrationID
) -> MigrationEvidenceOut:
    """The stored evidence: the migration, its Pods' last status, and the device's timeline and
    the governor's decisions about it (the newest 200 of each, oldest first)."""
    migrations = _reads(request)
    rows = await migrations.evidence(migration_id)
    changed = [d for d in await migrations.history(migration_id) if "phase" in d.details]
    if not rows or not changed:
        raise HTTPException(404, f"no evidence is stored for migration {migration_id!r}")
    last = changed[-1]
    node, resource_id = str(last.details["node"]), str(last.details["resourceID"])
    try:
        items = (await timeline(store, reads, node, resource_id, DEVICE_ITEMS)).items
    except HTTPException:  # a device the directory no longer knows: its timeline is empty
        items = []
    decisions = await reads.device_decisions(node, resource_id, DEVICE_ITEMS)
    return MigrationEvidenceOut(
        migration_id=migration_id,
        migration=MigrationOut.of(last.seq, last.idx, last.kind, last.details),
        pods=[EvidencePodOut.of(r) for r in rows],
        device=EvidenceDeviceOut(
            node=node,
            resource_id=resource_id,
            timeline=items,
            decisions=[{"id": f"{d.seq}.{d.idx}", **d.payload} for d in reversed(decisions)],
        ),
    )


router = APIRouter()
router.include_router(write_routes)
router.include_router(read_routes)
