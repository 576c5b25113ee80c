"""``devicestate replay --governance`` against the real broker and PostgreSQL.

The live governance projection is built by the real worker (health topic -> forwarding ->
governor, several batches, a restart in the middle); the replay folds the governance topic from
offset 0 in one process. ``--verify`` must find them identical, and must find a tampered row.
"""

from __future__ import annotations

import signal
from datetime import timedelta
from typing import Any
from uuid import uuid4

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from services.adapters.projection.compare import GOVERNANCE_COMPARED_TABLES, diff_projections
from services.domain.governance.inputs import (
    CommandAction,
    OperatorCommand,
    RecoveryLeaseRequested,
    Role,
)
from services.domain.migration.records import (
    EvidencePod,
    MigrationEvidence,
    MigrationReport,
    ReportKind,
    WorkloadOnDevice,
)
from services.domain.node_events import WatcherTick, encode_node_event
from services.runtime.config import Settings
from tests.replay.test_replay import drop, run_replay
from tests.streams.synthetic import T0, synthetic_log
from tests.streams.test_governor_integration import Pipeline, Record, governance, stop

pytestmark = pytest.mark.integration

PARTITIONS = 3


def tick(partition: int, seconds: float) -> Record:
    """A watcher tick ``seconds`` after the synthetic log's start."""
    event = WatcherTick(partition=partition, observed_at=T0 + timedelta(seconds=seconds))
    return (event.node.encode(), encode_node_event(event), partition)


@pytest.fixture
async def governed(
    stream_settings: Settings, engine: AsyncEngine, kafka_bootstrap: str, worker_process: Any
) -> Settings:
    """A governance topic with forwarded transitions, watermarks, commands, lease requests and one
    malformed record, and the live governance projection the worker built from it."""
    settings = stream_settings.model_copy(
        update={
            "unknown_tolerance_seconds": 2.0,
            "worker_batch_size": 50,
            "breaker_min_devices": 1000,  # so that quarantines and recoveries happen
            "breaker_min_nodes": 1000,
        }
    )
    log = synthetic_log(1200, nodes=10, seed=13)
    records = [(k, v, None) for k, v in log.records]
    end = T0 + timedelta(milliseconds=20_000)
    async with Pipeline(settings, engine, kafka_bootstrap) as pipe:
        pipe.worker = worker_process(settings)
        await pipe.wave(records[:600])
        await pipe.wave([tick(p, (end - T0).total_seconds() / 2) for p in range(PARTITIONS)])
        # A restart between batches: the second worker restores the state from the tables.
        pipe.worker.signal(signal.SIGKILL)
        await pipe.worker.wait(30)
        pipe.worker = worker_process(settings)
        await pipe.wave(records[600:])
        quarantined = await pipe.rows(
            "SELECT node, resource_id FROM {s}.device_governance WHERE state = 'Recovering' "
            "ORDER BY node, resource_id LIMIT 1"
        )
        requests = [
            governance(RecoveryLeaseRequested(node, rid, holder, end))
            for node, rid in quarantined
            for holder in ("executor-a", "executor-b")
        ]
        assert requests, "no device in recovery: the lease path would not be replayed"
        await pipe.append(requests)
        # A workload on the quarantined device migrates (issue 13): planned, leased (a second
        # executor denied), checkpointed, evicted; the other executor's eviction report refused.
        await pipe.append(
            [
                governance(
                    WorkloadOnDevice(
                        node,
                        rid,
                        "wl-1",
                        "pod-uid-1",
                        "team-a",
                        "train-0",
                        "checkpointed",
                        7,
                        end,
                        checkpoint_max_age_seconds=86400,
                    )
                )
                for node, rid in quarantined
            ]
            # A workload on a device that stays healthy: its fact stays a governor_workloads row.
            + [
                governance(
                    WorkloadOnDevice(
                        "node-x", "GPU-9", "wl-2", "pod-uid-2", "team-b", "web-0", None, 3, end
                    )
                )
            ]
        )
        [(mid,)] = await pipe.rows(
            "SELECT payload->'details'->>'migrationID' FROM {s}.governance_decisions "
            "WHERE kind = 'MigrationPlanned'"
        )
        await pipe.append(
            [
                governance(MigrationReport(mid, ReportKind.LEASE_REQUESTED, "executor-a", end)),
                governance(MigrationReport(mid, ReportKind.LEASE_REQUESTED, "executor-b", end)),
                governance(
                    MigrationReport(
                        mid,
                        ReportKind.CHECKPOINT_COMMITTED,
                        "executor-a",
                        end,
                        1,
                        checkpoint_id="ckpt-1",
                        checkpoint_at=end,
                    )
                ),
                governance(MigrationReport(mid, ReportKind.EVICTED, "executor-a", end, 1)),
                governance(MigrationReport(mid, ReportKind.EVICTED, "executor-b", end, 1)),
            ]
        )
        kinds = await pipe.kinds()
        assert kinds.count("MigrationDeviceReleased") == 1, kinds
        assert kinds.count("MigrationReportRejected") == 1, kinds
        # A non-recoverable workload on the same device: its evidence is kept (issue 13 item 3),
        # posted twice (the second stores nothing: the first per Pod is kept).
        await pipe.append(
            [
                governance(
                    WorkloadOnDevice(
                        node, rid, "wl-3", "pod-uid-3", "team-c", "infer-0", None, 8, end
                    )
                )
                for node, rid in quarantined
            ]
        )
        [(kept,)] = await pipe.rows(
            "SELECT payload->'details'->>'migrationID' FROM {s}.governance_decisions "
            "WHERE kind = 'MigrationEvidenceKept'"
        )
        await pipe.append(
            [
                governance(
                    MigrationEvidence(
                        kept,
                        "executor-a",
                        end,
                        end,
                        (EvidencePod("team-c", "infer-0", "pod-uid-3", str(n), {"phase": p}),),
                    )
                )
                for n, p in ((9, "Running"), (10, "Failed"))
            ]
        )
        kinds = await pipe.kinds()
        assert kinds.count("MigrationEvidenceStored") == 2, kinds
        command = OperatorCommand(
            command_id=f"cmd-{uuid4().hex[:6]}",
            action=CommandAction.PAUSE,
            actor="alice",
            role=Role.OPERATOR,
            requested_at=end,
            reason="maintenance",
        )
        await pipe.append([governance(command), (b"x", b"garbage", None)])
        await pipe.wave([tick(p, (end - T0).total_seconds() + 600) for p in range(PARTITIONS)])
        assert len(await pipe.decisions()) > 100
        await stop(pipe.worker)
    return settings


async def test_governance_replay_verify_matches_the_live_projection(
    governed: Settings, engine: AsyncEngine
) -> None:
    first, second = (f"replay_{uuid4().hex[:12]}" for _ in range(2))
    try:
        result = await run_replay(governed, "--governance", "--schema", first, "--verify")
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"verify: {first} is identical to {governed.database_schema}" in result.stdout
        assert "undecodable 1" in result.stdout
        # Other batch boundaries, same rows.
        other = await run_replay(governed, "--governance", "--schema", second, "--batch-size", "3")
        assert other.returncode == 0, other.stdout + other.stderr
        assert await diff_projections(engine, first, second, GOVERNANCE_COMPARED_TABLES) == []
        async with engine.connect() as conn:
            count = await conn.execute(text(f'SELECT count(*) FROM "{first}".quarantines'))
            assert count.scalar_one() > 0
            facts = await conn.execute(
                text(f'SELECT pod_uid FROM "{first}".governor_workloads ORDER BY pod_uid')
            )
            assert list(facts.scalars()) == ["pod-uid-2", "pod-uid-3"]  # the evicted one deleted
            kept = await conn.execute(
                text(f"SELECT pod_uid, status->>'phase' FROM \"{first}\".migration_evidence")
            )
            assert [tuple(r) for r in kept] == [("pod-uid-3", "Running")]  # the first is kept
    finally:
        await drop(engine, first, second)


async def test_governance_verify_reports_a_tampered_row(
    governed: Settings, engine: AsyncEngine
) -> None:
    s = governed.database_schema
    async with engine.begin() as conn:
        row = (
            await conn.execute(
                text(
                    f"UPDATE \"{s}\".quarantines SET status = 'released' WHERE quarantine_id = "
                    f'(SELECT min(quarantine_id) FROM "{s}".quarantines) RETURNING quarantine_id'
                )
            )
        ).one()
        await conn.execute(
            text(
                f'DELETE FROM "{s}".governance_decisions WHERE (seq, idx) = (SELECT seq, idx '
                f'FROM "{s}".governance_decisions ORDER BY seq DESC, idx DESC LIMIT 1)'
            )
        )
    schema = f"replay_{uuid4().hex[:12]}"
    result = await run_replay(governed, "--governance", "--schema", schema, "--verify", "--drop")
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"quarantines quarantine_id={row.quarantine_id!r}: status: 'released' !=" in (
        result.stdout
    )
    assert f"only in {schema}" in result.stdout  # the deleted decision
    assert "verify: 2 difference(s)" in result.stdout


async def test_governance_replay_refuses_in_place(stream_settings: Settings) -> None:
    result = await run_replay(stream_settings, "--governance", "--in-place")
    assert result.returncode == 2
    assert "--governance rebuilds into a fresh schema" in result.stderr
