"""``GET /v1/adoption/report`` (issue 16 item 5) on the real PostgreSQL: the small fleet of
``tests/api/inventory_scenario.py`` written by the store as the worker writes it, with
``PodLifecycleObserved`` records through ``apply_batch``; the figures, the errors and the
``/metrics`` gauges."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest

from services.adapters.projection.store import ProjectionStore
from services.domain.adoption.failure_classes import FailureClass
from services.domain.adoption.failure_events import DRAFailureObserved, FailureOrigin
from services.domain.batch import LoggedBatch
from services.domain.lifecycle import DevicePath, Stage
from services.domain.lifecycle_events import PodLifecycleObserved, StageSample
from services.domain.log import LogPosition
from tests.api.conftest import ApiFactory, Governor, InventoryWriter, bearer
from tests.api.inventory_scenario import DRIVER, NODE_A, NODE_C, load_fleet
from tests.conftest import T0, TOPIC, LogFactory, ObservationFactory

pytestmark = pytest.mark.integration

PLUGIN = "nvidia.com/gpu"


def _record(uid: str, node: str, path: DevicePath, *stages: tuple[Stage, float]) -> Any:
    cls = DRIVER if path is DevicePath.DRA else PLUGIN
    at = T0 + timedelta(minutes=30)
    samples = tuple(StageSample(s, cls, path, sec) for s, sec in stages)
    return PodLifecycleObserved(node, "ml", f"pod-{uid}", uid, at, samples)


async def _write_lifecycles(store: ProjectionStore, records: list[PodLifecycleObserved]) -> None:
    items = [(LogPosition(TOPIC, 0, 100 + i), r) for i, r in enumerate(records)]
    await store.apply_batch(
        LoggedBatch(
            (),
            highwaters={(TOPIC, 0): 100 + len(items)},
            event_times=[(p, r.observed_at) for p, r in items],
            lifecycles=items,
        )
    )


CLAIMED_POD = "e71c2dba-c432-5d7b-9dd2-52378aba9e6f"  # the example claim's reservedFor


def _failure(uid: str, count: int, reason: str, pod_uid: str, node: str | None) -> Any:
    return DRAFailureObserved(
        source_uid=uid,
        occurrences=count,
        origin=FailureOrigin.POD_CONDITION if reason == "Unschedulable" else FailureOrigin.EVENT,
        namespace="ml",
        pod_name=f"pod-{pod_uid}",
        pod_uid=pod_uid,
        node_name=node,
        reason=reason,
        message="0/3 nodes are available: 3 cannot allocate all claims.",
        failure_class=FailureClass.RETRYABLE,
        why="w",
        observed_at=T0 + timedelta(minutes=10),
    )


async def _write_failures(store: ProjectionStore, records: list[DRAFailureObserved]) -> None:
    items = [(LogPosition(TOPIC, 0, 200 + i), r) for i, r in enumerate(records)]
    await store.apply_batch(
        LoggedBatch(
            (),
            highwaters={(TOPIC, 0): 200 + len(items)},
            event_times=[(p, r.observed_at) for p, r in items],
            failures=items,
        )
    )


def _rows(body: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["pool"], r["path"]): r for r in body["rows"]}


async def test_the_report_compares_dra_with_the_plugin(
    gov_api: httpx.AsyncClient,
    governor: Governor,
    inventory_writer: InventoryWriter,
    store: ProjectionStore,
    observation: ObservationFactory,
    logged: LogFactory,
) -> None:
    await load_fleet(inventory_writer, store, governor, observation, logged)
    dra, plugin = DevicePath.DRA, DevicePath.DEVICE_PLUGIN
    records = [
        _record(
            "d1",
            NODE_A,
            dra,
            (Stage.CLAIM_ALLOCATED, 2),
            (Stage.POD_BOUND, 1),
            (Stage.POD_READY, 10),
        ),
        _record(
            "d2",
            NODE_A,
            dra,
            (Stage.CLAIM_ALLOCATED, 4),
            (Stage.POD_BOUND, 2),
            (Stage.POD_READY, 30),
        ),
        _record("p1", NODE_C, plugin, (Stage.POD_BOUND, 20), (Stage.POD_READY, 5)),
    ]
    await _write_lifecycles(store, records)
    await _write_lifecycles(store, [records[0]])  # a re-publish (new offsets): first wins
    prepare = "FailedPrepareDynamicResources"
    await _write_failures(
        store,
        [
            _failure("ev-1", 1, prepare, CLAIMED_POD, NODE_A),
            _failure("ev-1", 3, prepare, CLAIMED_POD, NODE_A),  # the same Event, count grown
            _failure("ev-2", 2, "FailedScheduling", "d1", None),  # d1 ran later: class known
            _failure("d1/PodScheduled/t", 1, "Unschedulable", "d1", None),  # same failure
            _failure("ev-3", 1, "FailedScheduling", "pending", None),  # class unknown
        ],
    )

    query = {"class": DRIVER, "resource": PLUGIN, "minSamples": "2", "window": "86400"}
    response = await gov_api.get("/v1/adoption/report", params=query, headers=bearer("viewer"))
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["deviceClass"], body["pluginResource"], body["failureCounts"]) == (
        DRIVER,
        PLUGIN,
        True,
    )
    assert body["windowEnd"] == "2026-11-29T12:30:00Z"  # the health topic's event time
    rows = _rows(body)
    assert set(rows) == {(p, path) for p in ("unpooled", "*") for path in ("dra", "device-plugin")}
    fleet_dra = rows[("*", "dra")]
    assert fleet_dra["pendingToBound"]["p50"] == {"value": 3.0, "samples": 2, "note": None}
    assert fleet_dra["pendingToBound"]["p95"]["value"] == 6.0
    assert fleet_dra["boundToReady"]["p95"]["value"] == 30.0
    # gpu-0..7 on one node: gpu-2/3 allocated, gpu-5 quarantined and tainted -> 5 free, one node
    assert fleet_dra["fragmentation"] == {"value": 0.0, "samples": 5, "note": None}
    # the one claim, allocated, over it + the Pods that failed: its own Pod (prepare) and d1
    # (FailedScheduling and Unschedulable: one failure); the pending Pod has no known class
    assert fleet_dra["allocationSuccess"] == {"value": 1 / 3, "samples": 3, "note": None}
    unpooled = rows[("unpooled", "dra")]["allocationSuccess"]
    assert (unpooled["value"], unpooled["samples"]) == (0.5, 2)  # d1's failure had no node
    assert unpooled["note"] == "failures without a node count in pool * only"
    fleet_plugin = rows[("*", "device-plugin")]
    assert fleet_plugin["boundToReady"]["p50"]["value"] is None  # one Pod, minimum 2
    assert "insufficient data" in fleet_plugin["boundToReady"]["p50"]["note"]
    # free plugin GPUs: 1 on gpu-node-c (never reported), 4 on gpu-node-e
    assert fleet_plugin["fragmentation"]["value"] == 0.2
    hours = fleet_plugin["deviceHours"]
    assert hours["capacity"] == {"value": 7 * 24.0, "samples": 7, "note": None}
    assert hours["allocated"]["value"] > 0
    assert hours["idle"]["value"] == pytest.approx(
        hours["capacity"]["value"] - hours["allocated"]["value"]
    )
    assert (
        fleet_plugin["allocationSuccess"]["note"] == "no source of failed device-plugin allocations"
    )

    one = await gov_api.get(
        "/v1/adoption/report", params={**query, "pool": "*"}, headers=bearer("viewer")
    )
    assert {r["pool"] for r in one.json()["rows"]} == {"*"}

    metrics = (await gov_api.get("/metrics")).text
    assert (
        'devicestate_adoption_fragmentation{class="gpu.example.com",path="dra",pool="*"} 0.0'
        in metrics
    )
    assert (
        'devicestate_adoption_device_hours{class="gpu.example.com",path="dra",pool="*",state="capacity"}'
        in metrics
    )
    # the gauges' default minimum (20) leaves the rates without a value: no sample
    assert "devicestate_adoption_allocation_success{" not in metrics


@pytest.mark.parametrize(
    ("params", "status"),
    [
        ({}, 422),  # class is required
        ({"class": DRIVER, "window": "10"}, 422),
        ({"class": DRIVER, "minSamples": "0"}, 422),
        ({"class": "Not A Class"}, 422),
        ({"class": DRIVER, "bogus": "1"}, 422),
        ({"class": "nope.example.com"}, 404),
        ({"class": DRIVER, "pool": "nowhere"}, 404),
    ],
)
async def test_bad_requests_get_a_4xx_with_a_message(
    gov_api: httpx.AsyncClient,
    governor: Governor,
    inventory_writer: InventoryWriter,
    store: ProjectionStore,
    observation: ObservationFactory,
    logged: LogFactory,
    params: dict[str, str],
    status: int,
) -> None:
    await load_fleet(inventory_writer, store, governor, observation, logged)
    response = await gov_api.get("/v1/adoption/report", params=params, headers=bearer("viewer"))
    assert response.status_code == status, response.text
    assert response.json()["detail"]


async def test_the_report_needs_a_viewer_token_without_anonymous_reads(
    make_api: ApiFactory,
    governor: Governor,
    inventory_writer: InventoryWriter,
    store: ProjectionStore,
    observation: ObservationFactory,
    logged: LogFactory,
) -> None:
    await load_fleet(inventory_writer, store, governor, observation, logged)
    async with make_api(api_anonymous_read=False) as client:
        params = {"class": DRIVER}
        assert (await client.get("/v1/adoption/report", params=params)).status_code == 401
        viewer = await client.get("/v1/adoption/report", params=params, headers=bearer("viewer"))
        assert viewer.status_code == 200, viewer.text
