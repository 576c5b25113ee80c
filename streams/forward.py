"""Forwarding from the device-health topic to the governance topic (issue 3).

The health agent (:mod:`streams.dedup`) hands :meth:`Forwarder.before_commit` to
:meth:`ProjectionStore.apply_batch <services.adapters.projection.store.ProjectionStore.apply_batch>`, which
awaits it inside the batch's transaction, just before the commit. It sends, in the batch's order:

- one :class:`HealthTransition` per health transition the directory fold made (a device's health
  changed, or the device was first seen), with the identity the inventory resolved for that
  observation (``device_id`` only when resolved or as reported: for an ambiguous or unresolved
  one the governor keys the device on its reported resourceID);
- every ``NodeHeartbeat``, ``NodeResourcesChanged``, ``NodeLabelsChanged`` (issue 16: pools
  selected by node labels) and ``WatcherTick`` unchanged (a tick is a clock
  record of the governor's event-time merge; DRA ``InventoryObserved`` records are not forwarded
  as such: they move the watermark, and a node-local ResourceSlice's device taints go as one
  ``DeviceTaintsObserved``, :mod:`streams.forward_taints`);
- one :class:`InventoryConflict` per inventory conflict the batch raised (``active``) or cleared
  (the governor turns it into a ``DataQualityFlagged`` alert), after the record that caused it;
- one :class:`DeviceIdentified` per device the inventory identified after its transitions named
  it by its reported resourceID (a claim read after the Pod's observation), after the record that
  identified it: the governor merges what it holds under the reported ID onto the device;
- one ``NodeAdoptionFacts`` per node whose adoption-gate facts (slices, divergences, allocated
  claims) a record changed, after that record (issue 16: the governor evaluates the gate);
- one :class:`~services.domain.migration.records.WorkloadOnDevice` per (device, Pod) whose
  holding a record began or ended, or whose Pod's workload facts a ``PodWorkloadObserved``
  changed, after that record's other records (issue 13: the migration policy;
  :mod:`services.domain.workloads.on_device`, ``PendingCommit.workloads_on_devices``);
- one :class:`~services.domain.governance.inputs_failures.NodeFailureObserved` per
  ``DRAFailureObserved`` with a node that raised its source's projected count, with the increase
  (issue 16: the gate's ``claim-failures``; :mod:`services.domain.adoption.failure_forward`,
  ``PendingCommit.failures_on_nodes``);
- one :class:`~services.domain.governance.inputs_ready.NodeReadyObserved` per
  ``PodLifecycleObserved`` with a bound-to-Ready stage (issue 16: the gate's ``ready-latency``;
  :mod:`services.domain.adoption.ready_forward`, ``PendingCommit.ready_on_nodes``);

each with its :class:`~services.domain.governance.inputs.MergeKey` (issue 10): the source record's
effective event time (:func:`~services.domain.event_time.effective_times`: ``observedAt`` bounded by
the broker's clock, never before an earlier record of the partition), partition, offset, and the
index of the record among those forwarded for that Kafka record (for a schema-2 record, counted
across its observations in their order, so each has keys of its own). The governor folds them in key order
(:mod:`services.domain.governance.event_order`), whatever order the batches came in.

Then one :class:`PartitionWatermark` per partition the batch touched, when the partition's newest
effective time in the batch is later than the newest one recorded for it before the batch
(``partition_progress.last_event_at``, which the same transaction raises: so a restarted or moved
worker never forwards an older watermark, nor the same one twice). Records at or before a
partition's recorded offset (a redelivered batch) are skipped like the store skips them.

These records are packed (:mod:`streams.forward_batch`) into ``ForwardedBatch`` records
(:mod:`services.domain.governance.input_batch`) of at most ``worker_forward_batch_records``
entries (``DEVICESTATE_WORKER_FORWARD_BATCH_RECORDS``, 512) and 256 KiB each: one governance
record per batch of the health topic where it fits, instead of one per forwarded record. A run of
one entry goes as the record itself, so with the setting at 1 the topic holds exactly what it held
before issue 12 (for a rolling upgrade: an older governor cannot read a ``ForwardedBatch``).

**The ordering guarantee.** The entries of a ``ForwardedBatch`` are the forwarded records in the
order above, and the batch records follow each other in that order too: the governance topic holds
the same sequence of forwarded records whatever the packing, only cut into fewer Kafka records.
The governor and ``replay --governance`` unpack each record and take its entries one by one, as if
each had been a record of its own at the batch record's offset; since the governor orders
forwarded records by their merge keys (and drops a key it holds or released), not by their place
on the topic, its decisions do not depend on the packing either. The batch records are sent inside
the same database transaction as before, through the same producer, one partition.

Each record carries its type in the ``devicestate-type`` header
(:mod:`services.adapters.kafka.headers`), so the governor decodes it without looking into the body.
The sends are awaited (acks=all) before the hook returns, so everything is on the governance
topic before the commit: a crash between the two re-forwards on the next attempt (at least once;
the governor drops a record whose key it already holds or released), never loses anything.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Protocol

from services.adapters.kafka.headers import type_headers
from services.domain.batch import PendingCommit, Transition
from services.domain.device_ceiling import OverCeiling, first_per_node
from services.domain.directory import DeviceRecord
from services.domain.event_time import effective_times
from services.domain.events import DeviceHealthObserved
from services.domain.governance.input_codec import encode_input
from services.domain.governance.inputs import (
    DeviceIdentified,
    GovernanceInput,
    HealthTransition,
    InventoryConflict,
    MergeKey,
    PartitionWatermark,
    WatermarkAdvanced,
)
from services.domain.inventory.events import InventoryObserved
from services.domain.inventory.fold import ConflictChange, IdentityResolved, forwards
from services.domain.inventory.identity import Identity
from services.domain.log import LogPosition
from services.domain.node_events import (
    NodeEvent,
    NodeHeartbeat,
    NodeLabelsChanged,
    NodeResourcesChanged,
    WatcherTick,
)
from streams.forward_batch import FORWARD_BATCH_BYTES, OutgoingRecord, pack
from streams.forward_taints import slice_taints


@dataclass(frozen=True, slots=True)
class LoggedNodeEvent:
    """A record of the device-health topic that is not a device event (a node event or a DRA
    inventory record) with the position it was read from."""

    position: LogPosition
    event: NodeEvent | InventoryObserved


@dataclass(frozen=True, slots=True)
class BatchView:
    """What the forwarder needs of one batch of the health topic, in stream order.

    ``order`` gives each decoded record's index in the batch (by position); ``node_events`` are the
    batch's node events; ``times`` the event time of every decoded record (device events, kept or
    dropped early, and node events), bounded by its Kafka timestamp
    (:func:`services.domain.event_time.bounded`); ``clamped`` the records whose time was clamped."""

    order: dict[LogPosition, int]
    node_events: list[LoggedNodeEvent]
    times: dict[LogPosition, datetime]
    clamped: set[LogPosition] = field(default_factory=set)


def pods_of(record: DeviceRecord) -> tuple[str, ...]:
    """``namespace/podName`` of the Pods holding the device, sorted."""
    return tuple(sorted({f"{a.namespace}/{a.pod_name}" for a in record.allocations}))


def health_transition(transition: Transition, identity: Identity | None = None) -> HealthTransition:
    """The governance record of one transition of the directory fold; ``identity`` is what the
    inventory resolved the observation to (``None``: the inventory was not maintained)."""
    event, record, position = transition.event, transition.change.record, transition.position
    claim = event.claim
    return HealthTransition(
        node=record.node,
        resource_id=record.resource_id,
        resource_name=record.resource_name,
        source=record.source,
        health=record.health,
        status_version=event.status_version,
        observed_at=event.observed_at,
        partition=position.partition,
        offset=position.offset,
        message=event.message,
        raw_health=event.raw_health,
        resource_claim=None if claim is None else claim.resource_claim_name,
        pods=pods_of(record),
        device_id=identity.device_id if identity is not None and forwards(identity) else None,
        identity=None if identity is None else identity.status.value,
        uuid=None if identity is None else identity.uuid,
    )


def over_ceiling_transition(over: OverCeiling) -> HealthTransition:
    """The governance record of an observation the directory refused (its node is at the device
    ceiling): the governor refuses it too, flags the node and dead-letters it. No Pods: the
    directory holds no allocation of it."""
    event, position = over.record.event, over.record.position
    assert isinstance(event, DeviceHealthObserved)  # only observations are over the ceiling
    return HealthTransition(
        node=event.node,
        resource_id=event.resource_id,
        resource_name=event.resource_name,
        source=event.source,
        health=event.health,
        status_version=event.status_version,
        observed_at=event.observed_at,
        partition=position.partition,
        offset=position.offset,
        message=event.message,
        raw_health=event.raw_health,
        pods=(),
    )


def inventory_conflict(change: ConflictChange) -> InventoryConflict:
    """The governance record of a conflict raised or cleared."""
    row = change.row
    return InventoryConflict(
        kind=row.kind,
        node=row.node,
        subject=row.subject,
        detail=row.detail,
        active=row.active,
        observed_at=change.at,
    )


def device_identified(resolved: IdentityResolved) -> DeviceIdentified:
    """The governance record of a device identified after its transitions."""
    identity = resolved.identity
    return DeviceIdentified(
        node=resolved.node,
        resource_id=resolved.resource_id,
        device_id=identity.device_id,
        observed_at=resolved.at,
        uuid=identity.uuid,
        partition=resolved.position.partition,
        offset=resolved.position.offset,
    )


Keyed = tuple[GovernanceInput, MergeKey | None]
"""A record to forward, with its place in the governor's event-time order (``None``: a progress
mark, which has none)."""


def governance_records(batch: BatchView, commit: PendingCommit, partitions: int) -> list[Keyed]:
    """What one batch forwards: transitions, node facts, ticks and inventory conflicts in batch
    order (a conflict after the record that caused it), each with its :class:`MergeKey`, then the
    partitions' progress marks (partition order). ``partitions`` is the health topic's partition
    count. Records at or before their partition's recorded offset (a redelivery) are skipped."""
    inventory = commit.inventory
    resolved = {} if inventory is None else inventory.resolved
    at = effective_times(
        ((p, t) for p, t in batch.times.items() if commit.fresh(p)), commit.last_event_at
    )
    ordered: list[tuple[int, LogPosition, GovernanceInput]] = []
    for t in commit.transitions:
        transition = health_transition(t, resolved.get(t.position))
        if t.position in batch.clamped:
            transition = replace(transition, observed_at=batch.times[t.position])
        ordered.append((batch.order[t.position], t.position, transition))
    for over in first_per_node(commit.over_ceiling):
        position = over.record.position
        refused = over_ceiling_transition(over)
        if position in batch.clamped:
            refused = replace(refused, observed_at=batch.times[position])
        ordered.append((batch.order[position], position, refused))
    for node_event in batch.node_events:
        event = node_event.event
        position = node_event.position
        if isinstance(
            event, NodeHeartbeat | NodeResourcesChanged | WatcherTick | NodeLabelsChanged
        ) and commit.fresh(position):
            if position in batch.clamped:
                event = replace(event, observed_at=batch.times[position])
            ordered.append((batch.order[position], position, event))
        elif isinstance(event, InventoryObserved) and commit.fresh(position):
            taints = slice_taints(event)  # issue 15: a slice's device taints, for the governor
            if taints is not None:
                if position in batch.clamped:
                    taints = replace(taints, observed_at=batch.times[position])
                ordered.append((batch.order[position], position, taints))
    if inventory is not None:
        ordered.extend(
            (batch.order[change.position], change.position, inventory_conflict(change))
            for change in inventory.changes
        )
        ordered.extend(
            (batch.order[found.position], found.position, device_identified(found))
            for found in inventory.identified
        )
        ordered.extend(  # the adoption gate's facts of a node (issue 16)
            (batch.order[position], position, facts) for position, facts in inventory.adoption
        )
    for position, fact in commit.workloads_on_devices:  # issue 13: after the record's others
        if position in batch.clamped:
            fact = replace(fact, observed_at=batch.times[position])
        ordered.append((batch.order[position], position, fact))
    for position, failure in commit.failures_on_nodes:  # issue 16: the gate's claim-failures
        if position in batch.clamped:
            failure = replace(failure, observed_at=batch.times[position])
        ordered.append((batch.order[position], position, failure))
    for position, ready in commit.ready_on_nodes:  # issue 16: the gate's ready-latency
        if position in batch.clamped:
            ready = replace(ready, observed_at=batch.times[position])
        ordered.append((batch.order[position], position, ready))
    ordered.sort(key=lambda item: item[0])  # stable: a conflict stays after its record
    out: list[Keyed] = []
    # Counted per Kafka record, across the observations of a schema-2 record (in their order):
    # they share its partition and offset, and the key must tell them apart.
    index: dict[tuple[str, int, int], int] = {}
    for _, position, forwarded in ordered:
        record = (position.topic, position.partition, position.offset)
        n = index.get(record, 0)
        index[record] = n + 1
        key = MergeKey(
            at[position], position.partition, position.offset, n, position in batch.clamped
        )
        out.append((forwarded, key))
    out.extend((mark, None) for mark in progress_marks(at, commit, partitions))
    return out


def progress_marks(
    at: dict[LogPosition, datetime], commit: PendingCommit, partitions: int
) -> list[PartitionWatermark]:
    """One :class:`PartitionWatermark` per partition whose newest effective time in the batch is
    later than the recorded one, in partition order."""
    newest: dict[tuple[str, int], datetime] = {}
    for position, observed_at in at.items():
        part = (position.topic, position.partition)
        if part not in newest or observed_at > newest[part]:
            newest[part] = observed_at
    out = []
    for part in sorted(newest):
        previous = commit.last_event_at.get(part)
        if previous is None or newest[part] > previous:
            out.append(
                PartitionWatermark(
                    partition=part[1],
                    partitions=max(partitions, part[1] + 1),
                    event_time=newest[part],
                )
            )
    return out


def record_key(record: GovernanceInput) -> bytes:
    """Kafka key of a forwarded record (the topic has one partition: for readers only)."""
    if isinstance(record, WatermarkAdvanced | PartitionWatermark):
        return f"~watermark/{record.partition}".encode()
    node = getattr(record, "node", None)
    return str(node or "").encode()


class RecordSender(Protocol):
    """Sends ``(key, value, type)`` records to the governance topic, in order, and waits for
    every acknowledgement (raises if any failed)."""

    def __call__(self, records: Sequence[OutgoingRecord]) -> Awaitable[None]: ...


def topic_sender(topic: Any) -> RecordSender:
    """A :class:`RecordSender` on a faust topic (raw serializers): queue every record on the
    app's producer (``acks=all``) with its type header, then await all deliveries."""

    async def send(records: Sequence[OutgoingRecord]) -> None:
        futures = [
            await topic.send(key=k, value=v, headers=type_headers(t), force=True)
            for k, v, t in records
        ]
        if futures:
            await asyncio.gather(*futures)

    return send


class Forwarder:
    """Forwards batches of the health topic to the governance topic through ``send``.

    ``partitions`` returns the health topic's partition count (the real one when known);
    ``batch_records`` and ``batch_bytes`` bound each ``ForwardedBatch`` (entries, encoded bytes;
    :func:`streams.forward_batch.pack`); ``on_sent(type, count)`` counts the forwarded records
    by type (entries, not Kafka records). :attr:`forwarded` counts the forwarded records,
    :attr:`sent` the Kafka records they went in."""

    def __init__(
        self,
        send: RecordSender,
        partitions: Callable[[], int],
        on_sent: Callable[[str, int], None] | None = None,
        *,
        batch_records: int = 512,
        batch_bytes: int = FORWARD_BATCH_BYTES,
    ) -> None:
        self.send = send
        self.partitions = partitions
        self.on_sent = on_sent
        self.batch_records = batch_records
        self.batch_bytes = batch_bytes
        self.forwarded = 0
        self.sent = 0

    def before_commit(self, batch: BatchView) -> Callable[[PendingCommit], Awaitable[None]]:
        """The :data:`~services.domain.batch.CommitHook` of one batch."""

        async def hook(commit: PendingCommit) -> None:
            records = governance_records(batch, commit, self.partitions())
            if records:
                outgoing = pack(
                    [(record_key(r), encode_input(r, key), r.type) for r, key in records],
                    self.batch_records,
                    self.batch_bytes,
                )
                await self.send(outgoing)
                self.forwarded += len(records)
                self.sent += len(outgoing)
                if self.on_sent is not None:
                    for kind, count in Counter(r.type for r, _ in records).items():
                        self.on_sent(kind, count)

        return hook
