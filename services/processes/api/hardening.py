"""Input hardening of the API: text checks of write inputs, request-level guards (ASGI middleware)
and the 422 answer.

- :func:`text_problem` refuses what the governor could not store or would mis-key: U+0000
  (PostgreSQL ``text`` cannot hold it), other C0/C1 control characters and DEL (tab, LF and CR only
  in multi-line text such as reasons) and lone surrogates (not encodable as UTF-8). Limits follow
  :mod:`services.domain.limits` (node names 253 bytes, resourceIDs
  :data:`~services.domain.limits.IDENTIFIER_MAX_BYTES`).
- :class:`NulGuardMiddleware` answers 400 to any request whose path or query holds a NUL
  (``%00``): no node, device, quarantine or command ID contains one, and the database would refuse
  the parameter (a misleading 503) if it went that far.
- :class:`BodyLimitMiddleware` answers 413 to a request body larger than its limit, whether the
  body announces its ``Content-Length`` or is chunked: the body is counted while it streams in
  and never held beyond the limit.
- :func:`validation_failed` answers 422 as every other error (``ErrorOut``: a ``detail`` line),
  with ``errors`` listing ``loc``, ``msg`` and ``type`` of each problem, never the offending
  ``input`` (it may be huge, or not JSON: ``NaN``, lone surrogates).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import unquote_to_bytes

import orjson
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.domain.limits import IDENTIFIER_MAX_BYTES, STATUS_VERSION_MAX_DIGITS

NODE_MAX_BYTES: Final = 253
"""Most UTF-8 bytes of a node name (a DNS-1123 subdomain, as :mod:`services.domain.limits`)."""
RESOURCE_ID_MAX_BYTES: Final = IDENTIFIER_MAX_BYTES
QUARANTINE_ID_MAX_BYTES: Final = (
    NODE_MAX_BYTES + 1 + IDENTIFIER_MAX_BYTES + 1 + STATUS_VERSION_MAX_DIGITS
)
"""``<node>/<resourceID>@<statusVersion>``, the longest quarantine ID the governor makes."""

MAX_BODY_BYTES: Final = 1024 * 1024
"""Largest request body (1 MiB): operator commands are a few hundred bytes."""
EXTENDER_MAX_BODY_BYTES: Final = 16 * 1024 * 1024
"""Largest ``POST /scheduler/filter`` body (16 MiB): an ``ExtenderArgs`` carries a whole Pod and,
for extenders that are not ``nodeCacheCapable``, whole Node objects."""

_MULTILINE_CONTROL: Final = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
_LINE_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_LOC_MAX, _MSG_MAX = 128, 1024


def text_problem(
    field: str,
    value: str,
    *,
    multiline: bool = False,
    max_chars: int | None = None,
    max_bytes: int | None = None,
) -> str | None:
    """Why ``value`` (the field ``field``) cannot be taken, or ``None``. The message names the
    field and the character's code point and position, never the value itself."""
    found = (_MULTILINE_CONTROL if multiline else _LINE_CONTROL).search(value)
    if found is not None:
        char = found.group()
        what = (
            "a lone surrogate (not valid Unicode text)"
            if "\ud800" <= char <= "\udfff"
            else "a NUL character"
            if char == "\x00"
            else "a control character"
        )
        allowed = " (only tab, LF and CR are allowed)" if multiline else ""
        return f"{field} contains {what}, U+{ord(char):04X} at position {found.start()}{allowed}"
    if max_chars is not None and len(value) > max_chars:
        return f"{field} is longer than {max_chars} characters"
    if max_bytes is not None and len(value.encode()) > max_bytes:
        return f"{field} is longer than {max_bytes} bytes (UTF-8)"
    return None


def nested_text_problem(field: str, value: Any, *, multiline: bool = False) -> str | None:
    """:func:`text_problem` of every string in ``value`` (lists and objects included, keys too)."""
    if isinstance(value, str):
        return text_problem(field, value, multiline=multiline)
    if isinstance(value, Mapping):
        for key, item in value.items():
            problem = nested_text_problem(field, key, multiline=False) or nested_text_problem(
                field, item, multiline=multiline
            )
            if problem is not None:
                return problem
    elif isinstance(value, list | tuple):
        for item in value:
            if (problem := nested_text_problem(field, item, multiline=multiline)) is not None:
                return problem
    return None


# --- the 422 answer ----------------------------------------------------------------------------


def _printable(text: str, limit: int) -> str:
    """``text`` encodable as UTF-8 (lone surrogates escaped) and at most ``limit`` characters."""
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= limit else text[:limit] + "..."


def validation_errors(errors: Any) -> list[dict[str, Any]]:
    """``loc``, ``msg`` and ``type`` of each validation error, safe to serialise: no ``input``
    (which can be a whole body, ``NaN`` or a lone surrogate) and no ``ctx`` (except the JSON
    parser's message, folded into ``msg``)."""
    out: list[dict[str, Any]] = []
    for error in errors:
        loc = [
            p if isinstance(p, int) and not isinstance(p, bool) else _printable(str(p), _LOC_MAX)
            for p in error.get("loc", ())
        ]
        msg = str(error.get("msg", ""))
        ctx = error.get("ctx")
        if error.get("type") == "json_invalid" and isinstance(ctx, dict) and ctx.get("error"):
            msg = f"{msg}: {ctx['error']}"
        out.append(
            {"loc": loc, "msg": _printable(msg, _MSG_MAX), "type": str(error.get("type", ""))}
        )
    return out


def validation_summary(errors: list[dict[str, Any]]) -> str:
    """One line of ``where: message`` pairs (``body.node: ...; query.limit: ...``)."""
    parts = []
    for error in errors:
        where = ".".join(str(p) for p in error["loc"])
        message = re.sub(r"^Value error, ", "", error["msg"])
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts) or "invalid request"


async def validation_failed(request: Request, exc: Exception) -> JSONResponse:
    """422 for invalid parameters or bodies: the documented ``ErrorOut`` shape, ``detail`` one
    readable line and ``errors`` the ``loc``/``msg``/``type`` of each problem (no ``input``)."""
    assert isinstance(exc, RequestValidationError)
    errors = validation_errors(exc.errors())
    return JSONResponse(
        {"detail": _printable(validation_summary(errors), 4 * _MSG_MAX), "errors": errors},
        status_code=422,
    )


# --- ASGI middleware ---------------------------------------------------------------------------


async def _json(send: Send, status: int, detail: str, headers: list[tuple[bytes, bytes]]) -> None:
    body = orjson.dumps({"detail": detail})
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class NulGuardMiddleware:
    """400 for a request whose path or query string contains a NUL character (``%00``), before
    any route (or database) sees it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            where = None
            raw_path = scope.get("raw_path") or b""
            if "\x00" in scope.get("path", "") or b"\x00" in unquote_to_bytes(raw_path):
                where = "path"
            elif b"\x00" in unquote_to_bytes(scope.get("query_string") or b""):
                where = "query string"
            if where is not None:
                await _json(
                    send,
                    400,
                    f"the request {where} contains a NUL character (%00); no node, device, "
                    "quarantine or command ID contains one",
                    [],
                )
                return
        await self.app(scope, receive, send)


class BodyLimitMiddleware:
    """413 for a request body larger than ``max_bytes`` (``overrides``: other limits for paths
    starting with a prefix). A ``Content-Length`` above the limit is refused before the body is
    read; a chunked body is read (counted) until it passes the limit. The app then receives the
    body it would have received, in one message."""

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int = MAX_BODY_BYTES,
        overrides: Mapping[str, int] | None = None,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.overrides = dict(overrides or {})

    def limit(self, path: str) -> int:
        for prefix, limit in self.overrides.items():
            if path.startswith(prefix):
                return limit
        return self.max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit(scope.get("path", ""))
        too_large = (
            f"the request body is larger than {limit} bytes ({limit / 1048576:g} MiB), "
            "the limit of this endpoint"
        )
        for name, value in scope.get("headers") or ():
            if name.lower() == b"content-length":
                try:
                    announced = int(value)
                except ValueError:
                    continue
                if announced > limit:
                    await _json(send, 413, too_large, [(b"connection", b"close")])
                    return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client went away: nothing to answer
            if message["type"] != "http.request":
                continue
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await _json(send, 413, too_large, [(b"connection", b"close")])
                return
            if chunk:
                chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body: bytes | None = b"".join(chunks)
        chunks.clear()

        async def replay() -> Message:
            nonlocal body
            if body is not None:
                message = {"type": "http.request", "body": body, "more_body": False}
                body = None
                return message
            return await receive()

        await self.app(scope, replay, send)
