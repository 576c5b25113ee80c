"""``devicestate replay``: rebuild the projection from the event topic and optionally verify it;
``--governance`` rebuilds the governance projection from the governance topic instead.

Progress goes to stderr; stdout carries the differences found by ``--verify`` and the summary
line. Exit codes: 0 done (and identical, with ``--verify``); 1 differences found; 2 the replay
could not run (missing topic, existing schema, bad options).
"""

from __future__ import annotations

import asyncio
import sys
from typing import Annotated, Any

import typer

from services.runtime.config import ReplayProcessSettings
from services.runtime.loop import run, tune_gc

EXIT_DIFFERENT = 1
EXIT_ERROR = 2


def replay(
    schema: Annotated[
        str | None,
        typer.Option(
            "--schema",
            help="Schema to rebuild into; must not exist yet. Default: replay_<n>, the next free "
            "number.",
        ),
    ] = None,
    in_place: Annotated[
        bool,
        typer.Option(
            "--in-place",
            help="Truncate the live tables (DEVICESTATE_DATABASE_SCHEMA) and rebuild them. "
            "Refused while the worker's consumer group has members: stop the worker first.",
        ),
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="With --in-place: skip the check that no worker is consuming (only when the "
            "group's members are known to be gone).",
        ),
    ] = False,
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url",
            help="Database to write to (default DEVICESTATE_DATABASE_URL). --verify compares "
            "with the live schema in this same database.",
        ),
    ] = None,
    verify: Annotated[
        bool,
        typer.Option(
            "--verify",
            help="After rebuilding into a fresh schema, compare it with the live schema (devices, "
            "device_history and the inventory tables); print every difference and exit 1 if "
            "there is any. The worker should have caught up.",
        ),
    ] = False,
    keep: Annotated[
        bool,
        typer.Option("--keep/--drop", help="Keep or drop the replay schema after --verify."),
    ] = True,
    governance: Annotated[
        bool,
        typer.Option(
            "--governance",
            help="Fold the governance topic (DEVICESTATE_GOVERNANCE_TOPIC) from offset 0 through "
            "the governor's state machine into a fresh schema; with --verify, compare "
            "device_governance, quarantines and governance_decisions with the live schema "
            "(a determinism check: they must be identical).",
        ),
    ] = False,
    batch_size: Annotated[
        int, typer.Option(min=1, help="Most events per database transaction.")
    ] = 5000,
    progress: Annotated[
        bool, typer.Option("--progress/--no-progress", help="Show a progress bar on stderr.")
    ] = True,
) -> None:
    """Rebuild the device projection (directory and DRA inventory) from the beginning of the
    event topic.

    Reads every partition from its first record up to the end offsets seen at the start (no
    consumer group, nothing committed), and writes through the worker's own fold and write path.
    Replaying the same log always gives identical rows.
    """
    from services.runtime.logs import configure_logging

    settings = ReplayProcessSettings()
    configure_logging(settings)
    if governance and in_place:
        _usage("--governance rebuilds into a fresh schema: it does not take --in-place")
    if in_place and (schema is not None or verify):
        _usage("--in-place rebuilds the live schema: it takes neither --schema nor --verify")
    if in_place and not force:
        from services.processes.replay.guard import active_group_members

        members = run(
            active_group_members(settings.kafka_bootstrap_servers, settings.consumer_group)
        )
        if members:
            _usage(
                f"consumer group {settings.consumer_group!r} has {len(members)} active member(s) "
                f"({', '.join(members)}): stop the worker before an in-place replay (a running "
                "worker would record its offsets in the truncated tables and the replay would "
                "skip the records before them), or pass --force"
            )
    tune_gc()
    code = run(
        _run(
            settings,
            schema=schema,
            in_place=in_place,
            database_url=database_url or settings.database_url,
            verify=verify,
            keep=keep,
            batch_size=batch_size,
            show_progress=progress and sys.stderr.isatty(),
            governance=governance,
        )
    )
    if code:
        raise typer.Exit(code)


def _usage(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(EXIT_ERROR)


async def _run(
    settings: ReplayProcessSettings,
    *,
    schema: str | None,
    in_place: bool,
    database_url: str,
    verify: bool,
    keep: bool,
    batch_size: int,
    show_progress: bool,
    governance: bool = False,
) -> int:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from services.adapters.kafka.topics import TopicCheckError, TopicRole, ensure_topics
    from services.adapters.projection.schema_admin import drop_schema, next_replay_schema
    from services.processes.replay.governance import replay_governance, verify_governance
    from services.processes.replay.run import ReplayError, ReplayRetention, make_engine, replay
    from services.processes.replay.run import verify as diff_live

    engine = make_engine(database_url)
    console = Console(stderr=True)
    bar = Progress(
        TextColumn("[bold]replay[/bold] {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]} events/s"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        disable=not show_progress,
    )
    try:
        target = settings.database_schema if in_place else schema
        if target is None:
            target = await next_replay_schema(engine)
        task = bar.add_task(target, total=None, rate="-")
        loop = asyncio.get_running_loop()
        started = loop.time()

        def on_start(total: int) -> None:
            bar.update(task, total=total)

        def on_progress(done: int, total: int) -> None:
            elapsed = max(loop.time() - started, 1e-9)
            bar.update(task, completed=done, rate=f"{done / elapsed:,.0f}")

        summary: Any
        try:
            # The topic it reads must be as the service made it (never created here: a replay
            # of a topic nobody wrote has nothing to read).
            role = TopicRole.GOVERNANCE if governance else TopicRole.EVENTS
            await ensure_topics(settings, (role,), create=False)
            with bar:
                if governance:
                    summary = await replay_governance(
                        settings,
                        engine=engine,
                        database_url=database_url,
                        schema=target,
                        batch_size=batch_size,
                        progress=on_progress,
                        on_start=on_start,
                    )
                else:
                    summary = await replay(
                        settings,
                        engine=engine,
                        database_url=database_url,
                        schema=target,
                        in_place=in_place,
                        batch_size=batch_size,
                        progress=on_progress,
                        on_start=on_start,
                        max_devices_per_node=settings.max_devices_per_node,
                        retention=ReplayRetention(
                            settings.max_clock_skew_seconds,
                            settings.device_history_retention_seconds,
                        ),
                    )
        except (ReplayError, TopicCheckError, ValueError) as exc:
            typer.echo(f"error: {exc}", err=True)
            return EXIT_ERROR
        code = 0
        if verify:
            compare = verify_governance if governance else diff_live
            differences = await compare(engine, settings.database_schema, target)
            for line in differences:
                typer.echo(line)
            if differences:
                typer.echo(
                    f"verify: {len(differences)} difference(s) between {settings.database_schema} "
                    f"and {target}"
                )
                code = EXIT_DIFFERENT
            else:
                typer.echo(f"verify: {target} is identical to {settings.database_schema}")
            if not keep:
                await drop_schema(engine, target)
        typer.echo(summary.line())
        return code
    finally:
        await engine.dispose()


if __name__ == "__main__":  # pragma: no cover - ``python -m services.processes.replay.cli`` (tests)
    typer.run(replay)
