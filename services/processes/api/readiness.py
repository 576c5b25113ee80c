"""The worker group's true lag as the API judges it: ``/readyz`` and the lag gauges of ``/metrics``.

:class:`LagReader` asks the broker (through the Kafka adapter's
:class:`~services.adapters.kafka.lag.GroupLagProbe`) how far ``settings.consumer_group`` is behind
on the event topic and the governance topic, at most every :data:`LAG_CACHE_SECONDS` seconds (a
readiness probe and a scrape in the same seconds share one answer). :func:`lag_problem` says,
purely, whether that lag makes the API unready: more than ``ready_max_lag_records`` records
waiting on a partition, or its oldest waiting record older than ``ready_max_lag_seconds`` (wall
clock minus its Kafka timestamp: a worker behind, or stopped while records wait).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from services.adapters.kafka.lag import GroupLagProbe, LagUnknown, PartitionLag
from services.runtime.config import ApiProcessSettings, ApiSettings

LAG_CACHE_SECONDS: Final = 2.0
"""How long one measurement of the lag is reused (monotonic seconds)."""

LAG_TIMEOUT_SECONDS: Final = 10.0
"""Longest wait for one measurement; then the lag counts as unknown."""


class LagUnavailable(RuntimeError):
    """The lag could not be measured (Kafka unreachable, a topic missing); the message says why."""


@dataclass(slots=True)
class LagReader:
    """``await reader.read()`` -> the :class:`PartitionLag` of every partition of the event and
    governance topics for the worker's group; ``await reader.close()`` at the end."""

    probe: GroupLagProbe
    lags: list[PartitionLag] = field(default_factory=list)
    read_at: float = float("-inf")
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @classmethod
    def of(cls, settings: ApiProcessSettings) -> LagReader:
        topics = [settings.topic, settings.governance_topic]
        probe = GroupLagProbe(
            settings, settings.consumer_group, topics, client_id="devicestate-api"
        )
        return cls(probe)

    async def read(self) -> list[PartitionLag]:
        """The cached lag while younger than :data:`LAG_CACHE_SECONDS`, else a new measurement.
        Raises :class:`LagUnavailable` (not cached) when it cannot be measured."""
        async with self._lock:
            if time.monotonic() - self.read_at <= LAG_CACHE_SECONDS:
                return self.lags
            try:
                async with asyncio.timeout(LAG_TIMEOUT_SECONDS):
                    self.lags = await self.probe.measure()
            except LagUnknown as exc:
                raise LagUnavailable(str(exc)) from exc
            except Exception as exc:
                raise LagUnavailable(
                    f"Kafka did not answer: {type(exc).__name__} {exc}".strip()
                ) from exc
            self.read_at = time.monotonic()
            return self.lags

    async def close(self) -> None:
        await self.probe.close()


def lag_problem(lags: list[PartitionLag], now: datetime, settings: ApiSettings) -> str | None:
    """Why ``lags`` make the API unready at wall-clock ``now`` (``None``: they do not): every
    partition over ``settings.ready_max_lag_records`` records or whose oldest waiting record
    waited over ``settings.ready_max_lag_seconds`` seconds, named with its figures."""
    behind = []
    for lag in lags:
        waited = lag.seconds(now)
        if lag.records > settings.ready_max_lag_records or waited > settings.ready_max_lag_seconds:
            behind.append(
                f"{lag.topic}[{lag.partition}]: {lag.records} records, oldest {waited:.0f} s"
            )
    if not behind:
        return None
    return (
        f"projection behind: the worker group has not consumed {'; '.join(behind)} (thresholds "
        f"{settings.ready_max_lag_records} records, {settings.ready_max_lag_seconds:g} s; is the "
        "worker running?)"
    )
