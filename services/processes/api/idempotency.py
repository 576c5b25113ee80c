"""``Idempotency-Key``: one command per (principal, key), and a conflict for a different request.

A key is scoped to its principal (the authenticated token's name): :func:`scoped_command_id`
makes the commandID ``<name>~<key>`` (``~`` is in neither a token name nor a key, so two
principals never share a commandID). The request a key was first used for is remembered by its
:func:`fingerprint` (SHA-256 of the method, the path and the JSON body with sorted keys; the
query, e.g. ``?wait``, is not part of it). :class:`KeyRegistry` holds, per commandID, that
fingerprint and whether the command was appended yet:

- the first request with a key :meth:`KeyRegistry.claim`\\ s it (synchronously, before any
  ``await``, so concurrent requests cannot both be first) and appends the command;
- a request with the same key and the same fingerprint waits until that append is done and gets
  the same commandID (and the outcome, when known); one that arrives while the append fails gets
  the same 503, and the key is free again for a retry;
- a request with the same key and another fingerprint gets :class:`KeyConflict` (409).

What holds across processes (API restarts, several replicas): the commandID is a function of the
principal and the key, and the governor decides a commandID once (it ignores a repeated one), so
the same key never makes two commands and never returns another principal's command. The command
carries its request's fingerprint (``OperatorCommand.request_fingerprint``), which the governor
records with its decision (``governance_commands.request_fingerprint``, rebuilt by replay like the
rest): a key whose command is decided answers with that outcome for the same request, and with
409 for another action or another fingerprint, whichever process sees it. While the command is
still undecided, a different body sent to another replica cannot be told apart yet: it is
appended (202 pending), and the governor, deciding the commandID once, ignores it; as soon as
the decision is recorded, that replica answers the request (with ``?wait``) and any repeat of it
409, never the first body's outcome as its own. The registry remembers the last
:data:`KEYS_REMEMBERED` keys.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

import orjson

KEYS_REMEMBERED: Final = 10_000
"""Keys (per principal) whose fingerprint this process remembers, most recent last."""
SCOPE_SEPARATOR: Final = "~"
"""Between the principal's name and the key in a commandID: in neither alphabet."""


def scoped_command_id(principal_name: str, key: str) -> str:
    """The commandID of ``key`` sent by ``principal_name``: ``<name>~<key>``."""
    return f"{principal_name}{SCOPE_SEPARATOR}{key}"


def fingerprint(
    method: str, path: str, body: bytes, query: Mapping[str, object] | None = None
) -> str:
    """SHA-256 (hex) of the canonical request: ``method``, ``path`` and ``body`` as JSON with
    sorted keys and no insignificant whitespace (an empty body counts as ``null``). The body has
    been validated by the route already; bytes that are not JSON are hashed as they are.
    ``query``: the parsed query parameters that change what the command does (``force`` of a
    pool's retirement; never ``wait``), as JSON with sorted keys; none or empty adds nothing, so
    the fingerprints of requests without one are as before."""
    try:
        canonical = orjson.dumps(orjson.loads(body) if body else None, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONDecodeError:
        canonical = body
    parts = [method.upper().encode(), path.encode(), canonical]
    if query:
        parts.append(orjson.dumps(dict(query), option=orjson.OPT_SORT_KEYS))
    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


class KeyConflict(Exception):
    """The key was already used by this principal for another request (409); ``str`` names the
    key, the first request's action, method and path."""


@dataclass(slots=True)
class KeyUse:
    """The first request of a key: its fingerprint, action and ``METHOD path``; ``appended`` is
    set when its append finished; ``failure`` then holds ``(status, message)`` if it failed
    (503: not appended; 409: the key was decided for another action)."""

    command_id: str
    fingerprint: str
    action: str
    request_line: str
    appended: asyncio.Event = field(default_factory=asyncio.Event)
    failure: tuple[int, str] | None = None


class KeyRegistry:
    """The keys this API process saw, per commandID (see the module doc); one per app."""

    def __init__(self, remembered: int = KEYS_REMEMBERED) -> None:
        self._uses: OrderedDict[str, KeyUse] = OrderedDict()
        self._remembered = remembered

    def claim(self, use: KeyUse) -> KeyUse | None:
        """Remember ``use`` if its commandID is new and return None (the caller appends the
        command); otherwise return the first use. Raises :class:`KeyConflict` when the first use
        had another fingerprint. Never awaits, so it is atomic within the event loop."""
        first = self._uses.get(use.command_id)
        if first is None:
            self._uses[use.command_id] = use
            while len(self._uses) > self._remembered:
                self._uses.popitem(last=False)
            return None
        if first.fingerprint != use.fingerprint:
            raise KeyConflict(conflict_message(use.command_id, first.action, first.request_line))
        self._uses.move_to_end(use.command_id)
        return first

    def appended(self, use: KeyUse) -> None:
        """The command of ``use`` is on the log: its waiters answer with its commandID."""
        use.appended.set()

    def failed(self, use: KeyUse, message: str, status: int = 503) -> None:
        """The first request of ``use`` ended without appending: its waiters get ``status``
        and ``message``, and the key is free again."""
        use.failure = (status, message)
        if self._uses.get(use.command_id) is use:
            del self._uses[use.command_id]
        use.appended.set()

    def forget(self, use: KeyUse) -> None:
        """``use`` was appended here, but the governor recorded another request's command under
        its commandID (another API process appended first): forget it, so the recorded
        fingerprint answers later requests with the key."""
        if self._uses.get(use.command_id) is use:
            del self._uses[use.command_id]


def conflict_message(command_id: str, action: str, request_line: str | None) -> str:
    """The 409 detail: the key, what it was first used for, and what to do."""
    key = command_id.split(SCOPE_SEPARATOR, 1)[-1]
    where = f" ({request_line})" if request_line else ""
    return (
        f"Idempotency-Key {key!r} was already used for a {action!r} command{where} with a "
        "different request (method, path or body); a retry must repeat the request exactly, "
        "a new request needs a new key"
    )
