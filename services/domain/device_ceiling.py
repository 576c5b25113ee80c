"""The ceiling of devices per node in the device directory (issue 11: one node with 100,000
resourceIDs must not stall the fleet).

A real node has tens of devices (a DGX has 8 GPUs; MIG or time-slicing gives at most a few hundred
resourceIDs). An observation of a device the directory does not hold yet, on a node that already
holds ``ceiling`` devices, is *over the ceiling*: the projection does not apply it, and the worker
sends it to the dead-letter topic with the reason. Devices the directory holds are never refused,
so lowering the setting only stops new ones.

The check runs over a batch in log order. A node's records are all on one partition of the topic
(records are keyed by node), so which observations are refused depends only on the node's own
records in log order: any batch split, any interleaving of partitions, and the replay refuse the
same ones. The governor applies the same ceiling to what it is forwarded
(``GovernancePolicy.max_devices_per_node``): the one setting ``DEVICESTATE_MAX_DEVICES_PER_NODE``.
It is forwarded the first refused observation of each node and batch (:func:`first_per_node`),
refuses it as well and flags the node once (its ``DataQualityFlagged`` decision is dated at the
node's first refused observation, whatever the batches).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from services.domain.directory import DeviceKey
from services.domain.events import DeviceHealthObserved
from services.domain.log import LoggedEvent


@dataclass(frozen=True, slots=True)
class OverCeiling:
    """An observation the directory does not apply: ``record`` (with its log position) and
    ``reason`` (what the dead letter says)."""

    record: LoggedEvent
    reason: str


def new_device_nodes(
    records: Sequence[LoggedEvent], known: Callable[[DeviceKey], bool]
) -> set[str]:
    """The nodes that have an observation of a device ``known`` does not hold: the nodes whose
    device count :func:`within_ceiling` needs."""
    return {
        logged.event.node
        for logged in records
        if isinstance(logged.event, DeviceHealthObserved) and not known(logged.event.device_key)
    }


def within_ceiling(
    records: Sequence[LoggedEvent],
    known: Callable[[DeviceKey], bool],
    counts: Mapping[str, int],
    ceiling: int | None,
) -> tuple[list[LoggedEvent], list[OverCeiling]]:
    """Split ``records`` (log order) into those the directory folds and those over the ceiling.

    ``known(key)``: whether the directory holds the device already; ``counts``: how many devices
    each node of :func:`new_device_nodes` holds (a node absent holds none); ``ceiling``: the most
    devices a node may hold (``None``: no ceiling). A device first seen in this batch counts from
    its first observation on, so a later observation of it in the batch is not refused.
    Raises ``ValueError`` for a ceiling below 1.
    """
    if ceiling is None:
        return list(records), []
    if ceiling < 1:
        raise ValueError(f"device ceiling must be at least 1, got {ceiling}")
    kept: list[LoggedEvent] = []
    refused: list[OverCeiling] = []
    held = dict(counts)
    added: set[DeviceKey] = set()
    for logged in records:
        event = logged.event
        if isinstance(event, DeviceHealthObserved):
            key = event.device_key
            if key not in added and not known(key):
                count = held.get(event.node, 0)
                if count >= ceiling:
                    refused.append(OverCeiling(logged, _reason(event, count, ceiling)))
                    continue
                held[event.node] = count + 1
                added.add(key)
        kept.append(logged)
    return kept, refused


def first_per_node(over: Sequence[OverCeiling]) -> list[OverCeiling]:
    """The first observation over the ceiling of each node in ``over`` (log order). The worker
    forwards these to the governor, which refuses them too and raises the node's one
    DataQualityFlagged decision (and dead-letters them); the others it dead-letters itself."""
    seen: set[str] = set()
    firsts: list[OverCeiling] = []
    for item in over:
        node = item.record.event.node
        if node not in seen:
            seen.add(node)
            firsts.append(item)
    return firsts


def _reason(event: DeviceHealthObserved, count: int, ceiling: int) -> str:
    return (
        f"device ceiling: node {event.node!r} already holds {count} devices "
        f"(DEVICESTATE_MAX_DEVICES_PER_NODE={ceiling}); resourceID {event.resource_id!r} of "
        f"{event.resource_name} is not applied"
    )
