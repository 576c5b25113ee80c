"""Records handed to the health agent out of order: where a partition must start, and reading
it again after a gap (:class:`~services.domain.batch.RecordsAfterGap`).

The store refuses a partition's batch that starts after records the projection never got (a
record prefetched before a rebalance delivered first: faust-streaming/faust#221), or, for a
partition with nothing recorded yet, after the partition's first offset. The agent leaves those
records unacknowledged and :meth:`GapRecovery.read_again` seeks the partition back to just after
its recorded offset, so the missing records are fetched again and everything is written in order.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any, Final

import structlog
from faust.types import TP

from services.domain.batch import RecordsAfterGap

log = structlog.get_logger(__name__)

RESEEK_SECONDS: Final = 10.0
"""How long before a partition is sought back to the same gap again."""


class GapRecovery:
    """Log start offsets (cached) and seeks back, on ``app``'s consumer."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.log_start: dict[tuple[str, int], int] = {}
        self.seeks: dict[tuple[str, int], tuple[int, float]] = {}
        """Partition -> the offset last sought back to after a gap, and when (monotonic)."""
        self.pending: dict[tuple[str, int], tuple[int, asyncio.TimerHandle]] = {}
        """Partition -> the offset of a seek scheduled for later, and its timer."""
        self._tasks: set[asyncio.Task[None]] = set()

    async def log_starts(self, parts: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """The earliest offset of each partition (asked of the broker once, then cached): where
        a partition with nothing recorded yet must start. Unknown (no consumer: unit tests, or
        the broker did not answer) leaves the partition unchecked."""
        missing = [part for part in parts if part not in self.log_start]
        if missing:
            try:
                earliest = await self.app.consumer.earliest_offsets(
                    *(TP(topic, partition) for topic, partition in missing)
                )
            except Exception:  # no consumer, or the broker did not answer: check later
                earliest = {}
            for tp, offset in earliest.items():
                if isinstance(offset, int):
                    self.log_start[(tp.topic, tp.partition)] = offset
        return {part: self.log_start[part] for part in parts if part in self.log_start}

    async def read_again(self, gap: RecordsAfterGap) -> None:
        """Seek each gap partition back to just after its recorded offset, so the records the
        agent never got are fetched again (faust then reads on from there). Once per position for
        :data:`RESEEK_SECONDS`: the records already buffered after the gap come back refused and
        do not seek again. A refusal within that time schedules one seek for when it ends
        instead: the refused records may have been the partition's last, and an idle partition
        brings no further refusal to seek on (the fault campaign stalled so)."""
        now = time.monotonic()
        for (topic, partition), (recorded, _) in sorted(gap.gaps.items()):
            part = (topic, partition)
            self.log_start.pop(part, None)  # retention may have moved it: ask again
            target = recorded + 1
            last = self.seeks.get(part)
            if last is not None and last[0] == target and now - last[1] < RESEEK_SECONDS:
                self._seek_later(part, target, last[1] + RESEEK_SECONDS - now)
                continue
            await self._seek(part, target, now)

    def written(self, parts: Mapping[tuple[str, int], int]) -> None:
        """The agent wrote these partitions through these offsets: a later seek scheduled to
        an offset at or before them is no longer needed (it would only re-read, harmlessly)."""
        for part, through in parts.items():
            pending = self.pending.get(part)
            if pending is not None and pending[0] <= through:
                pending[1].cancel()
                del self.pending[part]

    def close(self) -> None:
        """Cancel the scheduled seeks (the worker is stopping)."""
        for _, handle in self.pending.values():
            handle.cancel()
        self.pending.clear()

    def _seek_later(self, part: tuple[str, int], target: int, delay: float) -> None:
        if part in self.pending and self.pending[part][0] == target:
            return
        if part in self.pending:
            self.pending[part][1].cancel()
        loop = asyncio.get_running_loop()

        def fire() -> None:
            self.pending.pop(part, None)
            task = loop.create_task(self._seek(part, target, time.monotonic()))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        self.pending[part] = (target, loop.call_later(max(delay, 0.0), fire))

    async def _seek(self, part: tuple[str, int], target: int, now: float) -> None:
        topic, partition = part
        self.seeks[part] = (target, now)
        try:
            await self.app.consumer.seek(TP(topic, partition), target)
        except Exception as exc:  # the consumer is stopping or rebalancing: a restart reads it
            log.warning(
                "seek back to the gap failed", topic=topic, partition=partition, error=repr(exc)
            )
        else:
            log.warning(
                "reading again after a gap", topic=topic, partition=partition, offset=target
            )
