"""Positions in the event log, so the projection can record where each applied event came from."""

from __future__ import annotations

from dataclasses import dataclass

from services.domain.events import Event


@dataclass(frozen=True, slots=True, order=True)
class LogPosition:
    """An observation's place in the log: topic, partition, offset of its Kafka record, and
    ``index``, its place among the observations of a schema-2 record
    (:mod:`services.domain.observations`; 0 for every other record). Ordered as written."""

    topic: str
    partition: int
    offset: int
    index: int = 0


@dataclass(frozen=True, slots=True)
class LoggedEvent:
    """An event with the log position it was read from."""

    position: LogPosition
    event: Event
