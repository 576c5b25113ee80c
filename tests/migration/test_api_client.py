"""The executor's HTTP calls as sent (services/processes/migration/api.py), recorded through an
httpx transport: the evidence POST is written to the evidence route's contract (202 accepted,
404 unknown migration) whether or not this branch's API serves the route yet."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from services.processes.migration.api import (
    ApiCallError,
    HttpMigrationsApi,
    evidence_body,
    report_body,
)

MID = "m-0123456789abcdef0123"
AT = datetime(2026, 12, 3, 12, 0, 5, tzinfo=UTC)
POD = {
    "metadata": {"namespace": "ml", "name": "infer-0", "uid": "pod-uid", "resourceVersion": "41"},
    "spec": {"nodeName": "gpu-node-a"},
    "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
}


class Recorder:
    def __init__(self, status: int = 202, body: Any = None) -> None:
        self.requests: list[httpx.Request] = []
        self.status, self.body = status, body

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return httpx.Response(self.status, json=self.body if self.body is not None else {})


def _api(recorder: Recorder) -> HttpMigrationsApi:
    return HttpMigrationsApi("http://api.test", "tok", transport=httpx.MockTransport(recorder))


def test_the_evidence_body_is_the_routes_contract() -> None:
    assert evidence_body("exec-a", AT, [POD]) == {
        "holder": "exec-a",
        "collectedAt": "2026-12-03T12:00:05Z",
        "pods": [
            {
                "namespace": "ml",
                "name": "infer-0",
                "uid": "pod-uid",
                "resourceVersion": "41",
                "status": POD["status"],
            }
        ],
    }


@pytest.mark.parametrize(("status", "accepted"), [(202, True), (404, False)])
async def test_the_evidence_post(status: int, accepted: bool) -> None:
    recorder = Recorder(status, {"detail": "unknown"} if status == 404 else {})
    api = _api(recorder)
    assert await api.post_evidence(MID, evidence_body("exec-a", AT, [POD])) is accepted
    await api.aclose()
    (request,) = recorder.requests
    assert request.method == "POST"
    assert request.url == f"http://api.test/v1/migrations/{MID}/evidence"
    assert request.headers["authorization"] == "Bearer tok"
    assert json.loads(request.content) == evidence_body("exec-a", AT, [POD])


async def test_another_refusal_of_the_evidence_raises() -> None:
    api = _api(Recorder(403, {"detail": "operator role required"}))
    with pytest.raises(ApiCallError, match="403: operator role required"):
        await api.post_evidence(MID, evidence_body("exec-a", AT, []))
    await api.aclose()


async def test_reports_carry_the_token_except_the_lease_request() -> None:
    recorder = Recorder()
    api = _api(recorder)
    await api.report(MID, report_body("lease-requested", "exec-a", 0))
    await api.report(
        MID,
        report_body(
            "checkpoint-committed",
            "exec-a",
            4,
            checkpointID="c-1",
            checkpointAt="2026-12-03T11:59:00Z",
        ),
    )
    await api.report(MID, report_body("eviction-refused", "exec-a", 4, detail="x" * 2000))
    await api.aclose()
    bodies = [json.loads(r.content) for r in recorder.requests]
    assert all(r.url.path == f"/v1/migrations/{MID}/reports" for r in recorder.requests)
    assert bodies[0] == {"kind": "lease-requested", "holder": "exec-a"}
    assert bodies[1] == {
        "kind": "checkpoint-committed",
        "holder": "exec-a",
        "fencingToken": 4,
        "checkpointID": "c-1",
        "checkpointAt": "2026-12-03T11:59:00Z",
    }
    assert bodies[2]["fencingToken"] == 4 and len(bodies[2]["detail"]) == 1000


async def test_lists_follow_the_filters_and_pages() -> None:
    pages = iter(
        [{"items": [{"a": 1}], "nextCursor": "c2"}, {"items": [{"a": 2}], "nextCursor": None}]
    )
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/v1/workloads":
            return httpx.Response(200, json=next(pages))
        return httpx.Response(200, json={"items": [{"migrationID": MID}]})

    api = HttpMigrationsApi("http://api.test", None, transport=httpx.MockTransport(handler))
    assert await api.list_migrations("planned") == [{"migrationID": MID}]
    assert await api.workloads("ml") == [{"a": 1}, {"a": 2}]
    await api.aclose()
    assert seen[0].url.params["phase"] == "planned"
    assert "authorization" not in seen[0].headers
    assert seen[1].url.params["quarantined"] == "false" and seen[1].url.params["namespace"] == "ml"
    assert seen[2].url.params["cursor"] == "c2"
