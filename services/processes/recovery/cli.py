"""``devicestate recovery``: the executor of staged recovery (registered in
``services/cli/main.py``)."""

from __future__ import annotations

from typing import Literal

import typer

from services.runtime.config import RecoveryProcessSettings
from services.runtime.logs import configure_logging


def _device(text: str) -> tuple[str, str]:
    node, sep, resource_id = text.partition("/")
    if not sep or not node or not resource_id:
        raise typer.BadParameter(f"{text!r} is not <node>/<resourceID>")
    return node, resource_id


def recovery(
    executor: str | None = typer.Option(
        None,
        "--executor",
        help="inprocess (reports a configured result, runs nothing) or kubernetes-job (nvidia-smi "
        "in a Job pinned to the node). Overrides DEVICESTATE_RECOVERY_EXECUTOR.",
    ),
    live: bool | None = typer.Option(
        None,
        "--live/--dry-run",
        help="kubernetes-job: really run the Jobs (--live) or only have the API server accept "
        "them (--dry-run, the default). Overrides DEVICESTATE_RECOVERY_DRY_RUN.",
    ),
    holder: str | None = typer.Option(
        None,
        "--holder",
        help="Lease holder id (default: <hostname>/<pid>/<random>; must be unique per process).",
    ),
    max_concurrent: int = typer.Option(
        4, "--max-concurrent", min=1, help="Most devices checked (or awaiting a lease) at once."
    ),
    fail: list[str] = typer.Option(
        [],
        "--fail",
        help="inprocess: fail the checks of this device, as <node>/<resourceID> (repeatable); "
        "all others pass.",
    ),
    metrics_port: int = typer.Option(
        9110, "--metrics-port", help="Port of the Prometheus /metrics endpoint (0: off)."
    ),
    group: str = typer.Option(
        "devicestate-recovery", "--group", help="Kafka consumer group of the decisions topic."
    ),
) -> None:
    """Run the probes and canaries of staged recovery.

    Reads RecoveryStageStarted decisions (DEVICESTATE_DECISIONS_TOPIC), asks the governor for the
    device's recovery lease on the governance topic, runs the check once the lease is granted to
    this process, and reports the result with the lease's fencing token. At most one check per
    device at a time. Runs until SIGTERM or Ctrl-C.
    """
    settings = RecoveryProcessSettings()
    overrides: dict[str, object] = {}
    if executor is not None:
        if executor not in ("inprocess", "kubernetes-job"):
            raise typer.BadParameter("must be inprocess or kubernetes-job", param_hint="--executor")
        overrides["recovery_executor"] = executor
    if live is not None:
        overrides["recovery_dry_run"] = not live
    settings = settings.model_copy(update=overrides)
    chosen: Literal["inprocess", "kubernetes-job"] = settings.recovery_executor
    if fail and chosen != "inprocess":
        raise typer.BadParameter("only with the inprocess executor", param_hint="--fail")
    devices = tuple(_device(item) for item in fail)
    configure_logging(settings)
    from services.adapters.kafka.topics import TopicCheckError
    from services.processes.recovery.run import (  # the Kafka client when running
        RecoveryOptions,
        run_recovery,
    )
    from services.runtime.loop import run

    try:
        run(
            run_recovery(
                settings,
                RecoveryOptions(
                    group_id=group,
                    holder=holder,
                    max_concurrent=max_concurrent,
                    metrics_port=metrics_port,
                    fail=devices,
                ),
            )
        )
    except TopicCheckError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
