"""``GET /v1/workloads`` against a real PostgreSQL projection: devices and PodWorkloadObserved
records written by ``apply_batch`` (as the worker writes them), governance rows as the governor."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import httpx
import pytest

from services.adapters.projection.store import ProjectionStore
from services.domain.batch import LoggedBatch
from services.domain.log import LogPosition
from services.domain.workloads.events import PodWorkloadObserved
from services.domain.workloads.migration import MigrationClass, MigrationSource
from services.domain.workloads.owners import OwnerLink
from tests.api.conftest import ApiFactory, Governor
from tests.conftest import T0, TOPIC, LogFactory, ObservationFactory

pytestmark = pytest.mark.integration

JOB = (
    OwnerLink("Job", "train-0", "job-uid", "batch/v1"),
    OwnerLink("JobSet", "train", "jobset-uid", "jobset.x-k8s.io/v1alpha2"),
)
DEPLOYMENT = (
    OwnerLink("ReplicaSet", "web-7d9", "rs-uid", "apps/v1"),
    OwnerLink("Deployment", "web", "d-uid", "apps/v1"),
)


def workload(uid: str, name: str, version: int | None, **fields: object) -> PodWorkloadObserved:
    values: dict[str, object] = {"node": "gpu-node-a", "namespace": "ml"}
    values.update(fields)
    return PodWorkloadObserved(
        pod_name=name,
        pod_uid=uid,
        status_version=version,
        observed_at=T0 + timedelta(seconds=5),
        **values,  # type: ignore[arg-type]
    )


@pytest.fixture
async def api(
    make_api: ApiFactory,
    store: ProjectionStore,
    governor: Governor,
    observation: ObservationFactory,
    logged: LogFactory,
) -> AsyncIterator[httpx.AsyncClient]:
    """uid-1 (ml/train-0, JobSet, checkpointed) holds GPU-0, quarantined; uid-2 (ml/web-x,
    Deployment) holds GPU-1; uid-3 (infer/solo, bare Pod) holds GPU-5 on node b; uid-4 has a
    workload record but holds no device."""
    events = [
        observation(10, resource_id="GPU-0"),
        observation(11, resource_id="GPU-1", pod_uid="uid-2", pod_name="web-x"),
        observation(12, node="gpu-node-b", resource_id="GPU-5", pod_uid="uid-3", namespace="infer"),
    ]
    records = [
        workload(
            "uid-1",
            "train-0",
            10,
            chain=JOB,
            migration_class=MigrationClass.CHECKPOINTED,
            migration_source=MigrationSource.OWNER,
            checkpoint_max_age_seconds=900,
        ),
        workload(
            "uid-2",
            "web-x",
            11,
            chain=DEPLOYMENT[:1],
            chain_complete=False,
            chain_reason="Deployment web: GET failed, retried: HTTP 503: unavailable",
        ),
        workload("uid-3", "solo", 12, node="gpu-node-b", namespace="infer"),
        workload("uid-4", "idle", 3),
        # A later record of uid-2 with the whole chain, then an older one that must not win.
        workload("uid-2", "web-x", 14, chain=DEPLOYMENT),
        workload("uid-2", "web-x", 13, chain=(), migration_class=MigrationClass.SHARDED),
    ]
    start = len(events)
    positions = [LogPosition(TOPIC, 0, start + i) for i in range(len(records))]
    await store.apply_batch(
        LoggedBatch(
            logged(events),
            event_times=[(p, r.observed_at) for p, r in zip(positions, records, strict=True)],
            workloads=list(zip(positions, records, strict=True)),
        )
    )
    await governor.device(
        "gpu-node-a", "GPU-0", "Quarantined", T0, quarantine_id="gpu-node-a/GPU-0@10"
    )
    await governor.device("gpu-node-a", "GPU-1", "Available", T0)
    async with make_api() as client:
        yield client


async def test_default_view_is_the_workloads_on_quarantined_devices(
    api: httpx.AsyncClient,
) -> None:
    response = await api.get("/v1/workloads")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["nextCursor"] is None
    [item] = body["items"]
    assert item["pod"] == {
        "namespace": "ml",
        "name": "train-0",
        "uid": "uid-1",
        "node": "gpu-node-a",
        "resourceVersion": "10",
    }
    assert item["workload"] == {
        "kind": "JobSet",
        "name": "train",
        "uid": "jobset-uid",
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
    }
    assert [c["kind"] for c in item["chain"]] == ["Job", "JobSet"] and item["chainComplete"]
    assert item["migration"] == {
        "class": "checkpointed",
        "source": "owner",
        "checkpointMaxAgeSeconds": 900,
        "shard": None,
        "reasons": [],
    }
    assert item["devices"] == [
        {
            "resourceID": "GPU-0",
            "resourceName": "nvidia.com/gpu",
            "health": "Healthy",
            "state": "Quarantined",
            "quarantineID": "gpu-node-a/GPU-0@10",
        }
    ]


async def test_all_workloads_with_filters_and_the_newest_record(api: httpx.AsyncClient) -> None:
    every = (await api.get("/v1/workloads", params={"quarantined": "false"})).json()["items"]
    assert [i["pod"]["uid"] for i in every] == ["uid-1", "uid-2", "uid-3"]  # uid-4 holds none
    web = every[1]
    assert web["workload"]["kind"] == "Deployment" and web["chainComplete"]  # version 14 won
    assert web["migration"]["class"] == "non-recoverable"
    assert web["devices"][0]["state"] == "Available"
    bare = every[2]
    assert bare["workload"] == {"kind": "Pod", "name": "solo", "uid": "uid-3", "apiVersion": "v1"}
    assert bare["chain"] == [] and bare["devices"][0]["state"] is None
    on_b = await api.get("/v1/workloads", params={"quarantined": "false", "node": "gpu-node-b"})
    assert [i["pod"]["uid"] for i in on_b.json()["items"]] == ["uid-3"]
    in_ml = await api.get("/v1/workloads", params={"quarantined": "false", "namespace": "ml"})
    assert [i["pod"]["uid"] for i in in_ml.json()["items"]] == ["uid-1", "uid-2"]


async def test_pages_follow_the_cursor(api: httpx.AsyncClient) -> None:
    seen, cursor = [], None
    while True:
        params = {"quarantined": "false", "limit": "2", **({"cursor": cursor} if cursor else {})}
        page = (await api.get("/v1/workloads", params=params)).json()
        seen += [i["pod"]["uid"] for i in page["items"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert seen == ["uid-1", "uid-2", "uid-3"]


@pytest.mark.parametrize(
    "params",
    [{"cursor": "bm90LWEtY3Vyc29y"}, {"limit": "0"}, {"quarantined": "maybe"}, {"pod": "x"}],
)
async def test_bad_queries_are_422_with_a_message(
    api: httpx.AsyncClient, params: dict[str, str]
) -> None:
    response = await api.get("/v1/workloads", params=params)
    assert response.status_code == 422
    assert response.json()["detail"]
