"""The wire form of the device events (:mod:`services.domain.events`): JSON bytes in and out.

:func:`encode_event` writes the schema-1 JSON object (camelCase keys, sorted, times RFC 3339 with
``Z``, ``statusVersion`` as a decimal string); :func:`decode_event` reads it back and refuses, with
:class:`~services.domain.codec.EventDecodeError`, anything that is not a valid schema-1 event or
that the projection could not store (:func:`services.domain.limits.field_violations`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final

import orjson

from services.domain.codec import (
    RESOURCE_VERSION_MAX_DIGITS,
    EventDecodeError,
    check_event_time,
    json_fault,
    optional_str_field,
    parse_time,
    require,
    required_enum,
    version_field,
)
from services.domain.events import (
    SCHEMA_VERSION,
    ClaimRef,
    ContainerKind,
    ContainerRef,
    DeviceHealthObserved,
    DeviceSource,
    Event,
    Health,
    PodDevicesReleased,
    PodsListed,
    ReleaseReason,
    format_time,
)
from services.domain.limits import field_violations

# --- encoding -------------------------------------------------------------------------------


def _snapshot_to_dict(event: PodsListed) -> dict[str, Any]:
    return {
        "schema": SCHEMA_VERSION,
        "type": event.type,
        "node": event.node,
        "listVersion": None if event.list_version is None else str(event.list_version),
        "observedAt": format_time(event.observed_at),
        "podUIDs": list(event.pod_uids),
        "uidFrom": event.uid_from,
        "uidTo": event.uid_to,
    }


def _event_to_dict(event: Event) -> dict[str, Any]:
    if isinstance(event, PodsListed):
        return _snapshot_to_dict(event)
    base: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "type": event.type,
        "node": event.node,
        "namespace": event.namespace,
        "podName": event.pod_name,
        "podUID": event.pod_uid,
        "statusVersion": None if event.status_version is None else str(event.status_version),
        "observedAt": format_time(event.observed_at),
    }
    if isinstance(event, DeviceHealthObserved):
        base.update(device_dict(event))
        if event.pod_terminated:
            # Written only when true: the bytes of every other observation stay as before.
            base["podTerminated"] = True
    else:
        base.update(reason=event.reason.value, resourceIDs=list(event.resource_ids))
    return base


def device_dict(event: DeviceHealthObserved) -> dict[str, Any]:
    """The device fields of an observation's wire form (camelCase keys; no Pod fields): what
    a schema-1 event holds besides its Pod's, and each entry of a schema-2 record."""
    claim = event.claim
    return {
        "containers": [{"name": c.name, "kind": c.kind.value} for c in event.containers],
        "resourceName": event.resource_name,
        "resourceID": event.resource_id,
        "health": event.health.value,
        "rawHealth": event.raw_health,
        "message": event.message,
        "source": event.source.value,
        "claim": None
        if claim is None
        else {
            "podClaimName": claim.pod_claim_name,
            "request": claim.request,
            "resourceClaimName": claim.resource_claim_name,
        },
        "flags": list(event.flags),
    }


def encode_event(event: Event) -> bytes:
    """Serialise an event to its JSON wire form (UTF-8 bytes, keys sorted for stable bytes)."""
    return orjson.dumps(_event_to_dict(event), option=orjson.OPT_SORT_KEYS)


# Value -> member maps: a dict lookup is several times cheaper than calling the enum class, and
# for the plain ``str`` values orjson produces it finds exactly the members the call would.
_HEALTH_BY_VALUE: Final[dict[str, Health]] = {h.value: h for h in Health}
_SOURCE_BY_VALUE: Final[dict[str, DeviceSource]] = {s.value: s for s in DeviceSource}
_KIND_BY_VALUE: Final[dict[str, ContainerKind]] = {k.value: k for k in ContainerKind}
_REASON_BY_VALUE: Final[dict[str, ReleaseReason]] = {r.value: r for r in ReleaseReason}


# decode_event reads each field with one dict lookup and an exact type test (orjson gives plain
# ``str``/``list``/``dict`` objects); anything else falls back to the helpers above, which accept
# or reject it and word the error exactly as they always did. Fields are checked in the same order
# as the original field-by-field decoder, so a payload with several faults reports the same one.


def decode_event(payload: bytes) -> Event:
    """Parse the JSON wire form back into an event.

    Raises :class:`EventDecodeError` with a readable reason for anything that is not a valid
    schema-1 event, or that the projection could not store (``services/domain/limits.py``: NUL or
    control characters, oversized identifiers); the caller dead-letters the payload with that
    reason.
    """
    event = _decode_fields(payload)
    violations = field_violations(event)
    if violations:
        raise EventDecodeError("cannot be stored: " + "; ".join(violations))
    return event


def _decode_fields(payload: bytes) -> Event:
    try:
        obj = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise EventDecodeError(json_fault(payload, exc)) from None
    if not isinstance(obj, dict):
        raise EventDecodeError("not a JSON object")
    get = obj.get
    schema = get("schema")
    if schema != SCHEMA_VERSION:
        raise EventDecodeError(f"unsupported schema {schema!r} (this build reads {SCHEMA_VERSION})")
    kind = get("type")
    observed_at, node = event_head(obj)
    if kind == "PodsListed":
        return _snapshot_fields(obj, node, observed_at)
    namespace, pod_name, pod_uid, status_version = pod_head(obj)
    if kind == "DeviceHealthObserved":
        return device_fields(
            obj, node, namespace, pod_name, pod_uid, status_version, observed_at, None
        )
    if kind == "PodDevicesReleased":
        ids = get("resourceIDs") or []
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise EventDecodeError("field 'resourceIDs' must be a list of strings")
        raw_reason = get("reason")
        reason = _REASON_BY_VALUE.get(raw_reason) if type(raw_reason) is str else None
        if reason is None:
            reason = required_enum(ReleaseReason, obj, "reason")
        return PodDevicesReleased(
            node,
            namespace,
            pod_name,
            pod_uid,
            reason,
            status_version,
            observed_at,
            tuple(ids),
        )
    raise EventDecodeError(f"unknown event type {kind!r}")


def event_head(obj: dict[str, Any]) -> tuple[datetime, str]:
    """``(observedAt, node)`` of a device event's JSON object; raises :class:`EventDecodeError`."""
    get = obj.get
    try:
        observed_text = get("observedAt")
        if type(observed_text) is not str:
            observed_text = require(obj, "observedAt")
        observed_at = check_event_time(parse_time(observed_text))
    except ValueError as exc:
        raise EventDecodeError(f"field 'observedAt': {exc}") from None
    node = get("node")
    if type(node) is not str:
        node = require(obj, "node")
    if not node:
        raise EventDecodeError("field 'node' is empty")
    return observed_at, node


def pod_head(obj: dict[str, Any]) -> tuple[str, str, str, int | None]:
    """``(namespace, podName, podUID, statusVersion)`` of a Pod's event (an observation, a
    release, or a schema-2 record of observations); raises :class:`EventDecodeError`."""
    get = obj.get
    namespace = get("namespace")
    if type(namespace) is not str:
        namespace = require(obj, "namespace")
    pod_name = get("podName")
    if type(pod_name) is not str:
        pod_name = require(obj, "podName")
    pod_uid = get("podUID")
    if type(pod_uid) is not str:
        pod_uid = require(obj, "podUID")
    raw_version = get("statusVersion")
    status_version: int | None
    if raw_version is None:
        status_version = None
    elif (
        type(raw_version) is str
        and raw_version.isascii()
        and raw_version.isdigit()
        and raw_version[0] != "0"
        and len(raw_version) <= RESOURCE_VERSION_MAX_DIGITS
    ):
        status_version = int(raw_version)
    else:
        status_version = version_field(obj, "statusVersion")
    return namespace, pod_name, pod_uid, status_version


def _snapshot_fields(obj: dict[str, Any], node: str, observed_at: Any) -> PodsListed:
    """The fields of a ``PodsListed`` (``node`` and ``observed_at`` already read)."""
    uids = obj.get("podUIDs")
    if not isinstance(uids, list) or not all(isinstance(u, str) for u in uids):
        raise EventDecodeError("field 'podUIDs' must be a list of strings")
    uid_from = obj.get("uidFrom", "")
    if not isinstance(uid_from, str):
        raise EventDecodeError("field 'uidFrom' must be a string")
    uid_to = optional_str_field(obj, "uidTo")
    if uid_to is not None and uid_to <= uid_from:
        raise EventDecodeError("field 'uidTo' must sort after 'uidFrom'")
    if any(u < uid_from or (uid_to is not None and u >= uid_to) for u in uids):
        raise EventDecodeError("field 'podUIDs' holds a UID outside [uidFrom, uidTo)")
    return PodsListed(
        node=node,
        list_version=version_field(obj, "listVersion"),
        observed_at=observed_at,
        pod_uids=tuple(sorted(uids)),
        uid_from=uid_from,
        uid_to=uid_to,
    )


class SharedParts:
    """The containers and claim :func:`device_fields` read last, with the JSON they came from:
    the entries of one schema-2 record usually repeat them (a Pod's GPUs reported by the same
    container), so an entry whose JSON equals the previous one's gets the same (immutable)
    objects instead of new equal ones. The directory fold then finds one Pod change's
    allocation by identity (:func:`services.domain.directory.apply_observation`)."""

    __slots__ = ("claim", "claim_json", "containers", "containers_json")

    def __init__(self) -> None:
        self.containers_json: Any = None
        self.containers: tuple[ContainerRef, ...] = ()
        self.claim_json: Any = None
        self.claim: ClaimRef | None = None


def device_fields(
    obj: dict[str, Any],
    node: str,
    namespace: str,
    pod_name: str,
    pod_uid: str,
    status_version: int | None,
    observed_at: datetime,
    pod_terminated: bool | None,
    shared: SharedParts | None = None,
) -> DeviceHealthObserved:
    """The device fields of one observation (``resourceID``, ``containers``, ``claim``,
    ``flags``, ``resourceName``, ``health``, ``source``, ``message``, ``rawHealth``) read from
    the JSON object ``obj``, with the Pod's fields given (a schema-1 event's own, or those a
    schema-2 record holds once for all its observations; ``pod_terminated`` ``None``: read
    ``podTerminated`` from ``obj``, after the other fields). Raises :class:`EventDecodeError`
    naming the first faulty field; the limits (:func:`~services.domain.limits.field_violations`)
    are the caller's to check."""
    get = obj.get
    resource_id = get("resourceID")
    if type(resource_id) is not str:
        resource_id = require(obj, "resourceID")
    if not resource_id:
        raise EventDecodeError("field 'resourceID' is empty")
    items = get("containers")
    if type(items) is not list:
        items = require(obj, "containers", list)
    containers: tuple[ContainerRef, ...]
    if shared is not None and shared.containers_json == items:
        containers = shared.containers
    else:
        containers = _containers(items)
        if shared is not None:
            shared.containers_json, shared.containers = items, containers
    claim_obj = get("claim")
    claim = None
    if claim_obj is not None:
        if not isinstance(claim_obj, dict):
            raise EventDecodeError("field 'claim' must be an object or null")
        if shared is not None and shared.claim_json == claim_obj:
            claim = shared.claim
        else:
            claim = ClaimRef(
                pod_claim_name=require(claim_obj, "podClaimName"),
                request=optional_str_field(claim_obj, "request"),
                resource_claim_name=optional_str_field(claim_obj, "resourceClaimName"),
            )
            if shared is not None:
                shared.claim_json, shared.claim = claim_obj, claim
    flags = get("flags") or []
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        raise EventDecodeError("field 'flags' must be a list of strings")
    resource_name = get("resourceName")
    if type(resource_name) is not str:
        resource_name = require(obj, "resourceName")
    raw_health = get("health")
    health = _HEALTH_BY_VALUE.get(raw_health) if type(raw_health) is str else None
    if health is None:
        health = required_enum(Health, obj, "health")
    raw_source = get("source")
    source = _SOURCE_BY_VALUE.get(raw_source) if type(raw_source) is str else None
    if source is None:
        source = required_enum(DeviceSource, obj, "source")
    message = get("message")
    if message is not None and type(message) is not str:
        message = optional_str_field(obj, "message")
    raw_health_text = get("rawHealth")
    if raw_health_text is not None and type(raw_health_text) is not str:
        raw_health_text = optional_str_field(obj, "rawHealth")
    if pod_terminated is None:
        pod_terminated = get("podTerminated", False)
        if type(pod_terminated) is not bool:
            raise EventDecodeError("field 'podTerminated' must be a boolean")
    return DeviceHealthObserved(
        node,
        namespace,
        pod_name,
        pod_uid,
        containers,
        resource_name,
        resource_id,
        health,
        source,
        status_version,
        observed_at,
        message,
        raw_health_text,
        claim,
        tuple(flags),
        pod_terminated,
    )


def _containers(items: list[Any]) -> tuple[ContainerRef, ...]:
    containers = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(name := item.get("name"), str):
            raise EventDecodeError("field 'containers' holds an entry without a name")
        raw_kind = item.get("kind")
        container_kind = _KIND_BY_VALUE.get(raw_kind) if type(raw_kind) is str else None
        if container_kind is None:
            container_kind = required_enum(ContainerKind, item, "kind")
        containers.append(ContainerRef(name, container_kind))
    return tuple(containers)
