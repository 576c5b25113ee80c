"""``devicestate adoption set|retire|status|report``: DRA adoption pools through the API (issue
16). ``set`` is a governance command (``POST /v1/adoption``, :func:`.writes.submit`), ``retire``
another (``DELETE /v1/adoption/{pool}``); ``status`` reads
``GET /v1/adoption``: each pool's phase, the nodes it matches and the gate with its reasons;
``report`` reads ``GET /v1/adoption/report``: DRA against the device plugin per pool."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import quote

import typer

from services.client.common import (
    EXIT_USAGE,
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
from services.domain.governance.adoption import pool_name_problem
from services.domain.labels import parse

PHASES = ("plugin", "canary", "dra", "rolled-back")

adoption_app = typer.Typer(
    help="DRA adoption pools: declare a pool's phase (plugin, canary, dra, rolled-back) and read "
    "the rollout gate (expand, hold, rollback) with its reasons.",
    no_args_is_help=True,
)


@adoption_app.command("set")
def adoption_set(
    pool: Annotated[str, typer.Argument(metavar="POOL", help="The pool's name (a DNS subdomain).")],
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
    labels: Annotated[
        str | None,
        typer.Option(
            "-l",
            "--selector",
            help="Node labels, kubectl's syntax: 'k=v,k2 in (a,b),!k3,k4' (alone, or with "
            "--driver: the driver's nodes that match).",
        ),
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
    -r "canary of DRA on the east A100 nodes" --wait 10;
    devicestate adoption set east canary -l 'pool=east,zone in (a,b)' -r "canary by label"
    """
    problem = pool_name_problem(pool)
    if problem is not None:  # what the API's 422 says too, before any request
        fail(problem, EXIT_USAGE)
    if phase not in PHASES:
        fail(f"phase must be one of {', '.join(PHASES)}, not {phase!r}", EXIT_USAGE)
    if node and (driver is not None or labels is not None):
        fail("--node names the pool's nodes: not both it and --driver or -l/--selector", EXIT_USAGE)
    if driver is None and labels is None and not node:
        fail(
            "name the pool's nodes with --driver (and --slice-pool), -l/--selector, or --node",
            EXIT_USAGE,
        )
    selector: dict[str, Any] = {"nodes": node} if node else {"driver": driver}
    if slice_pool is not None:
        selector["slicePool"] = slice_pool
    if labels is not None:
        try:
            selector["labelSelector"] = parse(labels).to_dict()
        except ValueError as exc:
            fail(f"-l/--selector: {exc}", EXIT_USAGE)
    body: dict[str, Any] = {"pool": pool, "phase": phase, "reason": reason, "selector": selector}
    if device_class is not None:
        body["deviceClass"] = device_class
    submit(api_url, token, "/v1/adoption", body, wait, idempotency_key, output)


@adoption_app.command("retire")
def adoption_retire(
    pool: Annotated[str, typer.Argument(metavar="POOL", help="The declared pool's name.")],
    reason: Reason,
    force: Annotated[
        bool,
        typer.Option("--force", help="Retire a pool in canary or dra (its devices on DRA)."),
    ] = False,
    wait: Wait = 0,
    idempotency_key: IdempotencyKey = None,
    output: WriteFormat = WriteOutput.TEXT,
    api_url: ApiUrl = None,
    token: Token = None,
) -> None:
    """Retire a pool (operator): it leaves the gate and the status, its alert is resolved and
    the next `adoption enforce` pass removes its rollback policy; declaring the name again
    starts a new pool. A pool in canary or dra needs --force. Example:
    devicestate adoption retire a100-esat -r "typo of a100-east" --wait 10
    """
    query = {"force": "true"} if force else None
    path = f"/v1/adoption/{quote(pool, safe='')}"
    submit(
        api_url,
        token,
        path,
        {"reason": reason},
        wait,
        idempotency_key,
        output,
        method="DELETE",
        query=query,
    )


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
    noun = "pool" if len(pools) == 1 else "pools"
    console.print(f"\n{len(pools)} {noun}, gate at event time {cell(body.get('eventTime'))}")


def _value(figure: dict[str, Any], unit: str = "", scale: float = 1.0) -> str:
    """A figure's value with its sample count, or ``-`` (``n=3``) when it has none."""
    value = figure.get("value")
    shown = "-" if value is None else f"{value * scale:.3g}{unit}"
    return f"{shown} (n={figure.get('samples', 0)})"


@adoption_app.command("report")
def adoption_report(
    device_class: Annotated[
        str, typer.Option("--class", help="The DeviceClass compared (DRA side).")
    ],
    pool: Annotated[
        str | None, typer.Option(help="Only this adoption pool (or unpooled, or *).")
    ] = None,
    window: Annotated[
        int, typer.Option(help="Window in seconds before the event time.", min=60)
    ] = 7 * 86400,
    min_samples: Annotated[
        int, typer.Option("--min-samples", help="Fewest samples of a figure.", min=1)
    ] = 20,
    resource: Annotated[
        str | None,
        typer.Option(help="The plugin's extended resource (default: extendedResourceName)."),
    ] = None,
    output: ReadFormat = Output.TABLE,
    api_url: ApiUrl = None,
    token: Token = None,
) -> None:
    """DRA against the device plugin, per pool: allocation success, Pending-to-bound and
    bound-to-Ready p50/p95, fragmentation, device-hours allocated/idle, job retry rate; "-" is
    insufficient data (n = samples). Example:
    devicestate adoption report --class gpu.nvidia.com --window 86400
    """
    params: dict[str, Any] = {"class": device_class, "window": window, "minSamples": min_samples}
    if pool is not None:
        params["pool"] = pool
    if resource is not None:
        params["resource"] = resource
    body = get_json(api_url, token, "/v1/adoption/report", **params)
    if output is Output.JSON:
        print_json(body)
        return
    console = make_console()
    columns = [
        "POOL", "PATH", "CLASS", "ALLOC OK", "BOUND P50", "BOUND P95", "READY P50", "READY P95",
        "FRAGMENTED", "DEV-H ALLOC", "DEV-H IDLE", "RETRIES",
    ]  # fmt: skip
    rows = [
        [
            r["pool"],
            r["path"],
            r["deviceClass"],
            _value(r["allocationSuccess"], "%", 100),
            _value(r["pendingToBound"]["p50"], "s"),
            _value(r["pendingToBound"]["p95"], "s"),
            _value(r["boundToReady"]["p50"], "s"),
            _value(r["boundToReady"]["p95"], "s"),
            _value(r["fragmentation"]),
            _value(r["deviceHours"]["allocated"]),
            _value(r["deviceHours"]["idle"]),
            _value(r["retryRate"], "%", 100),
        ]
        for r in body["rows"]
    ]
    print_table(make_table(columns, rows), console)
    notes = sorted(
        {
            f"{r['pool']}/{r['path']} {name}: {f['note']}"
            for r in body["rows"]
            for name, f in (
                ("allocation success", r["allocationSuccess"]),
                ("fragmentation", r["fragmentation"]),
            )
            if f.get("note")
        }
    )
    for note in notes:
        console.print(cell(note))
    console.print(
        f"\n{body['deviceClass']} against {cell(body.get('pluginResource')) or '(no plugin resource)'}"
        f", window {body['windowStart']} to {body['windowEnd']}, at least "
        f"{body['minSamples']} samples per figure"
    )
