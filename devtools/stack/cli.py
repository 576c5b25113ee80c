"""``devicestate-dev stack up|down|status|env``: the local Kafka + PostgreSQL stack, without Docker.

Progress goes to stderr; stdout carries only what a script may want to read: the connection
settings (``NAME=value`` lines) after ``up`` and from ``env``, the table from ``status``.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import sys
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from devtools.stack import kafka, postgres
from devtools.stack.supervisor import HOST, PidRecord, StackError, StackLayout, file_lock

app = typer.Typer(
    help=(
        "Run the local development stack without Docker: Apache Kafka (KRaft; one node on "
        "127.0.0.1:9092, or --brokers 3 on 9092/9094/9096) and a private PostgreSQL on "
        "127.0.0.1:55432, with state in ./.stack (DEVICESTATE_STACK_DIR)."
    ),
    no_args_is_help=True,
)

EXIT_NOT_RUNNING = 3


class Component(StrEnum):
    kafka = "kafka"
    postgres = "postgres"


Only = Annotated[
    Component | None,
    typer.Option("--only", help="Act on one server only.", case_sensitive=False),
]


def _report(line: str) -> None:
    print(f"[stack] {line}", file=sys.stderr, flush=True)


def _selected(only: Component | None) -> tuple[Component, ...]:
    return (only,) if only is not None else (Component.kafka, Component.postgres)


def _layout(brokers: int | None = None) -> StackLayout:
    try:
        layout = StackLayout.from_env()
        return layout if brokers is None else layout.with_brokers(brokers)
    except StackError as exc:
        _fail(exc)


def _fail(exc: StackError) -> NoReturn:
    print(f"[stack] ERROR: {exc.details()}", file=sys.stderr, flush=True)
    raise typer.Exit(1)


def _quiet_client_logs() -> None:
    # aiokafka logs every refused connection while the broker is still starting.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)


@app.command()
def up(
    only: Only = None,
    timeout: Annotated[
        float, typer.Option(help="Seconds to wait for each server to become ready.")
    ] = 180.0,
    brokers: Annotated[
        int | None,
        typer.Option(
            help="Kafka brokers (KRaft nodes, each broker and controller) on 127.0.0.1: broker i "
            "on DEVICESTATE_STACK_KAFKA_PORT + 2(i-1). Default: DEVICESTATE_STACK_KAFKA_BROKERS, "
            "else as the stack was first started, else 1. With 3, every topic the brokers create "
            "has 3 replicas and min.insync.replicas=2.",
            min=1,
        ),
    ] = None,
) -> None:
    """Start Kafka and PostgreSQL (fetching and initialising on first use) and wait until ready.

    Does nothing for a server that already runs and answers. Prints the connection settings.
    """
    layout = _layout(brokers)
    _quiet_client_logs()
    started = time.monotonic()
    selected = _selected(only)
    try:
        with file_lock(layout.state_dir / "stack.lock", _report, "stack up/down"):
            # Kafka boots for a while: start it first and set PostgreSQL up meanwhile.
            launch = kafka.launch(layout, _report) if Component.kafka in selected else None
            postgres_error: StackError | None = None
            if Component.postgres in selected:
                try:
                    postgres.start(layout, _report, timeout)
                except StackError as exc:
                    postgres_error = exc
                    if launch is not None:
                        _report(f"ERROR: {exc.details()}")
            if launch is not None:
                kafka.wait_ready(layout, launch, _report, timeout)
            if postgres_error is not None:
                raise postgres_error
    except StackError as exc:
        _fail(exc)
    _report(f"up in {time.monotonic() - started:.1f} s; state in {layout.state_dir}")
    _print_env(layout, selected)


@app.command()
def down(
    only: Only = None,
    purge: Annotated[
        bool,
        typer.Option(
            "--purge",
            help="Also delete the servers' data (topics, databases) and the worker's "
            "(DEVICESTATE_WORKER_DATA_DIR: its RocksDB refers to the deleted topics).",
        ),
    ] = False,
) -> None:
    """Stop the servers this stack started (by their recorded PIDs)."""
    layout = _layout()
    if not layout.state_dir.is_dir():
        _report(f"nothing to stop: {layout.state_dir} does not exist")
        return
    try:
        with file_lock(layout.state_dir / "stack.lock", _report, "stack up/down"):
            for component in _selected(only):
                if component is Component.kafka:
                    kafka.stop(layout, _report)
                    if purge:
                        kafka.purge(layout, _report)
                        _purge_worker_data()
                else:
                    postgres.stop(layout, _report)
                    if purge:
                        postgres.purge(layout, _report)
    except StackError as exc:
        _fail(exc)


def _purge_worker_data() -> None:
    """The worker's RocksDB files (``DEVICESTATE_WORKER_DATA_DIR``) go with the topics: they hold
    changelog offsets of topics that no longer exist, and Faust refuses to start on them."""
    from services.runtime.config import WorkerProcessSettings

    data = Path(WorkerProcessSettings().worker_data_dir)
    if data.is_dir():
        shutil.rmtree(data)
        _report(f"worker data: deleted {data}")


@app.command()
def status(only: Only = None) -> None:
    """Show what runs. Exits 0 if every selected server runs and answers, 3 otherwise."""
    layout = _layout()
    _quiet_client_logs()
    all_ready = True
    for component in _selected(only):
        if component is Component.kafka:
            for node, record in kafka.running(layout, _report):
                ready = record is not None and asyncio.run(
                    kafka.metadata_answers(node.bootstrap_servers, seconds=5.0)
                )
                _print_status(node.name, node.bootstrap_servers, record, ready, node.server_log)
                all_ready = all_ready and ready
        else:
            pg = postgres.running(layout, _report)
            ready = pg is not None and asyncio.run(
                postgres.select_one(layout.postgres_port, seconds=5.0)
            )
            address = f"{HOST}:{layout.postgres_port}"
            _print_status(component.value, address, pg, ready, postgres.log_file(layout))
            all_ready = all_ready and ready
    if not all_ready:
        raise typer.Exit(EXIT_NOT_RUNNING)


def _print_status(
    name: str, address: str, record: PidRecord | None, ready: bool, log: Path
) -> None:
    if record is None:
        state = "stopped"
    else:
        state = f"running pid {record.pid}, " + ("ready" if ready else "NOT ready")
    print(f"{name:<9} {address:<16} {state}  (log {log})")


@app.command()
def env(only: Only = None) -> None:
    """Print the connection settings for this stack as NAME=value lines."""
    _print_env(_layout(), _selected(only))


def _print_env(layout: StackLayout, selected: tuple[Component, ...]) -> None:
    settings = layout.connection_env()
    if Component.kafka in selected:
        print(
            f"DEVICESTATE_KAFKA_BOOTSTRAP_SERVERS={settings['DEVICESTATE_KAFKA_BOOTSTRAP_SERVERS']}"
        )
    if Component.postgres in selected:
        print(f"DEVICESTATE_DATABASE_URL={settings['DEVICESTATE_DATABASE_URL']}")
    sys.stdout.flush()


if __name__ == "__main__":
    app()
