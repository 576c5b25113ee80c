"""Response models of the directory API: camelCase JSON, times RFC 3339 UTC (``Z``), statusVersions
as decimal strings (Kubernetes resourceVersions exceed 2**53, the largest integer a JSON double
holds exactly). Built from the projection's read models, never used as tables."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from services.adapters.projection.read_models import (
    FleetCounts,
    HistoryEntry,
    NodeCounts,
    NodeSummary,
    PartitionProgress,
)
from services.adapters.projection.reads_governance import DeviceGovernance
from services.domain.directory import Allocation, DeviceRecord
from services.domain.events import ContainerKind, DeviceSource, Health


def _version(value: int | None) -> str | None:
    return None if value is None else str(value)


class ApiModel(BaseModel):
    """Base of every response model: camelCase aliases on the wire, immutable."""

    model_config = ConfigDict(alias_generator=to_camel, validate_by_name=True, frozen=True)


class ContainerOut(ApiModel):
    name: str
    kind: ContainerKind


class ClaimOut(ApiModel):
    pod_claim_name: str
    request: str | None
    resource_claim_name: str | None


class AllocationOut(ApiModel):
    """A Pod holding the device, as its latest applied observation reported."""

    pod_uid: str = Field(alias="podUID")
    namespace: str
    pod_name: str
    containers: list[ContainerOut]
    claim: ClaimOut | None
    status_version: str | None = Field(
        description="The Pod's resourceVersion when this allocation was observed."
    )

    @classmethod
    def of(cls, allocation: Allocation) -> AllocationOut:
        claim = allocation.claim
        return cls(
            pod_uid=allocation.pod_uid,
            namespace=allocation.namespace,
            pod_name=allocation.pod_name,
            containers=[ContainerOut(name=c.name, kind=c.kind) for c in allocation.containers],
            claim=None
            if claim is None
            else ClaimOut(
                pod_claim_name=claim.pod_claim_name,
                request=claim.request,
                resource_claim_name=claim.resource_claim_name,
            ),
            status_version=_version(allocation.status_version),
        )


class DeviceGovernanceOut(ApiModel):
    """What devicestate's governor decided about the device (``device_governance``)."""

    state: str = Field(
        description="Available, UnknownTolerated, Restricted, Deferred, Quarantined or Recovering."
    )
    state_since: datetime = Field(description="Event time the device entered the state.")
    effective_health: str = Field(
        description="Observed health adjusted by node facts (a lost heartbeat or device plugin "
        "reads Unknown)."
    )
    effective_reason: str | None = Field(
        description="Why the effective health differs from the observed one."
    )
    quarantine_id: str | None = Field(
        alias="quarantineID", description="The quarantine holding the device, if any."
    )

    @classmethod
    def of(cls, gov: DeviceGovernance) -> DeviceGovernanceOut:
        return cls(
            state=gov.state,
            state_since=gov.state_since,
            effective_health=gov.effective_health,
            effective_reason=gov.effective_reason,
            quarantine_id=gov.quarantine_id,
        )


class DeviceOut(ApiModel):
    """Current state of one device ``(node, resourceID)``."""

    node: str
    resource_id: str = Field(alias="resourceID")
    resource_name: str = Field(
        description="Extended resource name (device plugin) or claim:<podClaimName>[/<request>] "
        "(DRA)."
    )
    source: DeviceSource
    health: Health
    raw_health: str | None = Field(
        description="The reported value when it was not one of the API's health values."
    )
    message: str | None
    status_version: str | None = Field(
        description="resourceVersion of the observation that set the health; null while the "
        "state comes from an unordered observation."
    )
    ordered: bool
    last_observed_at: datetime
    last_transition_at: datetime = Field(
        description="observedAt of the observation that last changed the health."
    )
    allocations: list[AllocationOut]
    flags: list[str]
    governance: DeviceGovernanceOut | None = Field(
        None, description="Governance state; null when the governor has not seen the device."
    )

    @classmethod
    def of(cls, record: DeviceRecord, governance: DeviceGovernance | None = None) -> DeviceOut:
        return cls(
            node=record.node,
            resource_id=record.resource_id,
            resource_name=record.resource_name,
            source=record.source,
            health=record.health,
            raw_health=record.raw_health,
            message=record.message,
            status_version=_version(record.status_version),
            ordered=record.ordered,
            last_observed_at=record.last_observed_at,
            last_transition_at=record.last_transition_at,
            allocations=[AllocationOut.of(a) for a in record.allocations],
            flags=list(record.flags),
            governance=None if governance is None else DeviceGovernanceOut.of(governance),
        )


class DevicePageOut(ApiModel):
    items: list[DeviceOut]
    next_cursor: str | None = Field(
        description="Pass as `cursor` for the next page; null on the last page."
    )


class HistoryEntryOut(ApiModel):
    """One change an event made to the device, with the event's log position."""

    topic: str
    partition: int
    offset: int
    kind: str = Field(description="observed (an applied observation) or released.")
    health: Health = Field(description="The device's health after the event.")
    status_version: str | None
    observed_at: datetime
    transition: bool = Field(description="True when the observation changed the health.")
    pod_uid: str = Field(alias="podUID")
    namespace: str
    pod_name: str
    message: str | None
    raw_health: str | None
    frozen: bool = Field(
        default=False,
        description="A Healthy reported by a terminated Pod: recorded, not applied (its status "
        "is frozen, KEP-4680); health is then what the observation said.",
    )

    @classmethod
    def of(cls, entry: HistoryEntry) -> HistoryEntryOut:
        return cls(
            topic=entry.position.topic,
            partition=entry.position.partition,
            offset=entry.position.offset,
            kind=entry.kind,
            health=entry.health,
            status_version=_version(entry.status_version),
            observed_at=entry.observed_at,
            transition=entry.transition,
            pod_uid=entry.pod_uid,
            namespace=entry.namespace,
            pod_name=entry.pod_name,
            message=entry.message,
            raw_health=entry.raw_health,
            frozen=entry.frozen,
        )


class HistoryOut(ApiModel):
    node: str
    resource_id: str = Field(alias="resourceID")
    items: list[HistoryEntryOut] = Field(description="Newest first.")


class NodeCountsOut(ApiModel):
    node: str
    total: int
    by_health: dict[Health, int]

    @classmethod
    def of(cls, counts: NodeCounts) -> NodeCountsOut:
        return cls(node=counts.node, total=counts.devices, by_health=counts.by_health)


class NodesOut(ApiModel):
    items: list[NodeCountsOut]
    next_cursor: str | None = Field(
        None, description="Pass as `cursor` for the next page; null on the last page."
    )


class NodeSummaryOut(ApiModel):
    node: str
    total: int
    by_health: dict[Health, int]
    devices: list[DeviceOut] = Field(description="Sorted by resourceID.")

    @classmethod
    def of(
        cls, summary: NodeSummary, governance: dict[str, DeviceGovernance] | None = None
    ) -> NodeSummaryOut:
        counts = summary.counts
        governance = governance or {}
        return cls(
            node=counts.node,
            total=counts.devices,
            by_health=counts.by_health,
            devices=[DeviceOut.of(d, governance.get(d.resource_id)) for d in summary.devices],
        )


class FleetOut(ApiModel):
    total: int
    nodes: int
    by_health: dict[Health, int]
    by_source: dict[DeviceSource, int]

    @classmethod
    def of(cls, counts: FleetCounts) -> FleetOut:
        return cls(
            total=counts.devices,
            nodes=counts.nodes,
            by_health=counts.by_health,
            by_source=counts.by_source,
        )


class PartitionOut(ApiModel):
    topic: str
    partition: int
    offset: int | None
    highwater: int | None
    lag: int | None
    last_event_at: datetime | None

    @classmethod
    def of(cls, progress: PartitionProgress) -> PartitionOut:
        return cls(
            topic=progress.topic,
            partition=progress.partition,
            offset=progress.offset,
            highwater=progress.highwater,
            lag=progress.lag,
            last_event_at=progress.last_event_at,
        )


class LagOut(ApiModel):
    """The worker group's lag on one partition, from the broker (records; seconds: how long the
    oldest record it has not consumed has waited)."""

    topic: str
    partition: int
    end_offset: int
    committed_offset: int | None
    records: int
    seconds: float


class ReadyOut(ApiModel):
    status: str = Field(description="ready or unavailable.")
    reason: str | None = None
    partitions: list[PartitionOut] = Field(
        [], description="What the projection recorded of its progress (as the worker last wrote)."
    )
    lag: list[LagOut] = Field(
        [],
        description="The worker group's lag per partition of the event and governance topics, "
        "from the broker's end offsets and the group's committed offsets.",
    )


class ValidationProblemOut(ApiModel):
    """One problem of an invalid request: where (``["body", "node"]``, ``["query", "limit"]``),
    what, and pydantic's error type."""

    loc: list[str | int]
    msg: str
    type: str


class ErrorOut(ApiModel):
    """Every error answer (4xx, 5xx): ``detail`` says what went wrong in one line."""

    detail: str
    errors: list[ValidationProblemOut] | None = Field(
        None, description="422 for an invalid body or parameter: each problem."
    )
