"""Writing governance commands through the API: the options every write shares (``--wait``,
``--idempotency-key``, ``--reason``, ``--ttl``/``--expires-at``), duration and expiry parsing, and
:func:`submit`, which POSTs a command and turns the governor's answer into an exit code.

Exit codes (:mod:`.common`): 0 accepted, or appended when not waiting; 1 the API refused or the
governor rejected the command; 2 unreachable or invalid arguments; 3 ``--wait`` ran out before the
governor decided (the command is logged and will be decided).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any

import typer

from services.client.common import (
    EXIT_PENDING,
    EXIT_REFUSED,
    EXIT_USAGE,
    WriteOutput,
    api_client,
    fail,
    fail_api_error,
    print_json,
)
from services.client.http import ApiError, error_message
from services.client.terminal import visible

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
        help="Idempotency key (letters, digits, ._:-), scoped to your token: the commandID is "
        "<token name>~<key>. Retrying the same command with the same key never makes a second "
        "command; another command with it is refused (409).",
        show_default=False,
    ),
]


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


def expiry_fields(ttl: str | None, expires_at: str | None, required: bool) -> dict[str, Any]:
    """The body fields of ``--ttl`` (``ttlSeconds``) or ``--expires-at`` (``expiresAt``, RFC 3339
    with an offset); exits with code 2 for both, a bad value, or neither when ``required``."""
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
    *,
    method: str = "POST",
    query: dict[str, Any] | None = None,
) -> None:
    """Send a command (``method``, ``POST`` unless said; ``query`` parameters beside ``wait``)
    and report its outcome (see the module doc for exit codes)."""
    params = {**(query or {}), **({"wait": wait} if wait > 0 else {})} or None
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
    try:
        with api_client(api_url, token) as client:
            response = client.request(
                method,
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
                visible(
                    f"rejected: {answer.get('reason') or 'no reason given'} "
                    f"({action}, command {command_id})"
                ),
                err=True,
            )
        raise typer.Exit(EXIT_REFUSED)
    if status == "accepted":
        if output is WriteOutput.TEXT:
            quarantine = answer.get("quarantineID")
            target = f": quarantine {quarantine}" if quarantine else ""
            typer.echo(visible(f"accepted{target} ({action}, command {command_id})"))
        return
    if output is WriteOutput.TEXT:
        note = f"not decided within {wait:g} s" if wait > 0 else "appended to the governance log"
        typer.echo(
            visible(
                f"pending: {action} {note}; see `devicestate command {command_id}` (command "
                f"{command_id})"
            )
        )
    if wait > 0:
        raise typer.Exit(EXIT_PENDING)
