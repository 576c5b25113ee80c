"""``PodLifecycleObserved``: a Pod's claim lifecycle stages, on the health topic (issue 16 item 5).

The watcher publishes one when its :class:`~services.domain.watch.lifecycle_tracker.LifecycleTracker`
reports a Pod first seen Ready (once per Pod, already deduplicated across LISTs), so the DRA
against device-plugin comparison (:mod:`services.domain.adoption.report`) is computed from the
log, replayable, instead of only from the watcher's histograms. Keyed by node (the Pod's
``spec.nodeName``). Its own ``version`` (:data:`LIFECYCLE_RECORD_VERSION`).

Wire form, JSON with sorted keys: ``{"schema": 1, "type": "PodLifecycleObserved", "version": 1,
"node", "namespace", "podName", "podUID", "observedAt" (RFC 3339 UTC, the watcher time of the Pod
event), "stages": [{"stage", "deviceClass", "path", "seconds", "claimUID"}], "unknownClaims"}``.
``stages`` are :class:`~services.domain.lifecycle.StageLatency` values (seconds >= 0, from
timestamps the API server wrote); ``unknownClaims`` counts the Pod's ResourceClaims the watcher
did not know (their stages are missing). The Pod turned Ready, so its allocation succeeded: a
failed allocation never makes this record. :func:`decode_lifecycle` raises
:class:`~services.domain.codec.EventDecodeError` naming the field for anything else.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

import orjson

from services.domain.codec import (
    EventDecodeError,
    decode_record,
    require,
)
from services.domain.events import SCHEMA_VERSION, format_time
from services.domain.lifecycle import DevicePath, Stage, StageReport
from services.domain.limits import invisible_problem, node_name_problem

LIFECYCLE_RECORD_VERSION: Final = 1
"""The ``version`` of every ``PodLifecycleObserved``; a reader refuses a newer one."""

LIFECYCLE_EVENT_TYPE: Final = "PodLifecycleObserved"
MAX_STAGES: Final = 64
"""Most stages one record holds (a Pod has a few claims and extended resources)."""
MAX_SECONDS: Final = 10 * 365 * 86400.0
"""Largest stage latency kept (ten years): anything above is a broken timestamp."""

_STAGES: Final = {s.value: s for s in Stage}
_PATHS: Final = {p.value: p for p in DevicePath}


@dataclass(frozen=True, slots=True)
class StageSample:
    """One stage of one Pod: ``seconds`` of ``stage`` for ``device_class`` on ``path``;
    ``claim_uid`` the ResourceClaim's UID for ``claim_allocated`` (empty for Pod stages)."""

    stage: Stage
    device_class: str
    path: DevicePath
    seconds: float
    claim_uid: str = ""


@dataclass(frozen=True, slots=True)
class PodLifecycleObserved:
    """A Pod's stage latencies when it was first seen Ready (see the module docstring)."""

    node: str
    namespace: str
    pod_name: str
    pod_uid: str
    observed_at: datetime
    stages: tuple[StageSample, ...] = ()
    unknown_claims: int = 0
    type: str = field(default=LIFECYCLE_EVENT_TYPE, init=False)


def lifecycle_record(
    pod: Mapping[str, Any], report: StageReport, observed_at: datetime
) -> PodLifecycleObserved | None:
    """The record of ``pod`` (raw JSON) for the tracker's ``report``; ``None`` when the report
    has no stage and no unknown claim, or the Pod has no node, name or UID."""
    if not report.latencies and not report.unknown_claims:
        return None
    metadata = pod.get("metadata")
    spec = pod.get("spec")
    if not isinstance(metadata, Mapping) or not isinstance(spec, Mapping):
        return None
    values = [metadata.get("namespace"), metadata.get("name"), metadata.get("uid")]
    node = spec.get("nodeName")
    if not isinstance(node, str) or not node or not all(isinstance(v, str) and v for v in values):
        return None
    namespace, name, uid = (str(v) for v in values)
    stages = tuple(
        StageSample(s.stage, s.device_class, s.path, s.seconds, s.claim_uid or "")
        for s in report.latencies
    )[:MAX_STAGES]
    return PodLifecycleObserved(
        node, namespace, name, uid, observed_at, stages, len(report.unknown_claims)
    )


def encode_lifecycle(event: PodLifecycleObserved) -> bytes:
    """The JSON bytes of ``event`` (keys sorted, stable)."""
    body = {
        "schema": SCHEMA_VERSION,
        "type": event.type,
        "version": LIFECYCLE_RECORD_VERSION,
        "node": event.node,
        "namespace": event.namespace,
        "podName": event.pod_name,
        "podUID": event.pod_uid,
        "observedAt": format_time(event.observed_at),
        "stages": [
            {
                "stage": s.stage.value,
                "deviceClass": s.device_class,
                "path": s.path.value,
                "seconds": s.seconds,
                "claimUID": s.claim_uid,
            }
            for s in event.stages
        ],
        "unknownClaims": event.unknown_claims,
    }
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)


def _sample(item: Any) -> StageSample:
    if not isinstance(item, dict):
        raise EventDecodeError("field 'stages' holds an entry that is not an object")
    stage = _STAGES.get(item.get("stage"))  # type: ignore[arg-type]
    if stage is None:
        raise EventDecodeError(f"field 'stages.stage' has unknown value {item.get('stage')!r}")
    path = _PATHS.get(item.get("path"))  # type: ignore[arg-type]
    if path is None:
        raise EventDecodeError(f"field 'stages.path' has unknown value {item.get('path')!r}")
    raw = item.get("seconds")
    seconds = float(raw) if isinstance(raw, int | float) and not isinstance(raw, bool) else math.nan
    if not math.isfinite(seconds) or not 0 <= seconds <= MAX_SECONDS:
        raise EventDecodeError(f"field 'stages.seconds' must be a number in [0, {MAX_SECONDS:.0f}]")
    device_class, claim_uid = item.get("deviceClass"), item.get("claimUID", "")
    if not isinstance(device_class, str) or not isinstance(claim_uid, str):
        raise EventDecodeError("fields 'stages.deviceClass' and 'stages.claimUID' must be strings")
    return StageSample(stage, device_class, path, seconds, claim_uid)


def decode_lifecycle(payload: bytes) -> PodLifecycleObserved:
    """Parse a ``PodLifecycleObserved``; raises :class:`EventDecodeError` with the reason."""
    obj, observed_at = decode_record(
        payload, SCHEMA_VERSION, LIFECYCLE_EVENT_TYPE, LIFECYCLE_RECORD_VERSION
    )
    items = require(obj, "stages", list)
    if len(items) > MAX_STAGES:
        raise EventDecodeError(f"field 'stages' has more than {MAX_STAGES} entries")
    unknown = obj.get("unknownClaims", 0)
    if type(unknown) is not int or unknown < 0:
        raise EventDecodeError("field 'unknownClaims' must be a non-negative integer")
    event = PodLifecycleObserved(
        node=require(obj, "node"),
        namespace=require(obj, "namespace"),
        pod_name=require(obj, "podName"),
        pod_uid=require(obj, "podUID"),
        observed_at=observed_at,
        stages=tuple(_sample(item) for item in items),
        unknown_claims=unknown,
    )
    problems = lifecycle_violations(event)
    if problems:
        raise EventDecodeError("cannot be stored: " + "; ".join(problems))
    return event


def _text_problem(name: str, value: str, limit: int, *, empty: bool = False) -> str | None:
    if not value and not empty:
        return f"{name} is empty"
    if any(ord(ch) < 0x20 for ch in value):
        return f"{name} contains a control character"
    if len(value) > limit:
        return f"{name} is longer than {limit} characters"
    return invisible_problem(name, value)


def lifecycle_violations(event: PodLifecycleObserved) -> list[str]:
    """Why ``event`` cannot be stored, one reason per field (empty: it can be)."""
    checks: list[tuple[str, str, int, bool]] = [
        ("namespace", event.namespace, 63, False),
        ("podName", event.pod_name, 253, False),
        ("podUID", event.pod_uid, 128, False),
    ]
    for s in event.stages:
        checks += [
            ("deviceClass", s.device_class, 253, False),
            ("claimUID", s.claim_uid, 128, True),
        ]
    problems = [p for n, v, lim, e in checks if (p := _text_problem(n, v, lim, empty=e))]
    if (problem := node_name_problem(event.node)) is not None:
        problems.insert(0, problem)
    return problems
