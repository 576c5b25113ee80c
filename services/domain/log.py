"""Positions in the event log, so the projection can record where each applied event came from."""

from __future__ import annotations

from dataclasses import dataclass

from services.domain.events import Event


@dataclass(frozen=True, slots=True, order=True)
class LogPosition:
    """A Kafka record's place: topic, partition and offset."""

    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class LoggedEvent:
    """An event with the log position it was read from."""

    position: LogPosition
    event: Event
