"""``devicestate inventory``, ``devicestate capacity`` and ``devicestate conflicts``: the inventory
directory, capacity views and inventory conflicts, read from the API (issue 4).

Same conventions as the other operator commands: ``--api-url`` / ``DEVICESTATE_API_URL``,
``--token`` / ``DEVICESTATE_TOKEN`` (needed only when the API refuses anonymous reads); exit code
1 when the API refused, 2 when it is unreachable.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer

from services.client.common import (
    ApiUrl,
    Token,
    api_client,
    cell,
    fail_api_error,
    make_table,
    print_json,
)
from services.client.directory import HEALTH_STYLE, make_console
from services.client.http import ApiError
from services.client.tables import (
    WATCH_INTERVAL_SECONDS,
    Listing,
    NoHeaders,
    TableOutput,
    Watch,
    WatchInterval,
    print_table,
    show,
)
from services.client.terminal import escape


class ReadOutput(StrEnum):
    TABLE = "table"
    JSON = "json"


class CapacityView(StrEnum):
    NODE = "node"
    POOL = "pool"
    DEVICE_CLASS = "deviceClass"
    NAMESPACE = "namespace"


def _allocated(device: dict[str, Any]) -> str:
    allocated = device.get("allocatedTo") or {}
    holders = list(allocated.get("pods") or []) or list(allocated.get("claims") or [])
    return ",".join(holders) if holders else "<idle>"


def _class(device: dict[str, Any]) -> str:
    return cell(device.get("deviceClass") or device.get("resourceName"))


def inventory_columns(wide: bool) -> list[str]:
    """The inventory table's columns (``wide``: pool, driver, UUID, taints, reported IDs)."""
    columns = ["NODE", "DEVICE ID", "OWNER", "CLASS", "HEALTH", "STATE", "ALLOCATED TO"]
    if wide:
        columns += ["POOL", "DRIVER", "UUID", "TAINTS", "UNAVAILABLE", "REPORTED IDS"]
    return columns


def inventory_row(d: dict[str, Any], wide: bool) -> list[str]:
    """One inventory device (rich markup, values escaped; health styled)."""
    health = d.get("health") or "-"
    style = HEALTH_STYLE.get(health, "")
    row = [
        escape(d.get("node") or "<pool>"),
        escape(d["deviceID"]),
        d["owner"],
        escape(_class(d)),
        f"[{style}]{escape(health)}[/]" if style else escape(health),
        escape(cell(d.get("state"))),
        escape(_allocated(d)),
    ]
    if wide:
        taints = ",".join(
            f"{t['key']}={t.get('value') or ''}:{t['effect']}" for t in d.get("taints") or []
        )
        row += [
            escape(cell(d.get("pool"))),
            escape(cell(d.get("driver"))),
            escape(cell(d.get("uuid"))),
            escape(cell(taints)),
            escape(cell(d.get("unavailable"))),
            escape(cell(",".join(d.get("reportedIDs") or []))),
        ]
    return row


def inventory(
    node: Annotated[str | None, typer.Option(help="Only devices on this node.")] = None,
    owner: Annotated[str | None, typer.Option(help="dra or device-plugin.")] = None,
    pool: Annotated[str | None, typer.Option(help="DRA pool (name or driver/pool).")] = None,
    device_class: Annotated[
        str | None, typer.Option("--device-class", help="Only this DeviceClass.")
    ] = None,
    state: Annotated[
        str | None, typer.Option(help="Governance state, e.g. Quarantined, Available.")
    ] = None,
    output: Annotated[
        TableOutput,
        typer.Option(
            "-o",
            "--output",
            help="table, wide (adds pool, driver, UUID, taints, IDs), json or yaml.",
        ),
    ] = TableOutput.TABLE,
    no_headers: NoHeaders = False,
    watch: Watch = False,
    watch_interval: WatchInterval = WATCH_INTERVAL_SECONDS,
    api_url: ApiUrl = None,
    token: Token = None,
) -> None:
    """Every device, idle ones included: DRA devices of the ResourceSlices and device-plugin
    devices whose IDs Pods reported, with owner, class, health, governance state and holders.

    Device plugins publish no IDs for idle devices: the table ends with the Node capacity no
    reported ID accounts for (unseen), per node and resource.
    """
    params = {
        "node": node,
        "owner": owner,
        "pool": pool,
        "deviceClass": device_class,
        "state": state,
    }
    unseen: dict[str, Any] = {}

    def fetch() -> tuple[Any, list[dict[str, Any]]]:
        try:
            with api_client(api_url, token) as client:
                items = list(client.pages("/v1/inventory/devices", params))
                if output not in (TableOutput.JSON, TableOutput.YAML) and not no_headers:
                    unseen.update(client.get("/v1/inventory/unseen", node=node) or {})
        except ApiError as exc:
            fail_api_error(exc)
        return items, items

    def summary(items: list[dict[str, Any]]) -> list[str]:
        idle = sum(1 for d in items if _allocated(d) == "<idle>")
        blocked = sum(1 for d in items if d.get("unavailable"))
        lines = [f"\n{len(items)} devices: {idle} not allocated, {blocked} unavailable"]
        if unseen.get("unseen"):
            parts = [
                f"{u['node']} {u['resourceName']}: {u['unseen']}"
                for u in unseen["items"]
                if u["unseen"]
            ]
            lines.append(
                f"{unseen['unseen']} device-plugin devices never reported (no ID published "
                "while idle): " + escape(", ".join(parts))
            )
        return lines

    listing = Listing(fetch, inventory_columns, inventory_row, summary=summary)
    show(
        listing,
        output,
        no_headers=no_headers,
        watch=watch,
        interval=watch_interval,
        console=make_console(),
    )


def _divergence_row(r: dict[str, Any], wide: bool) -> list[str]:
    return [
        escape(r["node"]),
        escape(r["resourceName"]),
        str(r["sliceDevices"]),
        str(r["nodeCapacity"]),
        f"{r['difference']:+d}",
        escape(r["status"]),
        escape(",".join(r["deviceClasses"])),
    ]


def _capacity_row(r: dict[str, Any], wide: bool) -> list[str]:
    return [
        escape(r["key"]),
        str(r["total"]),
        str(r["allocated"]),
        str(r["idle"]),
        str(r["unavailable"]),
        str(r["fragmented"]),
    ]


def capacity(
    view: Annotated[
        CapacityView, typer.Option("--view", help="node, pool, deviceClass or namespace.")
    ] = CapacityView.NODE,
    divergence: Annotated[
        bool,
        typer.Option(
            "--divergence",
            help="Print the reconcile check instead: ResourceSlice devices versus Node "
            "capacity per node and extended resource.",
        ),
    ] = False,
    output: Annotated[
        TableOutput, typer.Option("-o", "--output", help="table, wide (as table), json or yaml.")
    ] = TableOutput.TABLE,
    no_headers: NoHeaders = False,
    watch: Watch = False,
    watch_interval: WatchInterval = WATCH_INTERVAL_SECONDS,
    api_url: ApiUrl = None,
    token: Token = None,
) -> None:
    """Capacity per node, pool, DeviceClass or namespace: total, allocated, idle, unavailable
    (quarantined, restricted, Unhealthy, ...) and fragmented (idle devices on nodes that cannot
    fit the common request size). Quarantined devices are never idle."""
    last: dict[str, Any] = {}

    def fetch() -> tuple[Any, list[dict[str, Any]]]:
        try:
            with api_client(api_url, token) as client:
                body = (
                    client.get("/v1/capacity/divergence")
                    if divergence
                    else client.get("/v1/capacity", view=view.value)
                )
        except ApiError as exc:
            fail_api_error(exc)
        last.update(body)
        return body, list(body["items"])

    if divergence:

        def divergence_summary(items: list[dict[str, Any]]) -> list[str]:
            bad = sum(1 for r in items if r["status"] == "mismatch")
            return [f"\n{len(items)} node resources, {bad} diverging"]

        listing = Listing(
            fetch,
            lambda wide: [
                "NODE",
                "RESOURCE",
                "SLICES",
                "NODE CAPACITY",
                "DIFF",
                "STATUS",
                "CLASSES",
            ],
            _divergence_row,
            summary=divergence_summary,
        )
    else:
        header = {"deviceClass": "DEVICE CLASS"}.get(view.value, view.value.upper())

        def capacity_summary(items: list[dict[str, Any]]) -> list[str]:
            return [
                f"\nfragmented: idle devices on a node with fewer than {last['requestSize']} "
                f"idle (request size from {escape(str(last['requestSizeSource']))})"
            ]

        listing = Listing(
            fetch,
            lambda wide: [header, "TOTAL", "ALLOCATED", "IDLE", "UNAVAILABLE", "FRAGMENTED"],
            _capacity_row,
            summary=capacity_summary,
        )
    show(
        listing,
        output,
        no_headers=no_headers,
        watch=watch,
        interval=watch_interval,
        console=make_console(),
    )


def conflicts(
    show_all: Annotated[
        bool, typer.Option("--all", help="Also cleared conflicts (default: active only).")
    ] = False,
    node: Annotated[str | None, typer.Option(help="Only this node.")] = None,
    output: Annotated[ReadOutput, typer.Option("-o", "--output", help="table or json.")] = (
        ReadOutput.TABLE
    ),
    api_url: ApiUrl = None,
    token: Token = None,
) -> None:
    """Inventory conflicts (flagged, never merged): ambiguous or reused resourceIDs, a resource or
    GPU offered by both a device plugin and DRA, devices that vanished from their slice."""
    try:
        with api_client(api_url, token) as client:
            body = client.get(
                "/v1/inventory/conflicts", active=None if show_all else "true", node=node
            )
    except ApiError as exc:
        fail_api_error(exc)
    items = body["items"]
    if output is ReadOutput.JSON:
        print_json(items)
        return
    rows = [
        [
            c["kind"],
            c["node"],
            c["subject"],
            "active" if c["active"] else "cleared",
            c["firstSeen"],
            c["lastSeen"],
            c["detail"],
        ]
        for c in items
    ]
    console = make_console()
    print_table(
        make_table(
            ["KIND", "NODE", "SUBJECT", "STATUS", "FIRST SEEN", "LAST SEEN", "DETAIL"],
            rows,
        ),
        console,
    )
    console.print(f"\n{len(items)} conflicts" + ("" if show_all else " active"))


def register(app: typer.Typer) -> None:
    """Add ``inventory``, ``capacity`` and ``conflicts`` to the ``devicestate`` app."""
    app.command("inventory")(inventory)
    app.command("capacity")(capacity)
    app.command("conflicts")(conflicts)
