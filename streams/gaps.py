"""Records handed to the health agent out of order: where a partition must start, and reading
it again after a gap (:class:`~services.domain.batch.RecordsAfterGap`).

The store refuses a partition's batch that starts after records the projection never got (a
record prefetched before a rebalance delivered first: faust-streaming/faust#221), or, for a
partition with nothing recorded yet, after the partition's first offset. The agent leaves those
records unacknowledged and :meth:`GapRecovery.read_again` seeks the partition back to just after
its recorded offset, so the missing records are fetched again and everything is written in order.
"""

from __future__ import annotations

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
        do not seek again."""
        now = time.monotonic()
        for (topic, partition), (recorded, _) in sorted(gap.gaps.items()):
            self.log_start.pop((topic, partition), None)  # retention may have moved it: ask again
            target = recorded + 1
            last = self.seeks.get((topic, partition))
            if last is not None and last[0] == target and now - last[1] < RESEEK_SECONDS:
                continue
            self.seeks[(topic, partition)] = (target, now)
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
