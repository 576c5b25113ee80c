"""``GET /v1/workloads`` against a real PostgreSQL projection (``workloads_scenario``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from services.adapters.projection.store import ProjectionStore
from tests.api.conftest import ApiFactory, Governor
from tests.api.workloads_scenario import load_workloads
from tests.conftest import LogFactory, ObservationFactory

pytestmark = pytest.mark.integration


@pytest.fixture
async def api(
    make_api: ApiFactory,
    store: ProjectionStore,
    governor: Governor,
    observation: ObservationFactory,
    logged: LogFactory,
) -> AsyncIterator[httpx.AsyncClient]:
    await load_workloads(store, governor, observation, logged)
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
