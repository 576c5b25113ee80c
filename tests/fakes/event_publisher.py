"""An in-memory event publisher (the watcher's ``Publisher``, real: the Kafka
``EventPublisher``)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from services.domain.node_events import WatcherTick
from services.domain.records import TopicRecord


@dataclass
class FakePublisher:
    """Keeps records (in order, ticks included), and dead letters as ``(original, reason,
    stage, source)``; the topic has ``partition_count`` partitions."""

    partition_count: int = 3
    records: list[TopicRecord] = field(default_factory=list)
    dead_letters: list[tuple[bytes, str, str, str]] = field(default_factory=list)
    _published: asyncio.Event = field(default_factory=asyncio.Event)

    async def publish(self, record: TopicRecord) -> None:
        self.records.append(record)
        self._published.set()

    async def wait_for(self, count: int) -> None:
        """Until at least ``count`` records were published."""
        while len(self.records) < count:
            self._published.clear()
            await self._published.wait()

    async def publish_tick(
        self, observed_at: datetime, watch_seen_at: datetime | None = None
    ) -> int:
        for partition in range(self.partition_count):
            await self.publish(WatcherTick(partition, observed_at, watch_seen_at=watch_seen_at))
        return self.partition_count

    async def dead_letter(self, original: bytes, reason: str, stage: str, source: str) -> None:
        self.dead_letters.append((original, reason, stage, source))

    def of_type(self, name: str) -> list[Any]:
        return [r for r in self.records if r.type == name]
