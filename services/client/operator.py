"""Operator commands of ``devicestate``: quarantines, automation, breaker, governance status, the
device timeline, command outcomes, API tokens, and (``inventory_cli``) the inventory, capacity
views and inventory conflicts.

Every command talks to the API (``--api-url``, env ``DEVICESTATE_API_URL``, default
``http://DEVICESTATE_API_HOST:DEVICESTATE_API_PORT``) with the bearer token of ``--token`` or env
``DEVICESTATE_TOKEN``; ``devicestate token`` works offline.

Exit codes: 0 done (a write: accepted, or appended when not waiting); 1 the API refused (error
or the governor rejected the command); 2 the API is unreachable or the arguments are invalid;
3 ``--wait`` ran out before the governor decided (the command is logged and will be decided).
"""

from __future__ import annotations

import re
import secrets
import sys
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any

import orjson
import typer
from rich.markup import escape
from rich.table import Table

from services.client.common import (
    EXIT_PENDING,
    EXIT_REFUSED,
    EXIT_USAGE,
    ApiUrl,
    Token,
    api_client,
    cell,
    fail,
    fail_api_error,
    make_table,
    print_json,
)
from services.client.directory import make_console
from services.client.http import ApiError, error_message, path_segment
from services.domain.governance.inputs import Role
from services.runtime.tokens import token_entry


class Output(StrEnum):
    TABLE = "table"
    JSON = "json"


class WriteOutput(StrEnum):
    TEXT = "text"
    JSON = "json"


Wait = Annotated[
    float,
    typer.Option(
        "--wait",
        min=0,
        max=30,
        help="Wait up to this many seconds (at most 30) for the governor to accept or reject "
        "the command; 0 returns once the command is in the governance log.",
    ),
]
IdempotencyKey = Annotated[
    str | None,
    typer.Option(
        "--idempotency-key",
        help="Command ID to use (letters, digits, ._:-). Retrying with the same key never makes "
        "a second command.",
        show_default=False,
    ),
]
WriteFormat = Annotated[
    WriteOutput, typer.Option("-o", "--output", help="text, or json (the API's answer).")
]
ReadFormat = Annotated[Output, typer.Option("-o", "--output", help="table or json.")]
Reason = Annotated[
    str, typer.Option("--reason", "-r", help="Why (required; recorded with the command).")
]
Ttl = Annotated[
    str | None,
    typer.Option(
        "--ttl",
        help="How long from now, e.g. 90m, 2h, 1d, 1h30m, or seconds.",
        show_default=False,
    ),
]
ExpiresAt = Annotated[
    str | None,
    typer.Option(
        "--expires-at",
        help="Or: when, RFC 3339 with an offset (2026-12-01T08:00:00Z).",
        show_default=False,
    ),
]


# --- helpers --------------------------------------------------------------------------------------

_DURATION = re.compile(r"(\d+(?:\.\d+)?)([wdhms])")
_UNITS = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}


def parse_duration(text: str) -> float:
    """Seconds of ``90``, ``45s``, ``30m``, ``2h``, ``1d``, ``1w`` or combinations (``1h30m``).
    Raises ``ValueError`` for anything else or a duration of zero."""
    text = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        seconds = float(text)
    else:
        parts = _DURATION.findall(text)
        if not parts or "".join(n + u for n, u in parts) != text:
            raise ValueError(f"{text!r} is not a duration like 90m, 2h, 1d or 1h30m")
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise ValueError("the duration must be positive")
    return seconds


def _expiry(ttl: str | None, expires_at: str | None, required: bool) -> dict[str, Any]:
    if ttl is not None and expires_at is not None:
        fail("give --ttl or --expires-at, not both", EXIT_USAGE)
    if ttl is not None:
        try:
            return {"ttlSeconds": parse_duration(ttl)}
        except ValueError as exc:
            fail(f"--ttl: {exc}", EXIT_USAGE)
    if expires_at is not None:
        try:
            value = datetime.fromisoformat(expires_at.replace("Z", "+00:00"))
        except ValueError:
            fail(f"--expires-at: {expires_at!r} is not an RFC 3339 time", EXIT_USAGE)
        if value.tzinfo is None:
            fail("--expires-at needs an offset (Z or +hh:mm)", EXIT_USAGE)
        return {"expiresAt": value.isoformat()}
    if required:
        fail("give the new expiry: --ttl or --expires-at", EXIT_USAGE)
    return {}


def submit(
    api_url: str | None,
    token: str | None,
    path: str,
    body: dict[str, Any] | None,
    wait: float,
    idempotency_key: str | None,
    output: WriteOutput,
) -> None:
    """POST a command and report its outcome (see the module doc for exit codes)."""
    params = {"wait": wait} if wait > 0 else None
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
    try:
        with api_client(api_url, token) as client:
            response = client.request(
                "POST",
                path,
                json=body,
                params=params,
                headers=headers,
                accept=(409,),
                timeout=wait + 15,
            )
    except ApiError as exc:
        fail_api_error(exc)
    answer = response.json()
    if not isinstance(answer, dict) or "commandID" not in answer:  # a 409 of the API itself
        fail(error_message(response))
    if output is WriteOutput.JSON:
        print_json(answer)
    command_id = answer["commandID"]
    status = answer.get("status")
    action = answer.get("action") or "command"
    if status == "rejected":
        if output is WriteOutput.TEXT:
            typer.echo(
                f"rejected: {answer.get('reason') or 'no reason given'} "
                f"({action}, command {command_id})",
                err=True,
            )
        raise typer.Exit(EXIT_REFUSED)
    if status == "accepted":
        if output is WriteOutput.TEXT:
            quarantine = answer.get("quarantineID")
            target = f": quarantine {quarantine}" if quarantine else ""
            typer.echo(f"accepted{target} ({action}, command {command_id})")
        return
    if output is WriteOutput.TEXT:
        note = f"not decided within {wait:g} s" if wait > 0 else "appended to the governance log"
        typer.echo(
            f"pending: {action} {note}; see `devicestate command {command_id}` (command "
            f"{command_id})"
        )
    if wait > 0:
        raise typer.Exit(EXIT_PENDING)


# --- quarantine -----------------------------------------------------------------------------------

quarantine_app = typer.Typer(
    help="Quarantine devices, extend or release quarantines, list them. Quarantine IDs look like "
    "<node>/<resourceID>@<statusVersion> (system) or manual/<commandID>.",
    no_args_is_help=True,
)


@quarantine_app.command("create")
def quarantine_create(
    node: Annotated[str, typer.Argument(metavar="NODE", help="Node name.")],
    resource_id: Annotated[
        str, typer.Argument(metavar="RESOURCEID", help="Device ID (may contain /).")
    ],
    reason: Reason,
    ttl: Ttl = None,
    expires_at: ExpiresAt = None,
    wait: Wait = 0,
    idempotency_key: IdempotencyKey = None,
    output: WriteFormat = WriteOutput.TEXT,
    api_url: ApiUrl = None,
    token: Token = None,
) -> None:
    """Quarantine a device (operator); without --ttl/--expires-at until released.

    The quarantine's ID is manual/<commandID>. Example:
    devicestate quarantine create gpu-node-b GPU-0 -r "XID 79" --ttl 2h --wait 10
    """
    body = {"node": node, "resourceID": resource_id, "reason": reason}
    body.update(_expiry(ttl, expires_at, required=False))
    submit(api_url, token, "/v1/quarantines", body, wait, idempotency_key, output)


@quarantine_app.command("extend")
def quarantine_extend(
    quarantine_id: Annotated[str, typer.Argument(metavar="QUARANTINEID", help="Quarantine ID.")],
    reason: Reason,
    ttl: Ttl = None,
    expires_at: ExpiresAt = None,
    wait: Wait = 0,
    idempotency_key: IdempotencyKey = None,
    output: WriteFormat = WriteOutput.TEXT,
    api_url: ApiUrl = None,
    token: Token = None,
) -> None:
    """Give a quarantine a new expiry (operator): --ttl from now, or --expires-at."""
    body: dict[str, Any] = {"reason": reason, **_expiry(ttl, expires_at, required=True)}
    path = f"/v1/quarantines/{path_segment(quarantine_id)}/extend"
    submit(api_url, token, path, body, wait, idempotency_key, output)


@quarantine_app.command("release")
def quarantine_release(
    quarantine_id: Annotated[str, typer.Argument(metavar="QUARANTINEID", help="Quarantine ID.")],
    reason: Reason,
    break_glass: Annotated[
        bool,
        typer.Option(
            "--break-glass",
            help="Release a system quarantine that has not passed recovery (admin token).",
        ),
    ] = False,
    wait: Wait = 0,
    idempotency_key: IdempotencyKey = None,
    output: WriteFormat = WriteOutput.TEXT,
    api_url: ApiUrl = None,
    token: Token = None,
) -> None:
    """Release a quarantine (operator; --break-glass: admin).

    A manual quarantine can be released any time; a system one after its probe and canary
    passed, or with --break-glass by an admin (with a reason).
    """
    body = {"reason": reason, "breakGlass": break_glass}
    path = f"/v1/quarantines/{path_segment(quarantine_id)}/release"
    submit(api_url, token, path, body, wait, idempotency_key, output)


class QuarantineStatusFilter(StrEnum):
    ACTIVE = "active"
    RECOVERING = "recovering"
    RELEASED = "released"


class QuarantineKindFilter(StrEnum):
    SYSTEM = "system"
    MANUAL = "manual"


@quarantine_app.command("list")
def quarantine_list(
    status: Annotated[
        QuarantineStatusFilter | None, typer.Option(help="Only this status.", show_default=False)
    ] = None,
    kind: Annotated[
        QuarantineKindFilter | None, typer.Option(help="Only this kind.", show_default=False)
    ] = None,
    node: Annotated[str | None, typer.Option(help="Only this node.", show_default=False)] = None,
    resource_id: Annotated[
        str | None, typer.Option("--resource-id", help="Only this device ID.", show_default=False)
    ] = None,
    output: ReadFormat = Output.TABLE,
    api_url: ApiUrl = None,
    token: Token = None,
) -> None:
    """List quarantines, newest first."""
    params = {
        "status": None if status is None else status.value,
        "kind": None if kind is None else kind.value,
        "node": node,
        "resourceID": resource_id,
    }
    try:
        with api_client(api_url, token) as client:
            items = list(client.pages("/v1/quarantines", params))
    except ApiError as exc:
        fail_api_error(exc)
    if output is Output.JSON:
        print_json(items)
        return
    rows = [
        [
            q["quarantineID"],
            q["node"],
            q["resourceID"],
            q["kind"],
            q["status"] + (f" ({q['recoveryStage']})" if q.get("recoveryStage") else ""),
            q["actor"],
            q["createdAt"],
            cell(q.get("expiresAt")),
            q["reason"],
        ]
        for q in items
    ]
    console = make_console()
    console.print(
        make_table(
            [
                "QUARANTINE ID",
                "NODE",
                "RESOURCE ID",
                "KIND",
                "STATUS",
                "ACTOR",
                "CREATED",
                "EXPIRES",
                "REASON",
            ],
            rows,
            wrap=("REASON",),
        )
    )
    active = sum(1 for q in items if q["status"] != "released")
    console.print(f"\n{len(items)} quarantines, {active} active or recovering")


@quarantine_app.command("show")
def quarantine_show(
    quarantine_id: Annotated[str, typer.Argument(metavar="QUARANTINEID", help="Quarantine ID.")],
    api_url: ApiUrl = None,
    token: Token = None,
) -> None:
    """Print one quarantine record as JSON."""
    try:
        with api_client(api_url, token) as client:
            record = client.get(f"/v1/quarantines/{path_segment(quarantine_id)}")
    except ApiError as exc:
        fail_api_error(exc)
    print_json(record)


# --- automation, breaker, commands, status, timeline ---------------------------------------------

automation_app = typer.Typer(
    help="Pause or resume automatic restriction and quarantine, fleet-wide (operator).",
    no_args_is_help=True,
)


@automation_app.command("pause")
def automation_pause(
    reason: Reason,
    wait: Wait = 0,
    idempotency_key: IdempotencyKey = None,
    output: WriteFormat = WriteOutput.TEXT,
    api_url: ApiUrl = None,
    token: Token = None,
) -> None:
    """Pause automation: due restrictions wait (Deferred) until it is resumed."""
    submit(
        api_url, token, "/v1/automation/pause", {"reason": reason}, wait, idempotency_key, output
    )


@automation_app.command("resume")
def automation_resume(
    reason: Annotated[str, typer.Option("--reason", "-r", help="Why (optional).")] = "",
    wait: Wait = 0,
    idempotency_key: IdempotencyKey = None,
    output: WriteFormat = WriteOutput.TEXT,
    api_url: ApiUrl = None,
    token: Token = None,
) -> None:
    """Resume automation; deferred restrictions are retried."""
    submit(
        api_url, token, "/v1/automation/resume", {"reason": reason}, wait, idempotency_key, output
    )


breaker_app = typer.Typer(help="The governance circuit breaker.", no_args_is_help=True)


@breaker_app.command("reset")
def breaker_reset(
    reason: Reason,
    wait: Wait = 0,
    idempotency_key: IdempotencyKey = None,
    output: WriteFormat = WriteOutput.TEXT,
    api_url: ApiUrl = None,
    token: Token = None,
) -> None:
    """Close the open circuit breaker (admin): automatic restriction starts again."""
    submit(api_url, token, "/v1/breaker/reset", {"reason": reason}, wait, idempotency_key, output)


def command(
    command_id: Annotated[str, typer.Argument(metavar="COMMANDID", help="The commandID.")],
    api_url: ApiUrl = None,
    token: Token = None,
) -> None:
    """Print a command's outcome (accepted or rejected, with the governor's reason)."""
    try:
        with api_client(api_url, token) as client:
            response = client.request("GET", f"/v1/commands/{path_segment(command_id)}")
    except ApiError as exc:
        fail_api_error(exc)
    print_json(response.json())


def governance(
    output: ReadFormat = Output.TABLE,
    api_url: ApiUrl = None,
    token: Token = None,
) -> None:
    """Fleet governance status: staleness, breaker, automation, quarantines.

    Observations are stale when the governor's event-time watermark lags the wall clock by more
    than two watcher ticks (+5 s).
    """
    try:
        with api_client(api_url, token) as client:
            status = client.get("/v1/governance")
    except ApiError as exc:
        fail_api_error(exc)
    if output is Output.JSON:
        print_json(status)
        return
    console = make_console()
    style = "bold red" if status["stale"] else "green"
    console.print(f"[{style}]{escape(status['message'])}[/]")
    age = status["watermarkAgeSeconds"]
    watermark = cell(status["watermark"]) + ("" if age is None else f" ({age:.0f} s ago)")
    b = status["breaker"]
    breaker = f"OPEN since {cell(b['openedAt'])} ({cell(b['incident'])})" if b["open"] else "closed"
    a = status["automation"]
    automation = (
        f"PAUSED by {cell(a['pausedBy'])}: {cell(a['reason'])}" if a["paused"] else "running"
    )
    by_state = ", ".join(f"{n} {s}" for s, n in status["devicesByState"].items() if n)
    rows = [
        ("watermark", watermark),
        ("breaker", breaker),
        ("automation", automation),
        ("quarantines", f"{status['activeQuarantines']} active or recovering"),
        ("deferred", str(status["deferred"])),
        ("nodes", f"{status['nodesHeartbeatLost']} with a lost heartbeat"),
        ("devices", f"{status['devices']}" + (f": {by_state}" if by_state else "")),
    ]
    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    for name, value in rows:
        table.add_row(name, escape(value))
    console.print(table)


def timeline(
    node: Annotated[str, typer.Argument(metavar="NODE", help="Node name.")],
    resource_id: Annotated[
        str, typer.Argument(metavar="RESOURCEID", help="Device ID (may contain /).")
    ],
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Most items (newest kept).")] = 200,
    output: ReadFormat = Output.TABLE,
    api_url: ApiUrl = None,
    token: Token = None,
) -> None:
    """A device's observations and governance decisions in time order, oldest first."""
    path = f"/v1/nodes/{path_segment(node)}/timeline/{path_segment(resource_id)}"
    try:
        with api_client(api_url, token) as client:
            body = client.get(path, limit=limit)
    except ApiError as exc:
        fail_api_error(exc)
    if output is Output.JSON:
        print_json(body)
        return
    rows = []
    for item in body["items"]:
        f = item["fields"]
        if item["kind"] == "observation":
            what = f"{f['kind']} {f['health']}"
            detail = " ".join(
                x
                for x in (
                    f"v{cell(f.get('statusVersion'))}",
                    f"{f['namespace']}/{f['podName']}",
                    f.get("message") or "",
                )
                if x
            )
        else:
            what = str(f.get("type"))
            detail = f.get("summary") or orjson.dumps(f.get("details") or {}).decode()
        rows.append([item["time"], item["kind"], what, detail])
    console = make_console()
    console.print(make_table(["TIME", "KIND", "WHAT", "DETAIL"], rows, wrap=("DETAIL",)))
    console.print(f"\n{len(rows)} items for {escape(node)}/{escape(resource_id)}")


# --- tokens ---------------------------------------------------------------------------------------

token_app = typer.Typer(
    help="Make API bearer tokens and their DEVICESTATE_API_TOKENS entries (offline). The API "
    "stores only the SHA-256 of each token.",
    no_args_is_help=True,
)

RoleOption = Annotated[Role, typer.Option("--role", help="viewer, operator or admin.")]
TOKEN_PREFIX = "dst_"


def _check_name(name: str) -> None:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._@:-]{0,127}", name):
        fail("--name must be 1-128 characters of letters, digits and ._@:-", EXIT_USAGE)


@token_app.command("hash")
def token_hash(
    name: Annotated[str, typer.Option("--name", help="Name for the config entry.")] = "NAME",
    role: RoleOption = Role.VIEWER,
) -> None:
    """Read a token on stdin; print its SHA-256 (hex) and its api_tokens JSON entry."""
    _check_name(name)
    raw = typer.prompt("token", hide_input=True) if sys.stdin.isatty() else sys.stdin.read()
    token = raw.strip()
    if not token:
        fail("no token on stdin", EXIT_USAGE)
    entry = token_entry(name, role, token)
    typer.echo(entry["sha256"])
    typer.echo(orjson.dumps(entry).decode())


@token_app.command("new")
def token_new(
    name: Annotated[
        str, typer.Option("--name", help="Who uses it; recorded as the actor of its writes.")
    ],
    role: RoleOption,
    output: WriteFormat = WriteOutput.TEXT,
) -> None:
    """Generate a random token; print it ONCE, with its api_tokens entry.

    256 random bits (secrets.token_urlsafe); the entry holds only the token's SHA-256.
    """
    _check_name(name)
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    entry = token_entry(name, role, token)
    if output is WriteOutput.JSON:
        print_json({"token": token, "entry": entry})
        return
    typer.echo("token (shown only now; give it to its user through a secret store):")
    typer.echo(f"  {token}")
    typer.echo("entry for the JSON array of DEVICESTATE_API_TOKENS or DEVICESTATE_API_TOKENS_FILE:")
    typer.echo(f"  {orjson.dumps(entry).decode()}")


def register(app: typer.Typer) -> None:
    """Add the operator commands to the ``devicestate`` app."""
    app.add_typer(quarantine_app, name="quarantine")
    app.add_typer(automation_app, name="automation")
    app.add_typer(breaker_app, name="breaker")
    app.command("governance")(governance)
    app.command("timeline")(timeline)
    app.command("command")(command)
    app.add_typer(token_app, name="token")
    from services.client.inventory import register as register_inventory

    register_inventory(app)  # inventory, capacity, conflicts (issue 4)
