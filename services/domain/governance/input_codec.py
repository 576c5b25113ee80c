"""The wire form of the governance topic's records (:mod:`.inputs`): JSON bytes in and out.

JSON objects with ``schema`` 1 and ``type``, camelCase keys, times RFC 3339 UTC ``Z``; node facts
keep the form of :mod:`services.domain.node_events`. :func:`decode_input` raises
:class:`~services.domain.codec.EventDecodeError` on anything else, and on text PostgreSQL could
not store (NUL, lone surrogates).
"""

from __future__ import annotations

from datetime import datetime
from sys import intern
from typing import Any

import orjson

from services.domain.codec import (
    EventDecodeError,
    bool_field,
    enum_field,
    event_time_field,
    int_field,
    json_fault,
    optional_str_field,
    optional_time_field,
    parse_resource_version,
    str_field,
    time_field,
    type_mismatch,
)
from services.domain.events import SCHEMA_VERSION, DeviceSource, Health, format_time
from services.domain.governance import inputs_ready
from services.domain.governance.adoption import (
    declaration_from_dict,
    declaration_to_dict,
    retirement_from_dict,
    retirement_to_dict,
)
from services.domain.governance.input_checks import (
    HEALTHS,
    SOURCES,
    check_storable,
    interned,
    may_hold_nul,
    member_of,
)
from services.domain.governance.inputs import (
    CommandAction,
    DeviceIdentified,
    GovernanceInput,
    HealthTransition,
    InventoryConflict,
    MergeKey,
    OperatorCommand,
    PartitionWatermark,
    RecoveryLeaseRequested,
    RecoveryReport,
    RecoveryStage,
    Role,
    WatermarkAdvanced,
)
from services.domain.governance.inputs_adoption import (
    NodeAdoptionFacts,
    adoption_facts_from_dict,
    adoption_facts_to_dict,
)
from services.domain.governance.inputs_failures import (
    RECORD_TYPE as FAILURE_TYPE,
)
from services.domain.governance.inputs_failures import (
    NodeFailureObserved,
    failure_from_dict,
    failure_to_dict,
)
from services.domain.governance.taint_inputs import (
    RECORD_TYPE as TAINTS_TYPE,
)
from services.domain.governance.taint_inputs import (
    DeviceTaintsObserved,
    taints_from_dict,
    taints_to_dict,
)
from services.domain.migration import wire as migration_wire
from services.domain.migration.records import (
    MigrationEvidence,
    MigrationReport,
    WorkloadOnDevice,
)
from services.domain.node_events import (
    NodeHeartbeat,
    NodeLabelsChanged,
    NodeResourcesChanged,
    WatcherTick,
    node_event_from_dict,
    node_event_to_dict,
)


def _t(value: datetime | None) -> str | None:
    return None if value is None else format_time(value)


def input_to_dict(record: GovernanceInput) -> dict[str, Any]:
    """The JSON object of a governance-topic record."""
    if isinstance(record, NodeHeartbeat | NodeResourcesChanged | WatcherTick | NodeLabelsChanged):
        return node_event_to_dict(record)
    if isinstance(record, NodeAdoptionFacts):
        return adoption_facts_to_dict(record)
    if isinstance(record, NodeFailureObserved):
        return failure_to_dict(record)
    if isinstance(record, inputs_ready.NodeReadyObserved):
        return inputs_ready.ready_to_dict(record)
    if isinstance(record, DeviceTaintsObserved):
        return taints_to_dict(record)
    if isinstance(record, WorkloadOnDevice | MigrationReport | MigrationEvidence):
        return migration_wire.to_dict(record)
    base: dict[str, Any] = {"schema": SCHEMA_VERSION, "type": record.type}
    if isinstance(record, HealthTransition):
        base.update(
            node=record.node,
            resourceID=record.resource_id,
            resourceName=record.resource_name,
            source=record.source.value,
            health=record.health.value,
            statusVersion=None if record.status_version is None else str(record.status_version),
            observedAt=format_time(record.observed_at),
            partition=record.partition,
            offset=record.offset,
            message=record.message,
            rawHealth=record.raw_health,
            resourceClaim=record.resource_claim,
            pods=list(record.pods),
            deviceID=record.device_id,
            identity=record.identity,
            uuid=record.uuid,
        )
    elif isinstance(record, InventoryConflict):
        base.update(
            kind=record.kind,
            node=record.node,
            subject=record.subject,
            detail=record.detail,
            active=record.active,
            observedAt=format_time(record.observed_at),
        )
    elif isinstance(record, DeviceIdentified):
        base.update(
            node=record.node,
            resourceID=record.resource_id,
            deviceID=record.device_id,
            uuid=record.uuid,
            observedAt=format_time(record.observed_at),
            partition=record.partition,
            offset=record.offset,
        )
    elif isinstance(record, WatermarkAdvanced | PartitionWatermark):
        base.update(
            partition=record.partition,
            partitions=record.partitions,
            eventTime=format_time(record.event_time),
        )
    elif isinstance(record, OperatorCommand):
        base.update(
            commandID=record.command_id,
            action=record.action.value,
            actor=record.actor,
            role=record.role.value,
            requestedAt=format_time(record.requested_at),
            reason=record.reason,
            node=record.node,
            resourceID=record.resource_id,
            expiresAt=_t(record.expires_at),
            breakGlass=record.break_glass,
            quarantineID=record.quarantine_id,
        )
        if record.request_fingerprint is not None:  # absent: the bytes of before issue 11
            base["requestFingerprint"] = record.request_fingerprint
        if record.adoption is not None:  # absent: the bytes of before issue 16
            base["adoption"] = declaration_to_dict(record.adoption)
        if record.retire is not None:  # absent: the bytes of before the retire command
            base["retire"] = retirement_to_dict(record.retire)
    elif isinstance(record, RecoveryLeaseRequested):
        base.update(
            node=record.node,
            resourceID=record.resource_id,
            holder=record.holder,
            requestedAt=format_time(record.requested_at),
        )
    else:
        base.update(
            node=record.node,
            resourceID=record.resource_id,
            stage=record.stage.value,
            passed=record.passed,
            holder=record.holder,
            fencingToken=record.fencing_token,
            reportedAt=format_time(record.reported_at),
            detail=record.detail,
        )
    return base


def encode_input(record: GovernanceInput, key: MergeKey | None = None) -> bytes:
    """Serialise a governance-topic record (UTF-8 JSON, keys sorted); a forwarded record's
    :class:`MergeKey` goes in its ``order`` object."""
    return orjson.dumps(keyed_to_dict(record, key), option=orjson.OPT_SORT_KEYS)


def keyed_to_dict(record: GovernanceInput, key: MergeKey | None) -> dict[str, Any]:
    """The JSON object of a record with its ``order`` object (when ``key`` is given)."""
    obj = input_to_dict(record)
    if key is not None:
        obj["order"] = merge_key_to_dict(key)
    return obj


def keyed_from_dict(obj: dict[str, Any]) -> tuple[GovernanceInput, MergeKey | None]:
    """Inverse of :func:`keyed_to_dict` (``obj`` is not changed); raises ``EventDecodeError``."""
    order = obj.get("order")
    record = input_from_dict({k: v for k, v in obj.items() if k != "order"})
    return record, None if order is None else merge_key_from_dict(order)


def merge_key_to_dict(key: MergeKey) -> dict[str, Any]:
    """``{"eventTime", "partition", "offset", "index", "clamped"}``."""
    return {
        "eventTime": format_time(key.event_time),
        "partition": key.partition,
        "offset": key.offset,
        "index": key.index,
        "clamped": key.clamped,
    }


def merge_key_from_dict(obj: Any) -> MergeKey:
    """The :class:`MergeKey` of an ``order`` object; raises ``EventDecodeError``."""
    if not isinstance(obj, dict):
        raise EventDecodeError("field 'order' must be an object")
    return MergeKey(
        event_time=time_field(obj, "eventTime"),
        partition=int_field(obj, "partition"),
        offset=int_field(obj, "offset"),
        index=int_field(obj, "index"),
        clamped=bool_field(obj, "clamped"),
    )


# --- decoding -------------------------------------------------------------------------------


def input_from_dict(obj: dict[str, Any], *, storable: bool = False) -> GovernanceInput:
    """Build a governance-topic record from its JSON object; raises ``EventDecodeError`` (also for
    a string PostgreSQL could not store: the record is dead-lettered, not written).
    ``storable``: the caller knows every string of ``obj`` is storable (:func:`may_hold_nul` of
    the text it was parsed from), so it is not checked again."""
    if not storable:
        check_storable(obj, "")
    if obj.get("schema") != SCHEMA_VERSION:
        raise EventDecodeError(f"unsupported schema {obj.get('schema')!r}")
    kind = obj.get("type")
    if kind in ("NodeHeartbeat", "NodeResourcesChanged", "WatcherTick", "NodeLabelsChanged"):
        return node_event_from_dict(obj)
    if kind == "NodeAdoptionFacts":
        return adoption_facts_from_dict(obj)
    if kind == FAILURE_TYPE:
        return failure_from_dict(obj)
    if kind == inputs_ready.RECORD_TYPE:
        return inputs_ready.ready_from_dict(obj)
    if kind in migration_wire.TYPES:
        return migration_wire.from_dict(obj)
    if kind == "HealthTransition":
        raw_version = obj.get("statusVersion")
        version = None if raw_version is None else parse_resource_version(raw_version)
        if raw_version is not None and version is None:
            raise EventDecodeError(f"statusVersion {raw_version!r} is not comparable")
        pods = obj.get("pods") or []
        if not isinstance(pods, list) or not all(isinstance(p, str) for p in pods):
            raise EventDecodeError("field 'pods' must be a list of strings")
        # The governor keeps these strings for as long as it holds the device (``DeviceGov``);
        # interned, the devices of one node, one Pod or one resource name share one copy each.
        return HealthTransition(
            node=intern(str_field(obj, "node")),
            resource_id=str_field(obj, "resourceID"),
            resource_name=intern(str_field(obj, "resourceName")),
            source=member_of(SOURCES, DeviceSource, obj, "source"),
            health=member_of(HEALTHS, Health, obj, "health"),
            status_version=version,
            observed_at=event_time_field(obj, "observedAt"),
            partition=int_field(obj, "partition"),
            offset=int_field(obj, "offset"),
            message=interned(optional_str_field(obj, "message")),
            raw_health=interned(optional_str_field(obj, "rawHealth")),
            resource_claim=interned(optional_str_field(obj, "resourceClaim")),
            pods=tuple(intern(pod) for pod in pods),
            device_id=optional_str_field(obj, "deviceID"),
            identity=optional_str_field(obj, "identity"),
            uuid=optional_str_field(obj, "uuid"),
        )
    if kind == "InventoryConflict":
        return InventoryConflict(
            kind=str_field(obj, "kind"),
            node=str_field(obj, "node"),
            subject=str_field(obj, "subject"),
            detail=str_field(obj, "detail", empty=True),
            active=bool_field(obj, "active"),
            observed_at=event_time_field(obj, "observedAt"),
        )
    if kind == "DeviceIdentified":
        return DeviceIdentified(
            node=str_field(obj, "node"),
            resource_id=str_field(obj, "resourceID"),
            device_id=str_field(obj, "deviceID"),
            observed_at=event_time_field(obj, "observedAt"),
            uuid=optional_str_field(obj, "uuid"),
            partition=None if obj.get("partition") is None else int_field(obj, "partition"),
            offset=None if obj.get("offset") is None else int_field(obj, "offset"),
        )
    if kind in ("WatermarkAdvanced", "PartitionWatermark"):
        cls = WatermarkAdvanced if kind == "WatermarkAdvanced" else PartitionWatermark
        return cls(
            partition=int_field(obj, "partition"),
            partitions=int_field(obj, "partitions", 1),
            event_time=time_field(obj, "eventTime"),
        )
    if kind == "OperatorCommand":
        return OperatorCommand(
            command_id=str_field(obj, "commandID"),
            action=enum_field(CommandAction, obj, "action"),
            actor=str_field(obj, "actor"),
            role=enum_field(Role, obj, "role"),
            requested_at=time_field(obj, "requestedAt"),
            reason=str_field(obj, "reason", empty=True) if obj.get("reason") is not None else "",
            node=optional_str_field(obj, "node"),
            resource_id=optional_str_field(obj, "resourceID"),
            expires_at=optional_time_field(obj, "expiresAt"),
            break_glass=bool_field(obj, "breakGlass"),
            quarantine_id=optional_str_field(obj, "quarantineID"),
            request_fingerprint=optional_str_field(obj, "requestFingerprint"),
            adoption=None
            if obj.get("adoption") is None
            else declaration_from_dict(obj["adoption"]),
            retire=None if obj.get("retire") is None else retirement_from_dict(obj["retire"]),
        )
    if kind == "RecoveryLeaseRequested":
        return RecoveryLeaseRequested(
            node=str_field(obj, "node"),
            resource_id=str_field(obj, "resourceID"),
            holder=str_field(obj, "holder"),
            requested_at=time_field(obj, "requestedAt"),
        )
    if kind == "RecoveryReport":
        return RecoveryReport(
            node=str_field(obj, "node"),
            resource_id=str_field(obj, "resourceID"),
            stage=enum_field(RecoveryStage, obj, "stage"),
            passed=bool_field(obj, "passed"),
            holder=str_field(obj, "holder"),
            fencing_token=int_field(obj, "fencingToken", 1),
            reported_at=time_field(obj, "reportedAt"),
            detail=str_field(obj, "detail", empty=True) if obj.get("detail") is not None else "",
        )
    if kind == TAINTS_TYPE:
        return taints_from_dict(obj)
    raise EventDecodeError(f"unknown governance record type {kind!r}")


def decode_input(payload: bytes, record_type: str | None = None) -> GovernanceInput:
    """Parse a governance-topic record; raises :class:`EventDecodeError` with the reason.

    ``record_type``: the type the record's type header names (``None``: no header, a record
    written before producers set it); a body of another type is refused, the message naming both.
    """
    return decode_keyed(payload, record_type)[0]


def decode_keyed(
    payload: bytes, record_type: str | None = None
) -> tuple[GovernanceInput, MergeKey | None]:
    """:func:`decode_input` and the record's :class:`MergeKey` (``None``: not a forwarded record
    of the event-time merge: a command, a recovery record, or a record written before issue 10)."""
    try:
        obj = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise EventDecodeError(json_fault(payload, exc)) from None
    if not isinstance(obj, dict):
        raise EventDecodeError("not a JSON object")
    if record_type is not None and obj.get("type") != record_type:
        raise type_mismatch(record_type, obj.get("type"))
    order = obj.pop("order", None)
    record = input_from_dict(obj, storable=not may_hold_nul(payload))
    return record, None if order is None else merge_key_from_dict(order)
