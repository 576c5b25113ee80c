"""``devicestate migrations list|show|evidence`` against a running API (uvicorn in a thread) on the
decisions of the real governor (``machine.step``), written as the worker writes them (real
PostgreSQL): the migration of ``tests/api/test_migrations_api.py``, planned then completed."""

from __future__ import annotations

import orjson
import pytest
import typer
from sqlalchemy.ext.asyncio import AsyncEngine
from typer.testing import CliRunner, Result

from services.domain.events import Health
from services.domain.migration.records import (
    EvidencePod,
    MigrationEvidence,
    MigrationReport,
    ReportKind,
)
from tests.api.conftest import Governor
from tests.api.test_migration_evidence_api import Stored
from tests.api.test_migrations_api import Written
from tests.governance.migration_builders import N1, N2, quarantine, workload
from tests.governance.strategies import at, transition, watermark

pytestmark = pytest.mark.integration


def run(cli: typer.Typer, api_url: str, *args: str) -> Result:
    return CliRunner().invoke(cli, [*args, "--api-url", api_url], env={"DEVICESTATE_TOKEN": ""})


async def test_migrations_list_and_show(cli: typer.Typer, api_url: str, governor: Governor) -> None:
    g = Written(governor)
    await g.feed(transition(N2, "GPU-0", Health.HEALTHY, 1, 0))
    await g.feed(workload(N1, "GPU-0", "W", "train-0", "checkpointed", 5, 1, max_age=600))
    quarantine(g.run, N1, "GPU-0", 10)
    await g.flush()

    table = run(cli, api_url, "migrations", "list")
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert lines[0].split() == [
        "MIGRATION",
        "PHASE",
        "NODE",
        "DEVICE",
        "CLASS",
        "REASON",
        "UPDATED",
    ]
    cells = lines[1].split()
    assert cells[0].startswith("m-") and cells[1:6] == ["planned", N1, "GPU-0", "checkpointed", "-"]
    assert "1 migrations: 1 planned" in table.stdout
    mid = cells[0]

    await g.feed(MigrationReport(mid, ReportKind.LEASE_REQUESTED, "exec-a", at(11)))
    wide = run(cli, api_url, "migrations", "list", "-o", "wide")
    assert wide.exit_code == 0, wide.output
    row = next(line for line in wide.stdout.splitlines() if line.startswith(mid))
    assert "exec-a" in row and "team-a/train-0" in row

    as_json = run(cli, api_url, "migrations", "list", "--phase", "failed", "-o", "json")
    assert as_json.exit_code == 0, as_json.output
    assert orjson.loads(as_json.stdout) == []

    shown = run(cli, api_url, "migrations", "show", mid)
    assert shown.exit_code == 0, shown.output
    kinds = [
        line.split()[1] for line in shown.stdout.splitlines()[1:] if line.strip()[:1].isdigit()
    ]
    assert kinds[:2] == ["MigrationPlanned", "MigrationLeaseGranted"]
    assert f"migration {mid}:" in shown.stdout

    unknown = run(cli, api_url, "migrations", "show", "m-00000000000000000000")
    assert unknown.exit_code != 0
    assert "unknown to the governor" in unknown.output


async def test_migrations_evidence(
    cli: typer.Typer, api_url: str, engine: AsyncEngine, fresh_schema: str
) -> None:
    g = Stored(engine, fresh_schema)
    await g.feed(watermark(0), transition(N1, "GPU-0", Health.HEALTHY, 1, 0))
    await g.feed(workload(N1, "GPU-0", "W", "infer-0", None, 5, 1))
    await g.feed(transition(N1, "GPU-0", Health.UNHEALTHY, 10, 10), watermark(10))
    (mid,) = g.run.state.fleet.migrations.migrations
    none = run(cli, api_url, "migrations", "evidence", mid)
    assert none.exit_code != 0 and "no evidence is stored" in none.output
    pod = EvidencePod(
        "team-a", "infer-0", "uid-infer-0", "42", {"phase": "Failed", "reason": "OOM"}
    )
    await g.feed(MigrationEvidence(mid, "exec-a", at(14), at(15), (pod,)))

    table = run(cli, api_url, "migrations", "evidence", mid)
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["NAMESPACE", "POD", "UID", "PHASE", "REASON", "COLLECTED"]
    assert lines[1].split()[:5] == ["team-a", "infer-0", "uid-infer-0", "Failed", "OOM"]
    assert f"migration {mid}: evidence-kept; device {N1}/GPU-0" in table.stdout
    as_json = run(cli, api_url, "migrations", "evidence", mid, "-o", "json")
    assert as_json.exit_code == 0, as_json.output
    assert orjson.loads(as_json.stdout)["pods"][0]["status"] == {"phase": "Failed", "reason": "OOM"}
