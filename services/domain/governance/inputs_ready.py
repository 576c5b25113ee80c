"""The governance-topic record of one Pod's bound-to-Ready latencies (issue 16 item 2, the
adoption gate's ``ready-latency`` signal), and its wire form.

The watcher publishes a ``PodLifecycleObserved`` (:mod:`services.domain.lifecycle_events`) when
it first sees a Pod Ready; the worker projects it into ``pod_lifecycle_stages`` and forwards its
``pod_ready`` stages (``PodScheduled`` to ``Ready``) as one :class:`NodeReadyObserved`
(:mod:`services.domain.adoption.ready_forward`) with the health record's merge key: it takes its
place in event time and a redelivery is dropped like any forwarded record. The governor keeps
each node's samples for a sliding window of event time (:mod:`.adoption_state`).

JSON, camelCase: ``{"schema": 1, "type": "NodeReadyObserved", "node", "observedAt" (RFC 3339
UTC), "podUID", "samples": [{"deviceClass", "path" (``dra`` or ``device-plugin``), "seconds"
(>= 0), "classes" (the DeviceClasses a plugin sample compares against)}]}``.
:func:`ready_from_dict` raises :class:`~services.domain.codec.EventDecodeError` naming the bad
field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from services.domain.codec import EventDecodeError, event_time_field, str_field
from services.domain.events import SCHEMA_VERSION, format_time

RECORD_TYPE: Final = "NodeReadyObserved"
PATHS: Final = frozenset({"dra", "device-plugin"})
"""``services.domain.lifecycle.DevicePath`` values."""
MAX_SAMPLES: Final = 64
"""Most samples one record holds (``lifecycle_events.MAX_STAGES``)."""
MAX_CLASSES: Final = 16
"""Most DeviceClasses one plugin sample names."""
MAX_SECONDS: Final = 10 * 365 * 86400.0


@dataclass(frozen=True, slots=True, order=True)
class ReadySample:
    """``seconds`` (>= 0, <= ten years) from ``PodScheduled`` to ``Ready`` for ``device_class``
    on ``path``; ``classes`` (sorted, once each) the DeviceClasses it compares against."""

    device_class: str
    path: str
    seconds: float
    classes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "classes", tuple(sorted(set(self.classes))))
        if not self.device_class or self.path not in PATHS:
            raise ValueError(f"a ready sample needs a deviceClass and a path in {sorted(PATHS)}")
        if not (math.isfinite(self.seconds) and 0 <= self.seconds <= MAX_SECONDS):
            raise ValueError(f"seconds {self.seconds!r} is not in [0, {MAX_SECONDS:.0f}]")
        if len(self.classes) > MAX_CLASSES or not all(self.classes):
            raise ValueError(f"at most {MAX_CLASSES} non-empty classes per sample")


@dataclass(frozen=True, slots=True)
class NodeReadyObserved:
    """Pod ``pod_uid`` on ``node`` turned Ready, seen at event time ``observed_at`` (UTC), with
    its bound-to-Ready ``samples`` (one per device class and path, at most
    :data:`MAX_SAMPLES`). ``ValueError`` for an empty name or too many samples."""

    node: str
    observed_at: datetime
    pod_uid: str
    samples: tuple[ReadySample, ...] = ()
    type: str = field(default=RECORD_TYPE, init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "samples", tuple(sorted(set(self.samples))))
        if not (self.node and self.pod_uid):
            raise ValueError("a ready record needs its node and podUID")
        if len(self.samples) > MAX_SAMPLES:
            raise ValueError(f"at most {MAX_SAMPLES} samples ({len(self.samples)} given)")


def ready_to_dict(record: NodeReadyObserved) -> dict[str, Any]:
    """The record's JSON object (schema 1)."""
    return {
        "schema": SCHEMA_VERSION,
        "type": record.type,
        "node": record.node,
        "observedAt": format_time(record.observed_at),
        "podUID": record.pod_uid,
        "samples": [
            {
                "deviceClass": s.device_class,
                "path": s.path,
                "seconds": s.seconds,
                "classes": list(s.classes),
            }
            for s in record.samples
        ],
    }


def _sample(obj: Any) -> ReadySample:
    if not isinstance(obj, dict):
        raise EventDecodeError("field 'samples' holds an entry that is not an object")
    seconds, classes = obj.get("seconds"), obj.get("classes", [])
    if not isinstance(seconds, int | float) or isinstance(seconds, bool):
        raise EventDecodeError("field 'samples.seconds' must be a number")
    if not isinstance(classes, list) or not all(isinstance(c, str) for c in classes):
        raise EventDecodeError("field 'samples.classes' must be a list of strings")
    return ReadySample(
        str_field(obj, "deviceClass"), str_field(obj, "path"), float(seconds), tuple(classes)
    )


def ready_from_dict(obj: dict[str, Any]) -> NodeReadyObserved:
    """Parse the record; raises :class:`EventDecodeError` naming the bad field."""
    samples = obj.get("samples", [])
    if not isinstance(samples, list):
        raise EventDecodeError("field 'samples' must be a list")
    try:
        return NodeReadyObserved(
            node=str_field(obj, "node"),
            observed_at=event_time_field(obj, "observedAt"),
            pod_uid=str_field(obj, "podUID"),
            samples=tuple(_sample(s) for s in samples),
        )
    except ValueError as exc:
        if isinstance(exc, EventDecodeError):
            raise
        raise EventDecodeError(str(exc)) from exc
