"""Workload migrations through the API, on the real Kafka broker and PostgreSQL: the real
governor (``machine.step``) plans a migration, its decisions are written as the worker writes
them, ``GET /v1/migrations`` serves them, and an executor's ``POST .../reports`` lands on the
governance topic, where the governor decides it."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaConsumer

from services.adapters.projection.governance_rows import decision_row
from services.adapters.projection.governance_tables import governance_decisions
from services.domain.events import Health
from services.domain.governance.decisions import Decision
from services.domain.governance.input_codec import decode_input
from services.domain.governance.inputs import GovernanceInput
from services.domain.governance.state import GovernorState
from services.domain.migration.records import MigrationReport
from tests.api.conftest import Governor, bearer
from tests.governance.harness import GovernanceRun
from tests.governance.migration_builders import N1, N2, POLICY, quarantine, workload
from tests.governance.strategies import transition

pytestmark = pytest.mark.integration


async def topic_records(bootstrap: str, topic: str, expected: int) -> list[MigrationReport]:
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    found: list[MigrationReport] = []
    try:
        async with asyncio.timeout(20):
            while len(found) < expected:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    for record in records:
                        decoded = decode_input(record.value)
                        assert isinstance(decoded, MigrationReport)
                        assert record.key == decoded.migration_id.encode()
                        found.append(decoded)
    finally:
        await consumer.stop()
    return found


class Written:
    """The governor's run, its decisions written to the projection as the worker writes them."""

    def __init__(self, governor: Governor) -> None:
        self.governor = governor
        self.run = GovernanceRun(policy=POLICY, state=GovernorState())
        self.written = 0

    async def feed(self, *records: GovernanceInput) -> list[Decision]:
        decided = [d for r in records for d in self.run.feed(r)]
        await self.flush()
        return decided

    async def flush(self) -> None:
        rows = [decision_row(d) for d in self.run.decisions[self.written :]]
        self.written = len(self.run.decisions)
        if rows:
            await self.governor._insert(governance_decisions, rows)


async def test_an_executor_reports_through_the_api_and_reads_the_governor_s_decisions(
    gov_api: httpx.AsyncClient, governor: Governor, kafka_bootstrap: str, governance_topic: str
) -> None:
    g = Written(governor)
    await g.feed(transition(N2, "GPU-0", Health.HEALTHY, 1, 0))
    await g.feed(workload(N1, "GPU-0", "W", "train-0", "checkpointed", 5, 1, max_age=600))
    quarantine(g.run, N1, "GPU-0", 10)
    await g.flush()

    listed = await gov_api.get("/v1/migrations", headers=bearer("viewer"))
    assert listed.status_code == 200, listed.text
    (item,) = listed.json()["items"]
    assert (item["phase"], item["workloadUID"], item["pods"]) == (
        "planned",
        "W",
        ["team-a/train-0"],
    )
    mid = item["migrationID"]
    assert item["lastDecision"] == "MigrationPlanned"

    steps: list[dict[str, Any]] = [
        {"kind": "lease-requested", "holder": "exec-a"},
        {
            "kind": "checkpoint-committed",
            "holder": "exec-a",
            "fencingToken": 1,
            "checkpointID": "ckpt-1",
            "checkpointAt": "2026-11-29T12:00:09Z",
        },
        {"kind": "evicted", "holder": "exec-a", "fencingToken": 1},
        {"kind": "evicted", "holder": "exec-b", "fencingToken": 1},  # not the holder: refused
        {
            "kind": "replacement-observed",
            "holder": "exec-a",
            "fencingToken": 1,
            "devices": [{"node": N2, "resourceID": "GPU-0"}],
        },
    ]
    for body in steps:
        response = await gov_api.post(
            f"/v1/migrations/{mid}/reports", json=body, headers=bearer("operator")
        )
        assert response.status_code == 202, response.text
        assert response.json() == {
            "migrationID": mid,
            "kind": body["kind"],
            "holder": body["holder"],
            "status": "appended",
        }
    reports = await topic_records(kafka_bootstrap, governance_topic, len(steps))
    assert [r.kind.value for r in reports] == [b["kind"] for b in steps]
    await g.feed(*reports)

    one = await gov_api.get(f"/v1/migrations/{mid}", headers=bearer("viewer"))
    assert one.status_code == 200, one.text
    body = one.json()
    assert body["migration"]["phase"] == "completed"
    assert body["migration"]["details"]["checkpointID"] == "ckpt-1"
    kinds = [d["kind"] for d in body["decisions"]]
    assert kinds == [
        "MigrationPlanned",
        "MigrationLeaseGranted",
        "MigrationCheckpointRequested",
        "MigrationCheckpointCommitted",
        "MigrationEvictionRequested",
        "MigrationDeviceReleased",
        "MigrationReportRejected",
        "MigrationCompleted",
    ]
    done = await gov_api.get("/v1/migrations?phase=completed", headers=bearer("viewer"))
    assert [i["migrationID"] for i in done.json()["items"]] == [mid]
    assert (await gov_api.get("/v1/migrations?phase=failed", headers=bearer("viewer"))).json() == {
        "items": []
    }


async def test_bad_reports_are_refused_with_a_message(
    gov_api: httpx.AsyncClient, governor: Governor
) -> None:
    g = Written(governor)
    await g.feed(workload(N1, "GPU-0", "W", "train-0", "checkpointed", 5, 1))
    quarantine(g.run, N1, "GPU-0", 10)
    await g.flush()
    (item,) = (await gov_api.get("/v1/migrations", headers=bearer("viewer"))).json()["items"]
    mid = item["migrationID"]
    url = f"/v1/migrations/{mid}/reports"

    async def post(body: Any, role: str = "operator", path: str = url) -> httpx.Response:
        return await gov_api.post(path, json=body, headers=bearer(role))

    r = await post({"kind": "lease-requested", "holder": "exec-a"}, role="viewer")
    assert r.status_code == 403, r.text
    r = await post({"kind": "checkpoint-committed", "holder": "exec-a", "fencingToken": 1})
    assert r.status_code == 422 and "checkpointID" in r.text and "checkpointAt" in r.text
    r = await post({"kind": "evicted", "holder": "exec-a"})
    assert r.status_code == 422 and "fencingToken" in r.text
    r = await post({"kind": "replacement-observed", "holder": "exec-a", "fencingToken": 1})
    assert r.status_code == 422 and "devices" in r.text
    r = await post({"kind": "teleported", "holder": "exec-a"})
    assert r.status_code == 422, r.text
    r = await post({"kind": "evicted", "holder": "exec a", "fencingToken": 1})
    assert r.status_code == 422, r.text
    r = await post(
        {"kind": "lease-requested", "holder": "exec-a"},
        path="/v1/migrations/m-0123456789abcdef0123/reports",
    )
    assert r.status_code == 404 and "unknown to the governor" in r.text
    r = await post(
        {"kind": "lease-requested", "holder": "exec-a"}, path="/v1/migrations/nope/reports"
    )
    assert r.status_code == 422, r.text
    r = await gov_api.get("/v1/migrations/m-0123456789abcdef0123", headers=bearer("viewer"))
    assert r.status_code == 404, r.text
    r = await gov_api.get("/v1/migrations?phase=teleported", headers=bearer("viewer"))
    assert r.status_code == 422, r.text
