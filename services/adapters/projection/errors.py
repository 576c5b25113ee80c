"""Errors of the projection database, as the processes see them.

:data:`DatabaseError` is the base of every error SQLAlchemy raises (the API answers 503 for it);
:class:`ProjectionConflictError` is the batch writer's version guard refusing a write;
:func:`is_transient` says which of them a batch write should retry.
"""

from __future__ import annotations

import asyncio
from typing import Final

from sqlalchemy import exc as sa_exc

DatabaseError: Final = sa_exc.SQLAlchemyError
"""Base class of SQLAlchemy's errors (connection, statement and pool failures)."""


class ProjectionConflictError(RuntimeError):
    """The SQL version guard refused a write the in-memory fold planned: another writer changed
    the same devices concurrently. The transaction was rolled back; retrying the batch is safe."""


_TRANSIENT_SQLSTATES: Final = ("08", "40001", "40P01", "53", "57P01", "57P02", "57P03")
"""Connection exceptions, serialization failure, deadlock, insufficient resources, shutdowns."""


def is_transient(exc: BaseException) -> bool:
    """True for database errors worth retrying: lost or refused connections, timeouts, server
    restarts, serialization failures, deadlocks, and the projection's concurrent-writer conflict
    (rolled back, safe to retry). Anything else is a bug or bad data."""
    if isinstance(exc, ProjectionConflictError):
        return True
    if isinstance(exc, OSError | asyncio.TimeoutError):
        return True
    if isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated:
        return True
    if isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError | sa_exc.TimeoutError):
        return True
    if isinstance(exc, sa_exc.DisconnectionError):
        return True
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        sqlstate = getattr(current, "sqlstate", None) or getattr(current, "pgcode", None)
        if isinstance(sqlstate, str) and sqlstate.startswith(_TRANSIENT_SQLSTATES):
            return True
        if type(current).__name__ in {"ConnectionDoesNotExistError", "PostgresConnectionError"}:
            return True
        orig = getattr(current, "orig", None)
        current = orig if isinstance(orig, BaseException) else current.__cause__
    return False
