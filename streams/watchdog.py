"""A watchdog for the health agent's consumer: records wait on the broker, none reach the agent.

Faust's flow control takes a partition out of the fetch set when the agent's buffer is under
pressure and puts it back when the buffer drains (``Consumer.on_buffer_full`` /
``on_buffer_drop``, through the queue's pressure-drop callbacks). A worker was seen, rarely, to
stop receiving records of a partition with records left on it, its event loop idle, after a kill
and restart (the kill/restart test in ``tests/streams/test_worker_integration.py``). Faust's
issue tracker has several such hangs (faust-streaming/faust#532, #523, robinhood/faust#402).

:class:`ConsumerWatchdog` is checked every few seconds by the worker. When the agent saw no new
record for :data:`STALL_SECONDS` while a partition of the health topic has records after the last
one faust read, it logs ``consumer stalled`` with the consumer's partition sets and where every
task of the event loop is waiting, then puts the lagging partitions back into the fetch set, or,
when they are in it already, seeks them to the offset after the last one faust read. It
never drops, skips or acknowledges anything: a partition that was fetchable already is untouched.
"""

from __future__ import annotations

import gc
import types
from collections.abc import Callable
from typing import Any, Final

import structlog

log = structlog.get_logger(__name__)

STALL_SECONDS: Final = 30.0
"""How long the agent may see nothing while records wait before the watchdog acts."""


class ConsumerWatchdog:
    """Watches ``app``'s consumer on ``topic``; ``seen()`` is the agent's count of records."""

    def __init__(self, app: Any, topic: str, seen: Callable[[], int]) -> None:
        self.app = app
        self.topic = topic
        self.seen = seen
        self._last_seen = -1
        self._quiet_since: float | None = None
        self._next: dict[Any, int] = {}
        self.refetch: list[tuple[Any, int]] = []
        """Partitions to seek to the offset after the last one faust read (:meth:`refetch_now`)."""
        self.kicks = 0

    def check(self, now: float) -> bool:
        """One check at monotonic time ``now`` (seconds); ``True`` when it acted."""
        seen = self.seen()
        behind = self._behind()
        if not behind:
            self._last_seen, self._quiet_since = seen, None
            return False
        if seen != self._last_seen or self._quiet_since is None:
            self._last_seen, self._quiet_since = seen, now  # quiet from here on, if it stays
            return False
        if now - self._quiet_since < STALL_SECONDS:
            return False
        consumer = self.app.consumer
        active = set(getattr(consumer, "_active_partitions", None) or ())
        buffered = set(getattr(consumer, "_buffered_partitions", None) or ())
        log.warning(
            "consumer stalled: records wait on the broker, none reached the agent",
            seconds=round(now - self._quiet_since),
            behind={f"{tp.topic}/{tp.partition}": lag for tp, lag in sorted(behind.items())},
            active=sorted(f"{tp.topic}/{tp.partition}" for tp in active),
            buffered=sorted(f"{tp.topic}/{tp.partition}" for tp in buffered),
            tasks=waiting_tasks(),
        )
        for tp in behind:
            if tp in buffered:
                consumer.on_buffer_drop(tp)
            elif tp not in active and active is getattr(consumer, "_active_partitions", None):
                consumer._active_partitions.add(tp)
            else:  # in the fetch set and still nothing comes: fetch it again from where faust read
                self.refetch.append((tp, self._next.get(tp, 0)))
        self.kicks += 1
        self._quiet_since = now  # give the kick time to work before acting again
        return True

    def _behind(self) -> dict[Any, int]:
        """Assigned partitions of the topic with records after the last one faust read."""
        try:
            consumer = self.app.consumer
            read = consumer._read_offset
            assigned = [tp for tp in consumer.assignment() if tp.topic == self.topic]
            out = {}
            for tp in assigned:
                highwater = consumer.highwater(tp)
                last = read.get(tp) if hasattr(read, "get") else None
                after = 0 if last is None else last + 1
                if isinstance(highwater, int) and highwater > after:
                    out[tp] = highwater - after
                    self._next[tp] = after
            return out
        except Exception:  # no consumer yet, or faust's internals moved: watch nothing
            return {}

    async def refetch_now(self) -> None:
        """Seek the partitions :meth:`check` found in the fetch set but not fetched back to the
        offset after the last one faust read (nothing is skipped or read twice by the agent)."""
        while self.refetch:
            tp, offset = self.refetch.pop(0)
            try:
                await self.app.consumer.seek(tp, offset)
            except Exception as exc:  # stopping or rebalancing: the next check tries again
                log.warning("watchdog seek failed", partition=str(tp), error=repr(exc))
            else:
                log.warning("watchdog: fetching again", partition=str(tp), offset=offset)


def waiting_tasks(limit: int = 40) -> list[str]:
    """Where each task of the running loop waits: ``name: file:line function`` of its innermost
    coroutine frame (following awaits, also through awaitables that hide their coroutine)."""
    import asyncio

    try:
        tasks = list(asyncio.all_tasks())[:limit]
    except RuntimeError:  # no running loop
        return []
    out = []
    for task in tasks:
        coro: Any = task.get_coro()
        where = ""
        for _ in range(60):
            frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
            frame = frame or getattr(coro, "ag_frame", None)
            if frame is not None:
                where = f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}"
            inner = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
            inner = inner or getattr(coro, "ag_await", None)
            if inner is None and frame is None:
                inner = next(
                    (
                        ref
                        for ref in gc.get_referents(coro)
                        if isinstance(
                            ref,
                            types.CoroutineType | types.GeneratorType | types.AsyncGeneratorType,
                        )
                    ),
                    None,
                )
            if inner is None:
                break
            coro = inner
        out.append(f"{task.get_name()}: {where}")
    return out
