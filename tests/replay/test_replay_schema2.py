"""Schema-2 records (issue 12) through the live worker and the replay: a log of Pod status
changes, each one ``DeviceHealthObservations`` record, with one bad observation among them.

The live projection (the worker, its dedup table dropping re-sent changes device by device) and
the replay's must be identical (``--verify``), and both what the fold of the same observations
as schema-1 records gives: the bad observation alone is left out.
"""

from __future__ import annotations

import signal
from typing import Any
from uuid import uuid4

import orjson
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from services.runtime.config import Settings
from tests.conftest import publish
from tests.replay.test_replay import run_replay
from tests.streams.synthetic import pod_change_log, schema_2_records
from tests.streams.test_worker_integration import history_rows, projection_devices, wait_until

pytestmark = pytest.mark.integration


async def test_replay_of_schema_2_records_matches_the_live_projection(
    stream_settings: Settings, engine: AsyncEngine, kafka_bootstrap: str, worker_process: Any
) -> None:
    log = pod_change_log(3000, nodes=15, seed=31)
    records: list[tuple[bytes | None, bytes | None]] = list(schema_2_records(log.events))
    assert sum(b'"DeviceHealthObservations"' in (v or b"") for _, v in records) > 300
    # One more Pod change whose second observation is bad: the others are applied.
    key, value = next(r for r in records if b'"DeviceHealthObservations"' in (r[1] or b""))
    bad = orjson.loads(value or b"")
    bad["statusVersion"] = str(int(bad["statusVersion"]) + 10**6)
    bad["observations"][1]["health"] = ["not", "a", "string"]
    records.append((key, orjson.dumps(bad)))
    await publish(kafka_bootstrap, stream_settings.topic, records)

    worker = worker_process(stream_settings)
    expected = log.expected_history_rows() + len(bad["observations"]) - 1

    async def caught_up() -> bool:
        return await history_rows(engine, stream_settings.database_schema) >= expected

    await wait_until(caught_up, 120, "the worker to build the live projection", worker)
    worker.signal(signal.SIGTERM)
    assert await worker.wait(60) == 0

    devices = await projection_devices(engine, stream_settings.database_schema)
    folded = log.expected_devices()
    applied = {(bad["node"], o["resourceID"]) for i, o in enumerate(bad["observations"]) if i != 1}
    assert {k: v for k, v in devices.items() if k not in applied} == {
        k: v for k, v in folded.items() if k not in applied
    }
    assert {devices[k].status_version for k in applied} == {int(bad["statusVersion"])}

    schema = f"replay_{uuid4().hex[:12]}"
    result = await run_replay(stream_settings, "--schema", schema, "--verify", "--drop")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"verify: {schema} is identical to {stream_settings.database_schema}" in result.stdout
    assert "undecodable 1" in result.stdout
