"""Which claim lifecycle stages the worker forwards to the governor (issue 16 item 2, the gate's
``ready-latency`` signal).

For each ``PodLifecycleObserved`` of a batch (after its partition's recorded offset, log order)
with at least one ``pod_ready`` stage (``PodScheduled`` to ``Ready``, the report's
bound-to-Ready), one :class:`~services.domain.governance.inputs_ready.NodeReadyObserved` with
those stages: node, the record's ``observedAt``, the Pod's UID, and per stage the device class,
the path and the seconds. A device-plugin stage's class is an extended resource name; the
sample also names the DeviceClasses whose ``extendedResourceName`` it is in the worker's
inventory when the batch is written (``classes``), which is how the gate finds the plugin
samples "of the same class" as a pool's DeviceClass. A DRA sample names its own class.

Pure: the batch's records and the class map in, the records to forward out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from services.domain.governance.inputs_ready import (
    MAX_CLASSES,
    NodeReadyObserved,
    ReadySample,
)
from services.domain.inventory.state import InventoryState
from services.domain.lifecycle import DevicePath, Stage
from services.domain.lifecycle_events import PodLifecycleObserved
from services.domain.log import LogPosition


def forwarded_ready(
    items: Sequence[tuple[LogPosition, PodLifecycleObserved]],
    classes_of: Mapping[str, Sequence[str]],
) -> list[tuple[LogPosition, NodeReadyObserved]]:
    """The records to forward for ``items`` (log order), each with its record's position;
    ``classes_of`` maps an extended resource name to the DeviceClasses that name it (absent: a
    plugin sample that compares against none). A record with no ``pod_ready`` stage forwards
    nothing."""
    out = []
    for position, r in items:
        samples = []
        for s in r.stages:
            if s.stage is not Stage.POD_READY:
                continue
            if s.path is DevicePath.DRA:
                classes: tuple[str, ...] = (s.device_class,)
            else:
                classes = tuple(sorted(set(classes_of.get(s.device_class, ()))))[:MAX_CLASSES]
            samples.append(ReadySample(s.device_class, s.path.value, s.seconds, classes))
        if samples:
            out.append(
                (position, NodeReadyObserved(r.node, r.observed_at, r.pod_uid, tuple(samples)))
            )
    return out


def extended_classes(classes: Mapping[str, str | None]) -> dict[str, tuple[str, ...]]:
    """``DeviceClass name -> extendedResourceName`` (``None``: none) inverted: extended
    resource name -> the DeviceClasses naming it, sorted."""
    out: dict[str, list[str]] = {}
    for name, resource in sorted(classes.items()):
        if resource:
            out.setdefault(resource, []).append(name)
    return {k: tuple(v) for k, v in out.items()}


def ready_to_forward(
    items: Sequence[tuple[LogPosition, PodLifecycleObserved]], state: InventoryState | None
) -> list[tuple[LogPosition, NodeReadyObserved]]:
    """:func:`forwarded_ready` with the class map of the worker's inventory ``state`` as the
    batch left it (``None``: no inventory kept, no plugin sample names a class)."""
    if not items:
        return []
    classes = (
        {} if state is None else {c.name: c.extended_resource_name for c in state.classes.values()}
    )
    return forwarded_ready(items, extended_classes(classes))
