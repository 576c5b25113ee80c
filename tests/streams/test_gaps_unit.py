"""Reading a partition again after a gap (``streams/gaps.py``) on a recording consumer: one seek
per position within RESEEK_SECONDS, and the seek a refusal within that time schedules for its
end, so a partition whose refused records were its last is still read again (the fault campaign
stalled 600 s on one: its re-read batch was refused for a hole, the seek was skipped, and no
record came after)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from faust.types import TP

from services.domain.batch import RecordsAfterGap
from streams import gaps
from streams.gaps import GapRecovery

PART = ("t", 3)


class RecordingConsumer:
    def __init__(self) -> None:
        self.seeks: list[tuple[TP, int]] = []

    async def seek(self, tp: TP, offset: int) -> None:
        self.seeks.append((tp, offset))


@pytest.fixture
def recovery(monkeypatch: pytest.MonkeyPatch) -> tuple[GapRecovery, RecordingConsumer]:
    monkeypatch.setattr(gaps, "RESEEK_SECONDS", 0.2)
    consumer = RecordingConsumer()
    app: Any = SimpleNamespace(consumer=consumer)
    return GapRecovery(app), consumer


async def test_a_refusal_soon_after_a_seek_seeks_again_once_the_time_is_up(
    recovery: tuple[GapRecovery, RecordingConsumer],
) -> None:
    gap_recovery, consumer = recovery
    await gap_recovery.read_again(RecordsAfterGap({PART: (3631, 3641)}))
    await gap_recovery.read_again(RecordsAfterGap({PART: (3631, 3754)}))  # buffered leftovers
    await gap_recovery.read_again(RecordsAfterGap({PART: (3631, 3754)}))
    assert consumer.seeks == [(TP("t", 3), 3632)]
    await asyncio.sleep(0.35)  # nothing else comes: the partition is idle
    assert consumer.seeks == [(TP("t", 3), 3632), (TP("t", 3), 3632)]
    await asyncio.sleep(0.3)
    assert len(consumer.seeks) == 2  # one scheduled seek, not one per refusal


async def test_a_write_past_the_gap_cancels_the_scheduled_seek(
    recovery: tuple[GapRecovery, RecordingConsumer],
) -> None:
    gap_recovery, consumer = recovery
    await gap_recovery.read_again(RecordsAfterGap({PART: (3631, 3641)}))
    await gap_recovery.read_again(RecordsAfterGap({PART: (3631, 3754)}))
    gap_recovery.written({PART: 3700})
    await asyncio.sleep(0.35)
    assert consumer.seeks == [(TP("t", 3), 3632)]


async def test_close_cancels_the_scheduled_seeks(
    recovery: tuple[GapRecovery, RecordingConsumer],
) -> None:
    gap_recovery, consumer = recovery
    await gap_recovery.read_again(RecordsAfterGap({PART: (10, 20)}))
    await gap_recovery.read_again(RecordsAfterGap({PART: (10, 30)}))
    gap_recovery.close()
    await asyncio.sleep(0.35)
    assert consumer.seeks == [(TP("t", 3), 11)]
