"""``devicestate migrations``: the workload migrations off quarantined devices, as the governor
decided them (``GET /v1/migrations``, ``GET /v1/migrations/{id}``; issue 13, docs/migration.md).

``migrations list`` is a table like ``kubectl get`` (``-o wide``, ``-o json|yaml``: the API's
items as one array), newest first; ``migrations show ID`` the migration and every decision about
it, oldest first; ``migrations evidence ID`` the stored evidence of a non-recoverable one
(``GET /v1/migrations/{id}/evidence``). Exit codes: :mod:`.common`.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from services.client.common import ApiUrl, Token, get_json
from services.client.directory import make_console
from services.client.http import path_segment
from services.client.tables import (
    WATCH_INTERVAL_SECONDS,
    Listing,
    NoHeaders,
    TableOutput,
    Watch,
    WatchInterval,
    show,
)
from services.client.terminal import escape

migrations_app = typer.Typer(
    help="Workload migrations off quarantined devices (docs/migration.md).", no_args_is_help=True
)

PHASE_STYLE = {
    "completed": "green",
    "failed": "red",
    "evidence-kept": "yellow",
    "cancelled": "dim",
}
MAX_LISTED = 1000
"""The API's largest ``limit`` of ``GET /v1/migrations``."""


def migration_columns(wide: bool) -> list[str]:
    """The table's columns (``wide``: the lease, the Pods and the latest decision)."""
    columns = ["MIGRATION", "PHASE", "NODE", "DEVICE", "CLASS", "REASON", "UPDATED"]
    return (
        [*columns, "HOLDER", "TOKEN", "LEASE EXPIRES", "PODS", "LAST DECISION"] if wide else columns
    )


def migration_row(item: dict[str, Any], wide: bool) -> list[str]:
    """One row (rich markup, values escaped)."""
    phase = item["phase"]
    row = [
        escape(item["migrationID"]),
        f"[{PHASE_STYLE.get(phase, 'cyan')}]{escape(phase)}[/]",
        escape(item["node"]),
        escape(item["resourceID"]),
        escape(item["migrationClass"]),
        escape(item.get("reason") or "-"),
        escape(item["updatedAt"]),
    ]
    if wide:
        row += [
            escape(item.get("holder") or "-"),
            str(item["fencingToken"]),
            escape(item.get("leaseExpiresAt") or "-"),
            escape(",".join(item.get("pods") or []) or "-"),
            escape(f"{item['lastDecision']} ({item['lastDecisionID']})"),
        ]
    return row


@migrations_app.command("list")
def list_migrations(
    phase: Annotated[
        str | None,
        typer.Option(help="Only this phase (planned, ..., completed, failed, evidence-kept)."),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=MAX_LISTED, help="Most migrations.")] = 100,
    output: Annotated[
        TableOutput,
        typer.Option("-o", "--output", help="table, wide (adds lease and Pods), json or yaml."),
    ] = TableOutput.TABLE,
    no_headers: NoHeaders = False,
    watch: Watch = False,
    watch_interval: WatchInterval = WATCH_INTERVAL_SECONDS,
    api_url: ApiUrl = None,
    token: Token = None,
) -> None:
    """Migrations as of the governor's latest decision about each, newest first."""

    def fetch() -> tuple[Any, list[dict[str, Any]]]:
        body = get_json(api_url, token, "/v1/migrations", phase=phase, limit=limit)
        items: list[dict[str, Any]] = body["items"]
        return items, items

    def summary(items: list[dict[str, Any]]) -> list[str]:
        counts: dict[str, int] = {}
        for item in items:
            counts[item["phase"]] = counts.get(item["phase"], 0) + 1
        text = ", ".join(f"{n} {p}" for p, n in sorted(counts.items())) or "none"
        return [f"\n{len(items)} migrations: {text}"]

    listing = Listing(fetch, migration_columns, migration_row, summary=summary)
    show(
        listing,
        output,
        no_headers=no_headers,
        watch=watch,
        interval=watch_interval,
        console=make_console(),
    )


@migrations_app.command("show")
def show_migration(
    migration_id: Annotated[str, typer.Argument(help="The migration's ID (m-...).")],
    output: Annotated[
        TableOutput, typer.Option("-o", "--output", help="table, json or yaml.")
    ] = TableOutput.TABLE,
    api_url: ApiUrl = None,
    token: Token = None,
) -> None:
    """The migration and every decision about it (refused reports included), oldest first."""
    body = get_json(api_url, token, f"/v1/migrations/{path_segment(migration_id)}")

    def fetch() -> tuple[Any, list[dict[str, Any]]]:
        decisions: list[dict[str, Any]] = body["decisions"]
        return body, decisions

    def columns(wide: bool) -> list[str]:
        return ["DECISION", "KIND", "AT", "SUMMARY"]

    def row(item: dict[str, Any], wide: bool) -> list[str]:
        return [
            escape(item["id"]),
            escape(item["kind"]),
            escape(item["at"]),
            escape(item["summary"]),
        ]

    def summary(_: list[dict[str, Any]]) -> list[str]:
        m = body["migration"]
        return [
            f"\nmigration {escape(m['migrationID'])}: {escape(m['phase'])} "
            f"({escape(m['migrationClass'])}, {escape(m['node'])}/{escape(m['resourceID'])})"
            + (f", {escape(m['reason'])}" if m.get("reason") else "")
        ]

    show(Listing(fetch, columns, row, summary=summary), output, console=make_console())


@migrations_app.command("evidence")
def migration_evidence(
    migration_id: Annotated[str, typer.Argument(help="The migration's ID (m-...).")],
    output: Annotated[
        TableOutput, typer.Option("-o", "--output", help="table, json or yaml.")
    ] = TableOutput.TABLE,
    api_url: ApiUrl = None,
    token: Token = None,
) -> None:
    """A non-recoverable migration's stored evidence: each Pod's last status (phase, reason),
    then the device and how many timeline items and decisions are kept (-o json: all of it)."""
    body = get_json(api_url, token, f"/v1/migrations/{path_segment(migration_id)}/evidence")

    def fetch() -> tuple[Any, list[dict[str, Any]]]:
        pods: list[dict[str, Any]] = body["pods"]
        return body, pods

    def columns(wide: bool) -> list[str]:
        return ["NAMESPACE", "POD", "UID", "PHASE", "REASON", "COLLECTED"]

    def row(item: dict[str, Any], wide: bool) -> list[str]:
        status = item.get("status") or {}
        return [
            escape(item["namespace"]),
            escape(item["name"]),
            escape(item["uid"]),
            escape(str(status.get("phase") or "")),
            escape(str(status.get("reason") or "")),
            escape(item["collectedAt"]),
        ]

    def summary(_: list[dict[str, Any]]) -> list[str]:
        d = body["device"]
        return [
            f"\nmigration {escape(body['migrationID'])}: {escape(body['migration']['phase'])}; "
            f"device {escape(d['node'])}/{escape(d['resourceID'])}: {len(d['timeline'])} "
            f"timeline items, {len(d['decisions'])} decisions (-o json for all)"
        ]

    show(Listing(fetch, columns, row, summary=summary), output, console=make_console())
