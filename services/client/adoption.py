"""``devicestate adoption set|status``: DRA adoption pools through the API (issue 16). ``set``
is a governance command (``POST /v1/adoption``, :func:`.writes.submit`); ``status`` reads
``GET /v1/adoption``: each pool's phase, the nodes it matches and the gate with its reasons."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from services.client.common import (
    ApiUrl,
    Output,
    ReadFormat,
    Token,
    WriteFormat,
    WriteOutput,
    cell,
    fail,
    get_json,
    make_table,
    print_json,
)
from services.client.directory import make_console
from services.client.tables import print_table
from services.client.writes import IdempotencyKey, Reason, Wait, submit

PHASES = ("plugin", "canary", "dra", "rolled-back")

adoption_app = typer.Typer(
    help="DRA adoption pools: declare a pool's phase (plugin, canary, dra, rolled-back) and read "
    "the rollout gate (expand, hold, rollback) with its reasons.",
    no_args_is_help=True,
)


@adoption_app.command("set")
def adoption_set(
    pool: Annotated[str, typer.Argument(metavar="POOL", help="The pool's name (a DNS label).")],
    phase: Annotated[
        str, typer.Argument(metavar="PHASE", help="plugin, canary, dra or rolled-back.")
    ],
    reason: Reason,
    driver: Annotated[
        str | None, typer.Option(help="DRA driver whose slices name the pool's nodes.")
    ] = None,
    slice_pool: Annotated[
        str | None, typer.Option("--slice-pool", help="ResourceSlice pool name (with --driver).")
    ] = None,
    node: Annotated[
        list[str] | None,
        typer.Option("--node", help="A node of the pool (repeat; instead of --driver)."),
    ] = None,
    device_class: Annotated[
        str | None, typer.Option("--device-class", help="The DeviceClass the pool moves to.")
    ] = None,
    wait: Wait = 0,
    idempotency_key: IdempotencyKey = None,
    output: WriteFormat = WriteOutput.TEXT,
    api_url: ApiUrl = None,
    token: Token = None,
) -> None:
    """Declare a pool's path and phase (operator). Example:
    devicestate adoption set a100-east canary --driver gpu.nvidia.com --slice-pool a100-east
    -r "canary of DRA on the east A100 nodes" --wait 10
    """
    if phase not in PHASES:
        fail(f"phase must be one of {', '.join(PHASES)}, not {phase!r}")
    if (driver is None) == (not node):
        fail("name the pool's nodes with --driver (and --slice-pool) or with --node")
    selector: dict[str, Any] = {"nodes": node} if node else {"driver": driver}
    if slice_pool is not None:
        selector["slicePool"] = slice_pool
    body: dict[str, Any] = {"pool": pool, "phase": phase, "reason": reason, "selector": selector}
    if device_class is not None:
        body["deviceClass"] = device_class
    submit(api_url, token, "/v1/adoption", body, wait, idempotency_key, output)


def _figures(figures: dict[str, Any]) -> str:
    return " ".join(f"{k}={cell(v)}" for k, v in figures.items())


@adoption_app.command("status")
def adoption_status(
    output: ReadFormat = Output.TABLE,
    api_url: ApiUrl = None,
    token: Token = None,
) -> None:
    """Each pool's phase and the gate's verdict, then every reason with its figures."""
    body = get_json(api_url, token, "/v1/adoption")
    if output is Output.JSON:
        print_json(body)
        return
    console = make_console()
    pools = body["pools"]
    print_table(
        make_table(
            ["POOL", "PHASE", "SINCE", "NODES", "VERDICT", "RECORDED", "DECLARED BY"],
            [
                [
                    p["pool"],
                    p["phase"],
                    p["since"],
                    str(len(p["nodes"])),
                    p["verdict"],
                    # the governor's own verdict on event time (what the alerts follow)
                    (p.get("recorded") or {}).get("verdict") or "",
                    p["history"][-1]["actor"] if p["history"] else "",
                ]
                for p in pools
            ],
        ),
        console,
    )
    rows = [
        [p["pool"], r["code"], r["verdict"], _figures(r["figures"]), r["detail"]]
        for p in pools
        for r in p["reasons"]
    ]
    if rows:
        print_table(make_table(["POOL", "REASON", "VERDICT", "FIGURES", "DETAIL"], rows), console)
    console.print(f"\n{len(pools)} pools, gate at event time {cell(body.get('eventTime'))}")
