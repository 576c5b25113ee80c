"""``devicestate replay`` against the real broker and PostgreSQL.

The live projection is built by the real worker (which drops duplicates early through its table);
the replay reads the raw log without a table. Both must give identical rows.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from services.adapters.projection.compare import diff_projections
from services.domain.node_labels import NodeLabelsChanged
from services.domain.records import encode_record
from services.runtime.config import Settings
from tests.conftest import T0, publish, settings_env
from tests.streams.synthetic import synthetic_log
from tests.streams.test_worker_integration import history_rows, wait_until

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


async def run_replay(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m services.processes.replay.cli ARGS`` with ``settings`` in the environment."""
    env = {**os.environ, **settings_env(settings)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.processes.replay.cli",
        "--no-progress",
        *args,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 180)
    assert process.returncode is not None
    return subprocess.CompletedProcess(
        args, process.returncode, stdout.decode(errors="replace"), stderr.decode(errors="replace")
    )


async def drop(engine: AsyncEngine, *schemas: str) -> None:
    async with engine.begin() as conn:
        for schema in schemas:
            await conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))


@pytest.fixture
async def live(
    stream_settings: Settings, engine: AsyncEngine, kafka_bootstrap: str, worker_process: Any
) -> Settings:
    """A topic with a realistic log (duplicates, stale, releases, two malformed records) and the
    live projection the worker built from it; the worker is stopped again."""
    log = synthetic_log(4000, nodes=15, seed=31)
    records: list[tuple[bytes | None, bytes | None]] = list(log.records)
    records.insert(50, (b"gpu-node-003", b"\x00\x01 not json"))
    records.insert(3000, (b"gpu-node-004", b'{"schema": 1, "type": "Mystery"}'))
    for at_index, value in ((100, "east"), (2000, "west")):  # issue 16: the node_labels table
        relabelled = NodeLabelsChanged("gpu-node-005", (("pool", value),), T0)
        records.insert(at_index, (b"gpu-node-005", encode_record(relabelled)))
    for at_index, gone in ((150, False), (2500, True)):  # issue 16: a deleted Node's row goes
        record = NodeLabelsChanged("gpu-node-006", () if gone else (("pool", "east"),), T0, gone)
        records.insert(at_index, (b"gpu-node-006", encode_record(record)))
    await publish(kafka_bootstrap, stream_settings.topic, records)
    worker = worker_process(stream_settings)
    expected = log.expected_history_rows()

    async def caught_up() -> bool:
        return await history_rows(engine, stream_settings.database_schema) >= expected

    await wait_until(caught_up, 90, "the worker to build the live projection", worker)
    worker.signal(signal.SIGTERM)
    assert await worker.wait(60) == 0
    return stream_settings


async def test_replay_verify_matches_the_live_projection(
    live: Settings, engine: AsyncEngine
) -> None:
    schema = f"replay_{uuid4().hex[:12]}"
    result = await run_replay(live, "--schema", schema, "--verify", "--drop")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"verify: {schema} is identical to {live.database_schema}" in result.stdout
    assert "undecodable 2" in result.stdout
    async with engine.connect() as conn:  # the relabelled node's newest labels, as replayed too
        labels = await conn.execute(
            text(f'SELECT node, labels FROM "{live.database_schema}".node_labels')
        )
        assert [tuple(r) for r in labels] == [("gpu-node-005", {"pool": "west"})]
    async with engine.connect() as conn:
        gone = await conn.execute(
            text("SELECT 1 FROM pg_namespace WHERE nspname = :s"), {"s": schema}
        )
        assert gone.first() is None  # --drop


async def test_verify_reports_a_tampered_row_and_in_place_repairs_it(
    live: Settings, engine: AsyncEngine
) -> None:
    s = live.database_schema
    async with engine.begin() as conn:
        row = (
            await conn.execute(
                text(
                    f"UPDATE \"{s}\".devices SET health = 'Unhealthy', message = 'tampered' "
                    "WHERE (node, resource_id) = (SELECT node, resource_id FROM "
                    f"\"{s}\".devices WHERE health = 'Healthy' ORDER BY node, resource_id "
                    "LIMIT 1) RETURNING node, resource_id"
                )
            )
        ).one()
    schema = f"replay_{uuid4().hex[:12]}"
    result = await run_replay(live, "--schema", schema, "--verify", "--drop")
    assert result.returncode == 1, result.stdout + result.stderr
    difference = f"devices node={row.node!r}, resource_id={row.resource_id!r}: health:"
    assert difference in result.stdout
    assert "'tampered' != None" in result.stdout
    assert "verify: 1 difference(s)" in result.stdout

    repaired = await run_replay(live, "--in-place")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    again = await run_replay(live, "--schema", schema, "--verify", "--drop")
    assert again.returncode == 0, again.stdout + again.stderr


async def test_replaying_twice_gives_identical_rows(live: Settings, engine: AsyncEngine) -> None:
    first, second = (f"replay_{uuid4().hex[:12]}" for _ in range(2))
    try:
        one = await run_replay(live, "--schema", first)
        two = await run_replay(live, "--schema", second, "--batch-size", "7")
        assert one.returncode == 0 and two.returncode == 0, one.stderr + two.stderr
        assert await diff_projections(engine, first, second) == []
        assert await history_rows(engine, first) > 0
        exists = await run_replay(live, "--schema", first)
        assert exists.returncode == 2 and "already exists" in exists.stderr
    finally:
        await drop(engine, first, second)
