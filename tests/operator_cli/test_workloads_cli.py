"""``devicestate workloads`` against a running API (uvicorn in a thread) on the workloads of
``tests/api/workloads_scenario.py`` (real PostgreSQL)."""

from __future__ import annotations

import orjson
import pytest
import typer
from typer.testing import CliRunner, Result

from services.adapters.projection.store import ProjectionStore
from tests.api.conftest import Governor
from tests.api.workloads_scenario import load_workloads
from tests.conftest import LogFactory, ObservationFactory

pytestmark = pytest.mark.integration


def run(cli: typer.Typer, api_url: str, *args: str) -> Result:
    return CliRunner().invoke(cli, [*args, "--api-url", api_url], env={"DEVICESTATE_TOKEN": ""})


@pytest.fixture
async def loaded(
    store: ProjectionStore, governor: Governor, observation: ObservationFactory, logged: LogFactory
) -> None:
    await load_workloads(store, governor, observation, logged)


@pytest.mark.usefixtures("loaded")
def test_workloads_table_wide_and_json(cli: typer.Typer, api_url: str) -> None:
    table = run(cli, api_url, "workloads")
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["NAMESPACE", "POD", "NODE", "WORKLOAD", "CLASS", "DEVICES"]
    assert lines[1].split() == [
        "ml",
        "train-0",
        "gpu-node-a",
        "JobSet/train",
        "checkpointed",
        "GPU-0",
        "(Quarantined)",
    ]
    assert "1 Pods on quarantined devices: 1 checkpointed" in table.stdout

    wide = run(cli, api_url, "workloads", "--all", "-o", "wide", "-n", "ml")
    assert wide.exit_code == 0, wide.output
    train = next(line for line in wide.stdout.splitlines() if "train-0" in line)
    assert "Job/train-0 > JobSet/train" in train and "900s" in train
    assert "web-x" in wide.stdout and "solo" not in wide.stdout

    as_json = run(cli, api_url, "workloads", "-A", "-o", "json")
    assert as_json.exit_code == 0, as_json.output
    items = orjson.loads(as_json.stdout)
    assert [(i["pod"]["uid"], i["workload"]["kind"]) for i in items] == [
        ("uid-1", "JobSet"),
        ("uid-2", "Deployment"),
        ("uid-3", "Pod"),
    ]


def test_unreachable_api_exits_2(cli: typer.Typer) -> None:
    result = run(cli, "http://127.0.0.1:9", "workloads")
    assert result.exit_code == 2
    assert "error:" in result.output
