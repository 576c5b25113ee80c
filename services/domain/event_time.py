"""Event time of the device-health topic's records, bounded by the broker's clock (issue 10).

A record's ``observedAt`` comes from the watcher's host (or from a recorded stream's ``_CLOCK``
line), so one fast clock could move every timer of the governor. Each record also carries the
Kafka timestamp the broker gave it: the health topic is created with
``message.timestamp.type=LogAppendTime``, so it is the broker's append time, which no producer sets.
A record whose ``observedAt`` is more than the allowed skew ahead of its append time counts, for
event time, as observed at ``append time + skew`` (:func:`bounded`); the bound comes from the log,
so a replay of the topic bounds alike, whatever the replaying host's clock says.

The *effective* time of a record (:func:`effective_times`) is its bounded time, never earlier than
an earlier record of its partition: so it never decreases along a partition, which the governor's
event-time merge (:mod:`services.domain.governance.event_order`) needs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta

from services.domain.log import LogPosition

Partition = tuple[str, int]
"""``(topic, partition)``."""


def append_time(timestamp_seconds: float | None) -> datetime | None:
    """The Kafka record timestamp (seconds since the epoch, as faust gives it) as a UTC time;
    ``None`` when the record has none (a timestamp of -1 or 0: a producer before KIP-32)."""
    if timestamp_seconds is None or timestamp_seconds <= 0:
        return None
    return datetime.fromtimestamp(timestamp_seconds, UTC)


def bounded(
    observed_at: datetime, appended_at: datetime | None, skew_seconds: float
) -> tuple[datetime, bool]:
    """``(time, clamped)``: ``observed_at``, or ``appended_at + skew_seconds`` when it is later
    than that (``clamped`` true). Without an append time the record is not bounded."""
    if appended_at is None:
        return observed_at, False
    bound = appended_at + timedelta(seconds=skew_seconds)
    if observed_at > bound:
        return bound, True
    return observed_at, False


def effective_times(
    times: Iterable[tuple[LogPosition, datetime]], newest: Mapping[Partition, datetime]
) -> dict[LogPosition, datetime]:
    """Per position, the running maximum of the bounded times along its partition, in offset
    order (and index within a schema-2 record), starting from ``newest`` (each partition's
    newest time before these records)."""
    running = dict(newest)
    out: dict[LogPosition, datetime] = {}
    for position, at in sorted(
        times, key=lambda item: (item[0].topic, item[0].partition, item[0].offset, item[0].index)
    ):
        part = (position.topic, position.partition)
        previous = running.get(part)
        if previous is not None and previous > at:
            at = previous
        running[part] = at
        out[position] = at
    return out
