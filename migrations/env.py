"""Alembic environment of the projection: one target schema per run, version table inside it.

Target schema, first found: ``config.attributes["schema"]`` (set by
:func:`services.adapters.projection.migrate.migrate`), ``-x schema=NAME``, ``DEVICESTATE_DATABASE_SCHEMA``
(default ``public``). Database, first found: ``config.attributes["url"]``, ``-x url=...``, the
ini's ``sqlalchemy.url``, ``DEVICESTATE_DATABASE_URL``. Async URLs (``postgresql+asyncpg``) run
on an async engine, sync ones (``postgresql+psycopg``) directly.

Every run takes a transaction-level advisory lock on the schema name, so processes starting
together (worker, API) migrate one after the other, and creates the schema when it is missing.
"""

from __future__ import annotations

import asyncio
from logging.config import fileConfig

from alembic import context
from sqlalchemy import Connection, create_engine, pool, text
from sqlalchemy.ext.asyncio import create_async_engine

import services.adapters.projection.governance_tables  # (the imports register their tables on ``metadata``)
import services.adapters.projection.inventory_tables  # noqa: F401
from services.adapters.projection.tables import check_schema_name, metadata, quoted_schema
from services.runtime.config import DatabaseSettings

config = context.config
x_args = context.get_x_argument(as_dictionary=True)

# Programmatic runs (services.adapters.projection.migrate) have no ini file: the process's logging stays.
if config.config_file_name is not None:
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def target_schema() -> str:
    schema = config.attributes.get("schema") or x_args.get("schema")
    if not schema:
        schema = DatabaseSettings().database_schema
    return check_schema_name(schema)


def database_url() -> str:
    url = (
        config.attributes.get("url")
        or x_args.get("url")
        or config.get_main_option("sqlalchemy.url")
    )
    return url or DatabaseSettings().database_url


def run_migrations_offline() -> None:
    """``alembic upgrade head --sql``: print the SQL instead of running it."""
    schema = target_schema()
    context.configure(
        url=database_url(),
        target_metadata=metadata,
        version_table_schema=schema,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.execute(f"CREATE SCHEMA IF NOT EXISTS {quoted_schema(schema)}")
        context.run_migrations()


def do_run_migrations(connection: Connection) -> None:
    schema = target_schema()
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table_schema=schema,
    )
    with context.begin_transaction():
        connection.execute(text("SELECT pg_advisory_xact_lock(hashtext(:s))"), {"s": schema})
        connection.execute(text(f"CREATE SCHEMA IF NOT EXISTS {quoted_schema(schema)}"))
        context.run_migrations()


async def run_async_migrations(url: str) -> None:
    engine = create_async_engine(url, poolclass=pool.NullPool)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(do_run_migrations)
    finally:
        await engine.dispose()


def run_migrations_online() -> None:
    url = database_url()
    if "+asyncpg" in url:
        asyncio.run(run_async_migrations(url))
        return
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        with engine.connect() as sync_connection:
            do_run_migrations(sync_connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
