"""The opaque cursor of ``GET /v1/quarantines`` (keyset pagination, newest first).

A cursor is the URL-safe base64 (padding stripped) of the JSON array ``[createdAt, quarantineID]``
of the last item of a page (``createdAt`` RFC 3339 UTC), i.e. the
:data:`~services.adapters.projection.reads_governance.QuarantineCursor` the store continues after.
Clients treat it as opaque and pass back the ``nextCursor`` they were given.
"""

from __future__ import annotations

import base64
import binascii

import orjson

from services.adapters.projection.reads_governance import QuarantineCursor
from services.domain.codec import parse_time
from services.domain.events import format_time


def encode_quarantine_cursor(after: QuarantineCursor) -> str:
    """The cursor string of ``after`` (``(createdAt, quarantineID)``)."""
    payload = orjson.dumps([format_time(after[0]), after[1]])
    return base64.urlsafe_b64encode(payload).rstrip(b"=").decode()


def decode_quarantine_cursor(cursor: str) -> QuarantineCursor:
    """The ``(createdAt, quarantineID)`` of a cursor made by :func:`encode_quarantine_cursor`.

    Raises ``ValueError("not a cursor returned by this API")`` for anything else (bad base64,
    JSON that is not a pair of strings, an unparsable time)."""
    try:
        value = orjson.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if not (
            isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)
        ):
            raise ValueError
        return (parse_time(value[0]), value[1])
    except (binascii.Error, ValueError):
        raise ValueError("not a cursor returned by this API") from None
