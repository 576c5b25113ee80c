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


_REFUSED_SQLSTATES: Final = ("22", "23")
"""Data exceptions (value too long, out of range, invalid text or byte sequence, numeric
overflow...) and integrity constraint violations (not-null, check, unique, foreign key)."""

REASON_MAX_CHARS: Final = 1000
"""How much of a refusal's message :func:`refusal_reason` keeps."""


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and what it wraps (SQLAlchemy's ``orig``, else ``__cause__``), outermost first."""
    seen: set[int] = set()
    found: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        found.append(current)
        orig = getattr(current, "orig", None)
        current = orig if isinstance(orig, BaseException) else current.__cause__
    return found


def is_refused(exc: BaseException) -> bool:
    """True when PostgreSQL refused the *data* of a statement (SQLSTATE class 22 or 23, or
    SQLAlchemy's ``DataError``/``IntegrityError``): writing the same rows again fails the same
    way, so a batch writer isolates the record that carries them (issue 11 item 3) rather than
    retrying. Never true for a :func:`is_transient` error."""
    if is_transient(exc):
        return False
    for current in _chain(exc):
        if isinstance(current, sa_exc.DataError | sa_exc.IntegrityError):
            return True
        sqlstate = getattr(current, "sqlstate", None) or getattr(current, "pgcode", None)
        if isinstance(sqlstate, str) and sqlstate.startswith(_REFUSED_SQLSTATES):
            return True
    return False


def refusal_reason(exc: BaseException) -> str:
    """The database's own words for a refusal: ``"<SQLSTATE> <error class>: <message>"`` of the
    driver's error in ``exc``'s chain (without SQLAlchemy's statement and parameters, which hold
    the whole batch), at most :data:`REASON_MAX_CHARS` characters; ``str(exc)`` without one."""
    for current in reversed(_chain(exc)):
        sqlstate = getattr(current, "sqlstate", None)
        if isinstance(sqlstate, str):
            message = str(current).strip() or type(current).__name__
            return f"{sqlstate} {type(current).__name__}: {message}"[:REASON_MAX_CHARS]
    return (str(exc) or type(exc).__name__)[:REASON_MAX_CHARS]
