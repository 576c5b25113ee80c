"""``devicestate quarantine create|extend|release|list|show``: operator quarantines through the API
(writes are governance commands, :func:`.writes.submit`; reads page ``/v1/quarantines``)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer

from services.client.common import (
    ApiUrl,
    Token,
    WriteFormat,
    WriteOutput,
    api_client,
    cell,
    fail_api_error,
    get_json,
    print_json,
)
from services.client.directory import make_console
from services.client.http import ApiError, path_segment
from services.client.tables import (
    WATCH_INTERVAL_SECONDS,
    Format,
    Listing,
    NoHeaders,
    TableOutput,
    Watch,
    WatchInterval,
    show,
)
from services.client.terminal import escape
from services.client.writes import (
    ExpiresAt,
    IdempotencyKey,
    Reason,
    Ttl,
    Wait,
    expiry_fields,
    submit,
)

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
    body.update(expiry_fields(ttl, expires_at, required=False))
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
    body: dict[str, Any] = {"reason": reason, **expiry_fields(ttl, expires_at, required=True)}
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
    output: Format = TableOutput.TABLE,
    no_headers: NoHeaders = False,
    watch: Watch = False,
    watch_interval: WatchInterval = WATCH_INTERVAL_SECONDS,
    api_url: ApiUrl = None,
    token: Token = None,
) -> None:
    """List quarantines, newest first (``wide`` adds the recovery lease and attempts)."""
    params = {
        "status": None if status is None else status.value,
        "kind": None if kind is None else kind.value,
        "node": node,
        "resourceID": resource_id,
    }

    def fetch() -> tuple[Any, list[dict[str, Any]]]:
        try:
            with api_client(api_url, token) as client:
                items = list(client.pages("/v1/quarantines", params))
        except ApiError as exc:
            fail_api_error(exc)
        return items, items

    def summary(items: list[dict[str, Any]]) -> list[str]:
        active = sum(1 for q in items if q["status"] != "released")
        return [f"\n{len(items)} quarantines, {active} active or recovering"]

    listing = Listing(fetch, quarantine_columns, quarantine_row, summary=summary)
    show(
        listing,
        output,
        no_headers=no_headers,
        watch=watch,
        interval=watch_interval,
        console=make_console(),
    )


QUARANTINE_COLUMNS = [
    "QUARANTINE ID",
    "NODE",
    "RESOURCE ID",
    "KIND",
    "STATUS",
    "ACTOR",
    "CREATED",
    "EXPIRES",
    "REASON",
]


def quarantine_columns(wide: bool) -> list[str]:
    """The quarantine table's columns (``wide``: lease holder, its expiry, attempts, release)."""
    extra = ["LEASE HOLDER", "LEASE EXPIRES", "ATTEMPTS", "RELEASED", "RELEASED BY"]
    return QUARANTINE_COLUMNS + extra if wide else QUARANTINE_COLUMNS


def quarantine_row(q: dict[str, Any], wide: bool) -> list[str]:
    """One quarantine (values escaped)."""
    row = [
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
    if wide:
        row += [
            cell(q.get("leaseHolder")),
            cell(q.get("leaseExpiresAt")),
            str(q.get("recoveryAttempts", 0)),
            cell(q.get("releasedAt")),
            cell(q.get("releasedBy")),
        ]
    return [escape(text) for text in row]


@quarantine_app.command("show")
def quarantine_show(
    quarantine_id: Annotated[str, typer.Argument(metavar="QUARANTINEID", help="Quarantine ID.")],
    api_url: ApiUrl = None,
    token: Token = None,
) -> None:
    """Print one quarantine record as JSON."""
    record = get_json(api_url, token, f"/v1/quarantines/{path_segment(quarantine_id)}")
    print_json(record)
