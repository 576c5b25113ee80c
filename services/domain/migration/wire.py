"""The wire form of the migration records on the governance topic: JSON objects with ``schema``
1 and ``type``, camelCase keys, times RFC 3339 UTC ``Z`` (as the other governance records,
:mod:`services.domain.governance.input_codec`). Decoding raises
:class:`~services.domain.codec.EventDecodeError` with the field at fault."""

from __future__ import annotations

from typing import Any

from services.domain.codec import (
    EventDecodeError,
    bool_field,
    enum_field,
    event_time_field,
    int_field,
    optional_str_field,
    optional_time_field,
    parse_resource_version,
    str_field,
    time_field,
)
from services.domain.events import SCHEMA_VERSION, format_time
from services.domain.migration.records import (
    EvidencePod,
    MigrationEvidence,
    MigrationReport,
    ReportKind,
    WorkloadOnDevice,
)

TYPES = frozenset({"WorkloadOnDevice", "MigrationReport", "MigrationEvidence"})
EVIDENCE_VERSION = 1
"""``version`` of the ``MigrationEvidence`` wire form (a newer one is refused, not misread)."""

MigrationRecord = WorkloadOnDevice | MigrationReport | MigrationEvidence


def to_dict(record: MigrationRecord) -> dict[str, Any]:
    base: dict[str, Any] = {"schema": SCHEMA_VERSION, "type": record.type}
    if isinstance(record, MigrationEvidence):
        base.update(
            version=EVIDENCE_VERSION,
            migrationID=record.migration_id,
            holder=record.holder,
            collectedAt=format_time(record.collected_at),
            reportedAt=format_time(record.reported_at),
            pods=[
                {
                    "namespace": p.namespace,
                    "name": p.name,
                    "uid": p.uid,
                    "resourceVersion": p.resource_version,
                    "status": p.status,
                }
                for p in record.pods
            ],
        )
        return base
    if isinstance(record, WorkloadOnDevice):
        base.update(
            node=record.node,
            resourceID=record.resource_id,
            workloadUID=record.workload_uid,
            podUID=record.pod_uid,
            namespace=record.namespace,
            podName=record.pod_name,
            migrationClass=record.migration_class,
            checkpointMaxAgeSeconds=record.checkpoint_max_age_seconds,
            shard=record.shard,
            statusVersion=None if record.status_version is None else str(record.status_version),
            observedAt=format_time(record.observed_at),
            present=record.present,
        )
        return base
    base.update(
        migrationID=record.migration_id,
        kind=record.kind.value,
        holder=record.holder,
        reportedAt=format_time(record.reported_at),
        fencingToken=record.fencing_token,
        checkpointID=record.checkpoint_id,
        checkpointAt=None if record.checkpoint_at is None else format_time(record.checkpoint_at),
        devices=[{"node": n, "resourceID": r} for n, r in record.devices],
        detail=record.detail,
    )
    return base


def evidence_from_dict(obj: dict[str, Any]) -> MigrationEvidence:
    """The record of a ``MigrationEvidence`` object (``version`` 1)."""
    if obj.get("version") != EVIDENCE_VERSION:
        raise EventDecodeError(f"MigrationEvidence version {obj.get('version')!r} is not 1")
    pods = obj.get("pods")
    if not isinstance(pods, list) or not all(
        isinstance(p, dict) and isinstance(p.get("status"), dict) for p in pods
    ):
        raise EventDecodeError("field 'pods' must be a list of objects with a 'status' object")
    return MigrationEvidence(
        migration_id=str_field(obj, "migrationID"),
        holder=str_field(obj, "holder"),
        collected_at=time_field(obj, "collectedAt"),
        reported_at=time_field(obj, "reportedAt"),
        pods=tuple(
            EvidencePod(
                namespace=str_field(p, "namespace"),
                name=str_field(p, "name"),
                uid=str_field(p, "uid"),
                resource_version=str_field(p, "resourceVersion", empty=True),
                status=p["status"],
            )
            for p in pods
        ),
    )


def from_dict(obj: dict[str, Any]) -> MigrationRecord:
    """The record of a ``WorkloadOnDevice``, ``MigrationReport`` or ``MigrationEvidence`` object."""
    if obj.get("type") == "MigrationEvidence":
        return evidence_from_dict(obj)
    if obj.get("type") == "WorkloadOnDevice":
        raw = obj.get("statusVersion")
        version = None if raw is None else parse_resource_version(raw)
        if raw is not None and version is None:
            raise EventDecodeError(f"statusVersion {raw!r} is not comparable")
        age = obj.get("checkpointMaxAgeSeconds")
        if age is not None and (type(age) is not int or age <= 0):
            raise EventDecodeError("field 'checkpointMaxAgeSeconds' must be a positive integer")
        return WorkloadOnDevice(
            node=str_field(obj, "node"),
            resource_id=str_field(obj, "resourceID"),
            workload_uid=str_field(obj, "workloadUID"),
            pod_uid=str_field(obj, "podUID"),
            namespace=str_field(obj, "namespace"),
            pod_name=str_field(obj, "podName"),
            migration_class=optional_str_field(obj, "migrationClass"),
            checkpoint_max_age_seconds=age,
            shard=optional_str_field(obj, "shard"),
            status_version=version,
            observed_at=event_time_field(obj, "observedAt"),
            present=bool_field(obj, "present") if "present" in obj else True,
        )
    devices = obj.get("devices") or []
    if not isinstance(devices, list) or not all(
        isinstance(d, dict)
        and isinstance(d.get("node"), str)
        and isinstance(d.get("resourceID"), str)
        for d in devices
    ):
        raise EventDecodeError("field 'devices' must be a list of {node, resourceID} objects")
    return MigrationReport(
        migration_id=str_field(obj, "migrationID"),
        kind=enum_field(ReportKind, obj, "kind"),
        holder=str_field(obj, "holder"),
        reported_at=time_field(obj, "reportedAt"),
        fencing_token=int_field(obj, "fencingToken") if obj.get("fencingToken") is not None else 0,
        checkpoint_id=optional_str_field(obj, "checkpointID"),
        checkpoint_at=optional_time_field(obj, "checkpointAt"),
        devices=tuple((d["node"], d["resourceID"]) for d in devices),
        detail=str_field(obj, "detail", empty=True) if obj.get("detail") is not None else "",
    )
