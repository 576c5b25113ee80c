"""The scheduler extender's read model (``services/processes/api/warm_node_facts.py``): on the
fleet of ``tests/api/inventory_scenario.py`` (real PostgreSQL), the in-memory copy answers what
the per-call read answers, follows a change by the next refresh, and the filter served from it
gives the same verdicts."""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any

import pytest
from sqlalchemy import update

from services.adapters.projection.governance_tables import device_governance
from services.adapters.projection.reads_node_facts import ROWS_PER_FETCH, NodeFactReads, facts_of
from services.adapters.projection.store import ProjectionStore
from services.adapters.projection.tables import in_schema
from services.domain.batch import LoggedBatch
from services.domain.placement import NodeFacts
from services.processes.api.warm_node_facts import WarmNodeFacts
from tests.api.conftest import ApiFactory, tokens_json
from tests.api.inventory_scenario import NODE_A, NODE_B, NODE_C, NODE_E
from tests.api.test_scheduler_extender import CANDIDATES, pod
from tests.api.test_scheduler_extender import fleet as fleet  # the fixture
from tests.conftest import LogFactory, ObservationFactory

pytestmark = pytest.mark.integration

NODES = [NODE_A, NODE_B, NODE_C, NODE_E, "gpu-node-d"]
RESOURCES = [["nvidia.com/gpu"], ["nvidia.com/gpu", "example.com/fpga"], ["example.com/none"]]


def comparable(facts: dict[str, NodeFacts]) -> dict[str, Any]:
    """Facts with their device lists sorted (SQL gives rows in no order)."""
    return {
        node: (
            f.capacity,
            f.allocatable,
            sorted(f.devices, key=lambda d: d.resource_id),
            sorted(f.blocked, key=lambda d: d.resource_id),
        )
        for node, f in facts.items()
    }


async def release_b1(engine: Any, schema: str) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            update(device_governance)
            .where(device_governance.c.resource_id == "GPU-b1")
            .values(state="Available", quarantine_id=None),
            execution_options=in_schema(schema),
        )


@pytest.mark.usefixtures("fleet")
async def test_the_copy_answers_what_the_per_call_read_answers(
    engine: Any, fresh_schema: str
) -> None:
    reads = NodeFactReads(engine, fresh_schema)
    warm = WarmNodeFacts(reads, poll_seconds=0.1)
    await warm.load()
    assert len(warm) >= 4
    for resources in RESOURCES:
        held = warm.facts(NODES, resources)
        assert held is not None
        assert comparable(held) == comparable(await reads.for_nodes(NODES, resources))
    assert comparable(warm.facts(NODES, ["nvidia.com/gpu"]) or {})[NODE_B][3] != []

    # A change is read by the next refresh, only the changed node.
    await release_b1(engine, fresh_schema)
    assert await warm.refresh() == 1
    held = warm.facts(NODES, ["nvidia.com/gpu"])
    assert held is not None and held[NODE_B].blocked == []
    assert comparable(held) == comparable(await reads.for_nodes(NODES, ["nvidia.com/gpu"]))
    assert await warm.refresh() == 0  # nothing written since


async def test_facts_of_leaves_out_what_the_per_call_read_leaves_out() -> None:
    warm = {"n1": NodeFacts(None, None, [], []), "n2": NodeFacts({"a": 1}, {"a": 1})}
    assert facts_of(warm, ["n1", "n2", "n3"], ["a"]) == {"n2": NodeFacts({"a": 1}, {"a": 1})}
    assert facts_of(warm, ["n2"], []) == {}


@pytest.mark.usefixtures("fleet")
async def test_the_filter_served_from_memory_follows_a_release(
    make_inventory_api: ApiFactory, engine: Any, fresh_schema: str
) -> None:
    async with make_inventory_api(
        scheduler_extender=True,
        api_read_cache=True,
        api_read_cache_poll_seconds=0.1,
        api_tokens=tokens_json(),
    ) as client:
        body = {"Pod": pod(1), "NodeNames": CANDIDATES}
        result = (await client.post("/scheduler/filter", json=body)).json()
        assert list(result["FailedNodes"]) == [NODE_B]
        metrics = (await client.get("/metrics")).text
        assert "devicestate_api_extender_read_model_ready 1.0" in metrics

        await release_b1(engine, fresh_schema)
        for _ in range(100):  # served within a poll and a refresh
            result = (await client.post("/scheduler/filter", json=body)).json()
            if not result["FailedNodes"]:
                break
            await asyncio.sleep(0.05)
        assert result["NodeNames"] == CANDIDATES and result["FailedNodes"] == {}


async def test_a_whole_load_lets_the_event_loop_serve_between_fetches(
    engine: Any,
    fresh_schema: str,
    store: ProjectionStore,
    observation: ObservationFactory,
    logged: LogFactory,
) -> None:
    """The copy reloads every node every minute: at fleet size hundreds of thousands of rows.
    No step of the load between two turns of the event loop takes more than a small part of
    its CPU (rows are fetched and turned into facts :data:`ROWS_PER_FETCH` at a time), so filter
    calls are answered during it."""
    count = 12 * ROWS_PER_FETCH
    seen = [
        observation(1, node=f"gpu-node-{i // 8:04d}", resource_id=f"GPU-{i}", pod_uid=f"u{i // 8}")
        for i in range(count)
    ]
    await store.apply_batch(LoggedBatch(logged(seen)))
    reads = NodeFactReads(engine, fresh_schema)
    await reads.load()  # statements compiled, connection set up: measure the steady reload
    gc.disable()  # a collection of the whole test session's objects is no step of the load
    try:
        started = time.process_time()
        load = asyncio.create_task(reads.load())
        longest, last = 0.0, time.process_time()
        while not load.done():  # one turn of the loop per pass: the time the load held it
            await asyncio.sleep(0)
            now = time.process_time()
            longest, last = max(longest, now - last), now
        facts, _ = await load
        spent = time.process_time() - started
    finally:
        gc.enable()
    assert sum(len(f.devices) for f in facts.values()) == count
    assert longest < spent / 4, (longest, spent)
