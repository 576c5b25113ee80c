"""``devicestate adoption set|status`` against a running API, the real broker and PostgreSQL; the
command is decided by the real governor (``machine.step``) and its decisions written as the
worker writes them."""

from __future__ import annotations

from datetime import timedelta

import orjson
import pytest
import typer

from services.adapters.projection.governance_rows import decision_row
from services.adapters.projection.governance_tables import governance_decisions
from services.adapters.projection.store import ProjectionStore
from services.domain.governance.adoption import (
    AdoptionDeclaration,
    AdoptionRetirement,
    Phase,
    PoolSelector,
)
from services.domain.governance.inputs import CommandAction, OperatorCommand, Role
from services.domain.governance.machine import step
from services.domain.governance.policy import GovernancePolicy
from services.domain.governance.state import GovernorState
from services.domain.labels import parse
from tests.api.conftest import Governor, InventoryWriter, read_commands
from tests.conftest import T0, LogFactory, ObservationFactory
from tests.operator_cli.test_operator_cli import run

pytestmark = pytest.mark.integration


async def test_adoption_set_appends_the_declaration_and_status_reads_the_gate(
    cli: typer.Typer,
    api_url: str,
    governor: Governor,
    inventory_writer: InventoryWriter,
    kafka_bootstrap: str,
    governance_topic: str,
) -> None:
    result = run(
        cli,
        "adoption",
        "set",
        "east",
        "canary",
        "--node",
        "gpu-node-b",
        "--node",
        "gpu-node-a",
        "--device-class",
        "gpu.example.com",
        "-r",
        "canary on two nodes",
        "--api-url",
        api_url,
        role="operator",
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("pending: adoption-set appended to the governance log")
    [(_, command)] = await read_commands(kafka_bootstrap, governance_topic, 1)
    assert command.action is CommandAction.ADOPTION_SET
    assert command.adoption == AdoptionDeclaration(
        "east", PoolSelector(nodes=("gpu-node-a", "gpu-node-b")), Phase.CANARY, "gpu.example.com"
    )
    decisions = step(GovernorState(), command, 0, GovernancePolicy())
    await governor._insert(governance_decisions, [decision_row(d) for d in decisions])
    await governor.fleet(T0 + timedelta(hours=1))

    table = run(cli, "adoption", "status", "--api-url", api_url, role="viewer")
    assert table.exit_code == 0, table.output
    assert "east" in table.stdout and "canary" in table.stdout
    assert "devices-quarantined" in table.stdout
    assert "1 pool, gate at event time 2026-11-29T13:00:00Z" in table.stdout
    out = run(cli, "adoption", "status", "-o", "json", "--api-url", api_url, role="viewer")
    [pool] = orjson.loads(out.stdout)["pools"]
    assert (pool["pool"], pool["phase"], pool["nodes"], pool["verdict"]) == (
        "east",
        "canary",
        ["gpu-node-a", "gpu-node-b"],
        "expand",
    )
    assert pool["history"][0]["actor"] == "olga"


async def test_adoption_retire_deletes_the_pool_through_the_api(
    cli: typer.Typer,
    api_url: str,
    governor: Governor,
    kafka_bootstrap: str,
    governance_topic: str,
) -> None:
    unknown = run(cli, "adoption", "retire", "esat", "-r", "typo", "--api-url", api_url,
                  role="operator")  # fmt: skip
    assert unknown.exit_code == 1
    assert "pool 'esat' is not declared" in unknown.output
    declared = AdoptionDeclaration(
        "esat", PoolSelector(driver="gpu.example.com", pool="esat"), Phase.CANARY
    )
    decisions = step(
        GovernorState(),
        OperatorCommand("c0", CommandAction.ADOPTION_SET, "olga", Role.OPERATOR, T0, "typo",
                        adoption=declared),
        0,
        GovernancePolicy(),
    )  # fmt: skip
    await governor._insert(governance_decisions, [decision_row(d) for d in decisions])
    on_dra = run(cli, "adoption", "retire", "esat", "-r", "typo", "--api-url", api_url,
                 role="operator")  # fmt: skip
    assert on_dra.exit_code == 1
    assert "its devices are still on DRA" in on_dra.output
    forced = run(cli, "adoption", "retire", "esat", "--force", "-r", "typo of east",
                 "--api-url", api_url, role="operator")  # fmt: skip
    assert forced.exit_code == 0, forced.output
    assert forced.stdout.startswith("pending: adoption-retire appended to the governance log")
    [(_, command)] = await read_commands(kafka_bootstrap, governance_topic, 1)
    assert command.action is CommandAction.ADOPTION_RETIRE
    assert command.retire == AdoptionRetirement("esat", force=True)
    assert command.reason == "typo of east"


def test_adoption_set_needs_one_selector_and_a_known_phase(cli: typer.Typer) -> None:
    # Usage errors (exit 2, as a bad pool name), each saying what is wrong, before any request.
    both = run(cli, "adoption", "set", "p", "dra", "--driver", "d", "--node", "n", "-r", "x")
    assert both.exit_code == 2
    assert "not both it and --driver or -l/--selector" in " ".join(both.output.split())
    labelled = run(cli, "adoption", "set", "p", "dra", "-l", "k=v", "--node", "n", "-r", "x")
    assert labelled.exit_code == 2
    assert "not both it and --driver or -l/--selector" in " ".join(labelled.output.split())
    neither = run(cli, "adoption", "set", "p", "dra", "-r", "x")
    assert neither.exit_code == 2
    assert "--driver (and --slice-pool), -l/--selector, or --node" in neither.output
    phase = run(cli, "adoption", "set", "p", "half", "--driver", "d", "-r", "x")
    assert phase.exit_code == 2
    assert "phase must be one of plugin, canary, dra, rolled-back" in phase.output


def test_adoption_set_says_what_a_pool_name_is(cli: typer.Typer) -> None:
    # Not the API's regex: the rule in words, before any request is made.
    bad = run(cli, "adoption", "set", "a..b", "plugin", "--driver", "d", "-r", "x")
    assert bad.exit_code == 2
    assert (
        "'a..b' is not a pool name: a pool name is a DNS subdomain of at most 63 characters: "
        "lower-case letters, digits, '-' and '.'" in " ".join(bad.output.split())
    )
    assert "[a-z0-9]" not in bad.output


async def test_adoption_set_with_a_label_selector_appends_it(
    cli: typer.Typer, api_url: str, kafka_bootstrap: str, governance_topic: str
) -> None:
    result = run(
        cli,
        *("adoption", "set", "east", "canary", "-l", "pool=east,zone in (a,b),!cordoned"),
        *("--driver", "gpu.example.com", "-r", "canary by label", "--api-url", api_url),
        role="operator",
    )
    assert result.exit_code == 0, result.output
    [(_, command)] = await read_commands(kafka_bootstrap, governance_topic, 1)
    assert command.adoption is not None
    assert command.adoption.selector == PoolSelector(
        driver="gpu.example.com", labels=parse("pool=east,zone in (a,b),!cordoned")
    )
    bad = run(cli, "adoption", "set", "p", "dra", "-l", "zone in (a", "-r", "x")
    assert bad.exit_code == 2
    assert "-l/--selector: unbalanced '('" in bad.output


async def test_adoption_report_prints_a_table_and_json(
    cli: typer.Typer,
    api_url: str,
    governor: Governor,
    inventory_writer: InventoryWriter,
    store: ProjectionStore,
    observation: ObservationFactory,
    logged: LogFactory,
) -> None:
    from tests.api.inventory_scenario import load_fleet

    await load_fleet(inventory_writer, store, governor, observation, logged)
    args = ("--class", "gpu.example.com", "--resource", "nvidia.com/gpu", "--min-samples", "1")
    table = run(cli, "adoption", "report", *args, "--api-url", api_url, role="viewer")
    assert table.exit_code == 0, table.output
    assert "FRAGMENTED" in table.stdout and "device-plugin" in table.stdout
    assert "no source of failed device-plugin allocations" in table.stdout
    assert "gpu.example.com against nvidia.com/gpu, window" in table.stdout
    out = run(cli, "adoption", "report", *args, "-o", "json", "--api-url", api_url, role="viewer")
    assert out.exit_code == 0, out.output
    rows = {(r["pool"], r["path"]): r for r in orjson.loads(out.stdout)["rows"]}
    assert rows[("*", "device-plugin")]["fragmentation"]["value"] == 0.2
    unknown = run(cli, "adoption", "report", "--class", "nope", "--api-url", api_url, role="viewer")
    assert unknown.exit_code != 0
    assert "unknown DeviceClass" in unknown.output
