"""Reaching the local stack for one benchmark run, the run's own names, and its clean-up.

Connection settings: ``DEVICESTATE_KAFKA_BOOTSTRAP_SERVERS`` / ``DEVICESTATE_DATABASE_URL`` when
set (``export $(devicestate-dev stack env)``), otherwise the local stack's own addresses from
``devtools.stack`` (``StackLayout.from_env``, which follows ``DEVICESTATE_STACK_*_PORT``).
:func:`check_stack` asks both servers before anything is created, so a stopped stack fails in
seconds with the command that starts it.

Every run gets fresh names (:func:`new_run`): topic ``bench.<run id>`` (unless ``--topic``), its
dead-letter topic, governance and decisions topics, consumer group ``bench-<run id>``, schemas
``bench_<run id>`` (worker) and ``bench_<run id>_replay``; so runs on one stack, interleaved or
concurrent, never read each other's data. :func:`cleanup` removes them again.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from bench.console import console
from bench.kafka_admin import admin_client, delete_consumer_group, delete_topics
from bench.processes import Child
from devtools.stack.kafka import metadata_answers
from devtools.stack.supervisor import StackLayout
from services.runtime.config import Settings


class StackUnreachable(RuntimeError):
    """Kafka or PostgreSQL of the settings does not answer."""


@dataclass
class Run:
    """One benchmark run: its names, work directories, and what it created (for clean-up)."""

    run_id: str
    topic: str
    group: str
    worker_schema: str
    replay_schema: str
    worker_data_dir: Path
    log_dir: Path
    children: list[Child] = field(default_factory=list)
    created_schemas: list[str] = field(default_factory=list)
    created_topic: bool = False
    done: set[str] = field(default_factory=set)


def new_run(topic: str | None) -> Run:
    """Fresh names (UTC time to the second + 4 random hex digits) and a work directory
    ``$TMPDIR/devicestate-bench-<run id>/`` with ``logs/`` (kept) and ``worker-data/``."""
    stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S")
    run_id = f"{stamp}_{uuid.uuid4().hex[:4]}"
    work = Path(tempfile.gettempdir()) / f"devicestate-bench-{run_id}"
    (work / "logs").mkdir(parents=True, exist_ok=True)
    return Run(
        run_id=run_id,
        topic=topic or f"bench.{run_id}",
        group=f"bench-{run_id}",
        worker_schema=f"bench_{run_id}",
        replay_schema=f"bench_{run_id}_replay",
        worker_data_dir=work / "worker-data",
        log_dir=work / "logs",
    )


def stack_settings() -> Settings:
    """``Settings()`` from the environment, with the local stack's addresses for the
    connection settings the environment does not set."""
    stack_env = StackLayout.from_env().connection_env()
    missing = {
        name.removeprefix("DEVICESTATE_").lower(): value
        for name, value in stack_env.items()
        if not os.environ.get(name)
    }
    return Settings().model_copy(update=missing)


def run_settings(base: Settings, run: Run, partitions: int) -> Settings:
    """``base`` pointed at the run's topics and consumer group (logs at WARNING)."""
    return base.model_copy(
        update={
            "topic": run.topic,
            "dead_letter_topic": f"{run.topic}.dead-letter",
            # Per run even with --topic (an earlier run's governance records must not be folded).
            "governance_topic": f"bench.{run.run_id}.governance",
            "decisions_topic": f"bench.{run.run_id}.decisions",
            "consumer_group": run.group,
            "topic_partitions": partitions,
            "log_level": "WARNING",
        }
    )


async def check_stack(settings: Settings, seconds: float = 10.0) -> None:
    """Kafka answers a metadata request and PostgreSQL a ``SELECT 1`` within ``seconds`` each;
    raises :class:`StackUnreachable` (naming the address and how to start the stack) if not."""
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    hint = "start the local stack with `devicestate-dev stack up`, or set DEVICESTATE_*"
    if not await metadata_answers(settings.kafka_bootstrap_servers, seconds=seconds):
        raise StackUnreachable(
            f"Kafka at {settings.kafka_bootstrap_servers} does not answer; {hint}"
        )
    engine = create_async_engine(settings.database_url)
    try:
        async with asyncio.timeout(seconds), engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
    except Exception as exc:
        where = engine.url.render_as_string(hide_password=True)
        raise StackUnreachable(f"PostgreSQL at {where} does not answer ({exc!r}); {hint}") from exc
    finally:
        await engine.dispose()


async def cleanup(run: Run, settings: Settings, keep: bool) -> None:
    """Stop the run's children (by PID); unless ``keep``, delete its topics (the bench topic
    only if this run created it), its consumer group and its schemas, and its worker data.
    Failures are printed, not raised: clean-up runs after a failed stage too."""
    for child in run.children:
        if child.alive():
            console.print(f"  stopping {child.name} pid {child.pid}")
            child.stop()
    if keep:
        console.print(
            f"  --keep: topic {run.topic}, group {run.group}, schemas "
            f"{', '.join(run.created_schemas) or '-'}, data {run.worker_data_dir.parent} kept"
        )
        return
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    from services.adapters.projection.tables import quoted_schema

    def doomed(t: str) -> bool:
        return (
            (run.created_topic and t in (run.topic, settings.dead_letter_topic))
            or t in (settings.governance_topic, settings.decisions_topic)  # this run's
            or t.startswith(f"{run.group}-")  # the worker's changelog topics
        )

    try:
        async with admin_client(settings.kafka_bootstrap_servers) as admin:
            deleted = await delete_topics(admin, doomed)
            if deleted:
                console.print(f"  deleted topics: {', '.join(deleted)}")
            if "worker" in run.done or any(c.name.startswith("worker") for c in run.children):
                with contextlib.suppress(Exception):
                    await delete_consumer_group(admin, run.group)
                    console.print(f"  deleted consumer group {run.group}")
    except Exception as exc:
        console.print(f"  [red]topic clean-up failed:[/red] {exc!r}")
    if run.created_schemas:
        engine = create_async_engine(settings.database_url)
        try:
            async with engine.begin() as conn:
                for schema in run.created_schemas:
                    await conn.execute(
                        text(f"DROP SCHEMA IF EXISTS {quoted_schema(schema)} CASCADE")
                    )
            console.print(f"  dropped schemas: {', '.join(run.created_schemas)}")
        except Exception as exc:
            console.print(f"  [red]schema clean-up failed:[/red] {exc!r}")
        finally:
            await engine.dispose()
    shutil.rmtree(run.worker_data_dir, ignore_errors=True)
    console.print(f"  logs kept in {run.log_dir}")
