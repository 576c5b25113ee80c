"""``devicestate workloads``: the Pods holding devices with their workload, controller chain and
migration class (``GET /v1/workloads``, issue 13 item 1), by default those on quarantined
devices, like ``kubectl get``: a table, ``-o wide``, or ``-o json|yaml`` (the API's items as
one array). Exit codes: :mod:`.common`.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from services.client.common import ApiUrl, Token, api_client, fail_api_error
from services.client.directory import make_console
from services.client.http import ApiError
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

CLASS_STYLE = {"checkpointed": "green", "sharded": "cyan", "non-recoverable": "yellow"}


def workload_columns(wide: bool) -> list[str]:
    """The table's columns (``wide``: the chain, its reason and the migration details)."""
    columns = ["NAMESPACE", "POD", "NODE", "WORKLOAD", "CLASS", "DEVICES"]
    return [*columns, "CHAIN", "CHECKPOINT MAX AGE", "SHARD", "REASONS"] if wide else columns


def _devices(item: dict[str, Any]) -> str:
    held = [
        d["resourceID"] + (f" ({d['state']})" if d.get("state") else "")
        for d in item.get("devices") or []
    ]
    return ",".join(held) or "<none>"


def workload_row(item: dict[str, Any], wide: bool) -> list[str]:
    """One row (rich markup, values escaped)."""
    pod, workload, migration = item["pod"], item["workload"], item["migration"]
    label = f"{workload['kind']}/{workload['name']}"
    if not item["chainComplete"]:
        label += " (incomplete)"
    klass = migration["class"]
    row = [
        escape(pod["namespace"]),
        escape(pod["name"]),
        escape(pod["node"]),
        escape(label),
        f"[{CLASS_STYLE.get(klass, '')}]{escape(klass)}[/]",
        escape(_devices(item)),
    ]
    if wide:
        chain = " > ".join(f"{c['kind']}/{c['name']}" for c in item.get("chain") or [])
        age = migration.get("checkpointMaxAgeSeconds")
        reasons = [r for r in (item.get("chainReason"), *migration.get("reasons", [])) if r]
        row += [
            escape(chain or "-"),
            "-" if age is None else f"{age}s",
            escape(migration.get("shard") or "-"),
            escape("; ".join(reasons) or "-"),
        ]
    return row


def workloads(
    all_workloads: Annotated[
        bool,
        typer.Option("--all", "-A", help="Every Pod holding devices, not only quarantined ones."),
    ] = False,
    node: Annotated[str | None, typer.Option(help="Only Pods on this node.")] = None,
    namespace: Annotated[
        str | None, typer.Option("--namespace", "-n", help="Only Pods in this namespace.")
    ] = None,
    output: Annotated[
        TableOutput,
        typer.Option(
            "-o", "--output", help="table, wide (adds chain, checkpoint, shard), json or yaml."
        ),
    ] = TableOutput.TABLE,
    no_headers: NoHeaders = False,
    watch: Watch = False,
    watch_interval: WatchInterval = WATCH_INTERVAL_SECONDS,
    api_url: ApiUrl = None,
    token: Token = None,
) -> None:
    """Workloads on quarantined devices (``--all``: every Pod holding devices), each with its
    controller chain and migration class (docs/migration.md)."""
    params = {
        "quarantined": "false" if all_workloads else "true",
        "node": node,
        "namespace": namespace,
    }

    def fetch() -> tuple[Any, list[dict[str, Any]]]:
        try:
            with api_client(api_url, token) as client:
                items = list(client.pages("/v1/workloads", params))
        except ApiError as exc:
            fail_api_error(exc)
        return items, items

    def summary(items: list[dict[str, Any]]) -> list[str]:
        counts: dict[str, int] = {}
        for item in items:
            klass = item["migration"]["class"]
            counts[klass] = counts.get(klass, 0) + 1
        text = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "none"
        scope = "holding devices" if all_workloads else "on quarantined devices"
        return [f"\n{len(items)} Pods {scope}: {text}"]

    listing = Listing(fetch, workload_columns, workload_row, summary=summary)
    show(
        listing,
        output,
        no_headers=no_headers,
        watch=watch,
        interval=watch_interval,
        console=make_console(),
    )
