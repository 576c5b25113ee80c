"""A non-recoverable migration's evidence through the API (issue 13 item 3), on the real Kafka
broker and PostgreSQL: the real governor (``machine.step``) decides ``MigrationEvidenceKept``, its
batches are written by the real :class:`GovernanceStore` (as the worker writes them), the
executor's ``POST .../evidence`` lands on the governance topic, the governor stores the first
evidence per Pod, and ``GET .../evidence`` serves it with the device's timeline and decisions."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaConsumer
from sqlalchemy.ext.asyncio import AsyncEngine

from services.adapters.projection.governance_store import GovernanceStore, batch_rows
from services.domain.events import Health
from services.domain.governance.input_codec import decode_input
from services.domain.governance.inputs import GovernanceInput
from services.domain.governance.state import GovernorState
from services.domain.migration.records import MigrationEvidence
from services.processes.api.schemas_migration_evidence import MAX_EVIDENCE_BYTES
from tests.api.conftest import bearer
from tests.governance.harness import GovernanceRun
from tests.governance.migration_builders import N1, POLICY, workload
from tests.governance.strategies import transition, watermark

pytestmark = pytest.mark.integration


class Stored:
    """The real governor's run, each record's rows written by :class:`GovernanceStore`."""

    def __init__(self, engine: AsyncEngine, schema: str) -> None:
        self.store = GovernanceStore(engine, schema)
        self.run = GovernanceRun(policy=POLICY, state=GovernorState())
        self.offset: int | None = None

    async def feed(self, *records: GovernanceInput) -> None:
        decided = [d for r in records for d in self.run.feed(r)]
        offset = (-1 if self.offset is None else self.offset) + len(records)
        rows = batch_rows(
            self.run.state, decided, topic="gov", offset=offset, expected_offset=self.offset
        )
        await self.store.write(rows)
        self.run.state.clear_dirty()
        self.offset = offset


async def evidence_records(bootstrap: str, topic: str, expected: int) -> list[MigrationEvidence]:
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    found: list[MigrationEvidence] = []
    try:
        async with asyncio.timeout(20):
            while len(found) < expected:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    for record in records:
                        decoded = decode_input(record.value)
                        assert isinstance(decoded, MigrationEvidence)
                        assert record.key == decoded.migration_id.encode()
                        found.append(decoded)
    finally:
        await consumer.stop()
    return found


def body(phase: str, **extra: Any) -> dict[str, Any]:
    return {
        "holder": "exec-a",
        "collectedAt": "2026-11-29T12:00:15Z",
        "pods": [
            {
                "namespace": "team-a",
                "name": "infer-0",
                "uid": "uid-infer-0",
                "resourceVersion": "42",
                "status": {"phase": phase, "message": "line 1\nline 2", **extra},
            }
        ],
    }


async def kept(g: Stored, gov_api: httpx.AsyncClient) -> str:
    await g.feed(watermark(0), transition(N1, "GPU-0", Health.HEALTHY, 1, 0))
    await g.feed(workload(N1, "GPU-0", "W", "infer-0", None, 5, 1))
    await g.feed(transition(N1, "GPU-0", Health.UNHEALTHY, 10, 10), watermark(10))
    (item,) = (await gov_api.get("/v1/migrations", headers=bearer("viewer"))).json()["items"]
    assert item["phase"] == "evidence-kept"
    mid: str = item["migrationID"]
    return mid


async def test_evidence_is_stored_once_per_pod_and_served(
    gov_api: httpx.AsyncClient,
    engine: AsyncEngine,
    fresh_schema: str,
    kafka_bootstrap: str,
    governance_topic: str,
) -> None:
    g = Stored(engine, fresh_schema)
    mid = await kept(g, gov_api)
    url = f"/v1/migrations/{mid}/evidence"
    assert (await gov_api.get(url, headers=bearer("viewer"))).status_code == 404

    for phase in ("Running", "Failed"):  # the second POST (a retry, newer status) stores nothing
        r = await gov_api.post(url, json=body(phase), headers=bearer("operator"))
        assert r.status_code == 202, r.text
        assert r.json() == {"migrationID": mid, "holder": "exec-a", "pods": 1, "status": "appended"}
    records = await evidence_records(kafka_bootstrap, governance_topic, 2)
    assert [r.pods[0].status["phase"] for r in records] == ["Running", "Failed"]
    await g.feed(records[0])
    await g.feed(records[1])

    r = await gov_api.get(url, headers=bearer("viewer"))
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["migrationID"] == mid
    assert got["migration"]["phase"] == "evidence-kept"
    (pod,) = got["pods"]
    assert (pod["uid"], pod["resourceVersion"], pod["holder"]) == ("uid-infer-0", "42", "exec-a")
    assert pod["status"] == {"phase": "Running", "message": "line 1\nline 2"}  # the first kept
    assert pod["collectedAt"] == "2026-11-29T12:00:15Z"
    device = got["device"]
    assert (device["node"], device["resourceID"]) == (N1, "GPU-0")
    kinds = [d["type"] for d in device["decisions"]]
    assert "DeviceQuarantined" in kinds and kinds.count("MigrationEvidenceStored") == 2
    assert [i["fields"]["type"] for i in device["timeline"] if i["kind"] == "decision"] == kinds

    history = (await gov_api.get(f"/v1/migrations/{mid}", headers=bearer("viewer"))).json()
    assert [d["kind"] for d in history["decisions"]][-2:] == ["MigrationEvidenceStored"] * 2
    assert "already stored" in history["decisions"][-1]["summary"]


async def test_bad_evidence_is_refused_with_a_message(
    gov_api: httpx.AsyncClient, engine: AsyncEngine, fresh_schema: str
) -> None:
    g = Stored(engine, fresh_schema)
    mid = await kept(g, gov_api)
    url = f"/v1/migrations/{mid}/evidence"

    async def post(payload: Any, role: str = "operator", path: str = url) -> httpx.Response:
        return await gov_api.post(path, json=payload, headers=bearer(role))

    assert (await post(body("Running"), role="viewer")).status_code == 403
    r = await post({**body("Running"), "pods": []})
    assert r.status_code == 422 and "pods" in r.text
    r = await post({**body("Running"), "collectedAt": "2026-11-29T12:00:15"})  # no offset
    assert r.status_code == 422 and "collectedAt" in r.text
    r = await post({"holder": "exec-a", "collectedAt": "2026-11-29T12:00:15Z"})
    assert r.status_code == 422 and "pods" in r.text
    bad_pod = body("Running")
    del bad_pod["pods"][0]["uid"]
    r = await post(bad_pod)
    assert r.status_code == 422 and "uid" in r.text
    r = await post(body("Running", reason="a\u0000b"))
    assert r.status_code == 422, r.text
    r = await post({**body("Running"), "extra": 1})
    assert r.status_code == 422, r.text
    r = await post(body("Running", blob="x" * MAX_EVIDENCE_BYTES))
    assert r.status_code == 413 and "256 KiB" in r.text
    r = await post(body("Running"), path="/v1/migrations/m-0123456789abcdef0123/evidence")
    assert r.status_code == 404 and "unknown to the governor" in r.text
    r = await gov_api.get(
        "/v1/migrations/m-0123456789abcdef0123/evidence", headers=bearer("viewer")
    )
    assert r.status_code == 404, r.text
    paths = (await gov_api.get("/openapi.json")).json()["paths"]
    assert {"get", "post"} <= set(paths["/v1/migrations/{migrationID}/evidence"])
