"""Inventory events on the device-health topic (issue 4, item 1).

``InventoryObserved`` carries the compact form of one ResourceSlice, ResourceClaim or DeviceClass
(:mod:`.objects`) as the watcher last saw it, or its deletion. Record keys: the node (a slice's
``nodeName``, a claim's allocated node), ``pool:<driver>/<pool>`` for a pool-scoped slice,
``claim:<namespace>/<name>`` for an unallocated claim, ``class:<name>`` for a DeviceClass -- so the
inventory of a node is in the same partition as that node's Pod observations.

A claim's ``adminAccess`` (requests, results) and ``namespaceAdminAccess`` (its Namespace's
admin-access label as the watcher saw it) are written only when set: a record without them (all
records of before the tenant-boundary signal) reads as no admin access.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

import orjson

from services.domain.codec import EventDecodeError, json_fault, parse_time
from services.domain.events import SCHEMA_VERSION, format_time
from services.domain.inventory.objects import (
    AllocationResult,
    ClaimRequest,
    DeviceClassInfo,
    DeviceTaint,
    ResourceClaimInfo,
    ResourceSliceInfo,
    SliceDevice,
)


class InventoryKind(StrEnum):
    RESOURCE_SLICE = "ResourceSlice"
    RESOURCE_CLAIM = "ResourceClaim"
    DEVICE_CLASS = "DeviceClass"


InventoryObject = ResourceSliceInfo | ResourceClaimInfo | DeviceClassInfo


@dataclass(frozen=True, slots=True)
class InventoryObserved:
    """The current form of one DRA object, or its deletion (``obj`` is then the last form)."""

    key: str
    obj: InventoryObject
    deleted: bool
    observed_at: datetime
    type: str = field(default="InventoryObserved", init=False)

    @property
    def kind(self) -> InventoryKind:
        if isinstance(self.obj, ResourceSliceInfo):
            return InventoryKind.RESOURCE_SLICE
        if isinstance(self.obj, ResourceClaimInfo):
            return InventoryKind.RESOURCE_CLAIM
        return InventoryKind.DEVICE_CLASS

    @property
    def node(self) -> str:
        """Record key (named ``node`` like every other record of the topic)."""
        return self.key


def record_key(obj: InventoryObject) -> str:
    """The topic record key of an object (see the module docstring)."""
    if isinstance(obj, ResourceSliceInfo):
        return obj.partition_key
    if isinstance(obj, ResourceClaimInfo):
        return obj.node if obj.node else f"claim:{obj.namespace}/{obj.name}"
    return f"class:{obj.name}"


def _t(value: datetime | None) -> str | None:
    return None if value is None else format_time(value)


def _v(value: int | None) -> str | None:
    return None if value is None else str(value)


def _taint_to_json(t: DeviceTaint) -> dict[str, Any]:
    out: dict[str, Any] = {"key": t.key, "value": t.value, "effect": t.effect}
    if t.time_added is not None:  # absent otherwise: records of before issue 15 stay identical
        out["timeAdded"] = format_time(t.time_added)
    if t.rule is not None:
        out["rule"] = t.rule
    return out


def _request_to_json(r: ClaimRequest) -> dict[str, Any]:
    out: dict[str, Any] = {"name": r.name, "deviceClassName": r.device_class, "count": r.count}
    if r.admin_access:  # absent otherwise: records of before the tenant-boundary signal stay
        out["adminAccess"] = True
    return out


def _result_to_json(r: AllocationResult) -> dict[str, Any]:
    out: dict[str, Any] = {
        "request": r.request,
        "driver": r.driver,
        "pool": r.pool,
        "device": r.device,
    }
    if r.admin_access:
        out["adminAccess"] = True
    return out


def object_to_json(obj: InventoryObject) -> dict[str, Any]:
    if isinstance(obj, ResourceSliceInfo):
        return {
            "name": obj.name,
            "driver": obj.driver,
            "pool": obj.pool,
            "poolGeneration": obj.pool_generation,
            "resourceSliceCount": obj.resource_slice_count,
            "nodeName": obj.node,
            "devices": [
                {
                    "name": d.name,
                    "uuid": d.uuid,
                    "taints": [_taint_to_json(t) for t in d.taints],
                }
                for d in obj.devices
            ],
            "resourceVersion": _v(obj.resource_version),
        }
    if isinstance(obj, ResourceClaimInfo):
        return {
            "namespace": obj.namespace,
            "name": obj.name,
            "uid": obj.uid,
            "requests": [_request_to_json(r) for r in obj.requests],
            "results": [_result_to_json(r) for r in obj.results],
            "reservedFor": [{"name": n, "uid": u} for n, u in obj.reserved_for],
            "nodeName": obj.node,
            "createdAt": _t(obj.created_at),
            "allocatedAt": _t(obj.allocated_at),
            "resourceVersion": _v(obj.resource_version),
            **(
                {} if obj.namespace_admin is None else {"namespaceAdminAccess": obj.namespace_admin}
            ),
        }
    return {
        "name": obj.name,
        "extendedResourceName": obj.extended_resource_name,
        "drivers": list(obj.drivers),
        "resourceVersion": _v(obj.resource_version),
    }


def _pt(value: Any) -> datetime | None:
    return None if value is None else parse_time(value)


def _pv(value: Any) -> int | None:
    return None if value is None else int(value)


def _pb(value: Any) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise ValueError(f"namespaceAdminAccess must be a boolean, not {value!r}")


def object_from_json(kind: InventoryKind, o: dict[str, Any]) -> InventoryObject:
    if kind is InventoryKind.RESOURCE_SLICE:
        return ResourceSliceInfo(
            name=o["name"],
            driver=o["driver"],
            pool=o["pool"],
            pool_generation=int(o["poolGeneration"]),
            resource_slice_count=int(o["resourceSliceCount"]),
            node=o.get("nodeName"),
            devices=tuple(
                SliceDevice(
                    d["name"],
                    d.get("uuid"),
                    tuple(
                        DeviceTaint(
                            t["key"],
                            t.get("value"),
                            t["effect"],
                            _pt(t.get("timeAdded")),
                            t.get("rule"),
                        )
                        for t in d.get("taints") or ()
                    ),
                )
                for d in o["devices"]
            ),
            resource_version=_pv(o.get("resourceVersion")),
        )
    if kind is InventoryKind.RESOURCE_CLAIM:
        return ResourceClaimInfo(
            namespace=o["namespace"],
            name=o["name"],
            uid=o["uid"],
            requests=tuple(
                ClaimRequest(
                    r["name"],
                    r.get("deviceClassName"),
                    r.get("count"),
                    r.get("adminAccess") is True,
                )
                for r in o["requests"]
            ),
            results=tuple(
                AllocationResult(
                    r["request"],
                    r["driver"],
                    r["pool"],
                    r["device"],
                    r.get("adminAccess") is True,
                )
                for r in o["results"]
            ),
            reserved_for=tuple((r["name"], r["uid"]) for r in o["reservedFor"]),
            node=o.get("nodeName"),
            created_at=_pt(o.get("createdAt")),
            allocated_at=_pt(o.get("allocatedAt")),
            resource_version=_pv(o.get("resourceVersion")),
            namespace_admin=_pb(o.get("namespaceAdminAccess")),
        )
    return DeviceClassInfo(
        name=o["name"],
        extended_resource_name=o.get("extendedResourceName"),
        drivers=tuple(o.get("drivers") or ()),
        resource_version=_pv(o.get("resourceVersion")),
    )


def encode_inventory(event: InventoryObserved) -> bytes:
    """UTF-8 JSON (schema 1, keys sorted)."""
    return orjson.dumps(
        {
            "schema": SCHEMA_VERSION,
            "type": event.type,
            "key": event.key,
            "kind": event.kind.value,
            "object": object_to_json(event.obj),
            "deleted": event.deleted,
            "observedAt": format_time(event.observed_at),
        },
        option=orjson.OPT_SORT_KEYS,
    )


def decode_inventory(payload: bytes) -> InventoryObserved:
    """Parse an ``InventoryObserved`` record; raises :class:`EventDecodeError` with the reason."""
    try:
        o = orjson.loads(payload)
        if not isinstance(o, dict) or o.get("schema") != SCHEMA_VERSION:
            raise EventDecodeError("not a schema-1 object")
        if o.get("type") != "InventoryObserved":
            raise EventDecodeError(f"unknown event type {o.get('type')!r}")
        kind = InventoryKind(o["kind"])
        return InventoryObserved(
            key=str(o["key"]),
            obj=object_from_json(kind, o["object"]),
            deleted=bool(o["deleted"]),
            observed_at=parse_time(o["observedAt"]),
        )
    except EventDecodeError:
        raise
    except orjson.JSONDecodeError as exc:
        raise EventDecodeError(json_fault(payload, exc)) from None
    except (KeyError, ValueError, TypeError) as exc:
        raise EventDecodeError(f"not an InventoryObserved record: {exc!r}") from None
