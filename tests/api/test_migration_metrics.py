"""The migration metrics on the API's ``/metrics`` (issue 13 item 5), on the real PostgreSQL: the
real governor (``machine.step``) runs the shared scenario
(``tests/governance/migration_metrics_scenario.py``), its decisions are written to
``governance_decisions`` as the worker writes them, and ``/metrics`` serves the outcomes, the
deferrals, the waiting gauge, both histograms and the idle GPU-seconds; a new API process serves
the same; ``devicestate_api_migrations_up`` is 0 while the table does not exist."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from services.adapters.projection.governance_rows import decision_row
from services.adapters.projection.governance_tables import governance_decisions
from services.domain.governance.decisions import Decision
from tests.api.conftest import ApiFactory, Governor
from tests.governance.harness import GovernanceRun
from tests.governance.migration_builders import POLICY
from tests.governance.migration_metrics_scenario import IDLE_GPU_SECONDS, scenario

pytestmark = pytest.mark.integration


def samples(body: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the migration families, by name and labels."""
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(body):
        if "migration" not in family.name and "idle_gpu" not in family.name:
            continue
        for s in family.samples:
            found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return found


async def write(governor: Governor, decisions: list[Decision]) -> None:
    if decisions:
        await governor._insert(governance_decisions, [decision_row(d) for d in decisions])


async def scrape(make_api: ApiFactory) -> dict[Any, float]:
    async with make_api() as client:
        response = await client.get("/metrics")
        assert response.status_code == 200
        assert "devicestate_api_migrations_up 1.0" in response.text
        return samples(response.text)


async def test_metrics_follow_the_governor_s_decisions_and_survive_a_restart(
    make_api: ApiFactory, governor: Governor
) -> None:
    run = GovernanceRun(policy=POLICY)
    cut: dict[str, int] = {}
    scenario(run, lambda step: cut.setdefault(step, len(run.decisions)))

    await write(governor, run.decisions[: cut["deferred"]])
    early = await scrape(make_api)
    assert early[("devicestate_migrations_waiting", (("waiting_for", "rate-limited"),))] == 1
    assert early[("devicestate_migrations_deferred_total", (("waiting_for", "rate-limited"),))] == 1
    assert early[("devicestate_migrations_waiting", (("waiting_for", "breaker-open"),))] == 0
    assert (
        early[
            (
                "devicestate_migrations_total",
                (("namespace", "team-b"), ("outcome", "evidence-kept"), ("reason", "")),
            )
        ]
        == 1
    )

    await write(governor, run.decisions[cut["deferred"] :])
    for _ in range(2):  # a new API process serves the same values
        got = await scrape(make_api)
        outcomes = {k[1]: v for k, v in got.items() if k[0] == "devicestate_migrations_total"}
        assert outcomes == {
            (("namespace", "team-a"), ("outcome", "completed"), ("reason", "")): 1,
            (("namespace", "team-b"), ("outcome", "evidence-kept"), ("reason", "")): 1,
            (("namespace", "team-c"), ("outcome", "failed"), ("reason", "checkpoint-timeout")): 1,
        }
        assert got[("devicestate_migrations_waiting", (("waiting_for", "rate-limited"),))] == 0
        assert (
            got[("devicestate_migrations_deferred_total", (("waiting_for", "rate-limited"),))] == 1
        )
        checkpoint = "devicestate_migration_checkpoint_seconds"
        assert got[(f"{checkpoint}_bucket", (("le", "15.0"),))] == 0
        assert got[(f"{checkpoint}_bucket", (("le", "30.0"),))] == 1
        assert got[(f"{checkpoint}_sum", ())] == 30.0
        assert got[(f"{checkpoint}_count", ())] == 1
        rebuild = "devicestate_migration_rebuild_seconds"
        assert got[(f"{rebuild}_bucket", (("le", "10.0"),))] == 1
        assert got[(f"{rebuild}_sum", ())] == 10.0
        assert got[("devicestate_quarantined_idle_gpu_seconds_total", ())] == IDLE_GPU_SECONDS


async def test_without_the_table_the_read_is_down(
    engine: AsyncEngine, fresh_schema: str, make_api: ApiFactory
) -> None:
    async with engine.begin() as conn:
        await conn.execute(text(f'DROP TABLE "{fresh_schema}".governance_decisions CASCADE'))
    async with make_api() as client:
        body = (await client.get("/metrics")).text
    assert "devicestate_api_migrations_up 0.0" in body
    assert "devicestate_migrations_total" not in body


async def test_one_api_folds_only_the_new_decisions_and_starts_again_after_a_rebuild(
    engine: AsyncEngine, fresh_schema: str, make_api: ApiFactory, governor: Governor
) -> None:
    """One API process scraped between the writes (it folds only what was written since) serves
    what a fresh process computes from the whole table; a table rebuilt shorter (a replay into
    an emptied projection) is folded again from its first decision, not added to the old."""
    run = GovernanceRun(policy=POLICY)
    cut: dict[str, int] = {}
    scenario(run, lambda step: cut.setdefault(step, len(run.decisions)))
    async with make_api() as client:

        async def scraped() -> dict[Any, float]:
            response = await client.get("/metrics")
            assert "devicestate_api_migrations_up 1.0" in response.text
            return samples(response.text)

        await write(governor, run.decisions[: cut["deferred"]])
        early = await scraped()
        await write(governor, run.decisions[cut["deferred"] :])
        assert await scraped() == await scrape(make_api)  # incremental == whole
        total = ("devicestate_migrations_total",)
        assert sum(v for k, v in (await scraped()).items() if k[:1] == total) == 3  # not re-added

        async with engine.begin() as conn:
            await conn.execute(text(f'TRUNCATE "{fresh_schema}".governance_decisions'))
        await write(governor, run.decisions[: cut["deferred"]])
        assert await scraped() == early
