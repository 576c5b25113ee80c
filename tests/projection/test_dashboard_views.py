"""The dashboard views of migration 0008 on rows the demo stream never makes: Unknown episodes
that end, recoveries that pass and fail, quarantines released with and without a confirmed fault,
a fragmented node and a lagging partition (real PostgreSQL, a fresh migrated schema). The demo's
numbers are checked through the dashboards' panels in tests/monitoring/test_dashboard_sql.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import uuid4

import pytest
from sqlalchemy import insert, text
from sqlalchemy.ext.asyncio import AsyncEngine

from services.adapters.projection.governance_tables import governance_decisions, quarantines
from services.adapters.projection.migrate import migrate
from services.adapters.projection.tables import (
    device_history,
    devices,
    in_schema,
    partition_progress,
)

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


async def view(engine: AsyncEngine, schema: str, name: str, order: str) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        result = await conn.execute(text(f'SELECT * FROM "{schema}_views".{name} ORDER BY {order}'))
        return [dict(r._mapping) for r in result]


def device(node: str, resource_id: str, health: str, pods: list[str]) -> dict[str, Any]:
    return {
        "node": node,
        "resource_id": resource_id,
        "resource_name": "nvidia.com/gpu",
        "source": "device-plugin",
        "health": health,
        "ordered": True,
        "last_observed_at": at(0),
        "last_transition_at": at(0),
        "allocations": [{"podUID": p, "namespace": "ml", "podName": p} for p in pods],
        "flags": [],
    }


def observed(offset: int, health: str, minutes: int) -> dict[str, Any]:
    return {
        "topic": "events",
        "partition": 0,
        "offset": offset,
        "node": "n1",
        "resource_id": "GPU-1",
        "kind": "observed",
        "health": health,
        "observed_at": at(minutes),
        "transition": True,
        "pod_uid": "p1",
        "namespace": "ml",
        "pod_name": "p1",
    }


def quarantine(qid: str, status: str, confirmed: bool, released: int | None) -> dict[str, Any]:
    return {
        "quarantine_id": qid,
        "node": "n1",
        "resource_id": qid,
        "kind": "system",
        "status": status,
        "reason": "pod-status-unhealthy",
        "actor": "system",
        "created_at": at(0),
        "expires_at": at(120),
        "released_at": None if released is None else at(released),
        "confirmed_fault": confirmed,
        "fencing_token": 0,
        "recovery_attempts": 0,
    }


def decision(seq: int, kind: str, stage: str) -> dict[str, Any]:
    return {
        "seq": seq,
        "idx": 0,
        "kind": kind,
        "at": at(seq),
        "payload": {"type": kind, "details": {"stage": stage}},
    }


async def test_views_follow_episodes_recoveries_releases_and_lag(
    engine: AsyncEngine, fresh_schema: str
) -> None:
    async with engine.begin() as raw:
        conn = await raw.execution_options(**in_schema(fresh_schema))
        await conn.execute(
            insert(device_history),
            [
                observed(1, "Healthy", 0),
                observed(2, "Unknown", 10),
                observed(3, "Unknown", 15),
                observed(4, "Healthy", 40),
                observed(5, "Unknown", 50),
            ],
        )
        await conn.execute(
            insert(partition_progress),
            [
                {
                    "topic": "events",
                    "partition": 0,
                    "offset": 5,
                    "highwater": 9,
                    "last_event_at": at(60),
                }
            ],
        )
        await conn.execute(
            insert(devices),
            [
                device("n1", "GPU-1", "Healthy", ["a"]),
                device("n1", "GPU-2", "Healthy", ["a"]),
                device("n1", "GPU-3", "Healthy", []),  # idle, alone: a 2-GPU Pod fits nowhere
                device("n2", "GPU-4", "Healthy", []),
                device("n2", "GPU-5", "Healthy", []),
                device("n2", "GPU-6", "Unhealthy", []),
            ],
        )
        await conn.execute(
            insert(quarantines),
            [
                quarantine("q1", "released", False, 30),
                quarantine("q2", "released", True, 45),
                quarantine("q3", "active", False, None),
            ],
        )
        await conn.execute(
            insert(governance_decisions),
            [
                decision(1, "RecoveryStageStarted", "probe"),
                decision(2, "RecoveryStagePassed", "probe"),
                decision(3, "RecoveryStageStarted", "stability"),
                decision(4, "RecoveryStageStarted", "probe"),
                decision(5, "RecoveryFailed", "probe"),
            ],
        )

    episodes = await view(engine, fresh_schema, "unknown_episodes", "started_at")
    assert [
        (e["started_at"], e["ended_at"], e["open"], float(e["duration_seconds"])) for e in episodes
    ] == [
        (at(10), at(40), False, 30 * 60.0),  # ends at the first observation not Unknown
        (at(50), None, True, 10 * 60.0),  # open: up to the newest event time
    ]
    funnel = await view(engine, fresh_schema, "recovery_funnel", "ord")
    assert [(r["stage"], r["started"], r["passed"], r["failed"]) for r in funnel] == [
        ("probe", 2, 1, 1),
        ("canary", 0, 0, 0),
        ("stability", 1, 0, 0),
        ("released", 2, 2, 0),
    ]
    assert await view(engine, fresh_schema, "false_quarantines", "1") == [
        {"released": 2, "released_without_fault": 1, "false_rate": 0.5}
    ]
    ages = {
        q["quarantine_id"]: float(q["age_seconds"])
        for q in await view(engine, fresh_schema, "quarantines", "quarantine_id")
    }
    assert ages == {"q1": 30 * 60.0, "q2": 45 * 60.0, "q3": 60 * 60.0}
    capacity = await view(engine, fresh_schema, "capacity", "node")
    assert [
        (
            c["node"],
            c["total"],
            c["allocated"],
            c["idle"],
            c["unavailable"],
            c["fragmented"],
            c["request_size"],
        )
        for c in capacity
    ] == [("n1", 3, 2, 1, 0, 1, 2), ("n2", 3, 0, 2, 1, 0, 2)]
    (lag,) = await view(engine, fresh_schema, "partition_lag", "topic")
    assert lag["lag"] == 3  # offsets 6, 7 and 8 not applied yet
    status = await view(engine, fresh_schema, "status_age", "resource_id")
    assert {float(s["age_seconds"]) for s in status} == {60 * 60.0}


async def test_a_schema_dropped_alone_migrates_again(
    engine: AsyncEngine, database_url: str
) -> None:
    schema = f"test_{uuid4().hex[:16]}"
    try:
        await migrate(database_url, schema)
        async with engine.begin() as conn:  # as some tools drop a projection: its views go too
            await conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        await migrate(database_url, schema)  # the empty views' schema is reused
        assert await view(engine, schema, "as_of", "1") == [{"as_of": None}]
    finally:
        async with engine.begin() as conn:
            await conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
            await conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}_views" CASCADE'))


async def test_a_projection_schema_too_long_for_its_views_is_refused(database_url: str) -> None:
    with pytest.raises(ValueError, match="too long for its views"):
        await migrate(database_url, "s" * 58)
