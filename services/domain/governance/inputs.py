"""Records of the governance topic: the governor's log, in one partition (a total order).

Written by three producers:

- the stream worker forwards, from the device-health topic, every health *transition* of a device
  (:class:`HealthTransition`), identities resolved after the fact (:class:`DeviceIdentified`),
  inventory conflicts (:class:`InventoryConflict`), node facts (``NodeHeartbeat``, ``NodeResourcesChanged`` from
  :mod:`services.domain.node_events`, unchanged) and each partition's event-time watermark
  (:class:`WatermarkAdvanced`; since issue 10 each forwarded record carries its
  :class:`MergeKey`, ``WatcherTick``\\ s are forwarded as clock records, and per-partition progress is
  :class:`PartitionWatermark`, so the governor takes them in event-time order);
- the operator API appends :class:`OperatorCommand` records (never edits the projection);
- recovery executors append :class:`RecoveryLeaseRequested` and :class:`RecoveryReport`;
- migration (issue 13): ``WorkloadOnDevice`` facts and the executors' ``MigrationReport``\\ s
  (:mod:`services.domain.migration.records`).

Wire form (:mod:`.input_codec`): JSON objects with ``schema`` 1 and ``type``, camelCase keys, times
RFC 3339 UTC ``Z``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Final, TypeAlias

from services.domain.events import (
    DeviceSource,
    Health,
)
from services.domain.governance.adoption import AdoptionDeclaration, AdoptionRetirement
from services.domain.governance.inputs_adoption import NodeAdoptionFacts
from services.domain.governance.inputs_failures import NodeFailureObserved
from services.domain.governance.inputs_ready import NodeReadyObserved
from services.domain.governance.taint_inputs import DeviceTaintsObserved
from services.domain.migration.records import (
    MigrationEvidence,
    MigrationReport,
    WorkloadOnDevice,
)
from services.domain.node_events import (
    NodeHeartbeat,
    NodeResourcesChanged,
    WatcherTick,
)
from services.domain.node_labels import NodeLabelsChanged


@dataclass(frozen=True, slots=True)
class HealthTransition:
    """A device's observed health changed (or the device was first seen) in the directory fold.

    Forwarded by the stream worker for each :class:`~services.domain.directory.Change` with
    ``transition`` set. ``partition``/``offset`` locate the observation on the device-health topic;
    ``(node, resource_id, status_version)`` is its idempotency key. ``pods`` lists
    ``namespace/name`` of the Pods holding the device after the observation.

    ``device_id`` is the device's physical identity on its node when the worker resolved one
    (:mod:`services.domain.inventory.identity`: ``driver/pool/device`` for DRA, the physical GPU
    for device-plugin replicas); the governor keys the device on it (``resource_id`` otherwise),
    so a quarantine follows the GPU across claims whose CDI-form resourceIDs differ.
    ``identity`` is the resolution status and ``uuid`` the GPU UUID where known.
    """

    node: str
    resource_id: str
    resource_name: str
    source: DeviceSource
    health: Health
    status_version: int | None
    observed_at: datetime
    partition: int
    offset: int
    message: str | None = None
    raw_health: str | None = None
    resource_claim: str | None = None
    pods: tuple[str, ...] = ()
    device_id: str | None = None
    identity: str | None = None
    uuid: str | None = None
    type: str = field(default="HealthTransition", init=False)

    @property
    def device_key(self) -> tuple[str, str]:
        """``(node, device_id or resource_id)``: the governor's key of the device."""
        return (self.node, self.device_id or self.resource_id)


@dataclass(frozen=True, slots=True)
class DeviceIdentified:
    """The device ``node`` reported as ``resource_id`` is the physical device ``device_id``
    (``driver/pool/device``; ``uuid`` where known): the worker's inventory resolved it through a
    ResourceClaim or ResourceSlice read after the device's first transitions, which named it by
    its reported resourceID (issue 10). ``observed_at`` is the event time of the record that
    resolved it, ``partition``/``offset`` its place on the device-health topic (``None`` when
    not known). The governor merges what it holds under ``(node, resource_id)`` onto
    ``(node, device_id)`` (:mod:`.identities`)."""

    node: str
    resource_id: str
    device_id: str
    observed_at: datetime
    uuid: str | None = None
    partition: int | None = None
    offset: int | None = None
    type: str = field(default="DeviceIdentified", init=False)


@dataclass(frozen=True, slots=True)
class InventoryConflict:
    """A data-quality finding of the inventory (issue 4): ``kind`` (e.g. ``plugin-and-dra``,
    ``ambiguous-resource-id``, ``resource-id-reused``, ``vanished-from-slice``) about ``subject``
    on ``node``; ``active`` false when it is over. Raised and cleared as an alert, never merged."""

    kind: str
    node: str
    subject: str
    detail: str
    active: bool
    observed_at: datetime
    type: str = field(default="InventoryConflict", init=False)


@dataclass(frozen=True, slots=True)
class WatermarkAdvanced:
    """The device-health topic's ``partition`` (of ``partitions``) holds records up to event time
    ``event_time`` (UTC): the worker has forwarded everything before it from that partition."""

    partition: int
    partitions: int
    event_time: datetime
    type: str = field(default="WatermarkAdvanced", init=False)


@dataclass(frozen=True, slots=True)
class PartitionWatermark:
    """Progress of the governor's event-time merge (:mod:`.event_order`): every record the worker
    forwards from device-health partition ``partition`` (of ``partitions``) after this one has an
    event time at or after ``event_time`` (UTC, already bounded by the broker's clock).

    Sent once per batch and partition touched. Unlike :class:`WatermarkAdvanced` it moves no clock
    by itself: it only lets the merge release records of the other partitions that it has passed.
    """

    partition: int
    partitions: int
    event_time: datetime
    type: str = field(default="PartitionWatermark", init=False)


@dataclass(frozen=True, slots=True, order=True)
class MergeKey:
    """Where a forwarded record sits in the governor's event-time order (issue 10).

    ``(event_time, partition, offset, index)`` is the order: ``event_time`` is the source record's
    *effective* event time (UTC: its ``observedAt``, bounded by the broker's append time plus the
    allowed skew, and never before an earlier record of its partition, so it never decreases along
    a partition); ``partition``/``offset`` locate the source record on the device-health topic,
    ``index`` numbers the records forwarded for it. ``clamped`` says the ``observedAt`` was ahead of
    the bound (not part of the order).
    """

    event_time: datetime
    partition: int
    offset: int
    index: int
    clamped: bool = field(default=False, compare=False)

    @property
    def source(self) -> tuple[int, int, int]:
        """``(partition, offset, index)``: the identity of the forwarded record (a redelivery of
        the same source record forwards the same keys)."""
        return (self.partition, self.offset, self.index)


class CommandAction(StrEnum):
    """What an operator asks (issue 3, item 6)."""

    QUARANTINE = "quarantine"
    EXTEND = "extend"
    RELEASE = "release"
    PAUSE = "pause-automation"
    RESUME = "resume-automation"
    RESET_BREAKER = "reset-breaker"
    ADOPTION_SET = "adoption-set"  # a DRA adoption pool's phase (issue 16)
    ADOPTION_RETIRE = "adoption-retire"  # a DRA adoption pool retired (issue 16)


class Role(StrEnum):
    """API roles, weakest first."""

    VIEWER = "viewer"
    OPERATOR = "operator"
    ADMIN = "admin"


ROLE_RANK: Final = {Role.VIEWER: 0, Role.OPERATOR: 1, Role.ADMIN: 2}
"""A role may do what any role of a lower or equal rank may do (the API's checks and the
governor's agree on it)."""


@dataclass(frozen=True, slots=True)
class OperatorCommand:
    """A write from the operator API, appended to the log.

    ``command_id`` makes it idempotent (a repeat is ignored). ``actor`` is the token's name and
    ``role`` its role. ``node``/``resource_id`` name the device for quarantine, extend and release.
    ``expires_at`` (UTC) is the quarantine's new expiry; ``break_glass`` asks an admin release of a
    system quarantine that has not passed recovery (``reason`` required). ``quarantine_id``, when
    set on extend/release, names the quarantine the operator saw: if the device's active quarantine
    is another one by the time the command is decided, the command is rejected.
    """

    command_id: str
    action: CommandAction
    actor: str
    role: Role
    requested_at: datetime
    reason: str = ""
    node: str | None = None
    resource_id: str | None = None
    expires_at: datetime | None = None
    break_glass: bool = False
    quarantine_id: str | None = None
    request_fingerprint: str | None = None
    """SHA-256 (hex) of the HTTP request that made the command (method, path, canonical body),
    set when the client sent an ``Idempotency-Key``: the governor records it with its decision,
    so any API process can tell a retry of that request from another request with the key."""
    adoption: AdoptionDeclaration | None = None
    """The pool and phase an ``adoption-set`` declares (:mod:`services.domain.governance.adoption`)."""
    retire: AdoptionRetirement | None = None
    """The pool an ``adoption-retire`` retires (:mod:`services.domain.governance.adoption`)."""
    type: str = field(default="OperatorCommand", init=False)


class RecoveryStage(StrEnum):
    """Stages of staged recovery, in order (issue 3, item 5)."""

    PROBE = "probe"
    CANARY = "canary"
    STABILITY = "stability"


@dataclass(frozen=True, slots=True)
class RecoveryLeaseRequested:
    """An executor (``holder``) asks for the device's quarantine lease to run the current stage."""

    node: str
    resource_id: str
    holder: str
    requested_at: datetime
    type: str = field(default="RecoveryLeaseRequested", init=False)


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """Result of a probe or canary run by ``holder`` under lease ``fencing_token``."""

    node: str
    resource_id: str
    stage: RecoveryStage
    passed: bool
    holder: str
    fencing_token: int
    reported_at: datetime
    detail: str = ""
    type: str = field(default="RecoveryReport", init=False)


GovernanceInput: TypeAlias = (
    HealthTransition
    | NodeHeartbeat
    | NodeResourcesChanged
    | WatermarkAdvanced
    | OperatorCommand
    | RecoveryLeaseRequested
    | RecoveryReport
    | InventoryConflict
    | PartitionWatermark
    | WatcherTick
    | DeviceIdentified
    | NodeAdoptionFacts
    | NodeLabelsChanged  # issue 16: services/domain/node_labels.py
    | NodeFailureObserved
    | NodeReadyObserved
    | DeviceTaintsObserved
    | WorkloadOnDevice  # issue 13: services/domain/migration/records.py
    | MigrationReport
    | MigrationEvidence
)
