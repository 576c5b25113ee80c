"""Response models of ``GET /v1/workloads`` (camelCase JSON, RFC 3339 UTC times)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from services.adapters.projection.reads_workloads import WorkloadRow
from services.processes.api.schemas import ApiModel


class OwnerOut(ApiModel):
    """One controller reference (core/v1 ``metav1.OwnerReference``)."""

    kind: str
    name: str
    uid: str
    api_version: str


class WorkloadPodOut(ApiModel):
    namespace: str
    name: str
    uid: str
    node: str
    resource_version: str | None = Field(
        description="The Pod's metadata.resourceVersion the facts were read at (null: not "
        "comparable)."
    )


class MigrationOut(ApiModel):
    migration_class: str = Field(
        alias="class", description="checkpointed, sharded or non-recoverable (docs/migration.md)."
    )
    source: str = Field(description="pod, owner (the top-level owner's annotation) or default.")
    checkpoint_max_age_seconds: int | None = Field(
        description="Seconds; checkpointed workloads only, null when not declared."
    )
    shard: str | None = Field(description="The shard's name (sharded workloads only).")
    reasons: list[str] = Field(description="Annotation values that were not used, and why.")


class HeldDeviceOut(ApiModel):
    resource_id: str = Field(alias="resourceID")
    resource_name: str
    health: str
    state: str | None = Field(description="Governance state (null: not governed yet).")
    quarantine_id: str | None = Field(alias="quarantineID")


class WorkloadOut(ApiModel):
    """A Pod holding devices, with its workload (the top of its controller chain)."""

    pod: WorkloadPodOut
    workload: OwnerOut = Field(
        description="The topmost known controller; a bare Pod is its own workload (kind Pod)."
    )
    chain: list[OwnerOut] = Field(description="From the Pod's direct controller up.")
    chain_complete: bool
    chain_reason: str | None = Field(description="Where the chain stopped, when incomplete.")
    migration: MigrationOut
    devices: list[HeldDeviceOut]
    observed_at: datetime

    @classmethod
    def of(cls, item: WorkloadRow) -> WorkloadOut:
        r: dict[str, Any] = item.row
        chain = [OwnerOut.model_validate(c) for c in r["chain"]]
        version = r["status_version"]
        return cls(
            pod=WorkloadPodOut(
                namespace=r["namespace"],
                name=r["pod_name"],
                uid=r["pod_uid"],
                node=r["node"],
                resource_version=None if version is None else str(version),
            ),
            workload=OwnerOut(
                kind=r["workload_kind"],
                name=r["workload_name"],
                uid=r["workload_uid"],
                api_version=chain[-1].api_version if chain else "v1",
            ),
            chain=chain,
            chain_complete=r["chain_complete"],
            chain_reason=r["chain_reason"],
            migration=MigrationOut(
                migration_class=r["migration_class"],
                source=r["migration_source"],
                checkpoint_max_age_seconds=r["checkpoint_max_age_seconds"],
                shard=r["shard"],
                reasons=list(r["migration_reasons"]),
            ),
            devices=[
                HeldDeviceOut(
                    resource_id=d.resource_id,
                    resource_name=d.resource_name,
                    health=d.health,
                    state=d.state,
                    quarantine_id=d.quarantine_id,
                )
                for d in item.devices
            ],
            observed_at=r["observed_at"],
        )


class WorkloadPageOut(ApiModel):
    items: list[WorkloadOut] = Field(description="Sorted by Pod UID.")
    next_cursor: str | None = Field(
        description="Pass as `cursor` for the next page; null on the last page."
    )
