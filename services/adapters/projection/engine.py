"""The projection database's connection pool: the one place an engine is made.

Processes get an :data:`Engine` from :func:`create_engine` and hand it to the projection's readers
and writers; they never import SQLAlchemy themselves.
"""

from __future__ import annotations

from typing import Any, TypeAlias

import orjson
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

Engine: TypeAlias = AsyncEngine
"""An async SQLAlchemy engine (asyncpg driver) on the projection database."""


def create_engine(
    database_url: str,
    *,
    pool_size: int = 5,
    max_overflow: int = 10,
    pre_ping: bool = False,
    recycle_seconds: int = -1,
    orjson_rows: bool = False,
) -> Engine:
    """An engine on ``database_url`` (``postgresql+asyncpg://...``) that connects lazily.

    ``pool_size`` connections are kept, ``max_overflow`` more opened under load; ``pre_ping``
    checks a pooled connection before each use (a round trip: worth it for idle processes, not for
    busy ones); ``recycle_seconds`` replaces connections older than that (-1: never);
    ``orjson_rows`` decodes ``jsonb`` columns with orjson instead of the standard library. The
    defaults are SQLAlchemy's. Raises SQLAlchemy's ``ArgumentError`` for a malformed URL.
    """
    options: dict[str, Any] = {
        "pool_size": pool_size,
        "max_overflow": max_overflow,
        "pool_pre_ping": pre_ping,
        "pool_recycle": recycle_seconds,
    }
    if orjson_rows:
        options["json_deserializer"] = orjson.loads
    return create_async_engine(database_url, **options)
