"""Response models of the inventory, capacity and reconcile endpoints (camelCase JSON, RFC 3339
UTC times)."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from services.domain.inventory.capacity import CapacityRow
from services.domain.inventory.capacity_report import CapacityReport, PluginResource
from services.domain.inventory.directory import InventoryDevice
from services.domain.inventory.fold import ConflictRow
from services.domain.inventory.reconcile import Divergence
from services.processes.api.schemas import ApiModel


class TaintOut(ApiModel):
    key: str
    value: str | None
    effect: str
    time_added: datetime | None = Field(
        None, description="The taint's `timeAdded` (UTC), null when the object has none."
    )
    rule: str | None = Field(
        None,
        description="The DeviceTaintRule (of others: never devicestate's own) that taints the "
        "device; null for a taint the ResourceSlice publishes itself.",
    )


class AllocatedToOut(ApiModel):
    claims: list[str] = Field(
        description="`namespace/name` of the ResourceClaims allocated the device (DRA)."
    )
    pods: list[str] = Field(
        description="`namespace/name` of the Pods holding it: the directory's allocations of its "
        "reported IDs, and the claims' `reservedFor`."
    )


class InventoryDeviceOut(ApiModel):
    """One physical device, idle or not."""

    node: str | None = Field(description="Null for a device of a pool-scoped ResourceSlice.")
    device_id: str = Field(
        alias="deviceID",
        description="`driver/pool/device` (DRA) or the physical device-plugin ID (replica "
        "suffix `::<n>` removed).",
    )
    owner: str = Field(description="dra or device-plugin.")
    pool: str | None
    driver: str | None
    uuid: str | None = Field(
        description="GPU UUID where known (slice `uuid` attribute, GPU-/MIG- IDs)."
    )
    device_class: str | None = Field(
        description="DeviceClass whose CEL selector names the slice's driver (DRA)."
    )
    resource_name: str | None = Field(description="Extended resource name (device plugin).")
    taints: list[TaintOut] = Field(description="Device taints published in the ResourceSlice.")
    allocated_to: AllocatedToOut
    health: str | None = Field(
        description="Latest observed health of any of its reported IDs; null: never reported "
        "(idle since devicestate runs)."
    )
    health_observed_at: datetime | None
    state: str | None = Field(
        description="Governance state (device_governance); null: the governor never saw it."
    )
    quarantine_id: str | None = Field(alias="quarantineID")
    unavailable: str | None = Field(
        description="Why new work cannot use it: Quarantined, Recovering, Restricted, Deferred, "
        "Unhealthy or taint:<key>; null: usable."
    )
    reported_ids: list[str] = Field(
        alias="reportedIDs",
        description="resourceIDs Pod status reported for it (CDI names, replicas, ...).",
    )
    in_slice: bool = Field(
        description="False for a DRA device reported by Pods but in no current ResourceSlice."
    )

    @classmethod
    def of(cls, d: InventoryDevice) -> InventoryDeviceOut:
        return cls(
            node=d.node,
            device_id=d.device_id,
            owner=d.owner,
            pool=d.pool,
            driver=d.driver,
            uuid=d.uuid,
            device_class=d.device_class,
            resource_name=d.resource_name,
            taints=[
                TaintOut(
                    key=t.key,
                    value=t.value,
                    effect=t.effect,
                    time_added=t.time_added,
                    rule=t.rule,
                )
                for t in d.taints
            ],
            allocated_to=AllocatedToOut(claims=list(d.claims), pods=list(d.pods)),
            health=d.health,
            health_observed_at=d.health_observed_at,
            state=d.state,
            quarantine_id=d.quarantine_id,
            unavailable=d.unavailable,
            reported_ids=list(d.reported_ids),
            in_slice=d.in_slice,
        )


class InventoryPageOut(ApiModel):
    items: list[InventoryDeviceOut]
    next_cursor: str | None = Field(
        description="Pass as `cursor` for the next page; null on the last page."
    )


class PluginResourceOut(ApiModel):
    """A node's device-plugin resource: device plugins publish no IDs for idle devices, so the
    devices never reported are a count."""

    node: str
    resource_name: str
    capacity: int
    allocatable: int
    seen: int = Field(description="Distinct resourceIDs of the resource ever reported there.")
    unseen: int = Field(description="capacity - seen (at least 0): devices with no known ID.")

    @classmethod
    def of(cls, r: PluginResource) -> PluginResourceOut:
        return cls(
            node=r.node,
            resource_name=r.resource_name,
            capacity=r.capacity,
            allocatable=r.allocatable,
            seen=r.seen,
            unseen=r.unseen,
        )


class PluginResourcesOut(ApiModel):
    items: list[PluginResourceOut]
    unseen: int = Field(description="Sum of `unseen` over the items.")


class ConflictOut(ApiModel):
    kind: str = Field(
        description="ambiguous-resource-id, resource-id-reused, plugin-and-dra or "
        "vanished-from-slice."
    )
    node: str
    subject: str
    detail: str
    active: bool
    first_seen: datetime
    last_seen: datetime

    @classmethod
    def of(cls, c: ConflictRow) -> ConflictOut:
        return cls(
            kind=c.kind,
            node=c.node,
            subject=c.subject,
            detail=c.detail,
            active=c.active,
            first_seen=c.first_seen,
            last_seen=c.last_seen,
        )


class ConflictsOut(ApiModel):
    items: list[ConflictOut]


class CapacityRowOut(ApiModel):
    key: str
    total: int
    allocated: int
    idle: int
    unavailable: int
    fragmented: int

    @classmethod
    def of(cls, r: CapacityRow) -> CapacityRowOut:
        return cls(
            key=r.key,
            total=r.total,
            allocated=r.allocated,
            idle=r.idle,
            unavailable=r.unavailable,
            fragmented=r.fragmented,
        )


class CapacityOut(ApiModel):
    view: str
    request_size: int = Field(description="Request size of the `fragmented` count.")
    request_size_source: str = Field(
        description="setting (DEVICESTATE_CAPACITY_REQUEST_SIZE), claims (most common "
        "ResourceClaim request count), pods (most common devices per Pod and resource) or "
        "default (1)."
    )
    items: list[CapacityRowOut]

    @classmethod
    def of(cls, view: str, report: CapacityReport) -> CapacityOut:
        return cls(
            view=view,
            request_size=report.request_size,
            request_size_source=report.request_size_source,
            items=[CapacityRowOut.of(r) for r in report.views[view]],
        )


class DivergenceOut(ApiModel):
    node: str
    resource_name: str
    device_classes: list[str]
    slice_devices: int = Field(description="Devices the node's ResourceSlices advertise.")
    node_capacity: int = Field(description="The Node's capacity of the extended resource.")
    node_allocatable: int
    difference: int = Field(description="sliceDevices - nodeCapacity.")
    status: str = Field(description="match, mismatch, dra-only or plugin-only.")

    @classmethod
    def of(cls, d: Divergence) -> DivergenceOut:
        return cls(
            node=d.node,
            resource_name=d.resource_name,
            device_classes=list(d.device_classes),
            slice_devices=d.slice_devices,
            node_capacity=d.node_capacity,
            node_allocatable=d.node_allocatable,
            difference=d.difference,
            status=d.status,
        )


class DivergencesOut(ApiModel):
    items: list[DivergenceOut]
