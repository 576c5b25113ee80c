"""``devicestate_dra_failures_total`` on ``/metrics`` (issue 16 item 3): the projection's
``dra_failures`` summed per class, reason and namespace when scraped; the same after the API
restarts; ``devicestate_api_dra_failures_up`` 0 while the table does not exist."""

from __future__ import annotations

from datetime import timedelta

from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from services.adapters.projection.store import ProjectionStore
from services.domain.adoption.failure_classes import FailureClass
from services.domain.adoption.failure_events import DRAFailureObserved, FailureOrigin
from services.domain.batch import LoggedBatch
from services.domain.log import LogPosition
from tests.api.conftest import ApiFactory
from tests.conftest import T0


def failure(uid: str, count: int, cls: FailureClass, reason: str, ns: str) -> DRAFailureObserved:
    return DRAFailureObserved(
        source_uid=uid,
        occurrences=count,
        origin=FailureOrigin.EVENT,
        namespace=ns,
        pod_name="p",
        pod_uid=None,
        node_name="gpu-a",
        reason=reason,
        message="m",
        failure_class=cls,
        why="w",
        observed_at=T0 + timedelta(seconds=count),
    )


def samples(body: str) -> dict[tuple[str, str, str], float]:
    found = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            if s.name == "devicestate_dra_failures_total":
                found[(s.labels["class"], s.labels["reason"], s.labels["namespace"])] = s.value
    return found


async def test_the_counter_sums_the_projection_by_class(
    engine: AsyncEngine, fresh_schema: str, make_inventory_api: ApiFactory
) -> None:
    store = ProjectionStore(engine, fresh_schema)
    records = [
        failure("a", 2, FailureClass.RETRYABLE, "FailedPrepareDynamicResources", "ml"),
        failure("a", 5, FailureClass.RETRYABLE, "FailedPrepareDynamicResources", "ml"),
        failure("b", 1, FailureClass.RETRYABLE, "FailedPrepareDynamicResources", "ml"),
        failure("c", 3, FailureClass.NON_RETRYABLE, "FailedScheduling", "team-b"),
        failure("d", 1, FailureClass.NEEDS_CLEANUP, "FailedUnprepareDynamicResources", "ml"),
    ]
    positions = [LogPosition("t", 0, i) for i in range(len(records))]
    await store.apply_batch(
        LoggedBatch(
            event_times=[(p, r.observed_at) for p, r in zip(positions, records, strict=True)],
            failures=list(zip(positions, records, strict=True)),
        )
    )
    # "a" again with a smaller count (a record published before the one with 5, read later).
    late = failure("a", 4, FailureClass.RETRYABLE, "FailedPrepareDynamicResources", "ml")
    position = LogPosition("t", 0, len(records))
    await store.apply_batch(
        LoggedBatch(event_times=[(position, late.observed_at)], failures=[(position, late)])
    )
    expected = {
        ("retryable", "FailedPrepareDynamicResources", "ml"): 6.0,
        ("non-retryable", "FailedScheduling", "team-b"): 3.0,
        ("needs-cleanup", "FailedUnprepareDynamicResources", "ml"): 1.0,
    }
    for _ in range(2):  # a new API process serves the same counts
        async with make_inventory_api() as client:
            body = (await client.get("/metrics")).text
            assert samples(body) == expected
            assert "devicestate_api_dra_failures_up 1.0" in body
            assert "# TYPE devicestate_dra_failures_total counter" in body


async def test_without_the_table_the_read_is_down(
    engine: AsyncEngine, fresh_schema: str, make_inventory_api: ApiFactory
) -> None:
    async with engine.begin() as conn:
        await conn.execute(text(f'DROP TABLE "{fresh_schema}".dra_failures'))
    async with make_inventory_api() as client:
        body = (await client.get("/metrics")).text
        assert "devicestate_api_dra_failures_up 0.0" in body
        assert samples(body) == {}
