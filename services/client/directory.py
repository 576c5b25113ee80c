"""``devicestate devices``: print the device directory like ``kubectl get``.

Reads the directory API (``GET /v1/devices``, following ``nextCursor`` until the end), so it shows
exactly what platform services see. ``-o json|yaml`` prints the API's items as one array; the
table, ``--no-headers`` and ``--watch`` are :mod:`services.client.tables`'s.
"""

from __future__ import annotations

from typing import Any

import httpx
import typer
from rich.console import Console

from services.client.tables import (
    WATCH_INTERVAL_SECONDS,
    Format,
    Listing,
    NoHeaders,
    TableOutput,
    Watch,
    WatchInterval,
    print_table,
    show,
    table_of,
)
from services.client.terminal import escape

HEALTH_STYLE = {"Healthy": "green", "Unhealthy": "bold white on red", "Unknown": "yellow"}


def fetch_devices(
    api_url: str, filters: dict[str, str], page_size: int = 500, token: str | None = None
) -> list[dict[str, Any]]:
    """All devices matching ``filters`` (query parameters of ``GET /v1/devices``); ``token`` is
    sent as a bearer token (needed when the API refuses anonymous reads).

    Raises ``httpx.HTTPError`` when the API is unreachable, and ``RuntimeError`` with the API's
    message on a 4xx/5xx answer.
    """
    items: list[dict[str, Any]] = []
    params: dict[str, str | int] = {**filters, "limit": page_size}
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with httpx.Client(base_url=api_url, timeout=10.0, headers=headers) as client:
        while True:
            response = client.get("/v1/devices", params=params)
            if response.status_code >= 400:
                raise RuntimeError(f"{response.status_code} from the API: {response.text}")
            body = response.json()
            items.extend(body["items"])
            cursor = body.get("nextCursor")
            if not cursor:
                return items
            params["cursor"] = cursor


def _pods(device: dict[str, Any]) -> str:
    pods = [f"{a['namespace']}/{a['podName']}" for a in device.get("allocations") or []]
    return ",".join(pods) if pods else "<none>"


def device_columns(wide: bool) -> list[str]:
    """The columns of the device table (``wide``: source, governance state, flags, message)."""
    columns = ["NODE", "RESOURCE ID", "RESOURCE", "HEALTH", "VERSION", "PODS", "LAST TRANSITION"]
    return [*columns, "SOURCE", "STATE", "FLAGS", "MESSAGE"] if wide else columns


def device_style(d: dict[str, Any]) -> str | None:
    """Unhealthy rows stand out in red (on a terminal)."""
    return "red" if d["health"] == "Unhealthy" else None


def device_summary(devices: list[dict[str, Any]]) -> list[str]:
    """The line after the table: devices by health."""
    counts: dict[str, int] = {}
    for d in devices:
        counts[d["health"]] = counts.get(d["health"], 0) + 1
    summary = ", ".join(f"{n} {h}" for h, n in sorted(counts.items()))
    return [f"\n{len(devices)} devices: {summary or 'none'}"]


def render_table(devices: list[dict[str, Any]], console: Console, wide: bool = False) -> None:
    """Print devices as a table, one row per device and one line per row whatever the console's
    width (:func:`~services.client.tables.print_table`); Unhealthy rows stand out in red.

    ``wide`` adds the source, governance state, flags and message columns (like
    ``kubectl get -o wide``).
    """
    rows = [device_row(d, wide) for d in devices]
    styles = [device_style(d) for d in devices]
    print_table(table_of(device_columns(wide), rows, styles=styles), console)
    for line in device_summary(devices):
        console.print(line)


def device_row(d: dict[str, Any], wide: bool) -> list[str]:
    """One table row of a device (rich markup, values escaped)."""
    health = d["health"]
    raw = f" ({d['rawHealth']})" if d.get("rawHealth") else ""
    row = [
        escape(d["node"]),
        escape(d["resourceID"]),
        escape(d["resourceName"]),
        f"[{HEALTH_STYLE.get(health, '')}]{escape(health + raw)}[/]",
        escape(d.get("statusVersion") or "<unordered>"),
        escape(_pods(d)),
        d.get("lastTransitionAt") or "-",
    ]
    if wide:
        governance = d.get("governance") or {}
        row += [
            d["source"],
            escape(governance.get("state") or "-"),
            escape(",".join(d.get("flags") or []) or "-"),
            escape(_shortened(d.get("message") or "", MESSAGE_WIDE_CHARS)),
        ]
    return row


MESSAGE_WIDE_CHARS = 80
"""Characters of a device's message ``-o wide`` prints (``-o json`` has it whole)."""


def _shortened(text: str, most: int) -> str:
    """``text`` cut to ``most`` characters, the cut marked with ``…``."""
    return text if len(text) <= most else text[: most - 1] + "…"


def default_api_url() -> str:
    """``http://DEVICESTATE_API_HOST:DEVICESTATE_API_PORT`` (where ``devicestate api`` listens)."""
    from services.runtime.config import ApiSettings

    settings = ApiSettings()
    return f"http://{settings.api_host}:{settings.api_port}"


def make_console() -> Console:
    """A console for tables: as wide as the terminal, or 200 columns when output is not a tty
    (pipes and CI logs); a wider table widens it (:func:`~services.client.tables.print_table`)."""
    console = Console()
    return console if console.is_terminal else Console(width=200)


def devices(
    api_url: str | None = typer.Option(
        None,
        "--api-url",
        envvar="DEVICESTATE_API_URL",
        help="Base URL of the directory API (default: http://DEVICESTATE_API_HOST:DEVICESTATE_API_PORT).",
    ),
    node: str | None = typer.Option(None, help="Only devices on this node."),
    health: str | None = typer.Option(None, help="Only this health: Healthy, Unhealthy, Unknown."),
    resource_name: str | None = typer.Option(None, "--resource-name", help="e.g. nvidia.com/gpu."),
    namespace: str | None = typer.Option(None, help="Only devices allocated to Pods here."),
    source: str | None = typer.Option(None, help="device-plugin or dra."),
    state: str | None = typer.Option(
        None, help="Only this governance state, e.g. Quarantined, Restricted, Available."
    ),
    output: Format = TableOutput.TABLE,
    no_headers: NoHeaders = False,
    watch: Watch = False,
    watch_interval: WatchInterval = WATCH_INTERVAL_SECONDS,
    token: str | None = typer.Option(
        None,
        "--token",
        envvar="DEVICESTATE_TOKEN",
        help="Bearer token, needed when the API refuses anonymous reads.",
        show_default=False,
    ),
) -> None:
    """Print the device directory (from the directory API)."""
    filters = {
        k: v
        for k, v in {
            "node": node,
            "health": health,
            "resourceName": resource_name,
            "namespace": namespace,
            "source": source,
            "state": state,
        }.items()
        if v is not None
    }
    if health is not None and health not in HEALTH_STYLE:
        typer.echo(
            f"error: --health must be one of {', '.join(HEALTH_STYLE)} (case-sensitive)", err=True
        )
        raise typer.Exit(2)
    url = api_url or default_api_url()

    def fetch() -> tuple[Any, list[dict[str, Any]]]:
        try:
            items = fetch_devices(url, filters, token=token)
        except (httpx.HTTPError, RuntimeError) as exc:
            typer.echo(f"error: cannot read the directory at {url}: {exc}", err=True)
            raise typer.Exit(2) from None
        return items, items

    listing = Listing(fetch, device_columns, device_row, device_style, device_summary)
    show(
        listing,
        output,
        no_headers=no_headers,
        watch=watch,
        interval=watch_interval,
        console=make_console(),
    )
