"""Bearer-token authentication and roles of the API (issue 3, item 6).

The deployer configures tokens as JSON, in ``DEVICESTATE_API_TOKENS`` or in the file
``DEVICESTATE_API_TOKENS_FILE`` (a mounted Secret), never as plain tokens::

    [{"name": "alice", "role": "operator", "sha256": "<hex SHA-256 of the token>"}]

``devicestate token new --name alice --role operator`` makes a token and its entry;
``devicestate token hash`` prints the entry of an existing token. Roles, weakest first:
``viewer`` (reads), ``operator`` (quarantine, extend, release, pause/resume automation),
``admin`` (also break-glass releases and breaker resets); a stronger role can do everything a
weaker one can.

Requests: ``Authorization: Bearer <token>``. The token's SHA-256 is compared with every configured
digest with :func:`hmac.compare_digest`. A missing or unknown token where one is needed is 401 with
``WWW-Authenticate: Bearer``; a valid token with too weak a role is 403 naming the role needed.
GET routes are open without a token while ``api_anonymous_read`` is true (the default); a token
that is sent is always checked, even on a GET. ``/healthz``, ``/readyz``, ``/metrics`` and the
OpenAPI documents stay open (probes and Prometheus carry no token).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Final

import orjson
from fastapi import Depends, HTTPException, Request

from services.domain.governance.inputs import ROLE_RANK, Role
from services.runtime.config import ApiAuthSettings

_HEX_DIGEST: Final = re.compile(r"^[0-9a-fA-F]{64}$")
_ENTRY_KEYS: Final = frozenset({"name", "role", "sha256"})
_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@:-]{0,127}$")


class TokenConfigError(ValueError):
    """The token configuration is invalid; the API refuses to start."""


@dataclass(frozen=True, slots=True)
class TokenEntry:
    """One configured token: who (``name``, recorded as the actor of its writes), its role, and
    the SHA-256 of the token (raw 32 bytes)."""

    name: str
    role: Role
    digest: bytes


@dataclass(frozen=True, slots=True)
class Principal:
    """Who made a request: a token's name and role; ``None`` stands for anonymous."""

    name: str
    role: Role


def _parse(text: str, origin: str) -> list[TokenEntry]:
    if not text.strip():
        return []
    try:
        raw = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise TokenConfigError(f"{origin}: not JSON ({exc})") from None
    if not isinstance(raw, list):
        raise TokenConfigError(
            f'{origin}: must be a JSON array of {{"name", "role", "sha256"}} objects'
        )
    entries = []
    for i, item in enumerate(raw):
        where = f"{origin}[{i}]"
        if not isinstance(item, dict):
            raise TokenConfigError(f"{where}: must be an object with name, role and sha256")
        unknown = set(item) - _ENTRY_KEYS
        if unknown:
            hint = " (configure the token's sha256, never the token)" if "token" in unknown else ""
            raise TokenConfigError(f"{where}: unknown keys {sorted(unknown)}{hint}")
        name, role, digest = item.get("name"), item.get("role"), item.get("sha256")
        if not isinstance(name, str) or not _NAME.match(name):
            raise TokenConfigError(
                f"{where}: 'name' must be 1-128 characters of letters, digits and ._@:- "
                "(it is recorded as the actor of the token's writes)"
            )
        if role not in {r.value for r in Role}:
            raise TokenConfigError(
                f"{where} ({name}): 'role' must be one of viewer, operator, admin, not {role!r}"
            )
        if not isinstance(digest, str) or not _HEX_DIGEST.match(digest):
            raise TokenConfigError(
                f"{where} ({name}): 'sha256' must be the 64 hex digits of the token's SHA-256 "
                "(`devicestate token hash`)"
            )
        entries.append(TokenEntry(name, Role(role), bytes.fromhex(digest)))
    return entries


def load_tokens(settings: ApiAuthSettings) -> tuple[TokenEntry, ...]:
    """The tokens of ``settings.api_tokens`` and of the file ``settings.api_tokens_file`` (both
    may be used; their entries add up). Raises :class:`TokenConfigError` with a clear message for
    an unreadable file, invalid JSON, a bad entry, or a name or digest configured twice."""
    entries = _parse(settings.api_tokens, "DEVICESTATE_API_TOKENS")
    if settings.api_tokens_file:
        path = Path(settings.api_tokens_file)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise TokenConfigError(
                f"DEVICESTATE_API_TOKENS_FILE: cannot read {str(path)!r}: {exc.strerror or exc}"
            ) from None
        entries += _parse(text, str(path))
    names: set[str] = set()
    digests: set[bytes] = set()
    for entry in entries:
        if entry.name in names:
            raise TokenConfigError(f"token name {entry.name!r} is configured twice")
        if entry.digest in digests:
            raise TokenConfigError(
                f"token {entry.name!r} has the same sha256 as another entry (one token, one name)"
            )
        names.add(entry.name)
        digests.add(entry.digest)
    return tuple(entries)


class Authenticator:
    """Checks bearer tokens against the configured digests."""

    def __init__(self, entries: tuple[TokenEntry, ...], anonymous_read: bool) -> None:
        self.entries = entries
        self.anonymous_read = anonymous_read

    @classmethod
    def from_settings(cls, settings: ApiAuthSettings) -> Authenticator:
        """Raises :class:`TokenConfigError` for an invalid configuration."""
        return cls(load_tokens(settings), settings.api_anonymous_read)

    def identify(self, token: str) -> Principal | None:
        """The principal of ``token``, or ``None`` when no entry matches. Every entry is compared
        (constant time per entry), so the time taken does not tell which one matched."""
        digest = hashlib.sha256(token.encode("utf-8")).digest()
        found: TokenEntry | None = None
        for entry in self.entries:
            if hmac.compare_digest(digest, entry.digest):
                found = entry
        return None if found is None else Principal(found.name, found.role)


def _unauthorized(message: str, error: str | None = None) -> HTTPException:
    challenge = 'Bearer realm="devicestate"'
    if error is not None:
        challenge += f', error="{error}"'
    return HTTPException(401, message, headers={"WWW-Authenticate": challenge})


async def _principal(request: Request) -> Principal | None:
    """The request's principal (:func:`principal_of`) as a dependency."""
    return principal_of(request)


ROLE_NEEDED: Final[dict[Callable[..., Any], Role]] = {}
"""The role each :func:`require` dependency needs, for the route class (auth before the body is
read) and the OpenAPI document (which routes declare 401/403)."""


def require(role: Role) -> Callable[..., Awaitable[Principal]]:
    """A dependency that returns the request's principal when its role is at least ``role``;
    401 without a (valid) token, 403 with too weak a role."""

    async def dependency(
        principal: Annotated[Principal | None, Depends(_principal)],
    ) -> Principal:
        return authorize(principal, role)

    ROLE_NEEDED[dependency] = role
    return dependency


def authorize(principal: Principal | None, role: Role) -> Principal:
    """``principal`` when its role is at least ``role``; 401 for ``None``, 403 for a weaker role."""
    if principal is None:
        raise _unauthorized(f"this request needs a bearer token with the {role} role")
    check_role(principal, role)
    return principal


def principal_of(request: Request) -> Principal | None:
    """The principal of ``request``'s ``Authorization`` header, read without FastAPI's
    dependencies (the route class checks it before the body is parsed): ``None`` without the
    header; 401 for a header that is not ``Bearer <token>`` or an unknown token."""
    header = request.headers.get("authorization")
    if header is None:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise _unauthorized(
            "the Authorization header must be 'Bearer <token>'", error="invalid_request"
        )
    authenticator: Authenticator = request.app.state.authenticator
    principal = authenticator.identify(token.strip())
    if principal is None:
        raise _unauthorized("invalid token", error="invalid_token")
    return principal


def check_read(request: Request, principal: Principal | None) -> None:
    """401 for an anonymous read while ``api_anonymous_read`` is false."""
    authenticator: Authenticator = request.app.state.authenticator
    if principal is None and not authenticator.anonymous_read:
        raise _unauthorized("reading needs a bearer token (anonymous reads are disabled)")


def check_role(principal: Principal, role: Role, what: str = "this request") -> None:
    """403 unless ``principal``'s role is at least ``role``."""
    if ROLE_RANK[principal.role] < ROLE_RANK[role]:
        raise HTTPException(
            403,
            f"{what} needs the {role} role; token {principal.name!r} has the {principal.role} role",
        )


async def read_access(
    request: Request, principal: Annotated[Principal | None, Depends(_principal)]
) -> Principal | None:
    """Dependency of the read (GET) routes: anonymous while ``api_anonymous_read``, else viewer."""
    check_read(request, principal)
    return principal


Reader = Annotated[Principal | None, Depends(read_access)]
Operator = Annotated[Principal, Depends(require(Role.OPERATOR))]
Admin = Annotated[Principal, Depends(require(Role.ADMIN))]


def describe(entries: tuple[TokenEntry, ...]) -> list[dict[str, Any]]:
    """Names and roles of the configured tokens (no digests), for logs."""
    return [{"name": e.name, "role": e.role.value} for e in entries]
