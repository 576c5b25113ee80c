"""Reading the event topic back for the replay (:mod:`.run`): every partition from its beginning
up to the end offsets captured at the start, decoded, with the event times the worker gives its
batches (bounded by the broker's clock), in batches. A schema-2 record
(:mod:`services.domain.observations`) is read as its observations, each at its own position, as
the worker reads it; its bad entries count as undecodable.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Collection
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from services.adapters.kafka.headers import record_type
from services.adapters.kafka.reader import TopicMissing, TopicSnapshot
from services.adapters.kafka.reader import topic_partitions as kafka_topic_partitions
from services.domain.adoption.failure_events import DRAFailureObserved
from services.domain.batch import InventoryRecord
from services.domain.event_time import append_time, bounded
from services.domain.events import DeviceHealthObserved, PodDevicesReleased, PodsListed
from services.domain.inventory.events import InventoryObserved
from services.domain.lifecycle_events import PodLifecycleObserved
from services.domain.log import LoggedEvent, LogPosition
from services.domain.node_events import NodeResourcesChanged
from services.domain.node_labels import NodeLabelsChanged
from services.domain.observations import DeviceHealthObservations, observation_positions
from services.domain.records import check_key, decode_typed_record
from services.domain.workloads.events import PodWorkloadObserved

REPLAY_CLIENT_ID: Final = "devicestate-replay"
_READ_SLICE: Final = 100
"""Most records :func:`read_log` fetches and decodes between two yields to the event loop."""


@dataclass(frozen=True, slots=True)
class ReplayRetention:
    """The worker's settings the replay needs to keep what it keeps: ``skew_seconds``
    (``DEVICESTATE_MAX_CLOCK_SKEW_SECONDS``) and ``history_seconds``
    (``DEVICESTATE_DEVICE_HISTORY_RETENTION_SECONDS``)."""

    skew_seconds: float
    history_seconds: float = 0.0


def _append_time(timestamp_ms: int | None) -> datetime | None:
    """The broker's append time of a record read by the replay (aiokafka: milliseconds)."""
    return append_time(None if timestamp_ms is None else timestamp_ms / 1000)


class ReplayError(RuntimeError):
    """The replay cannot run as asked (missing topic, existing target schema, ...)."""


@dataclass(frozen=True, slots=True)
class LogBatch:
    """Decoded events of one read, with the records that did not decode."""

    records: list[LoggedEvent]
    undecodable: int
    read: int
    node_events: int = 0
    items: list[tuple[LogPosition, InventoryRecord]] = field(default_factory=list)
    """What the inventory folds, in read order: observations, DRA objects, resource counts."""
    event_times: list[tuple[LogPosition, datetime]] = field(default_factory=list)
    """Event times the worker gives its batches too (:attr:`LoggedBatch.event_times`): node
    events', and device events' whose ``observedAt`` was clamped to the broker's clock."""
    workloads: list[tuple[LogPosition, PodWorkloadObserved]] = field(default_factory=list)
    """The Pods' workload records (:attr:`LoggedBatch.workloads`), in read order."""
    failures: list[tuple[LogPosition, DRAFailureObserved]] = field(default_factory=list)
    """The driver and claim failures (:attr:`LoggedBatch.failures`), in read order."""
    lifecycles: list[tuple[LogPosition, PodLifecycleObserved]] = field(default_factory=list)
    """The Pods' lifecycle stages (:attr:`LoggedBatch.lifecycles`), in read order."""


async def read_log(
    bootstrap_servers: str,
    topic: str,
    *,
    batch_size: int = 5000,
    end_offsets: dict[tuple[str, int], int] | None = None,
    on_ready: Callable[[int], None] | None = None,
    skip: Collection[LogPosition] = (),
    skew_seconds: float | None = None,
) -> AsyncIterator[LogBatch]:
    """Yield the topic's records from the beginning up to the end offsets captured at the start.

    ``end_offsets`` (if given) is filled with each partition's end offset, and ``on_ready`` called
    with the number of records to read, before the first batch. Records at a position in ``skip``
    count as undecodable (the worker dead-lettered them). With ``skew_seconds`` (the worker's
    ``DEVICESTATE_MAX_CLOCK_SKEW_SECONDS``) event times are bounded by the records' Kafka
    timestamps as the worker bounds them (:mod:`services.domain.event_time`), so each partition's
    watermark, which retention goes by, is the worker's. Raises :class:`ReplayError` when the
    topic does not exist.
    """
    partitions = await topic_partitions(bootstrap_servers, topic)
    async with TopicSnapshot(
        bootstrap_servers,
        topic,
        partitions,
        client_id=REPLAY_CLIENT_ID,
        max_poll_records=batch_size,
        max_partition_fetch_bytes=8 * 1024 * 1024,
        fetch_max_bytes=64 * 1024 * 1024,
    ) as snapshot:
        if end_offsets is not None:
            end_offsets.update({(tp.topic, tp.partition): snapshot.end[tp] for tp in snapshot.end})
        if on_ready is not None:
            on_ready(snapshot.total)
        while not snapshot.done:
            records: list[LoggedEvent] = []
            items: list[tuple[LogPosition, InventoryRecord]] = []
            times: list[tuple[LogPosition, datetime]] = []
            workloads: list[tuple[LogPosition, PodWorkloadObserved]] = []
            failures: list[tuple[LogPosition, DRAFailureObserved]] = []
            lifecycles: list[tuple[LogPosition, PodLifecycleObserved]] = []
            undecodable = read = node_events = 0
            # A batch is gathered from small reads with a yield to the event loop after each:
            # decoding then runs while PostgreSQL works on the previous batch, and the writer
            # resumes as soon as a statement returns instead of after a whole batch's decoding.
            while not snapshot.done and read < batch_size:
                fetched = await snapshot.fetch(
                    min(_READ_SLICE, batch_size - read), timeout_ms=0 if read else 1000
                )
                if not fetched and read:
                    break  # nothing more fetched yet: hand over what we have
                for tp, messages in fetched.items():
                    for message in messages:
                        read += 1
                        position = LogPosition(tp.topic, tp.partition, message.offset)
                        try:
                            if skip and position in skip:  # no hash per record when empty
                                raise ValueError("dead-lettered: the projection refused it")
                            if message.value is None:
                                raise ValueError("record has no value")
                            event = check_key(
                                decode_typed_record(
                                    message.value, record_type(message.headers), inventory=True
                                ),
                                message.key,
                            )
                        except Exception:
                            undecodable += 1
                            continue
                        at, clamped = event.observed_at, False
                        if skew_seconds is not None:
                            appended = _append_time(message.timestamp)
                            at, clamped = bounded(event.observed_at, appended, skew_seconds)
                        if isinstance(event, DeviceHealthObservations):
                            # As the worker files it (streams.dedup_decode): its observations,
                            # each at its own position; a bad entry is left out alone.
                            undecodable += len(event.rejected)
                            for at_index, seen in observation_positions(position, event):
                                items.append((at_index, seen))
                                if clamped:
                                    times.append((at_index, at))
                                records.append(LoggedEvent(at_index, seen))
                            continue
                        if isinstance(
                            event,
                            DeviceHealthObserved
                            | InventoryObserved
                            | NodeResourcesChanged
                            | NodeLabelsChanged,  # issue 16: the node_labels table
                        ):
                            items.append((position, event))
                        if isinstance(event, PodWorkloadObserved):
                            workloads.append((position, event))
                        if isinstance(event, DRAFailureObserved):
                            failures.append((position, event))
                        if isinstance(event, PodLifecycleObserved):
                            lifecycles.append((position, event))
                        if not isinstance(
                            event, DeviceHealthObserved | PodDevicesReleased | PodsListed
                        ):
                            node_events += 1
                            times.append((position, at))
                            continue
                        if clamped:
                            times.append((position, at))
                        records.append(LoggedEvent(position, event))
                await asyncio.sleep(0)
            if read:
                yield LogBatch(
                    records,
                    undecodable,
                    read,
                    node_events,
                    items,
                    times,
                    workloads,
                    failures,
                    lifecycles,
                )


async def topic_partitions(bootstrap_servers: str, topic: str) -> list[int]:
    """The topic's partition numbers; raises :class:`ReplayError` when it does not exist."""
    try:
        return await kafka_topic_partitions(bootstrap_servers, topic, client_id=REPLAY_CLIENT_ID)
    except TopicMissing as exc:
        raise ReplayError(str(exc)) from None
