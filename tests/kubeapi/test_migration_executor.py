"""``devicestate migrate`` live: the executor against the real kube-apiserver, the real API app
on the real PostgreSQL and Kafka, and the real governor fold (tests/kubeapi/migration_harness.py).

A checkpointed Pod on a quarantined device: condition False, the handshake answered by the test,
checkpoint-committed, the Pod evicted through the Eviction API (it is gone), released; a
PodDisruptionBudget that blocks: eviction-refused; dry-run: nothing changes; two executors at
once: one eviction; an executor acting on what it read before its lease expired on event time:
its report is refused, the next lease (token 2) resumes, one eviction; a non-recoverable
Pod: a Warning Event, no eviction.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from kubernetes_asyncio import client

from services.adapters.kube.pods import KubernetesPods
from services.adapters.projection.store import ProjectionStore
from services.domain.events import format_time
from services.processes.migration.api import HttpMigrationsApi
from services.processes.migration.events import EVENT_REASON, EVICTION_REASON
from services.processes.migration.executor import EVIDENCE_DONE, MigrationExecutor
from services.processes.migration.plan import ACTIONABLE_PHASES, MigrationView
from tests.api.conftest import (  # noqa: F401 (fixtures)
    ApiFactory,
    Governor,
    api_settings,
    bearer,
    governance_topic,
    governor,
    make_api,
)
from tests.governance.strategies import T0, watermark
from tests.kubeapi.conftest import NAMESPACE
from tests.kubeapi.migration_harness import (
    LEASE_SECONDS,
    Clock,
    CountingPods,
    Governed,
    create_pod,
    drive,
    pod_manifest,
    relay,
    replacement_in_directory,
    serving,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def api(make_api: ApiFactory, clock: Clock) -> AsyncIterator[httpx.AsyncClient]:  # noqa: F811
    async with make_api(clock=clock) as http:
        http.headers.update(bearer("operator"))
        yield http


@pytest.fixture
async def governed(
    governor: Governor,  # noqa: F811
    kafka_bootstrap: str,
    governance_topic: str,  # noqa: F811
) -> AsyncIterator[Governed]:
    g = Governed(governor)
    async with relay(kafka_bootstrap, governance_topic, g):
        yield g


def executor(
    api: httpx.AsyncClient, pods: KubernetesPods, holder: str, clock: Clock, dry_run: bool = False
) -> MigrationExecutor:
    return MigrationExecutor(
        HttpMigrationsApi.over(api),
        pods,
        holder,
        dry_run=dry_run,
        lease_seconds=LEASE_SECONDS,
        clock=clock,
    )


async def read(pods: KubernetesPods, name: str) -> dict[str, Any] | None:
    return await pods.read_pod(NAMESPACE, name)


class Killed(Exception):
    """The executor process died here."""


class CrashBefore(HttpMigrationsApi):
    """The real HTTP calls, but the process dies instead of posting a report of ``kind``."""

    def __init__(self, kind: str, http: httpx.AsyncClient) -> None:
        self._client, self.kind = http, kind

    async def report(self, migration_id: str, body: dict[str, Any]) -> None:
        if body["kind"] == self.kind:
            raise Killed(self.kind)
        await super().report(migration_id, body)


async def listed(api: httpx.AsyncClient, mid: str) -> tuple[MigrationView, dict[str, Any]]:
    """The migration as ``GET /v1/migrations`` lists it (what a pass acts on)."""
    (item,) = [
        i
        for phase in ACTIONABLE_PHASES
        for i in (await api.get("/v1/migrations", params={"phase": phase})).json()["items"]
        if i["migrationID"] == mid
    ]
    return MigrationView.of(item), item


async def test_a_checkpointed_pod_is_asked_checkpointed_evicted_and_replaced(
    admin_client: client.ApiClient,
    api: httpx.AsyncClient,
    governed: Governed,
    clock: Clock,
    store: ProjectionStore,
) -> None:
    pods = CountingPods(admin_client)
    pod = await create_pod(admin_client, pod_manifest("train-ckpt"))
    pod_uid = pod["metadata"]["uid"]
    mid = await governed.plan(pod, "checkpointed", max_age=600)
    a = executor(api, pods, "exec-a", clock)

    async def asked() -> bool:
        found = await read(pods, "train-ckpt")
        annotations = (found or {}).get("metadata", {}).get("annotations") or {}
        return annotations.get("devicestate.io/checkpoint-request") == mid

    await drive([a], asked)
    assert governed.phase(mid) == "checkpoint-requested"
    current = await read(pods, "train-ckpt")
    assert current is not None and serving(current) == "False"  # out of the Service endpoints
    assert pods.evictions == 0  # nothing evicted before the checkpoint

    taken = clock()
    answer = {"migrationID": mid, "checkpointID": "ckpt-7", "checkpointAt": format_time(taken)}
    await client.CoreV1Api(admin_client).patch_namespaced_pod(
        "train-ckpt",
        NAMESPACE,
        {"metadata": {"annotations": {"devicestate.io/checkpoint-response": json.dumps(answer)}}},
    )

    async def committed() -> bool:
        return governed.phase(mid) != "checkpoint-requested"

    await drive([a], committed)
    assert governed.phase(mid) == "eviction-requested"
    m = governed.run.state.fleet.migrations.migrations[mid]
    assert m.checkpoint_id == "ckpt-7"

    # Killed (kill -9) after the eviction, before its report: nothing was reported.
    crashing = executor(api, pods, "exec-a", clock)
    crashing.api = CrashBefore("evicted", api)
    with pytest.raises(Killed):
        await crashing.act(*await listed(api, mid))
    assert await read(pods, "train-ckpt") is None  # evicted: the Pod is gone
    assert pods.evictions == 1 and governed.phase(mid) == "eviction-requested"
    events = await client.CoreV1Api(admin_client).list_namespaced_event(
        NAMESPACE, field_selector=f"involvedObject.uid={pod['metadata']['uid']}"
    )
    assert [e.reason for e in events.items if e.type == "Normal"] == [EVICTION_REASON]

    # Restarted (nothing in memory): it resumes from the governor's record, without a second
    # eviction, and finds its marker Event: evicted, not workload-gone.
    b = executor(api, pods, "exec-a", clock)

    async def released() -> bool:
        return governed.phase(mid) == "released"

    await drive([b], released)
    assert pods.evictions == 1
    kinds = [r.kind.value for r in governed.reports]
    assert kinds[0] == "lease-requested"
    assert kinds.count("checkpoint-committed") == 1 and kinds.count("evicted") == 1

    # The replacement (same workload UID) holds node-2/GPU-0 in the directory: completed.
    await replacement_in_directory(store, "train-ckpt-2", "uid-replacement", f"w-{pod_uid}")

    async def completed() -> bool:
        return governed.phase(mid) == "completed"

    await drive([b], completed)
    (observed,) = [r for r in governed.reports if r.kind.value == "replacement-observed"]
    assert observed.devices == (("node-2", "GPU-0"),)
    history = (await api.get(f"/v1/migrations/{mid}")).json()
    assert history["migration"]["phase"] == "completed"
    assert "MigrationReportRejected" not in [d["kind"] for d in history["decisions"]]


async def test_a_pod_disruption_budget_refuses_the_eviction(
    admin_client: client.ApiClient, api: httpx.AsyncClient, governed: Governed, clock: Clock
) -> None:
    pods = CountingPods(admin_client)
    labels = {"app": "shard-pdb"}
    pod = await create_pod(admin_client, pod_manifest("shard-pdb-0", labels))
    # Running (as a kubelet would write it): a Pending Pod is evicted whatever the budget says.
    await client.CoreV1Api(admin_client).patch_namespaced_pod_status(
        "shard-pdb-0", NAMESPACE, {"status": {"phase": "Running"}}
    )
    policy = client.PolicyV1Api(admin_client)
    pdb = {
        "metadata": {"name": "shard-pdb", "namespace": NAMESPACE},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}},
    }
    await policy.create_namespaced_pod_disruption_budget(NAMESPACE, pdb)
    try:
        mid = await governed.plan(pod, "sharded")

        async def finished() -> bool:
            return governed.phase(mid) == "failed"

        a = executor(api, pods, "exec-a", clock)
        await drive([a], finished)
    finally:
        await policy.delete_namespaced_pod_disruption_budget("shard-pdb", NAMESPACE)
    m = governed.run.state.fleet.migrations.migrations[mid]
    assert m.reason is not None and m.reason.value == "pdb-refused"
    assert "disruption budget" in m.detail
    left = await read(pods, "shard-pdb-0")
    assert left is not None and pods.evictions == 0

    # The Pod still runs and nothing will move it: it gets its serving condition back (an
    # executor restarted since does it too: the failed migrations are listed every pass).
    async def serving_again() -> bool:
        found = await read(pods, "shard-pdb-0")
        return found is not None and serving(found) == "True"

    await drive([executor(api, pods, "exec-b", clock)], serving_again)
    (condition,) = [
        c
        for c in (await read(pods, "shard-pdb-0") or {})["status"]["conditions"]
        if c["type"] == "devicestate.io/serving"
    ]
    assert condition["reason"] == "DeviceMigrationFailed" and "pdb-refused" in condition["message"]


async def test_dry_run_changes_nothing(
    admin_client: client.ApiClient, api: httpx.AsyncClient, governed: Governed, clock: Clock
) -> None:
    pods = CountingPods(admin_client)
    pod = await create_pod(admin_client, pod_manifest("dry-0"))
    mid = await governed.plan(pod, "sharded")
    dry = executor(api, pods, "exec-dry", clock, dry_run=True)
    result = await dry.run_pass()
    assert result.actions == [f"would request the lease of {mid} as exec-dry"]
    # Another executor holds the lease now, in eviction-requested: the dry run shows the steps.
    response = await api.post(
        f"/v1/migrations/{mid}/reports", json={"kind": "lease-requested", "holder": "exec-a"}
    )
    assert response.status_code == 202, response.text

    async def granted() -> bool:
        return governed.phase(mid) == "eviction-requested"

    await drive([], granted)
    before = await read(pods, "dry-0")
    result = await dry.run_pass()
    assert result.errors == [], result.errors
    assert result.actions == [
        "would set devicestate.io/serving=False on " + f"{NAMESPACE}/dry-0",
        f"would evict {NAMESPACE}/dry-0 (policy/v1 Eviction)",
        f"would report evicted for {mid}",
    ]
    after = await read(pods, "dry-0")
    assert after is not None and before is not None
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert serving(after) is None and pods.evictions == 0
    assert [r.holder for r in governed.reports] == ["exec-a"]  # the dry run posted nothing


async def test_two_executors_at_once_evict_once(
    admin_client: client.ApiClient, api: httpx.AsyncClient, governed: Governed, clock: Clock
) -> None:
    pods = CountingPods(admin_client)
    pod = await create_pod(admin_client, pod_manifest("race-0"))
    mid = await governed.plan(pod, "sharded")
    a, b = executor(api, pods, "exec-a", clock), executor(api, pods, "exec-b", clock)

    async def released() -> bool:
        return governed.phase(mid) == "released"

    await drive([a, b], released)
    assert await read(pods, "race-0") is None
    assert pods.evictions == 1
    m = governed.run.state.fleet.migrations.migrations[mid]
    evicted = [r for r in governed.reports if r.kind.value == "evicted"]
    assert [r.holder for r in evicted] == [m.holder] and m.fencing_token == 1
    # The other one at most asked for the lease (denied): it reported no step.
    other = {"exec-a", "exec-b"} - {m.holder}
    assert {r.kind.value for r in governed.reports if r.holder in other} <= {"lease-requested"}


async def test_a_report_under_an_expired_lease_is_refused_and_the_next_lease_resumes(
    admin_client: client.ApiClient, api: httpx.AsyncClient, governed: Governed, clock: Clock
) -> None:
    pods = CountingPods(admin_client)
    pod = await create_pod(admin_client, pod_manifest("lost-0"))
    mid = await governed.plan(pod, "sharded")
    a = executor(api, pods, "exec-a", clock)

    async def granted() -> bool:
        return governed.phase(mid) == "eviction-requested"

    await drive([a], granted)
    m = governed.run.state.fleet.migrations.migrations[mid]
    assert (m.holder, m.fencing_token) == ("exec-a", 1)
    stale_view = await listed(api, mid)  # what exec-a read just before its lease expired

    # Event time (the health log's watermark, not any executor's clock) passes the lease's
    # expiry: the lease ends on the governor's record.
    expiry = (m.lease_expires_at or clock()) - T0
    await governed.feed(watermark(expiry.total_seconds() + 5))
    assert governed.run.state.fleet.migrations.migrations[mid].holder is None

    # exec-a acts on what it read: it evicts and reports under token 1; the governor refuses
    # the report, and the refused report changes nothing.
    await a.act(*stale_view)
    assert pods.evictions == 1 and await read(pods, "lost-0") is None

    async def refused() -> bool:
        history = (await api.get(f"/v1/migrations/{mid}")).json()
        return "MigrationReportRejected" in {d["kind"] for d in history["decisions"]}

    await drive([], refused)
    (stale,) = [r for r in governed.reports if r.kind.value == "evicted"]
    assert (stale.holder, stale.fencing_token) == ("exec-a", 1)
    assert governed.phase(mid) == "eviction-requested"

    # The lease is free: whichever executor asks first gets token 2 and resumes from the
    # record; the Pod is gone and its marker Event exists, so it reports evicted without a
    # second eviction. Nothing more is posted under the lost token 1.
    b = executor(api, pods, "exec-b", clock)

    async def released() -> bool:
        return governed.phase(mid) == "released"

    await drive([a, b], released)
    m = governed.run.state.fleet.migrations.migrations[mid]
    assert m.fencing_token == 2 and pods.evictions == 1
    evicted = [(r.holder, r.fencing_token) for r in governed.reports if r.kind.value == "evicted"]
    assert evicted == [("exec-a", 1), (m.holder, 2)], evicted
    after = governed.reports[governed.reports.index(stale) + 1 :]
    assert not [r for r in after if (r.holder, r.fencing_token) == ("exec-a", 1)]


async def test_a_non_recoverable_pod_gets_a_warning_event_and_is_not_evicted(
    admin_client: client.ApiClient, api: httpx.AsyncClient, governed: Governed, clock: Clock
) -> None:
    pods = CountingPods(admin_client)
    pod = await create_pod(admin_client, pod_manifest("infer-0"))
    mid = await governed.plan(pod, "non-recoverable")
    assert governed.phase(mid) == "evidence-kept"
    result = await executor(api, pods, "exec-a", clock).run_pass()
    assert result.errors == [], result.errors
    events = await client.CoreV1Api(admin_client).list_namespaced_event(
        NAMESPACE, field_selector=f"involvedObject.uid={pod['metadata']['uid']}"
    )
    (event,) = [e for e in events.items if e.reason == EVENT_REASON]
    assert event.type == "Warning" and event.involved_object.kind == "Pod"
    assert mid in event.message and "node-1/GPU-0" in event.message
    current = await read(pods, "infer-0")
    assert current is not None and pods.evictions == 0 and serving(current) is None
    # The Pod is marked done once the API accepted the evidence (202); the governor stores it.
    assert (
        "/v1/migrations/{migrationID}/evidence" in (await api.get("/openapi.json")).json()["paths"]
    )
    marked = (current["metadata"].get("annotations") or {}).get(EVIDENCE_DONE)
    assert marked == mid

    async def evidence_stored() -> bool:  # the relay feeds the evidence record to the governor
        return any(d.kind.value == "MigrationEvidenceStored" for d in governed.run.decisions)

    await drive([executor(api, pods, "exec-a", clock)], evidence_stored)  # passes are idempotent
    (stored,) = [d for d in governed.run.decisions if d.kind.value == "MigrationEvidenceStored"]
    assert stored.details["storedPodUIDs"] == [pod["metadata"]["uid"]]
    # A second pass writes no second Event.
    await executor(api, pods, "exec-a", clock).run_pass()
    again = await client.CoreV1Api(admin_client).list_namespaced_event(
        NAMESPACE, field_selector=f"involvedObject.uid={pod['metadata']['uid']}"
    )
    assert [e.count for e in again.items if e.reason == EVENT_REASON] == [1]
