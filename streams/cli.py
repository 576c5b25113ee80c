"""``devicestate worker``: run the stream worker (also ``python -m streams.cli``).

Settings come from ``DEVICESTATE_*`` environment variables; the options below override a few of
them for one run.
"""

from __future__ import annotations

from typing import Annotated

import typer

from services.runtime.config import WorkerProcessSettings
from services.runtime.loop import run, tune_gc


def worker(
    batch_size: Annotated[
        int | None,
        typer.Option(help="Most events per database transaction (DEVICESTATE_WORKER_BATCH_SIZE)."),
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(help="Prometheus port, 0 for none (DEVICESTATE_WORKER_METRICS_PORT)."),
    ] = None,
    skip_prepare: Annotated[
        bool,
        typer.Option(
            "--skip-prepare",
            help="Do not run the database migrations or create missing topics before starting "
            "(the topics are still checked).",
        ),
    ] = False,
) -> None:
    """Consume device-health events from Kafka, drop duplicates, and write the PostgreSQL projection.

    Migrates the projection schema and creates missing topics first, then checks them (exit 2
    naming the fix when one is wrong). Stops cleanly on SIGTERM/SIGINT (a batch being written is
    finished first); exits 1 when a batch cannot be written.
    """
    from services.runtime.logs import configure_logging
    from streams.worker import run_worker

    overrides: dict[str, object] = {}
    if batch_size is not None:
        overrides["worker_batch_size"] = batch_size
    if metrics_port is not None:
        overrides["worker_metrics_port"] = metrics_port
    settings = WorkerProcessSettings(**overrides)  # type: ignore[arg-type]
    configure_logging(settings)
    tune_gc()
    from services.adapters.kafka.topics import TopicCheckError

    try:
        code = run(run_worker(settings, prepare_first=not skip_prepare))
    except TopicCheckError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if code:
        raise typer.Exit(code)


def main() -> None:
    typer.run(worker)


if __name__ == "__main__":
    main()
