"""``devicestate automation pause|resume``, ``breaker reset``, ``command``, ``governance`` and
``timeline``: the fleet-wide switches (governance commands, :func:`.writes.submit`), a command's
outcome, the governor's status and a device's timeline, read from the API."""

from __future__ import annotations

from typing import Annotated, Any

import orjson
import typer

from services.client.common import (
    ApiUrl,
    Output,
    ReadFormat,
    Token,
    WriteFormat,
    WriteOutput,
    api_client,
    cell,
    fail_api_error,
    get_json,
    make_table,
    print_json,
)
from services.client.directory import make_console
from services.client.http import ApiError, path_segment
from services.client.tables import print_table, table_of
from services.client.terminal import escape
from services.client.writes import (
    IdempotencyKey,
    Reason,
    Wait,
    submit,
)

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
    """Fleet governance status: staleness, breaker, automation, watch, node incidents,
    quarantines.

    Observations are stale when the governor's event-time watermark lags the wall clock by more
    than two watcher ticks (+5 s).
    """
    status = get_json(api_url, token, "/v1/governance")
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
        ("watch", watch_text(status.get("watch"))),
        *node_incident_rows(status.get("nodeIncidents") or []),
        ("quarantines", f"{status['activeQuarantines']} active or recovering"),
        ("deferred", str(status["deferred"])),
        ("nodes", f"{status['nodesHeartbeatLost']} with a lost heartbeat"),
        ("devices", f"{status['devices']}" + (f": {by_state}" if by_state else "")),
    ]
    if status.get("pending"):  # not folded yet: the counts above do not include them
        rows.append(
            (
                "held",
                f"{status['pending']} forwarded record(s) wait for every partition's watermark "
                "(the event-time merge); the counts above do not include them yet",
            )
        )
    table = table_of(
        ["NAME", "VALUE"], [[f"[bold]{n}[/]", escape(v)] for n, v in rows], headers=False
    )
    print_table(table, console)


def watch_text(watch: dict[str, Any] | None) -> str:
    """The watch line of ``devicestate governance`` (issue 15): stale or fresh, on event time."""
    if watch is None:
        return "-"
    seen = cell(watch["lastSeenAt"])
    if watch["stale"]:
        return f"STALE: no event or bookmark since {seen} ({cell(watch['incident'])})"
    if watch["lastSeenAt"] is None:
        return "not known yet (no watcher tick folded)"
    return f"fresh (last delivery {seen})"


def node_incident_rows(incidents: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """One row per open node incident: its node, devices and key."""
    if not incidents:
        return [("node incidents", "none")]
    return [
        (
            "node incident",
            f"{i['node']}: {len(i['devices'])} devices since {cell(i['openedAt'])} "
            f"({', '.join(i['devices'])}; {i['incident']})",
        )
        for i in incidents
    ]


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
    body = get_json(api_url, token, path, limit=limit)
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
    print_table(make_table(["TIME", "KIND", "WHAT", "DETAIL"], rows), console)
    console.print(f"\n{len(rows)} items for {escape(node)}/{escape(resource_id)}")
