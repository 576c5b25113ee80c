"""The event model: what the watcher publishes and the stream worker applies.

Events are frozen dataclasses serialised as JSON objects (orjson) with a ``schema`` number and a
``type`` name. Field names on the wire are camelCase, as in the Kubernetes API they come from.
Times are UTC and serialised as RFC 3339 with a ``Z`` suffix. ``statusVersion`` is the Pod's
``metadata.resourceVersion`` (comparable as an integer since Kubernetes 1.35, KEP-5504); it is
written as a decimal string because real values exceed 2**53 and JSON numbers are doubles for many
consumers.

Schema history:

- 1: ``DeviceHealthObserved``, ``PodDevicesReleased``.

Decoding never guesses: a payload that is not valid JSON, has an unknown ``schema`` or ``type``, or
lacks a required field raises :class:`EventDecodeError`, whose message the worker puts on the
dead-letter record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Final, TypeAlias

import orjson

from services.domain.codec import RESOURCE_VERSION_MAX_DIGITS as RESOURCE_VERSION_MAX_DIGITS
from services.domain.codec import EventDecodeError as EventDecodeError
from services.domain.codec import optional_str_field, require, required_enum, version_field
from services.domain.codec import parse_resource_version as parse_resource_version
from services.domain.codec import parse_time as parse_time

SCHEMA_VERSION: Final = 1
"""Current event schema number, written in every event's ``schema`` field."""

MESSAGE_MAX_LENGTH: Final = 1024
"""core/v1 ``ResourceHealthMessageMaxLength``: longer messages are cut to this many characters."""


class Health(StrEnum):
    """Device health as the API defines it (core/v1 ``ResourceHealthStatus``, KEP-4680).

    The values are case-sensitive; anything else is recorded as ``Unknown`` with the raw value kept
    in ``DeviceHealthObserved.raw_health``.
    """

    HEALTHY = "Healthy"
    UNHEALTHY = "Unhealthy"
    UNKNOWN = "Unknown"


class DeviceSource(StrEnum):
    """Who allocated the device: a device plugin (``name`` is an extended resource name) or DRA
    (``name`` is ``claim:<podClaimName>[/<request>]``)."""

    DEVICE_PLUGIN = "device-plugin"
    DRA = "dra"


class ContainerKind(StrEnum):
    """Which Pod status list a container came from: ``containerStatuses`` (regular) or
    ``initContainerStatuses`` (init, including native sidecars)."""

    REGULAR = "regular"
    INIT = "init"


class ReleaseReason(StrEnum):
    """Why a Pod's devices were released."""

    DELETED = "deleted"  # DELETED watch event, or the Pod vanished between two LISTs
    TERMINATED = "terminated"  # status.phase became Succeeded or Failed


@dataclass(frozen=True, slots=True, order=True)
class ContainerRef:
    """One container of the Pod that reports the device."""

    name: str
    kind: ContainerKind = ContainerKind.REGULAR


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """DRA claim behind an ``allocatedResourcesStatus`` entry named ``claim:<podClaimName>[/<request>]``.

    ``resource_claim_name`` is the ResourceClaim object's name, from
    ``pod.status.resourceClaimStatuses[]`` (``None`` when the Pod status does not list it).
    """

    pod_claim_name: str
    request: str | None = None
    resource_claim_name: str | None = None


@dataclass(frozen=True, slots=True)
class DeviceHealthObserved:
    """Health of one allocated device as one Pod's status reports it.

    One event per (Pod, resourceID): when several containers of the Pod report the same device
    (shared DRA claims, sidecars; KEP-4680 allows it) they are listed together in ``containers``
    rather than sent as several events.

    Dedup key: ``(node, resource_id, status_version)``. ``status_version`` is ``None`` when the Pod's
    resourceVersion was missing or not an integer; such an observation is *unordered*: it may create
    a device's first state but never overwrites state that came from an ordered observation.
    """

    node: str
    namespace: str
    pod_name: str
    pod_uid: str
    containers: tuple[ContainerRef, ...]
    resource_name: str
    resource_id: str
    health: Health
    source: DeviceSource
    status_version: int | None
    observed_at: datetime
    message: str | None = None
    raw_health: str | None = None
    claim: ClaimRef | None = None
    flags: tuple[str, ...] = ()
    type: str = field(default="DeviceHealthObserved", init=False)

    @property
    def device_key(self) -> tuple[str, str]:
        """``(node, resourceID)``: the key of the device in the directory."""
        return (self.node, self.resource_id)


@dataclass(frozen=True, slots=True)
class PodDevicesReleased:
    """A Pod no longer holds its devices: it was deleted or reached a terminal phase.

    Releases remove the Pod's allocations from the directory; they never change a device's health.
    ``resource_ids`` lists the devices the watcher last saw the Pod report (possibly empty);
    the projection releases every allocation of ``pod_uid`` on ``node`` whatever the list says.
    """

    node: str
    namespace: str
    pod_name: str
    pod_uid: str
    reason: ReleaseReason
    status_version: int | None
    observed_at: datetime
    resource_ids: tuple[str, ...] = ()
    type: str = field(default="PodDevicesReleased", init=False)


Event: TypeAlias = DeviceHealthObserved | PodDevicesReleased


# --- time and resourceVersion helpers ---------------------------------------------------------


def format_time(value: datetime) -> str:
    """RFC 3339 in UTC with a ``Z`` suffix and at most microsecond precision.

    Raises ``ValueError`` for a naive datetime (no tzinfo): every time in the model is aware.
    """
    if value.tzinfo is None:
        raise ValueError("naive datetime: times in devicestate events must be timezone-aware")
    text = value.astimezone(UTC).isoformat()
    return text.replace("+00:00", "Z")


# --- encoding -------------------------------------------------------------------------------


def _event_to_dict(event: Event) -> dict[str, Any]:
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
        base.update(
            containers=[{"name": c.name, "kind": c.kind.value} for c in event.containers],
            resourceName=event.resource_name,
            resourceID=event.resource_id,
            health=event.health.value,
            rawHealth=event.raw_health,
            message=event.message,
            source=event.source.value,
            claim=None
            if event.claim is None
            else {
                "podClaimName": event.claim.pod_claim_name,
                "request": event.claim.request,
                "resourceClaimName": event.claim.resource_claim_name,
            },
            flags=list(event.flags),
        )
    else:
        base.update(reason=event.reason.value, resourceIDs=list(event.resource_ids))
    return base


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
# ``str``/``list``/``dict`` objects); anything else falls back to the field decoders of
# services.domain.codec, which accept or reject it and word the error exactly as they always did.
# Fields are checked in the same order as the original field-by-field decoder, so a payload with
# several faults reports the same one.


def decode_event(payload: bytes) -> Event:
    """Parse the JSON wire form back into an event.

    Raises :class:`EventDecodeError` with a readable reason for anything that is not a valid
    schema-1 event, or that the projection could not store (``services/domain/limits.py``: NUL or
    control characters, oversized identifiers); the caller dead-letters the payload with that
    reason.
    """
    check = _field_violations or _bind_field_violations()
    event = _decode_fields(payload)
    violations = check(event)
    if violations:
        raise EventDecodeError("cannot be stored: " + "; ".join(violations))
    return event


_field_violations: Callable[[Event], list[str]] | None = None
"""``services.domain.limits.field_violations``, bound on first use: limits imports this module,
and an import statement in :func:`decode_event` would cost a module lookup per event."""


def _bind_field_violations() -> Callable[[Event], list[str]]:
    global _field_violations
    from services.domain.limits import field_violations

    _field_violations = field_violations
    return field_violations


def _decode_fields(payload: bytes) -> Event:
    try:
        obj = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise EventDecodeError(f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise EventDecodeError("not a JSON object")
    get = obj.get
    schema = get("schema")
    if schema != SCHEMA_VERSION:
        raise EventDecodeError(f"unsupported schema {schema!r} (this build reads {SCHEMA_VERSION})")
    kind = get("type")
    try:
        observed_text = get("observedAt")
        if type(observed_text) is not str:
            observed_text = require(obj, "observedAt")
        observed_at = parse_time(observed_text)
    except ValueError as exc:
        raise EventDecodeError(f"field 'observedAt': {exc}") from None
    node = get("node")
    if type(node) is not str:
        node = require(obj, "node")
    if not node:
        raise EventDecodeError("field 'node' is empty")
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
    if kind == "DeviceHealthObserved":
        resource_id = get("resourceID")
        if type(resource_id) is not str:
            resource_id = require(obj, "resourceID")
        if not resource_id:
            raise EventDecodeError("field 'resourceID' is empty")
        items = get("containers")
        if type(items) is not list:
            items = require(obj, "containers", list)
        containers = []
        for item in items:
            if not isinstance(item, dict) or not isinstance(name := item.get("name"), str):
                raise EventDecodeError("field 'containers' holds an entry without a name")
            raw_kind = item.get("kind")
            container_kind = _KIND_BY_VALUE.get(raw_kind) if type(raw_kind) is str else None
            if container_kind is None:
                container_kind = required_enum(ContainerKind, item, "kind")
            containers.append(ContainerRef(name, container_kind))
        claim_obj = get("claim")
        claim = None
        if claim_obj is not None:
            if not isinstance(claim_obj, dict):
                raise EventDecodeError("field 'claim' must be an object or null")
            claim = ClaimRef(
                pod_claim_name=require(claim_obj, "podClaimName"),
                request=optional_str_field(claim_obj, "request"),
                resource_claim_name=optional_str_field(claim_obj, "resourceClaimName"),
            )
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
        return DeviceHealthObserved(
            node,
            namespace,
            pod_name,
            pod_uid,
            tuple(containers),
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


def now_utc() -> datetime:
    """The wall clock in UTC. Only adapters (the watcher stamping ``observedAt``) may call it; the
    domain core takes every time from events."""
    return datetime.now(UTC)
