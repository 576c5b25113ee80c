"""Event time against the broker's clock (issue 10), through the real worker, Kafka and PostgreSQL.

A watcher whose clock jumps ten years ahead (or a recorded stream's ``_CLOCK 2036`` line) must not
end a tolerance window or expire a quarantine before real time has passed: the health topic is
stamped by the broker (``LogAppendTime``), and a record's event time is clamped to its append time
plus ``DEVICESTATE_MAX_CLOCK_SKEW_SECONDS``.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from services.domain.events import Health
from services.domain.governance.inputs import CommandAction, OperatorCommand, Role
from services.runtime.config import Settings
from tests.streams.test_governor_integration import (
    PARTITIONS,
    T0,
    Pipeline,
    governance,
    observation,
    stop,
    tick,
)
from tests.streams.test_worker_integration import free_port, scrape

pytestmark = pytest.mark.integration

TEN_YEARS = 10 * 365 * 86400.0


async def test_a_ten_year_clock_jump_ends_no_window_and_expires_no_quarantine(
    stream_settings: Settings, engine: AsyncEngine, kafka_bootstrap: str, worker_process: Any
) -> None:
    port = free_port()
    settings = stream_settings.model_copy(
        update={
            "worker_metrics_port": port,
            "unknown_tolerance_seconds": 600.0,
            "max_clock_skew_seconds": 2.0,  # the records after the jump wait for real time to pass it
        }
    )
    now = (datetime.now(UTC) - T0).total_seconds()  # the tests' times are seconds after T0
    async with Pipeline(settings, engine, kafka_bootstrap) as pipe:
        pipe.worker = worker_process(settings)
        await pipe.wave(
            [
                observation("gpu-node-a", "GPU-0", Health.UNKNOWN, 10, now - 5),
                observation("gpu-node-b", "GPU-7", Health.HEALTHY, 20, now - 5),
            ]
        )
        await pipe.append(
            [
                governance(
                    OperatorCommand(
                        command_id="ttl-2h",
                        action=CommandAction.QUARANTINE,
                        actor="sre",
                        role=Role.OPERATOR,
                        requested_at=datetime.now(UTC),
                        reason="suspect fan",
                        node="gpu-node-b",
                        resource_id="GPU-7",
                        expires_at=datetime.now(UTC) + timedelta(hours=2),
                    )
                )
            ]
        )
        # The watcher's clock jumps ten years ahead, then is right again.
        await pipe.wave([tick(p, now + TEN_YEARS) for p in range(PARTITIONS)], settle=False)
        await asyncio.sleep(settings.max_clock_skew_seconds + 1)  # real time passes the bound
        now = (datetime.now(UTC) - T0).total_seconds()
        await pipe.wave([tick(p, now) for p in range(PARTITIONS)], settle=False)
        await pipe.wave([observation("gpu-node-a", "GPU-9", Health.HEALTHY, 11, now + 0.5)])

        decisions = await pipe.decisions()
        kinds = [d["type"] for d in decisions]
        assert "CommandRejected" not in kinds, decisions
        assert "UnknownToleranceStarted" in kinds and "CommandAccepted" in kinds
        assert "DeviceRestricted" not in kinds  # the 600 s window did not end
        assert "QuarantineReleased" not in kinds  # the 2 h quarantine did not expire
        ahead = [d for d in decisions if d["details"].get("conflict") == "clock-ahead"]
        # One alert per partition, raised by the jump and resolved when the clock is right again.
        assert sorted((d["details"]["subject"], d["alert"]) for d in ahead) == sorted(
            (f"partition-{p}", alert) for p in range(PARTITIONS) for alert in ("firing", "resolved")
        )
        [quarantine] = await pipe.rows("SELECT status FROM {s}.quarantines")
        assert quarantine.status == "active"
        [fleet] = await pipe.rows("SELECT watermark, snapshot FROM {s}.governor_fleet")
        # Clamped to append time + the skew: never more than that ahead of the broker.
        bound = datetime.now(UTC) + timedelta(seconds=settings.max_clock_skew_seconds)
        assert fleet.watermark <= bound
        order = fleet.snapshot["order"]
        assert order["clamped"] == PARTITIONS
        assert order["lastClampedAt"] is not None
        metrics = scrape(port)
        clamped = sum(
            v
            for k, v in metrics.items()
            if k.startswith("devicestate_worker_event_time_clamped_total{")
        )
        assert clamped == PARTITIONS
        skews = [
            v for k, v in metrics.items() if k.startswith("devicestate_worker_event_time_skew")
        ]
        assert skews and max(skews) < 60  # the last batch per partition was on time again
        await stop(pipe.worker)
