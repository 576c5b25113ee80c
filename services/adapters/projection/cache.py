"""The device rows of a projection kept in memory, for a writer that owns the projection alone.

:meth:`ProjectionStore.apply_batch <services.adapters.projection.store.ProjectionStore.apply_batch>` locks
and loads the rows a batch touches before it folds the batch, because the worker shares its tables
with other writers (a restarted worker, a second instance). A replay writes into a fresh (or
truncated) schema nobody else writes to, so what it wrote is all there is: given a
:class:`DeviceCache`, the store takes the rows (and the partition offsets already applied) from it
instead of reading them back, and records what it wrote in it. The fold sees exactly the records
it would have loaded, so the rows written are the same.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from services.domain.directory import Allocation, DeviceKey, DeviceRecord
from services.domain.events import DeviceHealthObserved, PodsListed
from services.domain.log import LoggedEvent
from services.domain.tombstones import Tombstone, merged, retained


def same_pods(old: Sequence[Allocation], new: Sequence[Allocation]) -> bool:
    """Whether two allocation lists name the same Pods in the same order (cheap for the usual
    single allocation)."""
    if len(old) != len(new):
        return False
    if len(old) == 1:
        return old[0].pod_uid == new[0].pod_uid
    return [a.pod_uid for a in old] == [a.pod_uid for a in new]


class DeviceCache:
    """Every ``devices`` row of a projection, as :class:`DeviceRecord` objects by key, with an
    index of the devices each Pod holds on its node (so a release looks only at those) and of the
    held devices per node (so does a snapshot), the offset ``partition_progress`` records for
    each partition, and the ``pod_tombstones`` rows by Pod UID.

    It must start as the tables' exact content -- empty for a fresh or truncated schema -- and
    only the one writer that owns the tables may use it: nothing here notices other writers.
    """

    __slots__ = (
        "_devices",
        "_event_times",
        "_held_on",
        "_holders",
        "_offsets",
        "_per_node",
        "_tombstones",
    )

    def __init__(self) -> None:
        self._devices: dict[DeviceKey, DeviceRecord] = {}
        self._holders: dict[tuple[str, str], set[DeviceKey]] = {}
        self._held_on: dict[str, set[DeviceKey]] = {}
        self._offsets: dict[tuple[str, int], int] = {}
        self._per_node: dict[str, int] = {}
        self._tombstones: dict[str, Tombstone] = {}
        self._event_times: dict[tuple[str, int], datetime] = {}

    def __len__(self) -> int:
        return len(self._devices)

    def get(self, key: DeviceKey) -> DeviceRecord | None:
        """The device's record, or ``None`` when it has no row."""
        return self._devices.get(key)

    def offset(self, topic: str, partition: int) -> int | None:
        """The partition's recorded offset (the last applied), or ``None``."""
        return self._offsets.get((topic, partition))

    def event_times(self) -> dict[tuple[str, int], datetime]:
        """Each partition's recorded ``last_event_at`` (its watermark), a copy."""
        return dict(self._event_times)

    def node_counts(self, nodes: Iterable[str]) -> dict[str, int]:
        """How many devices each of ``nodes`` holds (nodes without any are absent), as the
        store's count of ``devices`` rows per node."""
        per_node = self._per_node
        return {node: per_node[node] for node in nodes if node in per_node}

    def fresh(self, records: Sequence[LoggedEvent]) -> Sequence[LoggedEvent]:
        """``records`` without those at or before their partition's recorded offset (already
        applied: a redelivery), like the store's locked read of ``partition_progress``."""
        offsets = self._offsets
        if not offsets:
            return records
        return [
            r
            for r in records
            if r.position.offset > offsets.get((r.position.topic, r.position.partition), -1)
        ]

    def current(self, records: Iterable[LoggedEvent]) -> dict[DeviceKey, DeviceRecord]:
        """The rows the store would lock for ``records``: each observed device that exists, and
        every device a released Pod holds on the release's node."""
        devices = self._devices
        holders = self._holders
        current: dict[DeviceKey, DeviceRecord] = {}
        for logged in records:
            event = logged.event
            if isinstance(event, DeviceHealthObserved):
                key = (event.node, event.resource_id)
                record = devices.get(key)
                if record is not None:
                    current[key] = record
            elif isinstance(event, PodsListed):
                for key in self._held_on.get(event.node, ()):
                    current[key] = devices[key]
            else:
                for key in holders.get((event.node, event.pod_uid), ()):
                    current[key] = devices[key]
        return current

    def tombstones(self, records: Iterable[LoggedEvent]) -> dict[str, Tombstone]:
        """The tombstones the store would load for ``records``: those of the observed Pods."""
        found = {}
        for logged in records:
            event = logged.event
            if isinstance(event, DeviceHealthObserved):
                tombstone = self._tombstones.get(event.pod_uid)
                if tombstone is not None:
                    found[event.pod_uid] = tombstone
        return found

    def update(
        self,
        written: Mapping[DeviceKey, DeviceRecord],
        offsets: Mapping[tuple[str, int], int] | None = None,
        tombstones: Mapping[str, Tombstone] | None = None,
        event_times: Mapping[tuple[str, int], datetime] | None = None,
    ) -> None:
        """Record a batch's writes: the new state of each device it inserted or updated, the
        partition offsets it recorded (an offset never moves back, as in the table), the
        tombstones it left (merged, then the retention applied, as the store's statements do) and
        the partitions' watermarks after it (``last_event_at``, which never moves back either)."""
        devices = self._devices
        holders = self._holders
        if tombstones:
            self._tombstones = retained(merged(self._tombstones, tombstones.values()))
        for key, new in written.items():
            old = devices.get(key)
            if old is None:  # rows are never deleted: a node's count only grows
                self._per_node[key[0]] = self._per_node.get(key[0], 0) + 1
            # Most observations keep the device's Pods, and so its place in the index.
            if old is None or not same_pods(old.allocations, new.allocations):
                node = key[0]
                if old is not None:
                    for allocation in old.allocations:
                        held = holders.get((node, allocation.pod_uid))
                        if held is not None:
                            held.discard(key)
                            if not held:
                                del holders[(node, allocation.pod_uid)]
                for allocation in new.allocations:
                    holders.setdefault((node, allocation.pod_uid), set()).add(key)
                if new.allocations:
                    self._held_on.setdefault(node, set()).add(key)
                elif node in self._held_on:
                    self._held_on[node].discard(key)
            devices[key] = new
        for part, offset in (offsets or {}).items():
            recorded = self._offsets.get(part)
            if recorded is None or offset > recorded:
                self._offsets[part] = offset
        for part, at in (event_times or {}).items():
            held_at = self._event_times.get(part)
            if held_at is None or at > held_at:
                self._event_times[part] = at
