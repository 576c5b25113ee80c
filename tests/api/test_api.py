"""The directory API against a real PostgreSQL projection loaded through ``apply_batch``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import uuid4

import httpx
import pytest

from services.adapters.projection.store import ProjectionStore
from services.domain.batch import LoggedBatch
from services.domain.events import ClaimRef, ContainerKind, ContainerRef, DeviceSource, Health
from services.processes.api.app import create_app
from services.runtime.config import Settings
from tests.conftest import T0, TOPIC, LogFactory, ObservationFactory, ReleaseFactory

pytestmark = pytest.mark.integration

DRA_ID = "gpu.example.com/pool-a/gpu-2"


def client_for(settings: Settings) -> tuple[Any, httpx.AsyncClient]:
    app = create_app(settings)
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api")
    return app, client


@pytest.fixture
async def api(
    database_url: str, fresh_schema: str, kafka_admin: Any
) -> AsyncIterator[httpx.AsyncClient]:
    # Private event and governance topics and group: /readyz measures their lag on the broker
    # (the shared default topics may hold records of another run). The API creates them.
    tag = f"t{uuid4().hex[:12]}"
    settings = Settings(
        database_url=database_url,
        database_schema=fresh_schema,
        topic=f"{tag}.events",
        governance_topic=f"{tag}.governance",
        consumer_group=f"{tag}.worker",
        api_read_cache=False,  # reads right after writes; the copy: test_warm_devices.py
    )
    app, client = client_for(settings)
    try:
        async with app.router.lifespan_context(app), client:
            yield client
    finally:
        await kafka_admin.delete_topics([t for t in await kafka_admin.list_topics() if tag in t])


@pytest.fixture
async def loaded(
    store: ProjectionStore,
    observation: ObservationFactory,
    release: ReleaseFactory,
    logged: LogFactory,
) -> None:
    """Node a: GPU-0 Healthy (ml/train-0), GPU-1 Unhealthy then released (ml/train-1),
    GPU-2..4 Healthy (batch/job-*). Node b: a DRA device (slash in its ID) Unknown, version 2**70."""
    events = [
        observation(10, resource_id="GPU-0"),
        observation(11, resource_id="GPU-1", pod_uid="uid-2", pod_name="train-1"),
        observation(
            12,
            Health.UNHEALTHY,
            at=60,
            resource_id="GPU-1",
            pod_uid="uid-2",
            pod_name="train-1",
            message="XID 79",
        ),
        release(13, at=90, pod_uid="uid-2", pod_name="train-1"),
        *(
            observation(20 + i, resource_id=f"GPU-{i}", namespace="batch", pod_uid=f"job-{i}")
            for i in range(2, 5)
        ),
        observation(
            2**70,
            Health.UNKNOWN,
            at=30,
            node="gpu-node-b",
            resource_id=DRA_ID,
            resource_name="claim:gpus/gpu",
            source=DeviceSource.DRA,
            namespace="infer",
            pod_uid="uid-9",
            containers=(ContainerRef("app"), ContainerRef("setup", ContainerKind.INIT)),
            claim=ClaimRef("gpus", "gpu", "infer-gpus-x7"),
            raw_health="Degraded",
        ),
    ]
    await store.apply_batch(LoggedBatch(logged(events), highwaters={(TOPIC, 0): len(events) + 5}))


def ids(body: dict[str, Any]) -> list[tuple[str, str]]:
    return [(d["node"], d["resourceID"]) for d in body["items"]]


@pytest.mark.usefixtures("loaded")
@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({}, ["GPU-0", "GPU-1", "GPU-2", "GPU-3", "GPU-4", DRA_ID]),
        ({"node": "gpu-node-b"}, [DRA_ID]),
        ({"health": "Unhealthy"}, ["GPU-1"]),
        ({"health": "Unknown"}, [DRA_ID]),
        ({"resourceName": "claim:gpus/gpu"}, [DRA_ID]),
        ({"source": "dra"}, [DRA_ID]),
        ({"namespace": "batch"}, ["GPU-2", "GPU-3", "GPU-4"]),
        ({"namespace": "ml"}, ["GPU-0"]),  # GPU-1's Pod was released
        ({"podUID": "job-3"}, ["GPU-3"]),
        ({"namespace": "batch", "health": "Unhealthy"}, []),
    ],
)
async def test_list_devices_filters(
    api: httpx.AsyncClient, query: dict[str, str], expected: list[str]
) -> None:
    response = await api.get("/v1/devices", params=query)
    assert response.status_code == 200, response.text
    body = response.json()
    assert [rid for _, rid in ids(body)] == expected
    assert body["nextCursor"] is None


@pytest.mark.usefixtures("loaded")
async def test_pagination_walks_every_device_once_in_key_order(api: httpx.AsyncClient) -> None:
    everything = ids((await api.get("/v1/devices")).json())
    seen: list[tuple[str, str]] = []
    params: dict[str, Any] = {"limit": 2}
    pages = 0
    while True:
        body = (await api.get("/v1/devices", params=params)).json()
        seen += ids(body)
        pages += 1
        if body["nextCursor"] is None:
            break
        params["cursor"] = body["nextCursor"]
    assert seen == everything == sorted(everything)
    assert pages == 3


@pytest.mark.usefixtures("loaded")
async def test_device_with_slashes_in_its_id_is_served_in_camel_case(
    api: httpx.AsyncClient,
) -> None:
    response = await api.get(f"/v1/nodes/gpu-node-b/devices/{DRA_ID}")
    assert response.status_code == 200, response.text
    assert response.json() == {
        "node": "gpu-node-b",
        "resourceID": DRA_ID,
        "resourceName": "claim:gpus/gpu",
        "source": "dra",
        "health": "Unknown",
        "rawHealth": "Degraded",
        "message": None,
        "statusVersion": str(2**70),
        "ordered": True,
        "lastObservedAt": "2026-11-29T12:00:30Z",
        "lastTransitionAt": "2026-11-29T12:00:30Z",
        "allocations": [
            {
                "podUID": "uid-9",
                "namespace": "infer",
                "podName": "train-0",
                "containers": [
                    {"name": "app", "kind": "regular"},
                    {"name": "setup", "kind": "init"},
                ],
                "claim": {
                    "podClaimName": "gpus",
                    "request": "gpu",
                    "resourceClaimName": "infer-gpus-x7",
                },
                "statusVersion": str(2**70),
            }
        ],
        "flags": [],
        "governance": None,  # the governor has not seen the device
    }
    # Percent-encoded slashes reach the same device.
    encoded = await api.get("/v1/nodes/gpu-node-b/devices/gpu.example.com%2Fpool-a%2Fgpu-2")
    assert encoded.status_code == 200
    assert encoded.json()["resourceID"] == DRA_ID


@pytest.mark.usefixtures("loaded")
async def test_history_is_newest_first_and_limited(api: httpx.AsyncClient) -> None:
    body = (await api.get("/v1/nodes/gpu-node-a/history/GPU-1")).json()
    assert [(e["kind"], e["health"], e["statusVersion"]) for e in body["items"]] == [
        ("released", "Unhealthy", "13"),
        ("observed", "Unhealthy", "12"),
        ("observed", "Healthy", "11"),
    ]
    assert [e["transition"] for e in body["items"]] == [False, True, True]
    assert body["items"][1]["message"] == "XID 79"
    assert (body["node"], body["resourceID"]) == ("gpu-node-a", "GPU-1")
    limited = (await api.get("/v1/nodes/gpu-node-a/history/GPU-1", params={"limit": 1})).json()
    assert [e["offset"] for e in limited["items"]] == [3]


@pytest.mark.usefixtures("loaded")
async def test_nodes_come_in_pages_that_follow_their_cursor(api: httpx.AsyncClient) -> None:
    """Issue 12's new user: ``GET /v1/nodes`` had no limit. A page of one node with a cursor,
    then the last page with none; each node's counts are those of the whole list."""
    first = (await api.get("/v1/nodes", params={"limit": 1})).json()
    assert [n["node"] for n in first["items"]] == ["gpu-node-a"]
    assert first["items"][0]["total"] == 5  # every health of the node, not one row of it
    second = (await api.get("/v1/nodes", params={"limit": 1, "cursor": first["nextCursor"]})).json()
    assert [n["node"] for n in second["items"]] == ["gpu-node-b"]
    assert second["nextCursor"] is None
    bad = await api.get("/v1/nodes", params={"cursor": "nope"})
    assert bad.status_code == 422 and "malformed cursor" in bad.text
    assert (await api.get("/v1/nodes", params={"limit": 0})).status_code == 422


@pytest.mark.usefixtures("loaded")
async def test_nodes_and_fleet_counts(api: httpx.AsyncClient) -> None:
    body = (await api.get("/v1/nodes")).json()
    assert body["nextCursor"] is None
    nodes = body["items"]
    assert nodes == [
        {
            "node": "gpu-node-a",
            "total": 5,
            "byHealth": {"Healthy": 4, "Unhealthy": 1, "Unknown": 0},
        },
        {
            "node": "gpu-node-b",
            "total": 1,
            "byHealth": {"Healthy": 0, "Unhealthy": 0, "Unknown": 1},
        },
    ]
    node = (await api.get("/v1/nodes/gpu-node-a")).json()
    assert node["total"] == 5
    assert [d["resourceID"] for d in node["devices"]] == [f"GPU-{i}" for i in range(5)]
    fleet = (await api.get("/v1/fleet")).json()
    assert fleet == {
        "total": 6,
        "nodes": 2,
        "byHealth": {"Healthy": 4, "Unhealthy": 1, "Unknown": 1},
        "bySource": {"device-plugin": 5, "dra": 1},
        "governance": {  # no governor ran here (tests/api/test_fleet_governance.py)
            "governorSeen": False,
            "breaker": {"open": False, "openedAt": None, "incident": None},
            "automation": {"paused": False, "pausedBy": None, "reason": None},
            "watch": {"stale": False, "lastSeenAt": None, "incident": None},
            "nodeIncidents": [],
        },
    }


@pytest.mark.usefixtures("loaded")
@pytest.mark.parametrize(
    ("path", "needle"),
    [
        ("/v1/nodes/gpu-node-a/devices/GPU-77", "GPU-77"),
        ("/v1/nodes/gpu-node-z/devices/GPU-0", "gpu-node-z"),
        ("/v1/nodes/gpu-node-a/history/GPU-77", "GPU-77"),
        ("/v1/nodes/gpu-node-z", "gpu-node-z"),
    ],
)
async def test_unknown_device_or_node_is_404_with_a_message(
    api: httpx.AsyncClient, path: str, needle: str
) -> None:
    response = await api.get(path)
    assert response.status_code == 404
    assert needle in response.json()["detail"]


@pytest.mark.parametrize(
    ("query", "needle"),
    [
        ({"health": "healthy"}, "Healthy"),
        ({"source": "plugin"}, "device-plugin"),
        ({"limit": "0"}, "greater than or equal to 1"),
        ({"limit": "1001"}, "less than or equal to 1000"),
        ({"limit": "ten"}, "integer"),
        ({"cursor": "not-a-cursor"}, "malformed cursor"),
        ({"cursor": "WzFd"}, "malformed cursor"),  # base64 of [1]
    ],
)
async def test_invalid_query_is_422_with_a_clear_message(
    api: httpx.AsyncClient, query: dict[str, str], needle: str
) -> None:
    response = await api.get("/v1/devices", params=query)
    assert response.status_code == 422
    assert needle in response.text


async def test_readyz_needs_partition_progress(
    api: httpx.AsyncClient,
    store: ProjectionStore,
    observation: ObservationFactory,
    logged: LogFactory,
) -> None:
    assert (await api.get("/healthz")).json() == {"status": "ok"}
    before = await api.get("/readyz")
    assert before.status_code == 503
    assert "no partition progress" in before.json()["reason"]
    await store.apply_batch(LoggedBatch(logged([observation(1)]), highwaters={(TOPIC, 0): 4}))
    after = await api.get("/readyz")
    assert after.status_code == 200
    assert after.json()["partitions"] == [
        {
            "topic": TOPIC,
            "partition": 0,
            "offset": 0,
            "highwater": 4,
            "lag": 3,
            "lastEventAt": "2026-11-29T12:00:00Z",
        }
    ]


async def test_readyz_is_503_while_the_lag_cannot_be_measured(
    database_url: str,
    fresh_schema: str,
    store: ProjectionStore,
    observation: ObservationFactory,
    logged: LogFactory,
) -> None:
    await store.apply_batch(LoggedBatch(logged([observation(1)]), highwaters={(TOPIC, 0): 1}))
    # Port 9 (discard): no broker answers; the projection alone would say "caught up".
    settings = Settings(
        database_url=database_url,
        database_schema=fresh_schema,
        kafka_bootstrap_servers="127.0.0.1:9",
    )
    app, client = client_for(settings)
    async with app.router.lifespan_context(app), client:
        response = await client.get("/readyz")
        assert response.status_code == 503
        assert response.json()["reason"].startswith("projection lag unknown: Kafka did not answer")
        assert response.json()["partitions"][0]["lag"] == 0
        assert "devicestate_api_lag_up 0.0" in (await client.get("/metrics")).text


async def test_database_unreachable_gives_503_with_a_reason() -> None:
    # Port 9 (discard) on loopback: nothing listens, the connection is refused at once.
    settings = Settings(database_url="postgresql+asyncpg://nobody:x@127.0.0.1:9/none")
    app, client = client_for(settings)
    async with app.router.lifespan_context(app), client:
        response = await client.get("/readyz")
        assert response.status_code == 503
        assert "database unreachable" in response.json()["reason"]
        metrics = await client.get("/metrics")
        assert "devicestate_api_database_up 0.0" in metrics.text
        devices = await client.get("/v1/devices")
        assert devices.status_code == 503
        assert devices.json()["detail"].startswith("database unavailable")


@pytest.mark.usefixtures("loaded")
async def test_metrics_report_freshness_lag_and_devices_by_health(api: httpx.AsyncClient) -> None:
    response = await api.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    assert "devicestate_api_database_up 1.0" in text
    assert 'devicestate_devices{health="Unhealthy"} 1.0' in text
    assert 'devicestate_devices{health="Healthy"} 4.0' in text
    # 9 events at offsets 0..8, highwater 14: the worker last saw 5 records it had not applied.
    assert f'devicestate_projection_recorded_lag{{partition="0",topic="{TOPIC}"}} 5.0' in text
    freshness = next(
        line for line in text.splitlines() if line.startswith("devicestate_projection_freshness")
    )
    # Newest applied event: T0 + 90 s. The gauge is wall clock minus that (negative under skew).
    expected = (datetime.now(UTC) - (T0 + timedelta(seconds=90))).total_seconds()
    assert float(freshness.split()[1]) == pytest.approx(expected, abs=30)


async def test_openapi_documents_the_url_scheme(api: httpx.AsyncClient) -> None:
    spec = (await api.get("/openapi.json")).json()
    paths = spec["paths"]
    assert "/v1/nodes/{node}/devices/{resourceID}" in paths
    assert "/v1/nodes/{node}/history/{resourceID}" in paths
    params = paths["/v1/nodes/{node}/devices/{resourceID}"]["get"]["parameters"]
    assert [p["name"] for p in params] == ["node", "resourceID"]
    assert "last" in spec["info"]["description"]
    assert (await api.get("/docs")).status_code == 200


@pytest.mark.parametrize(
    "path",
    [
        "/v1/nodes/GPU_Node",
        "/v1/nodes/-node/devices/GPU-0",
        "/v1/nodes/node./history/GPU-0",
        "/v1/devices?node=Node-A",
        "/v1/quarantines?node=a_b",
        "/v1/workloads?node=BAD_N",
        "/v1/inventory/devices?node=BAD_N",
        f"/v1/nodes/{'a' * 254}",
    ],
)
async def test_a_node_that_is_no_node_name_is_a_422_not_a_404_or_an_empty_page(
    api: httpx.AsyncClient, path: str
) -> None:
    """Issue 12's new user: a node name the directory can never hold (not a DNS-1123 subdomain,
    which the worker refuses to store) says so, instead of answering as if it were unknown."""
    response = await api.get(path)
    assert response.status_code == 422, response.text
    assert "node" in response.text and "pattern" not in response.text, response.text
