"""Request and response models of the migration endpoints (issue 13): an executor's report
(``POST /v1/migrations/{migrationID}/reports``) and the migrations as the governor last decided
them (``GET /v1/migrations``). camelCase JSON, times RFC 3339 UTC."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, ClassVar

from pydantic import AwareDatetime, Field, model_validator

from services.domain.migration.records import ReportKind
from services.processes.api.schemas import ApiModel
from services.processes.api.schemas_governance import MAX_REASON, RequestModel

MIGRATION_ID_PATTERN = "^m-[0-9a-f]{20}$"
"""A migration's ID (:func:`services.domain.migration.book.migration_id`)."""
HOLDER_PATTERN = "^[A-Za-z0-9][A-Za-z0-9._:/-]{0,252}$"
"""An executor's name: letters, digits and ``._:/-`` (e.g. ``namespace/pod``)."""
MAX_DEVICES = 64
"""Most devices one replacement may report."""

Text = Annotated[str, Field(min_length=1, max_length=253)]


class DeviceIn(RequestModel):
    node: Text = Field(description="The node's name.")
    resource_id: str = Field(
        alias="resourceID",
        min_length=1,
        max_length=1024,
        description="The device as the governor keys it (its physical ID, or the resourceID).",
    )


class MigrationReportIn(RequestModel):
    """What a migration executor did, under its lease (``fencingToken`` 0 for
    ``lease-requested``). The governor decides it (``MigrationReportRejected`` with the reason for
    a stale token, another holder, or a report the phase does not expect)."""

    MULTILINE: ClassVar[frozenset[str]] = frozenset({"detail"})

    kind: ReportKind = Field(description="What happened (`lease-requested`, `evicted`, ...).")
    holder: str = Field(description="The executor's name.", pattern=HOLDER_PATTERN)
    fencing_token: int = Field(0, ge=0, le=2**53, description="The lease's fencing token.")
    checkpoint_id: Text | None = Field(
        None, alias="checkpointID", description="The committed checkpoint (checkpoint-committed)."
    )
    checkpoint_at: AwareDatetime | None = Field(
        None, description="When the checkpoint was taken (UTC; checkpoint-committed)."
    )
    devices: list[DeviceIn] = Field(
        default_factory=list,
        max_length=MAX_DEVICES,
        description="The devices the replacement Pod holds (replacement-observed).",
    )
    detail: str = Field("", max_length=MAX_REASON, description="Free text, e.g. the PDB's message.")

    @model_validator(mode="after")
    def _complete(self) -> MigrationReportIn:
        if self.kind is ReportKind.CHECKPOINT_COMMITTED and (
            self.checkpoint_id is None or self.checkpoint_at is None
        ):
            raise ValueError("a checkpoint-committed report needs checkpointID and checkpointAt")
        if self.kind is ReportKind.REPLACEMENT_OBSERVED and not self.devices:
            raise ValueError(
                "a replacement-observed report needs the devices the replacement holds"
            )
        if self.kind is not ReportKind.LEASE_REQUESTED and self.fencing_token < 1:
            raise ValueError(f"a {self.kind.value} report needs the lease's fencingToken (>= 1)")
        return self


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
