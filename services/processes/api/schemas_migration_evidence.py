"""Request and response models of a non-recoverable migration's evidence (issue 13 item 3):
``POST /v1/migrations/{migrationID}/evidence`` (the executor's body) and
``GET /v1/migrations/{migrationID}/evidence``. camelCase JSON, times RFC 3339 UTC."""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar, Final

from pydantic import Field, field_validator

from services.domain.limits import DNS1123_SUBDOMAIN_PATTERN
from services.domain.migration.records import EvidencePod, MigrationEvidence
from services.processes.api.schemas import ApiModel
from services.processes.api.schemas_governance import RequestModel, TimelineItemOut, UtcDatetime
from services.processes.api.schemas_migrations import HOLDER_PATTERN, MigrationOut

MAX_EVIDENCE_BYTES: Final = 256 * 1024
"""Largest evidence body (bytes): 413 above (a Pod's status is a few KiB)."""
MAX_EVIDENCE_PODS: Final = 64
"""Most Pods in one evidence body."""
MAX_STATUS_DEPTH: Final = 32
"""Deepest nesting of a Pod's ``status`` (objects and arrays; a real PodStatus has about 6):
the governance record is encoded by orjson, which refuses more than 254 levels (a TypeError, a
500) while the request's JSON parser takes about 1000."""


def _depth_problem(value: Any, limit: int) -> str | None:
    """Why ``value`` nests deeper than ``limit`` levels (``None``: it does not); iterative."""
    todo: list[tuple[Any, int]] = [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                return f"status nests objects and arrays deeper than {limit} levels"
            children = item.values() if isinstance(item, dict) else item
            todo.extend((child, depth + 1) for child in children)
    return None


class EvidencePodIn(RequestModel):
    """One Pod of the migration, as the executor read it."""

    MULTILINE: ClassVar[frozenset[str]] = frozenset({"status"})  # container messages hold LF

    namespace: str = Field(min_length=1, max_length=63)
    name: str = Field(min_length=1, max_length=253, pattern=DNS1123_SUBDOMAIN_PATTERN)
    uid: str = Field(min_length=1, max_length=128, description="The Pod's metadata.uid.")
    resource_version: str = Field(
        "", max_length=64, description="The Pod's metadata.resourceVersion when it was read."
    )
    status: dict[str, Any] = Field(description="The Pod's last .status (core/v1 PodStatus).")

    @field_validator("status")
    @classmethod
    def _not_too_deep(cls, value: dict[str, Any]) -> dict[str, Any]:
        problem = _depth_problem(value, MAX_STATUS_DEPTH)
        if problem is not None:
            raise ValueError(problem)
        return value


class MigrationEvidenceIn(RequestModel):
    """The evidence of a non-recoverable migration (phase ``evidence-kept``)."""

    # Checked here before each Pod's own fields: a Pod's status may hold tab, LF and CR.
    MULTILINE: ClassVar[frozenset[str]] = frozenset({"pods"})
    holder: str = Field(description="The executor's name.", pattern=HOLDER_PATTERN)
    collected_at: UtcDatetime = Field(description="When the Pods were read (UTC).")
    pods: list[EvidencePodIn] = Field(min_length=1, max_length=MAX_EVIDENCE_PODS)


def evidence_of(migration_id: str, body: MigrationEvidenceIn, at: datetime) -> MigrationEvidence:
    """The governance record of an evidence body received at ``at`` (UTC)."""
    return MigrationEvidence(
        migration_id=migration_id,
        holder=body.holder,
        collected_at=body.collected_at,
        reported_at=at,
        pods=tuple(
            EvidencePod(p.namespace, p.name, p.uid, p.resource_version, p.status) for p in body.pods
        ),
    )


class EvidenceAcceptedOut(ApiModel):
    """The evidence is on the governance log; the governor stores the first per Pod
    (``GET /v1/migrations/{migrationID}/evidence``)."""

    migration_id: str = Field(alias="migrationID")
    holder: str
    pods: int = Field(description="Pods in the body.")
    status: str = Field(description="`appended`.")


class EvidencePodOut(ApiModel):
    namespace: str
    name: str
    uid: str
    resource_version: str
    status: dict[str, Any] = Field(description="The Pod's last .status (core/v1 PodStatus).")
    holder: str
    collected_at: datetime
    reported_at: datetime = Field(description="When the API received it (the record's time).")

    @classmethod
    def of(cls, row: dict[str, Any]) -> EvidencePodOut:
        return cls(
            namespace=row["namespace"],
            name=row["pod_name"],
            uid=row["pod_uid"],
            resource_version=row["resource_version"],
            status=row["status"],
            holder=row["holder"],
            collected_at=row["collected_at"],
            reported_at=row["reported_at"],
        )


class EvidenceDeviceOut(ApiModel):
    node: str
    resource_id: str = Field(alias="resourceID")
    timeline: list[TimelineItemOut] = Field(
        description="As GET /v1/nodes/{node}/timeline/{resourceID}: oldest first."
    )
    decisions: list[dict[str, Any]] = Field(
        description="The governor's decisions about the device (governance_decisions), oldest "
        "first."
    )


class MigrationEvidenceOut(ApiModel):
    migration_id: str = Field(alias="migrationID")
    migration: MigrationOut
    pods: list[EvidencePodOut]
    device: EvidenceDeviceOut
