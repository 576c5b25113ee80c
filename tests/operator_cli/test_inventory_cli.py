"""``devicestate inventory|capacity|conflicts`` against a running API (uvicorn in a thread) on the
fleet of ``tests/api/inventory_scenario.py`` (real PostgreSQL)."""

from __future__ import annotations

import orjson
import pytest
import typer
from typer.testing import CliRunner, Result

from services.adapters.projection.store import ProjectionStore
from services.domain.inventory.events import InventoryObserved
from services.domain.inventory.state import Conflict, InventoryState
from tests.api.conftest import Governor, InventoryWriter
from tests.api.inventory_scenario import GPU, NODE_A, NODE_B, dra_objects, load_fleet
from tests.conftest import T0, LogFactory, ObservationFactory

pytestmark = pytest.mark.integration


def run(cli: typer.Typer, api_url: str, *args: str) -> Result:
    return CliRunner().invoke(cli, [*args, "--api-url", api_url], env={"DEVICESTATE_TOKEN": ""})


@pytest.fixture
async def fleet(
    inventory_writer: InventoryWriter,
    store: ProjectionStore,
    governor: Governor,
    observation: ObservationFactory,
    logged: LogFactory,
) -> None:
    await load_fleet(inventory_writer, store, governor, observation, logged)


@pytest.mark.usefixtures("fleet")
def test_inventory_table_wide_and_json(cli: typer.Typer, api_url: str) -> None:
    table = run(cli, api_url, "inventory")
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert lines[0].split()[:7] == [
        "NODE",
        "DEVICE",
        "ID",
        "OWNER",
        "CLASS",
        "HEALTH",
        "STATE",
    ]
    gpu5 = next(line for line in lines if GPU[5] in line)
    assert "Quarantined" in gpu5 and "Unhealthy" in gpu5 and "<idle>" in gpu5
    gpu2 = next(line for line in lines if GPU[2] in line)
    assert "ml-serving/infer-dra-0,ml-serving/infer-dra-1" in gpu2
    assert "11 devices: 7 not allocated, 2 unavailable" in table.stdout
    assert "5 device-plugin devices never reported" in table.stdout
    assert "gpu-node-c nvidia.com/gpu: 1" in table.stdout

    wide = run(cli, api_url, "inventory", "-o", "wide", "--node", NODE_A)
    assert wide.exit_code == 0, wide.output
    assert "gpu.example.com/xid=79:NoSchedule" in wide.stdout
    assert "GPU-c63229b9-0465-5d98-a1eb-027c31219bc4" in wide.stdout
    assert "gpu-node-b" not in wide.stdout

    as_json = run(cli, api_url, "inventory", "-o", "json", "--state", "Quarantined")
    assert as_json.exit_code == 0, as_json.output
    assert [(d["node"], d["deviceID"]) for d in orjson.loads(as_json.stdout)] == [
        (NODE_A, GPU[5]),
        (NODE_B, "GPU-b1"),
    ]
    bad = run(cli, api_url, "inventory", "--state", "Broken")
    assert bad.exit_code == 1
    assert "422" in bad.output


@pytest.mark.usefixtures("fleet")
def test_capacity_views_and_divergence(cli: typer.Typer, api_url: str) -> None:
    node = run(cli, api_url, "capacity")
    assert node.exit_code == 0, node.output
    row = next(line for line in node.stdout.splitlines() if line.startswith(NODE_A))
    assert row.split() == [NODE_A, "8", "2", "5", "1", "0"]
    assert "fewer than 2 idle (request size from claims)" in node.stdout

    namespaces = run(cli, api_url, "capacity", "--view", "namespace", "-o", "json")
    assert namespaces.exit_code == 0, namespaces.output
    body = orjson.loads(namespaces.stdout)
    assert body["view"] == "namespace"
    assert {r["key"]: r["allocated"] for r in body["items"]} == {
        "batch": 1,
        "ml": 1,
        "ml-serving": 2,
    }
    pools = run(cli, api_url, "capacity", "--view", "pool")
    assert "DEVICE CLASS" not in pools.stdout and "POOL" in pools.stdout
    classes = run(cli, api_url, "capacity", "--view", "deviceClass")
    assert "DEVICE CLASS" in classes.stdout

    diverging = run(cli, api_url, "capacity", "--divergence")
    assert diverging.exit_code == 0, diverging.output
    # gpu-node-a offers example.com/gpu through DRA only (KEP-5004: not in Node capacity).
    row = next(line for line in diverging.stdout.splitlines() if line.startswith(NODE_A))
    assert row.split() == [NODE_A, "example.com/gpu", "8", "0", "+8", "dra-only", "gpu.example.com"]
    assert "1 node resources, 0 diverging" in diverging.stdout
    assert run(cli, api_url, "capacity", "--view", "rack").exit_code == 2


@pytest.fixture
async def conflicts_loaded(inventory_writer: InventoryWriter) -> None:
    state = InventoryState()
    for obj in dra_objects():
        state.apply(InventoryObserved("k", obj, False, T0))
    state.set_capacity(NODE_A, [("example.com/gpu", 8)])
    found = state.ownership_conflicts()
    await inventory_writer.conflicts(found)
    old = Conflict(found[0].kind, "gpu-node-z", "nvidia.com/gpu", "an old one")
    await inventory_writer.conflicts([old], active=False)


@pytest.mark.usefixtures("conflicts_loaded")
def test_conflicts(cli: typer.Typer, api_url: str) -> None:
    active = run(cli, api_url, "conflicts")
    assert active.exit_code == 0, active.output
    assert "plugin-and-dra" in active.stdout and "example.com/gpu" in active.stdout
    assert "gpu-node-z" not in active.stdout
    assert "1 conflicts active" in active.stdout
    everything = run(cli, api_url, "conflicts", "--all", "-o", "json")
    assert [c["node"] for c in orjson.loads(everything.stdout)] == [NODE_A, "gpu-node-z"]


def test_unreachable_api_exits_2(cli: typer.Typer) -> None:
    result = CliRunner().invoke(cli, ["capacity", "--api-url", "http://127.0.0.1:9"])
    assert result.exit_code == 2
    assert "cannot reach the API" in result.output
