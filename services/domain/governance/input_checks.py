"""What a governance-topic record's decoded JSON may hold (:mod:`.input_codec`'s checks and
field helpers): strings PostgreSQL can store, known enum values looked up without the enum's call,
and the interned strings a device's state keeps for as long as the governor holds it.

PostgreSQL's ``text`` and ``jsonb`` cannot hold NUL or lone surrogates: a record holding one is
dead-lettered (``EventDecodeError``), never written.
"""

from __future__ import annotations

import re
from enum import StrEnum
from sys import intern
from typing import Any, Final, TypeVar

from services.domain.codec import EventDecodeError, enum_field
from services.domain.events import DeviceSource, Health

E = TypeVar("E", bound=StrEnum)

_UNSTORABLE: Final = re.compile("[\x00\ud800-\udfff]")
"""NUL and lone surrogates: PostgreSQL text and JSONB cannot hold them."""


def check_storable(value: Any, where: str) -> None:
    """Raise ``EventDecodeError`` when a string of ``value`` (a decoded JSON value, keys
    included) holds a NUL or a lone surrogate; ``where`` names the field in the error."""
    if isinstance(value, str):
        # The cheap tests first: almost every value is ASCII without NUL.
        if "\x00" in value or (not value.isascii() and _UNSTORABLE.search(value)):
            raise EventDecodeError(f"field {where!r} holds a NUL or a lone surrogate")
    elif isinstance(value, dict):
        for key, item in value.items():
            if (
                type(item) is str
                and item.isascii()
                and "\x00" not in item
                and key.isascii()
                and "\x00" not in key
            ):
                continue  # the common case, without building a path
            check_storable(key, where)
            check_storable(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list):
        for item in value:
            check_storable(item, where)


def interned(text: str | None) -> str | None:
    """``text`` interned (``sys.intern``: one shared copy of equal strings), ``None`` kept."""
    return None if text is None else intern(text)


SOURCES: Final = {m.value: m for m in DeviceSource}
"""``DeviceSource`` by value, for :func:`member_of`."""
HEALTHS: Final = {m.value: m for m in Health}
"""``Health`` by value, for :func:`member_of`."""


def member_of(members: dict[str, E], enum: type[E], obj: dict[str, Any], name: str) -> E:
    """:func:`~services.domain.codec.enum_field` without the enum's call for a known value (the
    common case: one lookup), the same member or error otherwise."""
    raw = obj.get(name)
    member = members.get(raw) if type(raw) is str else None
    return member if member is not None else enum_field(enum, obj, name)


def may_hold_nul(payload: bytes) -> bool:
    """Whether a JSON text ``orjson.loads`` accepted may hold a string PostgreSQL cannot store.
    orjson refuses raw control characters and lone surrogates (escaped or not), so the only such
    string it returns holds a NUL, which JSON can only spell ``\\u0000``; ``False`` means none
    of the text's strings needs :func:`check_storable` (a ``\\u0000`` after an escaped
    backslash is a false alarm: checked)."""
    return b"\\u0000" in payload
