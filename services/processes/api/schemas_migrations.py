"""Request and response models of the migration endpoints (issue 13): an executor's report
(``POST /v1/migrations/{migrationID}/reports``) and the migrations as the governor last decided
them (``GET /v1/migrations``). camelCase JSON, times RFC 3339 UTC."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, ValidationInfo, field_validator

from services.domain.limits import invisible_problem
from services.domain.migration.records import MigrationReport, ReportKind
from services.processes.api.hardening import (
    nested_text_problem,
    text_problem,
)
from services.processes.api.schemas import ApiModel
from services.processes.api.schemas_governance import (
    MAX_REASON,
    RESOURCE_ID_PATTERN,
    DeviceRefIn,
    RequestModel,
    UtcDatetime,
)

MIGRATION_ID_PATTERN = "^m-[0-9a-f]{20}$"
"""A migration's ID (:func:`services.domain.migration.book.migration_id`)."""
HOLDER_PATTERN = "^[A-Za-z0-9][A-Za-z0-9._:/-]{0,252}$"
"""An executor's name: letters, digits and ``._:/-`` (e.g. ``namespace/pod``)."""
MAX_DEVICES = 64
"""Most devices one replacement may report."""

_CONTROL = "\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f-\\u009f"
DETAIL_PATTERN = f"^[^{_CONTROL}]*$"
"""Free text: no control character but tab, LF and CR."""

CheckpointID = Annotated[
    str,
    Field(
        alias="checkpointID",
        min_length=1,
        max_length=253,
        description="The committed checkpoint's ID.",
        json_schema_extra={"pattern": RESOURCE_ID_PATTERN},
    ),
]


class DeviceIn(DeviceRefIn):
    """A device the replacement Pod holds, as the governor keys it."""


class _ReportIn(BaseModel):
    """Base of the report bodies: :class:`RequestModel`'s configuration and text checks, on the
    text fields only (a discriminator field takes no ``before`` validator)."""

    model_config = RequestModel.model_config

    holder: str = Field(description="The executor's name.", pattern=HOLDER_PATTERN)
    detail: str = Field(
        "",
        max_length=MAX_REASON,
        description="Free text, e.g. the PodDisruptionBudget's message.",
        json_schema_extra={"pattern": DETAIL_PATTERN},
    )

    @field_validator("holder", "detail", mode="before")
    @classmethod
    def _no_control_characters(cls, value: Any, info: ValidationInfo) -> Any:
        name = info.field_name or ""
        problem = nested_text_problem(name, value, multiline=name == "detail")
        if problem is not None:
            raise ValueError(problem)
        return value


class LeaseRequestIn(_ReportIn):
    """Ask for the migration's lease (a new holder gets the next fencing token)."""

    kind: Literal["lease-requested"]


class _LeasedIn(_ReportIn):
    fencing_token: int = Field(ge=1, le=2**53, description="The lease's fencing token.")


class StepIn(_LeasedIn):
    """A step without data of its own, under the lease."""

    kind: Literal[
        "lease-renewed",
        "lease-released",
        "checkpoint-timed-out",
        "evicted",
        "eviction-refused",
        "workload-gone",
    ]


class CheckpointIn(_LeasedIn):
    """The workload committed a checkpoint (``checkpointAt`` UTC)."""

    kind: Literal["checkpoint-committed"]
    checkpoint_id: CheckpointID
    checkpoint_at: UtcDatetime = Field(description="When the checkpoint was taken (UTC).")

    @field_validator("checkpoint_id")
    @classmethod
    def _checkpoint_id(cls, value: str) -> str:
        problem = text_problem("checkpointID", value) or invisible_problem("checkpointID", value)
        if problem is not None:
            raise ValueError(problem)
        return value


class ReplacementIn(_LeasedIn):
    """The replacement Pod runs, holding ``devices``."""

    kind: Literal["replacement-observed"]
    devices: list[DeviceIn] = Field(min_length=1, max_length=MAX_DEVICES)


MigrationReportIn = Annotated[
    LeaseRequestIn | StepIn | CheckpointIn | ReplacementIn, Field(discriminator="kind")
]
"""What a migration executor did, under its lease: the governor decides it
(``MigrationReportRejected`` with the reason for a stale token, another holder, or a report the
phase does not expect)."""


def report_of(
    migration_id: str, body: LeaseRequestIn | StepIn | CheckpointIn | ReplacementIn, at: datetime
) -> MigrationReport:
    """The governance record of a report body received at ``at`` (UTC)."""
    return MigrationReport(
        migration_id=migration_id,
        kind=ReportKind(body.kind),
        holder=body.holder,
        reported_at=at,
        fencing_token=0 if isinstance(body, LeaseRequestIn) else body.fencing_token,
        checkpoint_id=body.checkpoint_id if isinstance(body, CheckpointIn) else None,
        checkpoint_at=body.checkpoint_at if isinstance(body, CheckpointIn) else None,
        devices=tuple((d.node, d.resource_id) for d in body.devices)
        if isinstance(body, ReplacementIn)
        else (),
        detail=body.detail.strip(),
    )


class ReportAcceptedOut(ApiModel):
    """The report is on the governance log; the governor's decision follows
    (``GET /v1/migrations/{migrationID}``)."""

    migration_id: str = Field(alias="migrationID")
    kind: str
    holder: str
    status: str = Field(description="`appended`.")


class MigrationOut(ApiModel):
    """A migration as of the governor's latest decision about it (the decision's ``details``)."""

    migration_id: str = Field(alias="migrationID")
    phase: str = Field(
        description="waiting, planned, checkpoint-requested, eviction-requested, released, "
        "completed, failed, evidence-kept or cancelled."
    )
    node: str
    resource_id: str = Field(alias="resourceID")
    workload_uid: str = Field(alias="workloadUID")
    migration_class: str
    shard: str | None
    pods: list[str] = Field(description="`namespace/name` of the Pods it moves.")
    holder: str | None
    fencing_token: int
    lease_expires_at: datetime | None
    reason: str | None = Field(description="Why it failed (pdb-refused, checkpoint-timeout, ...).")
    detail: str
    planned_at: datetime
    updated_at: datetime
    last_decision: str = Field(description="Kind of the latest decision.")
    last_decision_id: str = Field(alias="lastDecisionID")
    details: dict[str, Any] = Field(description="Every field of the latest decision.")

    @classmethod
    def of(cls, seq: int, idx: int, kind: str, details: dict[str, Any]) -> MigrationOut:
        return cls(
            migration_id=details["migrationID"],
            phase=details["phase"],
            node=details["node"],
            resource_id=details["resourceID"],
            workload_uid=details["workloadUID"],
            migration_class=details["migrationClass"],
            shard=details.get("shard"),
            pods=list(details.get("pods") or ()),
            holder=details.get("holder"),
            fencing_token=int(details.get("fencingToken") or 0),
            lease_expires_at=details.get("leaseExpiresAt"),
            reason=details.get("reason"),
            detail=details.get("detail") or "",
            planned_at=details["plannedAt"],
            updated_at=details["updatedAt"],
            last_decision=kind,
            last_decision_id=f"{seq}.{idx}",
            details=details,
        )


class MigrationsOut(ApiModel):
    items: list[MigrationOut]


class MigrationDecisionOut(ApiModel):
    id: str
    kind: str
    at: datetime
    summary: str


class MigrationHistoryOut(ApiModel):
    migration: MigrationOut
    decisions: list[MigrationDecisionOut] = Field(description="Oldest first.")
