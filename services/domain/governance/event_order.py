"""The governor's event-time merge of the device-health partitions (issue 10).

The governance topic holds the worker's forwarded records in the order the worker happened to
commit its batches, which depends on batch sizes, on how partitions interleave and on speed. The
governor does not fold them in that order. Each forwarded record carries a
:class:`~.inputs.MergeKey` ``(event time, partition, offset, index)``, and :class:`EventOrder`
releases the records in key order. This is the watermark merge of Flink, Beam and Kafka Streams:

- a record of partition ``p`` at event time ``t`` is released once every other partition ``q``
  has passed it, i.e. ``(W_q, q) > (t, p)``. ``W_q`` is the newest event time forwarded for ``q``
  (:class:`~.inputs.PartitionWatermark` progress, or a record of ``q``), and no later record of
  ``q`` has an earlier key, because effective event times never decrease along a partition. The
  watcher's ticks keep idle partitions moving;
- a redelivered record (same ``(partition, offset, index)``) is dropped, whether it is still
  pending or already released.

So the released sequence is a function of the per-partition contents of the device-health topic
alone. The governor (:func:`.intake.take`) advances its clock to each released record's key time
before it folds the record, and timers fire exactly at their due time between the records on
either side. The pending records are part of the governor's state (snapshotted with the fleet),
so a restart neither loses nor doubles them. Each pending record is a row of its own
(:meth:`EventOrder.pending_rows`, ``governor_pending``), written once, with the batch that leaves
it pending, and deleted with the batch that releases it: a partition that lags keeps thousands
pending, and the fleet's row, rewritten every batch, would carry them all (issue 12: 1.7 MB a batch
on the training benchmark). A record offered and released within one batch is never written.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from services.domain.codec import parse_time
from services.domain.events import format_time
from services.domain.governance.inputs import GovernanceInput, MergeKey, PartitionWatermark

Order = tuple[datetime, int, int, int]
"""``(event_time, partition, offset, index)``: a :class:`MergeKey` without its flag."""
Source = tuple[int, int, int]
"""``(partition, offset, index)``: :attr:`MergeKey.source`, a forwarded record's identity."""


def order_of(key: MergeKey) -> Order:
    return (key.event_time, key.partition, key.offset, key.index)


@dataclass(slots=True)
class EventOrder:
    """The merge's state: per-partition watermarks, the pending records (a heap by key), how far
    each partition was released, and the sequence number of the next folded record.

    ``next_seq`` numbers every record the governor folds (the decisions' ``seq``): a function of
    the merged order, so decision ids are the same whatever the batching. ``None`` until the
    governor sets it (:func:`.intake.start_sequence`).
    """

    partitions: int = 0
    watermarks: dict[int, datetime] = field(default_factory=dict)
    pending: list[tuple[Order, MergeKey, GovernanceInput]] = field(default_factory=list)
    released: dict[int, tuple[int, int]] = field(default_factory=dict)
    """Partition -> ``(offset, index)`` of the last record released from it."""
    next_seq: int | None = None
    clamped: int = 0
    """Records whose ``observedAt`` was ahead of the broker clock bound (their key was clamped)."""
    last_clamped_at: datetime | None = None
    """Key time of the last clamped record."""
    _sources: dict[Source, tuple[MergeKey, GovernanceInput]] = field(default_factory=dict)
    """The pending records by source."""
    unstored: set[Source] = field(default_factory=set, compare=False, repr=False)
    """Pending records without their row yet (offered since the last write)."""
    unpended: set[Source] = field(default_factory=set, compare=False, repr=False)
    """Released records whose row is to be deleted (they were pending at a write)."""

    # -- input ----------------------------------------------------------------------------------

    def offer(self, key: MergeKey, record: GovernanceInput) -> bool:
        """Add a forwarded record; ``False`` (and nothing changes) for a redelivery."""
        source = key.source
        done = self.released.get(key.partition)
        if source in self._sources or (done is not None and (key.offset, key.index) <= done):
            return False
        self._hold(key, record)
        self.unstored.add(source)
        # The partition count comes from progress marks only: a record says nothing of how many
        # partitions there are, and guessing low would release it before the others reported.
        self._raise(key.partition, key.event_time)
        if key.clamped:
            self.clamped += 1
            if self.last_clamped_at is None or key.event_time > self.last_clamped_at:
                self.last_clamped_at = key.event_time
        return True

    def _hold(self, key: MergeKey, record: GovernanceInput) -> None:
        self._sources[key.source] = (key, record)
        heapq.heappush(self.pending, (order_of(key), key, record))

    def progress(self, mark: PartitionWatermark) -> None:
        """A partition's progress mark: raises its watermark (never lowers it)."""
        self.partitions = max(self.partitions, mark.partitions, mark.partition + 1)
        self._raise(mark.partition, mark.event_time)

    def _raise(self, partition: int, event_time: datetime) -> None:
        known = self.watermarks.get(partition)
        if known is None or event_time > known:
            self.watermarks[partition] = event_time

    # -- output ---------------------------------------------------------------------------------

    def clock(self) -> datetime | None:
        """The merge's low watermark: the oldest partition watermark (``None`` until every
        partition reported one)."""
        if self.partitions == 0 or len(self.watermarks) < self.partitions:
            return None
        if any(p not in self.watermarks for p in range(self.partitions)):
            return None
        return min(self.watermarks[p] for p in range(self.partitions))

    def release(self) -> Iterator[tuple[MergeKey, GovernanceInput]]:
        """Pop, in key order, the records every other partition has passed.

        The bound of partition ``p`` is the smallest ``(W_q, q)`` over ``q != p``; the head
        record ``(t, p, ...)`` is released while ``(t, p)`` is below it. Nothing is released while
        a partition has no watermark yet (its first record may be older than any pending one),
        nor past a head that is held: the order is the key order, never skipped.
        """
        if self.partitions == 0 or any(q not in self.watermarks for q in range(self.partitions)):
            return
        lowest = sorted((self.watermarks[q], q) for q in range(self.partitions))[:2]
        while self.pending:
            (t, p, offset, index), key, record = self.pending[0]
            bound = next((mark for mark in lowest if mark[1] != p), None)
            if bound is not None and bound <= (t, p):
                return
            heapq.heappop(self.pending)
            source = key.source
            del self._sources[source]
            if source in self.unstored:  # never written
                self.unstored.discard(source)
            else:
                self.unpended.add(source)
            self.released[p] = (offset, index)
            yield key, record

    # -- snapshot -------------------------------------------------------------------------------

    def to_json(self, encode: Any, *, pending: bool = True) -> dict[str, Any]:
        """JSON-ready form; ``encode(record, key) -> dict`` is the governance codec's
        :func:`~.input_codec.keyed_to_dict` (pending records are kept in their wire form).
        ``pending=False``: without the pending records but their count, ``pendingCount`` (the
        fleet row's form: they are rows of their own, :meth:`pending_rows`)."""
        obj: dict[str, Any] = {
            "partitions": self.partitions,
            "watermarks": {str(p): format_time(t) for p, t in sorted(self.watermarks.items())},
        }
        if pending:
            obj["pending"] = [encode(record, key) for _, key, record in sorted(self.pending)]
        else:  # how many, for readers of the row (``GET /v1/governance``)
            obj["pendingCount"] = len(self.pending)
        obj.update(
            released={str(p): list(v) for p, v in sorted(self.released.items())},
            nextSeq=self.next_seq,
            clamped=self.clamped,
            lastClampedAt=None
            if self.last_clamped_at is None
            else format_time(self.last_clamped_at),
        )
        return obj

    def pending_rows(self, encode: Any) -> tuple[list[tuple[Source, dict[str, Any]]], list[Source]]:
        """What changed since the last write, in source order: the pending records to write,
        ``(source, wire form)`` (``encode`` as for :meth:`to_json`), and the sources of the rows
        to delete (released since). Call before :meth:`clear_written`."""
        added = [
            (source, encode(record, key))
            for source in sorted(self.unstored)
            for key, record in (self._sources[source],)
        ]
        return added, sorted(self.unpended)

    def clear_written(self) -> None:
        """The rows of :meth:`pending_rows` are written."""
        self.unstored.clear()
        self.unpended.clear()

    def load_pending(self, rows: Iterable[dict[str, Any]], decode: Any) -> None:
        """Hold the pending records of ``rows`` (their wire forms, :meth:`pending_rows`) after a
        restore; they are written already. One that is pending already (from an older snapshot's
        ``pending``, which :meth:`from_json` read as unwritten) is not held twice."""
        for item in rows:
            record, key = decode(item)
            assert key is not None, "a pending record without its merge key"
            if key.source in self._sources:
                self.unstored.discard(key.source)
            else:
                self._hold(key, record)

    @classmethod
    def from_json(cls, obj: dict[str, Any] | None, decode: Any) -> EventOrder:
        """Inverse of :meth:`to_json`; ``decode(dict) -> (record, key)`` is
        :func:`~.input_codec.keyed_from_dict`. ``None`` (a snapshot from before issue 10): empty.
        Pending records in ``obj`` (a whole snapshot, or a fleet row written before they had rows
        of their own) are held as not yet written, so the next write gives them their rows."""
        if not obj:
            return cls()
        order = cls(
            partitions=int(obj.get("partitions") or 0),
            watermarks={int(p): parse_time(t) for p, t in (obj.get("watermarks") or {}).items()},
            released={
                int(p): (int(v[0]), int(v[1])) for p, v in (obj.get("released") or {}).items()
            },
            next_seq=obj.get("nextSeq"),
            clamped=int(obj.get("clamped") or 0),
            last_clamped_at=None
            if obj.get("lastClampedAt") is None
            else parse_time(obj["lastClampedAt"]),
        )
        for item in obj.get("pending") or ():
            record, key = decode(item)
            assert key is not None, "a pending record without its merge key"
            order._hold(key, record)
            order.unstored.add(key.source)
        return order
