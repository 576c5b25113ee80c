"""How far the worker's consumer group is behind the end of the topic."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from services.adapters.kafka.clients import KafkaError
from services.adapters.kafka.reader import group_lag


async def consumer_lag(bootstrap_servers: str, topic: str, group: str) -> dict[int, int]:
    """Per partition of ``topic``: end offset minus the group's committed offset (0 = caught up).

    A partition the group has not committed yet counts its whole length.
    """
    return await group_lag(bootstrap_servers, topic, group, client_id="devicestate-demo")


async def wait_caught_up(
    bootstrap_servers: str,
    topic: str,
    group: str,
    timeout_seconds: float,
    on_progress: Callable[[int], None] | None = None,
    still_alive: Callable[[], None] | None = None,
) -> None:
    """Wait until the group has committed every record of ``topic``.

    Calls ``on_progress(total_lag)`` on each poll and ``still_alive()`` (which should raise if the
    worker died). Raises ``TimeoutError`` after ``timeout_seconds``.
    """
    deadline = time.monotonic() + timeout_seconds
    while True:
        if still_alive is not None:
            still_alive()
        try:
            total = sum((await consumer_lag(bootstrap_servers, topic, group)).values())
        except KafkaError as exc:  # e.g. the group coordinator of a brand-new broker is not up
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"consumer lag still unknown after {timeout_seconds:.0f} s: {exc!r}"
                ) from exc
            await asyncio.sleep(1.0)
            continue
        if on_progress is not None:
            on_progress(total)
        if total == 0:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"worker still {total} records behind after {timeout_seconds:.0f} s")
        await asyncio.sleep(1.0)
