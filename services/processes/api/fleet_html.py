"""HTML of the fleet page (issue 14): pure functions from the API's read models to a document.

Server-rendered, one self-contained document per page: the stylesheet is inline, there is no
script, no font and no external URL, so the page works offline and behind any proxy. Every text
taken from the projection (node names, resourceIDs, reasons, actors, messages) goes through
:func:`html.escape`; URLs are built with :func:`urllib.parse.quote` (``/`` kept: resourceIDs
contain it and are the last part of a path, as in the JSON API).

- :func:`fleet_page`: the staleness and breaker banner (``GET /v1/governance``), devices by
  governance state (counts over the whole fleet, each a link filtering the grid), one page of the
  nodes x devices grid (a cell per device coloured by its governance state, a link to its
  timeline) and the active and recovering quarantines (reason, actor, expiry).
- :func:`timeline_page`: one device's observations and decisions (``GET /v1/nodes/{node}/
  timeline/{resourceID}``), oldest first.

Times are shown in RFC 3339 UTC. No I/O, no clock, no errors raised.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from html import escape
from itertools import groupby
from typing import Any
from urllib.parse import quote, urlencode

import orjson

from services.adapters.projection.reads_governance import GovernedDevice
from services.domain.events import format_time
from services.domain.governance.device_state import GovState
from services.processes.api.schemas_governance import GovernanceOut, TimelineOut

PAGE_PATH = "/ui/fleet"
"""Where the fleet page is served; a device's timeline is under ``/ui/fleet/devices/``."""

UNGOVERNED = "Ungoverned"
"""The state shown for a device the governor has not seen yet."""

# One colour per governance state: green free, amber watched, red taken out of service.
_COLOURS = {
    GovState.AVAILABLE.value: "#2e7d32",
    GovState.UNKNOWN_TOLERATED.value: "#f9a825",
    GovState.RESTRICTED.value: "#ef6c00",
    GovState.DEFERRED.value: "#8e24aa",
    GovState.QUARANTINED.value: "#c62828",
    GovState.RECOVERING.value: "#1565c0",
    UNGOVERNED: "#9e9e9e",
}

_STYLE = (
    "body{font:14px/1.4 system-ui,sans-serif;margin:1em;color:#222}"
    "h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.4em}"
    "table{border-collapse:collapse}td,th{padding:2px 8px;text-align:left;"
    "border-bottom:1px solid #ddd;vertical-align:top}"
    ".banner{padding:.6em 1em;margin-bottom:1em;border-radius:4px}"
    ".ok{background:#e8f5e9}.warn{background:#fff3e0}.bad{background:#ffebee;font-weight:bold}"
    ".cells{display:flex;flex-wrap:wrap;gap:3px}"
    ".dev{display:inline-block;width:18px;height:18px;border-radius:3px}"
    ".legend span{display:inline-block;margin-right:1em}"
    ".swatch{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:4px}"
    "code{font-size:.92em}.when{white-space:nowrap}"
) + "".join(f".s-{state}{{background:{colour}}}" for state, colour in _COLOURS.items())


def _time(value: datetime | None) -> str:
    return "-" if value is None else format_time(value)


def device_href(node: str, resource_id: str) -> str:
    """The URL of a device's timeline page (resourceID last, its ``/`` unescaped)."""
    return f"{PAGE_PATH}/devices/{quote(node, safe='')}/{quote(resource_id, safe='/')}"


def _document(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head>"
        f"<body>{body}</body></html>"
    )


def banner(status: GovernanceOut) -> str:
    """The staleness and breaker banner: red when the breaker is open, amber when observations
    are stale or automation is paused, green otherwise; the text is the status ``message``."""
    level = (
        "bad"
        if status.breaker.open
        else "warn"
        if status.stale or status.automation.paused
        else "ok"
    )
    parts = [f'<div class="banner {level}" id="banner" data-stale="{str(status.stale).lower()}"']
    parts.append(f' data-breaker="{"open" if status.breaker.open else "closed"}">')
    parts.append(f"<div>{escape(status.message)}</div>")
    parts.append(
        f"<div>watermark {_time(status.watermark)} · breaker "
        f"{'OPEN since ' + _time(status.breaker.opened_at) if status.breaker.open else 'closed'}"
        f" · automation {'paused' if status.automation.paused else 'on'}"
        f" · {status.active_quarantines} active quarantine(s)</div></div>"
    )
    return "".join(parts)


def _counts(status: GovernanceOut, node: str | None) -> str:
    links = [f'<a href="{PAGE_PATH}">all {status.devices}</a>']
    for state, count in status.devices_by_state.items():
        query = urlencode({k: v for k, v in (("state", state), ("node", node)) if v})
        links.append(
            f'<span><span class="swatch s-{escape(state)}"></span>'
            f'<a href="{PAGE_PATH}?{query}" data-count-state="{escape(state)}">'
            f"{escape(state)} {count}</a></span>"
        )
    return f'<p class="legend" id="counts">{" ".join(links)}</p>'


def _state(device: GovernedDevice) -> str:
    return UNGOVERNED if device.governance is None else device.governance.state


def grid(devices: Sequence[GovernedDevice]) -> str:
    """Nodes x devices of one page: a row per node, a coloured cell per device linking to its
    timeline; the cell's tooltip names the device, its state and health."""
    rows = []
    for node, group in groupby(devices, key=lambda d: d.record.node):
        cells = []
        for d in group:
            state = _state(d)
            rid = d.record.resource_id
            tip = f"{rid}: {state} ({d.record.health})"
            cells.append(
                f'<a class="dev s-{escape(state)}" href="{escape(device_href(node, rid))}" '
                f'title="{escape(tip)}" data-state="{escape(state)}" '
                f'data-node="{escape(node)}" data-resource-id="{escape(rid)}"></a>'
            )
        rows.append(
            f'<tr class="node"><th>{escape(node)}</th><td><div class="cells">{"".join(cells)}'
            "</div></td></tr>"
        )
    if not rows:
        return '<p id="grid">no devices on this page</p>'
    return f'<table id="grid"><tr><th>node</th><th>devices</th></tr>{"".join(rows)}</table>'


def quarantine_table(rows: Iterable[dict[str, Any]]) -> str:
    """Active and recovering quarantines: device (linking to its timeline), status, reason,
    actor, created and expiry (``-``: until released)."""
    body = []
    for r in rows:
        href = device_href(r["node"], r["resource_id"])
        body.append(
            f'<tr class="quarantine"><td>{escape(r["node"])}</td>'
            f'<td><a href="{escape(href)}"><code>{escape(r["resource_id"])}</code></a></td>'
            f"<td>{escape(r['status'])}</td><td>{escape(r['reason'])}</td>"
            f"<td>{escape(r['actor'])}</td><td>{_time(r['created_at'])}</td>"
            f"<td>{_time(r['expires_at'])}</td></tr>"
        )
    if not body:
        return '<p id="quarantines">no active quarantine</p>'
    head = "".join(
        f"<th>{h}</th>"
        for h in ("node", "resourceID", "status", "reason", "actor", "created", "expires")
    )
    return f'<table id="quarantines"><tr>{head}</tr>{"".join(body)}</table>'


def fleet_page(
    status: GovernanceOut,
    devices: Sequence[GovernedDevice],
    quarantines: Sequence[dict[str, Any]],
    *,
    state: str | None,
    node: str | None,
    next_cursor: str | None,
    more_quarantines: bool,
    limit: int | None = None,
) -> str:
    """The fleet page: banner, counts, one grid page (``next_cursor``: the link to the next page,
    keeping the ``state`` and ``node`` filters and the page's ``limit``, when given) and the
    quarantines."""
    shown = " ".join(f"{k}={v}" for k, v in (("state", state), ("node", node)) if v)
    more = ""
    if next_cursor is not None:
        kept = (("state", state), ("node", node), ("limit", limit), ("cursor", next_cursor))
        query = urlencode({k: v for k, v in kept if v})
        more = f'<p><a id="next" href="{escape(f"{PAGE_PATH}?{query}")}">next page</a></p>'
    q_more = (
        '<p>more quarantines: <a href="/v1/quarantines?status=active">/v1/quarantines</a></p>'
        if more_quarantines
        else ""
    )
    body = (
        "<h1>devicestate fleet</h1>"
        + banner(status)
        + _counts(status, node)
        + f"<h2>Devices{(' (' + escape(shown) + ')') if shown else ''}</h2>"
        + grid(devices)
        + more
        + f"<h2>Quarantines ({len(quarantines)})</h2>"
        + quarantine_table(quarantines)
        + q_more
    )
    return _document("devicestate fleet", body)


def _value(value: Any) -> str:
    if isinstance(value, dict | list):
        return orjson.dumps(value, default=str).decode()
    return str(value)


def _fields(fields: dict[str, Any]) -> str:
    """A timeline item's fields: a decision's type and summary first, then the rest."""
    rest = {k: v for k, v in fields.items() if k not in ("type", "summary")}
    lead = " ".join(f"<b>{escape(str(fields[k]))}</b>" for k in ("type", "summary") if k in fields)
    tail = "; ".join(
        f"{escape(str(k))}={escape(_value(v))}" for k, v in rest.items() if v not in (None, "", [])
    )
    return f"{lead}<br><small>{tail}</small>" if lead else tail


def timeline_page(status: GovernanceOut, timeline: TimelineOut) -> str:
    """One device's timeline: observations and decisions in time order, oldest first."""
    rows = "".join(
        f'<tr class="entry {item.kind}"><td class="when">{_time(item.time)}</td><td>{item.kind}</td>'
        f"<td>{_fields(item.fields)}</td></tr>"
        for item in timeline.items
    )
    body = (
        f'<p><a href="{PAGE_PATH}" id="back">fleet</a></p>'
        + banner(status)
        + f'<h1 id="device">{escape(timeline.node)} <code>{escape(timeline.resource_id)}</code></h1>'
        + f'<table id="timeline"><tr><th>time (UTC)</th><th>kind</th><th>what</th></tr>{rows}'
        "</table>"
    )
    return _document(f"{timeline.resource_id} on {timeline.node}", body)
