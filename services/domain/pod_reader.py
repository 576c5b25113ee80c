"""Translate one Pod, as raw JSON from the Kubernetes API, into device-health observations.

Source of the facts: KEP-4680 ``Pod.status.containerStatuses[].allocatedResourcesStatus`` and the
same field on ``initContainerStatuses`` (core/v1 ``ResourceStatus`` / ``ResourceHealth``). Shape::

    status.containerStatuses[]: {name, allocatedResourcesStatus: [{name, resources: [
        {resourceID, health: Healthy|Unhealthy|Unknown, message?}]}]}

:func:`read_pod` is pure: no I/O and no clock (``observed_at`` is the watcher's time, passed in).
It never raises on odd input: whatever it has to skip or flag is returned as a :class:`~services.domain.pod_status.Problem`,
and absence of data never becomes ``Healthy``. Rules, from ``../shared/examples`` (``stream-10``'s
``perLine`` above all):

- no ``allocatedResourcesStatus`` (null, missing, empty) or an entry without ``resources``: no
  observation and no problem;
- an entry without ``name`` or a resource without a non-empty ``resourceID`` is skipped;
- a health other than exactly ``Healthy|Unhealthy|Unknown`` is read as ``Unknown``, the raw value
  kept; an absent health is ``Unknown`` too (``health`` is ``omitempty`` in the Go type);
- one observation per (Pod, resourceID): containers reporting the same device with the same health
  are merged; the same resourceID with conflicting health in one Pod yields no observation;
- a Pod without ``spec.nodeName`` yields no observation (a device is keyed by node).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Set
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import orjson

from services.domain.codec import parse_resource_version
from services.domain.events import (
    MESSAGE_MAX_LENGTH,
    ClaimRef,
    ContainerKind,
    ContainerRef,
    DeviceHealthObserved,
    DeviceSource,
    Health,
)
from services.domain.limits import RAW_HEALTH_MAX_LENGTH
from services.domain.pod_sightings import Sighting, reconcile
from services.domain.pod_status import CLAIM_PREFIX, PodReading, Problem, ProblemCode

_FLAG_CODES: Final = frozenset(
    {ProblemCode.UNRECOGNIZED_HEALTH, ProblemCode.MISSING_HEALTH, ProblemCode.MESSAGE_TRUNCATED}
)


_HEALTH_VALUES: Final = frozenset(h.value for h in Health)


@dataclass(frozen=True, slots=True)
class _PodFacts:
    """What every observation of one Pod shares."""

    node: str
    namespace: str
    name: str
    uid: str
    status_version: int | None
    observed_at: datetime


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _dict(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object, what: str, problems: list[Problem]) -> list[Any]:
    """``value`` if it is a JSON array; null/missing is an empty list; anything else is flagged."""
    if value is None:
        return []
    if isinstance(value, list):
        return value
    problems.append(Problem(ProblemCode.MALFORMED_STATUS, f"{what} is not a list: ignored"))
    return []


def _read_health(raw: object, where: str, problems: list[Problem]) -> tuple[Health, str | None]:
    """``(health, raw_health)``: exact API values only; anything else is Unknown (KEP-4680)."""
    if raw is None:
        problems.append(Problem(ProblemCode.MISSING_HEALTH, f"{where}: no health, read as Unknown"))
        return Health.UNKNOWN, None
    if isinstance(raw, str) and raw in _HEALTH_VALUES:
        return Health(raw), None
    # Case-sensitive on purpose: "unhealthy" is not a value the API allows, so it is no signal.
    text = raw if isinstance(raw, str) else orjson.dumps(raw).decode()
    # Kept for people, bounded and storable (limits.RAW_HEALTH_MAX_LENGTH, no NUL).
    text = text[:RAW_HEALTH_MAX_LENGTH].replace("\x00", "\ufffd")
    problems.append(
        Problem(ProblemCode.UNRECOGNIZED_HEALTH, f"{where}: health {text[:64]!r} read as Unknown")
    )
    return Health.UNKNOWN, text


def _read_message(raw: object, where: str, problems: list[Problem]) -> str | None:
    """The message, cut to ``MESSAGE_MAX_LENGTH`` characters (core/v1 limit, kubelet cuts too)."""
    if raw is None:
        return None
    if not isinstance(raw, str):
        problems.append(Problem(ProblemCode.MALFORMED_STATUS, f"{where}: message is not a string"))
        return None
    if "\x00" in raw:
        # PostgreSQL text cannot hold NUL; drivers' free text may (the rest is still worth keeping).
        raw = raw.replace("\x00", "\ufffd")
    if len(raw) <= MESSAGE_MAX_LENGTH:
        return raw
    problems.append(
        Problem(
            ProblemCode.MESSAGE_TRUNCATED,
            f"{where}: message of {len(raw)} characters cut to {MESSAGE_MAX_LENGTH}",
        )
    )
    return raw[:MESSAGE_MAX_LENGTH]


def _container_names(spec: Mapping[str, Any], key: str) -> frozenset[str]:
    items = spec.get(key)
    if not isinstance(items, list):
        return frozenset()
    return frozenset(n for c in items if (n := _str(_dict(c).get("name"))) is not None)


def _sightings(pod: Mapping[str, Any], problems: list[Problem]) -> Iterator[Sighting]:
    spec, status = _dict(pod.get("spec")), _dict(pod.get("status"))
    lists = (
        ("containerStatuses", ContainerKind.REGULAR, _container_names(spec, "containers")),
        ("initContainerStatuses", ContainerKind.INIT, _container_names(spec, "initContainers")),
    )
    for key, kind, known in lists:
        for status_item in _list(status.get(key), f"status.{key}", problems):
            container_status = _dict(status_item)
            entries = _list(
                container_status.get("allocatedResourcesStatus"),
                f"status.{key}[].allocatedResourcesStatus",
                problems,
            )
            if not entries:
                continue
            name = _str(container_status.get("name"))
            if name is None:
                problems.append(
                    Problem(
                        ProblemCode.MISSING_CONTAINER_NAME,
                        f"status.{key}: a container status without name reports devices: skipped",
                    )
                )
                continue
            unknown_container = name not in known
            if unknown_container:
                problems.append(
                    Problem(
                        ProblemCode.STATUS_FOR_UNKNOWN_CONTAINER,
                        f"container {name!r} ({kind.value}) is not in the Pod spec; its devices "
                        "are recorded anyway",
                    )
                )
            yield from _entry_sightings(
                ContainerRef(name, kind), entries, unknown_container, problems
            )


def _entry_sightings(
    container: ContainerRef,
    entries: Iterable[Any],
    unknown_container: bool,
    problems: list[Problem],
) -> Iterator[Sighting]:
    for entry_item in entries:
        entry = _dict(entry_item)
        entry_name = _str(entry.get("name"))
        resources = _list(
            entry.get("resources"), f"container {container.name!r}: resources", problems
        )
        if entry_name is None:
            if resources:
                problems.append(
                    Problem(
                        ProblemCode.MISSING_NAME,
                        f"container {container.name!r}: allocatedResourcesStatus entry without "
                        f"name skipped ({len(resources)} resources)",
                    )
                )
            continue
        for resource_item in resources:
            resource = _dict(resource_item)
            resource_id = _str(resource.get("resourceID"))
            where = f"container {container.name!r} {entry_name!r}"
            if resource_id is None:
                problems.append(
                    Problem(
                        ProblemCode.MISSING_RESOURCE_ID,
                        f"{where}: resource without resourceID skipped",
                    )
                )
                continue
            where = f"{where} {resource_id!r}"
            count = len(problems)
            health, raw_health = _read_health(resource.get("health"), where, problems)
            message = _read_message(resource.get("message"), where, problems)
            # The problems just found about this resource become flags on its observation.
            flags = {p.code.value for p in problems[count:] if p.code in _FLAG_CODES}
            if unknown_container:
                flags.add(ProblemCode.STATUS_FOR_UNKNOWN_CONTAINER.value)
            yield Sighting(
                container=container,
                entry_name=entry_name,
                resource_id=resource_id,
                health=health,
                raw_health=raw_health,
                message=message,
                flags=frozenset(flags),
            )


def _claim_of(entry_name: str, claim_names: Mapping[str, str]) -> ClaimRef | None:
    """``ClaimRef`` for ``claim:<podClaimName>[/<request>]``; ``None`` for a device plugin name."""
    if not entry_name.startswith(CLAIM_PREFIX):
        return None
    pod_claim_name, _, request = entry_name[len(CLAIM_PREFIX) :].partition("/")
    return ClaimRef(
        pod_claim_name=pod_claim_name,
        request=request or None,
        resource_claim_name=claim_names.get(pod_claim_name),
    )


def _claim_names(spec: Any, status: Mapping[str, Any], problems: list[Problem]) -> dict[str, str]:
    """Pod-level claim name -> ResourceClaim object name.

    From ``status.resourceClaimStatuses[] {name, resourceClaimName}`` (KEP-4680 maps the names
    through it for claims made from a template), and for a claim the Pod references directly,
    ``spec.resourceClaims[] {name, resourceClaimName}``: such Pods get no status entry
    (kubernetes#140036; ``../shared/examples/stream-05b``). The status wins where both exist.
    """
    names: dict[str, str] = {}
    for item in (spec or {}).get("resourceClaims") or [] if isinstance(spec, Mapping) else []:
        entry = _dict(item)
        name, claim_name = _str(entry.get("name")), _str(entry.get("resourceClaimName"))
        if name is not None and claim_name is not None:
            names[name] = claim_name
    for item in _list(
        status.get("resourceClaimStatuses"), "status.resourceClaimStatuses", problems
    ):
        entry = _dict(item)
        name, claim_name = _str(entry.get("name")), _str(entry.get("resourceClaimName"))
        if name is not None and claim_name is not None:
            names[name] = claim_name
    return names


def _merge(
    resource_id: str,
    sightings: list[Sighting],
    pod: _PodFacts,
    claim_names: Mapping[str, str],
    problems: list[Problem],
) -> DeviceHealthObserved | None:
    """One observation for all sightings of ``resource_id`` in the Pod, or ``None`` on conflict."""
    if len(sightings) == 1:  # the usual case: one entry per device, nothing to reconcile
        first = sightings[0]
        containers: tuple[ContainerRef, ...] = (first.container,)
        flags: Set[str] = first.flags
        message = first.message
    else:
        reconciled = reconcile(resource_id, sightings, problems)
        if reconciled is None:
            return None
        first, containers, flags, message = reconciled
    claim = _claim_of(first.entry_name, claim_names)
    return DeviceHealthObserved(
        containers=containers,
        resource_name=first.entry_name,
        resource_id=resource_id,
        health=first.health,
        raw_health=first.raw_health,
        message=message,
        source=DeviceSource.DEVICE_PLUGIN if claim is None else DeviceSource.DRA,
        claim=claim,
        flags=tuple(sorted(flags)),
        node=pod.node,
        namespace=pod.namespace,
        pod_name=pod.name,
        pod_uid=pod.uid,
        status_version=pod.status_version,
        observed_at=pod.observed_at,
    )


def read_pod(pod: Mapping[str, Any], observed_at: datetime) -> PodReading:
    """Read one Pod object (a JSON object as the API serves it, ``kind`` optional).

    ``observed_at`` must be timezone-aware (the watcher's clock, UTC); raises ``ValueError`` when
    it is naive. Never raises for the Pod's content: see the module docstring for the rules.
    """
    if observed_at.tzinfo is None:
        raise ValueError("observed_at must be timezone-aware (UTC)")
    metadata, spec, status = (
        _dict(pod.get("metadata")),
        _dict(pod.get("spec")),
        _dict(pod.get("status")),
    )
    namespace = _str(metadata.get("namespace")) or ""
    name = _str(metadata.get("name")) or ""
    uid = _str(metadata.get("uid")) or ""
    node = _str(spec.get("nodeName"))
    raw_version = metadata.get("resourceVersion")
    status_version = parse_resource_version(raw_version)
    phase = _str(status.get("phase"))
    problems: list[Problem] = []

    grouped: dict[str, list[Sighting]] = {}
    for sighting in _sightings(pod, problems):
        grouped.setdefault(sighting.resource_id, []).append(sighting)

    observations: list[DeviceHealthObserved] = []
    if grouped and node is None:
        problems.append(
            Problem(
                ProblemCode.MISSING_NODE_NAME,
                f"{len(grouped)} devices reported but spec.nodeName is empty: not keyed",
            )
        )
    elif grouped and not uid:
        problems.append(
            Problem(ProblemCode.MISSING_UID, "devices reported but metadata.uid is empty")
        )
    elif grouped and node is not None:
        if status_version is None:
            problems.append(
                Problem(
                    ProblemCode.UNORDERED_RESOURCE_VERSION,
                    f"resourceVersion {raw_version!r} is not comparable (KEP-5504): "
                    "observations are unordered",
                )
            )
        facts = _PodFacts(node, namespace, name, uid, status_version, observed_at)
        claim_names = _claim_names(pod.get("spec"), status, problems)
        for resource_id in sorted(grouped):
            observation = _merge(resource_id, grouped[resource_id], facts, claim_names, problems)
            if observation is not None:
                observations.append(observation)

    return PodReading(
        node=node,
        namespace=namespace,
        name=name,
        uid=uid,
        status_version=status_version,
        phase=phase,
        observed_at=observed_at,
        observations=tuple(observations),
        problems=tuple(problems),
    )
