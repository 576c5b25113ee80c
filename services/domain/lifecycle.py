"""Claim lifecycle stages (issue 4, item 4): how long a device request takes from claim created to
allocated, to Pod bound, to Pod Ready, by device class and by DRA versus device plugin.

Pure: no I/O and no wall clock; every time is a timestamp the API server wrote. Never raises on
odd input: a stage whose two ends are not both known, or whose latency would be negative (clock
skew between components, a condition that flapped), is skipped.

Stages (seconds)::

    DRA, per ResourceClaim the Pod uses     claim_allocated = allocation.allocationTimestamp - claim creationTimestamp
    DRA, per device class of those claims   pod_bound       = PodScheduled(True) - allocationTimestamp
                                            pod_ready       = Ready(True) - PodScheduled(True)
    device plugin, per extended resource    pod_bound       = PodScheduled(True) - Pod creationTimestamp
                                            pod_ready       = Ready(True) - PodScheduled(True)

- The claims of a Pod: ``spec.resourceClaims[]`` (the ResourceClaim's name from
  ``status.resourceClaimStatuses[]`` for a template, ``resourceClaimName`` for a claim referenced
  directly; a status entry without a name means no claim was needed) and the claim the scheduler
  made for extended resources backed by DRA (KEP-5004, ``status.extendedResourceClaimStatus``).
- ``device_class``: a claim's first request's ``deviceClassName`` (:data:`UNKNOWN_CLASS` when it
  has none, e.g. ``firstAvailable``, or when the claim is not known); for a device plugin the
  extended resource name (a resource name with ``/`` in ``limits`` or ``requests`` of a container
  or init container, quantity not zero). An extended resource that ``extendedResourceClaimStatus``
  maps to a DRA request is DRA, not device plugin: that is the plugin-to-DRA migration.
- ``claim_allocated`` is counted once per claim; ``pod_bound`` and ``pod_ready`` once per Pod and
  ``(device_class, path)``, DRA ``pod_bound`` from the latest allocation among that class's claims
  (the one the binding waited for).
- A claim allocated before the Pod existed was allocated for another consumer (a claim shared
  across Pods, stream-05b): its ``claim_allocated`` and the Pod's ``pod_bound`` from it are not
  this Pod's and are skipped; ``pod_ready`` still is.
- A claim the caller does not know (:data:`ClaimLookup` gives ``None``) is reported in
  :attr:`StageReport.unknown_claims`; the Pod's ``pod_ready`` is still observed under
  ``device_class="unknown"``.

Timestamps have second precision: a stage shorter than a second reads 0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Final, TypeAlias

from services.domain.codec import parse_time
from services.domain.inventory.objects import ResourceClaimInfo

UNKNOWN_CLASS: Final = "unknown"
"""``device_class`` of a claim without a device class in its first request, or not known."""


class Stage(StrEnum):
    CLAIM_ALLOCATED = "claim_allocated"
    POD_BOUND = "pod_bound"
    POD_READY = "pod_ready"


class DevicePath(StrEnum):
    """How the Pod got its devices."""

    DRA = "dra"
    DEVICE_PLUGIN = "device-plugin"


ClaimLookup: TypeAlias = Callable[[str, str], ResourceClaimInfo | None]
"""``(namespace, name)`` -> the ResourceClaim as last seen, or ``None`` when not known."""


@dataclass(frozen=True, slots=True)
class StageLatency:
    """One observation: ``seconds`` (>= 0) of ``stage`` for ``device_class`` on ``path``.
    ``claim_uid`` is the claim's UID for ``claim_allocated`` (``None`` for Pod stages)."""

    stage: Stage
    device_class: str
    path: DevicePath
    seconds: float
    claim_uid: str | None = None


@dataclass(frozen=True, slots=True)
class PodClaim:
    """A ResourceClaim a Pod uses: ``pod_claim_name`` (``spec.resourceClaims[].name``; ``None``
    for the claim made for DRA-backed extended resources) and ``claim_name``, the ResourceClaim
    object's name (``None`` when the Pod's status does not say it yet)."""

    pod_claim_name: str | None
    claim_name: str | None

    @property
    def label(self) -> str:
        """For logs: ``<pod claim> -> <ResourceClaim>``."""
        return f"{self.pod_claim_name or '<extended resources>'} -> {self.claim_name or '?'}"


@dataclass(frozen=True, slots=True)
class PodLifecycle:
    """The lifecycle facts of one Pod (:func:`read_lifecycle`)."""

    uid: str
    namespace: str
    name: str
    created_at: datetime | None
    scheduled_at: datetime | None
    ready: bool
    ready_at: datetime | None
    claims: tuple[PodClaim, ...]
    plugin_resources: tuple[str, ...]
    """Extended resources the Pod gets from device plugins (sorted, unique)."""

    @property
    def uses_devices(self) -> bool:
        return bool(self.claims or self.plugin_resources)


@dataclass(slots=True)
class StageReport:
    """What :func:`stage_latencies` found: ``latencies``, the UIDs of the Pod's claims it looked
    up (``claim_uids``) and the claims it could not look up (``unknown_claims``)."""

    latencies: list[StageLatency] = field(default_factory=list)
    claim_uids: list[str] = field(default_factory=list)
    unknown_claims: list[PodClaim] = field(default_factory=list)


def _dict(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return parse_time(value)
    except ValueError:
        return None


def _condition(status: Mapping[str, Any], kind: str) -> tuple[bool, datetime | None]:
    """Whether the condition ``kind`` is ``True``, and its ``lastTransitionTime`` when it is."""
    for raw in _list(status.get("conditions")):
        condition = _dict(raw)
        if condition.get("type") == kind:
            if condition.get("status") != "True":
                return False, None
            return True, _time(condition.get("lastTransitionTime"))
    return False, None


def _claims(spec: Mapping[str, Any], status: Mapping[str, Any]) -> list[PodClaim]:
    generated: dict[str, str | None] = {}
    for raw in _list(status.get("resourceClaimStatuses")):
        entry = _dict(raw)
        name = _str(entry.get("name"))
        if name is not None:
            generated[name] = _str(entry.get("resourceClaimName"))
    claims = []
    for raw in _list(spec.get("resourceClaims")):
        entry = _dict(raw)
        name = _str(entry.get("name"))
        if name is None:
            continue
        direct = _str(entry.get("resourceClaimName"))
        if direct is not None:
            claims.append(PodClaim(name, direct))
        elif name not in generated:
            claims.append(PodClaim(name, None))  # from a template; status does not say it yet
        elif generated[name] is not None:
            claims.append(PodClaim(name, generated[name]))
        # else: the status says no claim was needed for this entry.
    extended = _dict(status.get("extendedResourceClaimStatus"))
    extended_claim = _str(extended.get("resourceClaimName"))
    if extended_claim is not None:
        claims.append(PodClaim(None, extended_claim))
    return claims


def _zero(quantity: object) -> bool:
    if isinstance(quantity, int | float):
        return quantity == 0
    return isinstance(quantity, str) and quantity.strip() in ("0", "0m", "")


def _plugin_resources(spec: Mapping[str, Any], status: Mapping[str, Any]) -> list[str]:
    """Extended resources requested and not mapped to DRA by ``extendedResourceClaimStatus``."""
    extended = _dict(status.get("extendedResourceClaimStatus"))
    dra_backed = {
        (_str(m.get("containerName")), _str(m.get("resourceName")))
        for m in (_dict(raw) for raw in _list(extended.get("requestMappings")))
    }
    names: set[str] = set()
    for key in ("initContainers", "containers"):
        for raw in _list(spec.get(key)):
            container = _dict(raw)
            container_name = _str(container.get("name"))
            resources = _dict(container.get("resources"))
            for section in ("limits", "requests"):
                for resource, quantity in _dict(resources.get(section)).items():
                    if (
                        isinstance(resource, str)
                        and "/" in resource
                        and not _zero(quantity)
                        and (container_name, resource) not in dra_backed
                    ):
                        names.add(resource)
    return sorted(names)


def read_lifecycle(pod: object) -> PodLifecycle | None:
    """The lifecycle facts of a raw Pod; ``None`` when it has no UID or namespace."""
    pod = _dict(pod)
    metadata, spec, status = (_dict(pod.get(k)) for k in ("metadata", "spec", "status"))
    uid, namespace = _str(metadata.get("uid")), _str(metadata.get("namespace"))
    if uid is None or namespace is None:
        return None
    scheduled, scheduled_at = _condition(status, "PodScheduled")
    ready, ready_at = _condition(status, "Ready")
    return PodLifecycle(
        uid=uid,
        namespace=namespace,
        name=_str(metadata.get("name")) or "",
        created_at=_time(metadata.get("creationTimestamp")),
        scheduled_at=scheduled_at if scheduled else None,
        ready=ready,
        ready_at=ready_at,
        claims=tuple(_claims(spec, status)),
        plugin_resources=tuple(_plugin_resources(spec, status)),
    )


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    seconds = (end - start).total_seconds()
    return seconds if seconds >= 0 else None


def _device_class(claim: ResourceClaimInfo) -> str:
    first = claim.requests[0].device_class if claim.requests else None
    return first if isinstance(first, str) and first else UNKNOWN_CLASS


def _latest(times: Iterable[datetime | None]) -> datetime | None:
    known = [t for t in times if t is not None]
    return max(known) if known else None


def stage_latencies(facts: PodLifecycle, claims: ClaimLookup) -> StageReport:
    """The stage latencies of a Ready Pod (see the module docstring); empty if it is not Ready.
    ``claims`` looks the Pod's ResourceClaims up in its namespace."""
    report = StageReport()
    if not facts.ready:
        return report
    ready = _seconds(facts.scheduled_at, facts.ready_at)
    # device_class -> allocation times of its claims allocated for this Pod
    dra_classes: dict[str, list[datetime | None]] = {}
    seen_claims: set[str] = set()
    for pod_claim in facts.claims:
        claim = (
            claims(facts.namespace, pod_claim.claim_name)
            if pod_claim.claim_name is not None
            else None
        )
        if claim is None:
            report.unknown_claims.append(pod_claim)
            dra_classes.setdefault(UNKNOWN_CLASS, [])
            continue
        device_class = _device_class(claim)
        allocations = dra_classes.setdefault(device_class, [])
        if claim.uid in seen_claims:
            continue
        seen_claims.add(claim.uid)
        report.claim_uids.append(claim.uid)
        if (
            claim.allocated_at is not None
            and facts.created_at is not None
            and claim.allocated_at < facts.created_at
        ):
            continue  # allocated for an earlier consumer: not this Pod's wait
        allocations.append(claim.allocated_at)
        allocated = _seconds(claim.created_at, claim.allocated_at)
        if allocated is not None:
            report.latencies.append(
                StageLatency(
                    Stage.CLAIM_ALLOCATED, device_class, DevicePath.DRA, allocated, claim.uid
                )
            )
    for device_class, allocations in dra_classes.items():
        bound = _seconds(_latest(allocations), facts.scheduled_at)
        if bound is not None:
            report.latencies.append(
                StageLatency(Stage.POD_BOUND, device_class, DevicePath.DRA, bound)
            )
        if ready is not None:
            report.latencies.append(
                StageLatency(Stage.POD_READY, device_class, DevicePath.DRA, ready)
            )
    plugin_bound = _seconds(facts.created_at, facts.scheduled_at)
    for resource in facts.plugin_resources:
        if plugin_bound is not None:
            report.latencies.append(
                StageLatency(Stage.POD_BOUND, resource, DevicePath.DEVICE_PLUGIN, plugin_bound)
            )
        if ready is not None:
            report.latencies.append(
                StageLatency(Stage.POD_READY, resource, DevicePath.DEVICE_PLUGIN, ready)
            )
    return report


def pod_stage_latencies(pod: object, claims: ClaimLookup) -> StageReport:
    """:func:`stage_latencies` of a raw Pod (empty when it cannot be read)."""
    facts = read_lifecycle(pod)
    return StageReport() if facts is None else stage_latencies(facts, claims)
