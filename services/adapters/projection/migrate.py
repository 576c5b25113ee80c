"""Bring a projection schema up to date: ``await migrate(database_url, schema)``.

Runs the Alembic revisions in the repository's ``migrations/`` directory (found relative to this
file, so it works from an editable install). ``migrations/env.py`` creates the schema when missing,
keeps the ``alembic_version`` table inside it and serialises runs on the same schema across
processes with an advisory lock.

Alembic keeps its environment in module-level state, so two runs must never interleave in one
process: each run happens in a worker thread (with its own event loop for asyncpg) under a
process-wide lock, and the caller's event loop stays free meanwhile.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Final

from alembic import command
from alembic.config import Config

import services.adapters.projection.failure_tables  # (the imports register their tables on ``metadata``)
import services.adapters.projection.governance_tables  # (the imports register their tables on ``metadata``)
import services.adapters.projection.inventory_tables
import services.adapters.projection.lifecycle_tables
import services.adapters.projection.workload_tables  # noqa: F401
from services.adapters.projection.tables import check_schema_name

REPO_ROOT: Final = Path(__file__).resolve().parents[3]  # services/adapters/projection/ -> root
MIGRATIONS_DIR: Final = REPO_ROOT / "migrations"

_ALEMBIC_LOCK: Final = threading.Lock()


def alembic_config(schema: str | None = None, database_url: str | None = None) -> Config:
    """An Alembic config for the repository's migrations, without logging set-up.

    ``schema`` becomes the target schema (as ``-x schema=NAME`` does on the CLI) and
    ``database_url`` the database (as ``-x url=...``); unset, env.py falls back to the settings.
    """
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if schema is not None:
        config.attributes["schema"] = check_schema_name(schema)
    if database_url is not None:
        config.attributes["url"] = database_url
    return config


def _upgrade_blocking(database_url: str, schema: str) -> None:
    with _ALEMBIC_LOCK:
        command.upgrade(alembic_config(schema, database_url), "head")


async def migrate(database_url: str, schema: str) -> None:
    """Create ``schema`` if missing and upgrade it to the newest revision (``head``).

    ``database_url`` is a SQLAlchemy URL (``postgresql+asyncpg://...``; a sync driver works too).
    Idempotent; safe to call concurrently, from one process or several. Raises ``ValueError`` for
    a schema name that is not a plain identifier, and SQLAlchemy's ``OperationalError`` (or the
    driver's connection error, ``OSError``) when the database is unreachable.
    """
    check_schema_name(schema)
    await asyncio.to_thread(_upgrade_blocking, database_url, schema)
