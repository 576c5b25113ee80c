"""The consumer watchdog (:mod:`streams.watchdog`) on a stand-in for faust's consumer: it acts only
when records wait and none reached the agent for ``STALL_SECONDS``, and puts the lagging partition
back into the fetch set."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, NamedTuple

from streams.watchdog import STALL_SECONDS, ConsumerWatchdog, waiting_tasks


class TP(NamedTuple):
    topic: str
    partition: int


class Consumer:
    """The part of faust's ``Consumer`` the watchdog reads and uses."""

    def __init__(self) -> None:
        self.tps = [TP("health", 0), TP("health", 1), TP("other", 0)]
        self._read_offset: dict[TP, int | None] = defaultdict(lambda: None)
        self._active_partitions = set(self.tps)
        self._buffered_partitions: set[TP] = set()
        self.highwaters = {tp: 0 for tp in self.tps}

    def assignment(self) -> set[TP]:
        return set(self.tps)

    def highwater(self, tp: TP) -> int:
        return self.highwaters[tp]

    def on_buffer_drop(self, tp: TP) -> None:  # faust: back into the fetch set
        self._buffered_partitions.discard(tp)
        self._active_partitions.add(tp)


class App:
    def __init__(self) -> None:
        self.consumer = Consumer()


def test_a_partition_left_out_of_the_fetch_set_is_put_back_after_the_stall() -> None:
    app = App()
    seen = [100]
    dog = ConsumerWatchdog(app, "health", lambda: seen[0])
    consumer = app.consumer
    stuck = TP("health", 1)
    consumer._read_offset[TP("health", 0)] = 49
    consumer.highwaters[TP("health", 0)] = 50  # caught up
    consumer._read_offset[stuck] = 10
    consumer.highwaters[stuck] = 800  # 789 records wait
    consumer._active_partitions.discard(stuck)
    consumer._buffered_partitions.add(stuck)  # flow control paused it and never resumed

    assert not dog.check(0.0)  # first sight: quiet starts now
    assert not dog.check(STALL_SECONDS - 1)
    assert dog.check(STALL_SECONDS + 1)
    assert stuck in consumer._active_partitions and stuck not in consumer._buffered_partitions
    assert dog.kicks == 1
    assert not dog.check(STALL_SECONDS + 2)  # waits again before the next kick


def test_nothing_happens_while_the_agent_sees_records_or_nothing_waits() -> None:
    app = App()
    seen = [0]
    dog = ConsumerWatchdog(app, "health", lambda: seen[0])
    app.consumer.highwaters[TP("health", 0)] = 500
    for second in range(0, 200, 10):
        seen[0] += 1  # the agent keeps receiving
        assert not dog.check(float(second))
    app.consumer._read_offset[TP("health", 0)] = 499  # all read: nothing waits
    for second in range(200, 400, 10):
        assert not dog.check(float(second))
    assert dog.kicks == 0


def test_an_app_without_a_consumer_is_watched_as_idle() -> None:
    class Bare:
        @property
        def consumer(self) -> Any:
            raise RuntimeError("not started")

    dog = ConsumerWatchdog(Bare(), "health", lambda: 0)
    assert not any(dog.check(float(t)) for t in range(0, 300, 10))


async def test_waiting_tasks_name_where_each_task_waits() -> None:
    import asyncio

    async def parked() -> None:
        await asyncio.sleep(3600)

    task = asyncio.create_task(parked(), name="parked-task")
    await asyncio.sleep(0)
    try:
        [line] = [t for t in waiting_tasks() if t.startswith("parked-task")]
        assert "asyncio/tasks.py" in line and "sleep" in line
    finally:
        task.cancel()


async def test_a_partition_in_the_fetch_set_that_gets_nothing_is_fetched_again() -> None:
    app = App()
    sought: list[tuple[TP, int]] = []

    async def seek(tp: TP, offset: int) -> None:
        sought.append((tp, offset))

    app.consumer.seek = seek  # type: ignore[attr-defined]
    dog = ConsumerWatchdog(app, "health", lambda: 7)
    stuck = TP("health", 2)
    app.consumer.tps.append(stuck)
    app.consumer._active_partitions.add(stuck)  # active, not buffered: flow control is not it
    app.consumer._read_offset[stuck] = 40
    app.consumer.highwaters[stuck] = 86
    app.consumer._read_offset[TP("health", 0)] = app.consumer._read_offset[TP("health", 1)] = -1
    assert not dog.check(0.0)
    assert dog.check(STALL_SECONDS)
    await dog.refetch_now()
    assert sought == [(stuck, 41)] and dog.refetch == []
