"""The directory API application: ``create_app(settings)``.

The database engine is created when the app starts (lifespan) and disposed when it stops; nothing
connects at import time. The API only reads the projection; the stream worker writes it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import orjson
import structlog
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import create_async_engine

from services.api import routes_devices, routes_ops
from services.config import Settings
from services.projection.store import ProjectionStore

DESCRIPTION = """\
Current health of every allocated device (KEP-4680 `allocatedResourcesStatus`), as the
event-sourced projection holds it.

**URL scheme.** A device is identified by `(node, resourceID)`. Node names never contain `/`;
resourceIDs often do (`gpu.example.com/pool-a/gpu-3`, CDI names), so the resourceID is always the
**last** part of a path and may contain `/` unescaped:
`/v1/nodes/{node}/devices/{resourceID}`, `/v1/nodes/{node}/history/{resourceID}`.
Percent-encode only what URLs require (`%`, `?`, `#`, spaces).

**JSON.** Field names are camelCase; times are RFC 3339 in UTC; `statusVersion` values are
decimal strings (Kubernetes resourceVersions exceed what JSON numbers hold exactly).
Lists are paged with `limit` and an opaque `cursor` (`nextCursor` of the previous page).
Errors carry a `detail` message: 404 for an unknown node or device, 422 for invalid parameters,
503 when the database cannot be read.
"""

log = structlog.get_logger(__name__)


async def database_unavailable(request: Request, exc: Exception) -> JSONResponse:
    """503 for a database that is unreachable or not migrated, instead of a bare 500."""
    log.warning("database read failed", path=request.url.path, error=repr(exc))
    return JSONResponse({"detail": f"database unavailable: {type(exc).__name__}"}, status_code=503)


def create_app(settings: Settings) -> FastAPI:
    """The FastAPI app serving the projection in ``settings.database_schema`` of
    ``settings.database_url``. The engine is created on startup and disposed on shutdown."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # No pre-ping: it costs a round trip per request. A connection broken by a database
        # restart fails one request with 503 and is then replaced by the pool.
        engine = create_async_engine(
            settings.database_url,
            pool_size=10,
            max_overflow=20,
            pool_recycle=1800,
            json_deserializer=orjson.loads,
        )
        app.state.store = ProjectionStore(engine, settings.database_schema)
        try:
            yield
        finally:
            await engine.dispose()

    app = FastAPI(
        title="devicestate directory API",
        version="1",
        description=DESCRIPTION,
        lifespan=lifespan,
    )
    app.add_exception_handler(SQLAlchemyError, database_unavailable)
    app.add_exception_handler(OSError, database_unavailable)
    app.include_router(routes_devices.router)
    app.include_router(routes_ops.router)
    return app
