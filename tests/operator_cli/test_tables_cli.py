"""Every table of the CLI prints like ``kubectl get`` (issue 14, item 6): one line per row whatever
the width (piped: plain full-width columns), ``-o wide|json|yaml``, ``--no-headers``, ``--watch``.
Against the API (uvicorn in a thread) on the fleet of ``tests/api/inventory_scenario.py``."""

from __future__ import annotations

import asyncio
import io
import os
import sys
from typing import Any

import orjson
import pytest
import typer
import yaml
from rich.console import Console
from typer.testing import CliRunner, Result

from services.client.directory import render_table
from services.client.tables import follow
from tests.api.conftest import Governor
from tests.conftest import T0
from tests.operator_cli.test_inventory_cli import fleet  # noqa: F401 - the fixture

LONG_REASON = "XID 79 fell off the bus; " * 12 + "\nsecond line"
LONG_ID = "gpu.example.com/pool-with-a-long-name/" + "gpu-" * 20 + "7"


@pytest.fixture
def cli() -> typer.Typer:
    """The whole ``devicestate`` app: ``devices`` is not one of the operator commands."""
    from services.cli.main import app

    return app


def run(cli: typer.Typer, api_url: str, *args: str) -> Result:
    return CliRunner().invoke(cli, [*args, "--api-url", api_url], env={"DEVICESTATE_TOKEN": ""})


def rows(result: Result, headers: bool = True) -> list[str]:
    """The table's lines: after the header, up to the blank line before the summary."""
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    body = lines[1:] if headers else lines
    return body[: body.index("")] if "" in body else body


def as_json(cli: typer.Typer, api_url: str, *args: str) -> Any:
    result = run(cli, api_url, *args, "-o", "json")
    assert result.exit_code == 0, result.output
    return orjson.loads(result.stdout)


@pytest.mark.integration
@pytest.mark.usefixtures("fleet")
async def test_each_table_prints_one_line_per_item_when_piped(
    cli: typer.Typer, api_url: str, governor: Governor
) -> None:
    await governor.quarantine(
        f"gpu-node-a/{LONG_ID}@9", "gpu-node-a", LONG_ID, reason=LONG_REASON, created_at=T0
    )
    commands: list[tuple[list[str], str, str]] = [
        (["devices"], "node", "resourceID"),
        (["inventory"], "node", "deviceID"),
        (["quarantine", "list"], "node", "quarantineID"),
    ]
    for command, first, second in commands:
        items = as_json(cli, api_url, *command)
        for output in ("table", "wide"):
            lines = rows(run(cli, api_url, *command, "-o", output))
            assert len(lines) == len(items), (command, output, lines)
            for item, line in zip(items, lines, strict=True):
                # Both identifying values, whole, on the item's one line.
                assert item[first] in line and item[second] in line, (command, line)
            assert max(map(len, lines)) > 100  # wider than rich's default 80: nothing folded
    quarantines = rows(run(cli, api_url, "quarantine", "list"))
    assert any(LONG_REASON.replace("\n", "\\n") in line for line in quarantines)
    capacity = as_json(cli, api_url, "capacity")
    assert len(rows(run(cli, api_url, "capacity"))) == len(capacity["items"])


@pytest.mark.integration
@pytest.mark.usefixtures("fleet")
def test_no_headers_yaml_and_watch_options(cli: typer.Typer, api_url: str) -> None:
    for command in (["devices"], ["inventory"], ["quarantine", "list"], ["capacity"]):
        table = run(cli, api_url, *command)
        bare = run(cli, api_url, *command, "--no-headers")
        assert bare.exit_code == 0, bare.output
        # The same rows (columns as wide as their cells: no header), nothing after them.
        assert [line.split() for line in bare.stdout.splitlines()] == [
            line.split() for line in rows(table)
        ]
        assert yaml.safe_load(run(cli, api_url, *command, "-o", "yaml").stdout) == as_json(
            cli, api_url, *command
        )
        watch_json = run(cli, api_url, *command, "-w", "-o", "json")
        assert watch_json.exit_code == 2
        assert "--watch prints table rows" in watch_json.output
    slow = run(cli, api_url, "devices", "-w", "--watch-interval", "0.1")
    assert slow.exit_code == 2  # the interval's minimum is 0.5 s


def test_follow_prints_new_and_changed_rows_only() -> None:
    polls = iter(
        [
            [["a", "Healthy"], ["b", "Healthy"]],  # nothing changed
            [["a", "Unhealthy"], ["b", "Healthy"]],  # a changed
            [["a", "Unhealthy"], ["b", "Healthy"], ["c", "Healthy"]],  # c is new
            [["a", "Unhealthy"]],  # b gone: nothing to print
        ]
    )
    shown: list[list[list[str]]] = []
    slept: list[float] = []
    follow(
        lambda: next(polls),
        shown.append,
        [["a", "Healthy"], ["b", "Healthy"]],
        2.0,
        sleep=slept.append,
        polls=4,
    )
    assert shown == [[["a", "Unhealthy"]], [["c", "Healthy"]]]
    assert slept == [2.0] * 4


DEMO_DEVICE = {
    "node": "gpu-node-a",
    "resourceID": "GPU-0d66eb34-d063-5bcf-8979-99aa607278db",
    "resourceName": "nvidia.com/gpu",
    "source": "device-plugin",
    "health": "Unhealthy",
    "rawHealth": None,
    "message": "XID 79",
    "statusVersion": "95021",
    "lastTransitionAt": "2026-11-29T16:00:00Z",
    "allocations": [{"namespace": "qa-malformed", "podName": "mal-n-1"}],
    "flags": [],
    "governance": {"state": "Quarantined"},
}


@pytest.mark.parametrize("terminal", [False, True])
def test_the_demo_directory_never_folds_a_uuid(terminal: bool) -> None:
    """The demo's directory (``render_table`` wide) on an 80-column log or terminal: each device
    on one line, its GPU UUID whole."""
    out = io.StringIO()
    colours = "standard" if terminal else "auto"  # auto: none off a terminal, as for a pipe
    console = Console(file=out, width=80, force_terminal=terminal, color_system=colours)
    render_table([DEMO_DEVICE, {**DEMO_DEVICE, "node": "gpu-node-b"}], console, wide=True)
    lines = out.getvalue().splitlines()
    assert len(lines) == 5, lines  # header, 2 devices, blank, summary
    assert all(DEMO_DEVICE["resourceID"] in line for line in lines[1:3])
    assert ("\x1b[" in out.getvalue()) is terminal  # colours on a terminal only


@pytest.mark.integration
async def test_watch_prints_a_new_quarantine_as_it_appears(
    api_url: str, governor: Governor
) -> None:
    """``devicestate quarantine list -w`` in a subprocess, its stdout a pipe (as ``| grep``): the
    first table, then the row of a quarantine the governor records later, flushed as it comes."""
    await governor.quarantine("gpu-node-a/GPU-1@1", "gpu-node-a", "GPU-1", created_at=T0)
    command = [sys.executable, "-m", "services.cli.main", "quarantine", "list", "-w"]
    command += ["--watch-interval", "0.5", "--api-url", api_url]
    env = {**os.environ, "DEVICESTATE_TOKEN": ""}
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, env=env
    )
    assert process.stdout is not None
    stdout = process.stdout

    async def line_with(text: str) -> str:
        while True:
            line = (await asyncio.wait_for(stdout.readline(), 30)).decode()
            assert line, f"the watch ended before a line with {text!r}"
            if text in line:
                return line

    try:
        assert "gpu-node-a/GPU-1@1" in await line_with("GPU-1@1")
        await line_with("1 quarantines, 1 active or recovering")
        await governor.quarantine(
            "gpu-node-b/GPU-2@5", "gpu-node-b", "GPU-2", created_at=T0, reason="xid-79"
        )
        row = await line_with("GPU-2@5")
        assert "gpu-node-b" in row and "xid-79" in row
        assert process.returncode is None  # still following
    finally:
        process.kill()
        await process.wait()


def test_off_a_terminal_no_line_ends_in_padding() -> None:
    from services.client.tables import print_table, table_of

    out = io.StringIO()
    table = table_of(["NODE", "LAST"], [["gpu-node-a", "x"], ["n", "a much longer value"]])
    print_table(table, Console(file=out, width=80, force_terminal=False))
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and lines[0].startswith("NODE")
    assert all(line == line.rstrip() for line in lines)
