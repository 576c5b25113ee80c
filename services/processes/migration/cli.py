"""``devicestate migrate``: the migration executor (registered in ``services/cli/main.py``)."""

from __future__ import annotations

import typer

from services.runtime.config import MigrationProcessSettings
from services.runtime.logs import configure_logging


def migrate(
    apply: bool | None = typer.Option(
        None,
        "--apply/--dry-run",
        help="Act (--apply) or only print what it would do (--dry-run, the default: Kubernetes "
        "writes go with dryRun=All, no report is posted). Overrides DEVICESTATE_MIGRATE_DRY_RUN.",
    ),
    holder: str | None = typer.Option(
        None,
        "--holder",
        help="Lease holder name (default DEVICESTATE_MIGRATE_HOLDER, else <hostname>-<pid>).",
    ),
    interval: float | None = typer.Option(
        None,
        "--interval",
        min=0.1,
        help="Seconds between passes (DEVICESTATE_MIGRATE_POLL_SECONDS).",
    ),
    once: bool = typer.Option(False, "--once", help="One pass, then exit (1 if a step failed)."),
    metrics_port: int = typer.Option(
        9112, "--metrics-port", help="Port of the Prometheus /metrics endpoint (0: off)."
    ),
) -> None:
    """Carry out the governor's workload migrations off quarantined devices.

    Polls GET /v1/migrations; takes a migration's lease (lease-requested, renewed at half the
    lease period); sets the Pod condition devicestate.io/serving=False (pods/status); asks a
    checkpointed workload for a checkpoint (annotation devicestate.io/checkpoint-request) and
    reports checkpoint-committed; evicts the Pods through the policy/v1 Eviction API (never a
    delete); reports the replacement. For a non-recoverable workload: a Warning Event on each
    Pod and POST /v1/migrations/{id}/evidence, no eviction. Runs until SIGTERM or Ctrl-C.
    """
    settings = MigrationProcessSettings()
    update: dict[str, object] = {}
    if apply is not None:
        update["migrate_dry_run"] = not apply
    if holder is not None:
        update["migrate_holder"] = holder
    if interval is not None:
        update["migrate_poll_seconds"] = interval
    settings = settings.model_copy(update=update)
    configure_logging(settings)
    from services.adapters.kube.client import KubeConfigUnavailable
    from services.processes.migration.executor import PassResult
    from services.processes.migration.run import run_executor
    from services.runtime.loop import run

    def show(result: PassResult) -> None:
        for action in result.actions:
            typer.echo(action)
        for error in result.errors:
            typer.echo(f"error: {error}", err=True)

    try:
        result = run(run_executor(settings, once=once, metrics_port=metrics_port, on_result=show))
    except (KubeConfigUnavailable, OSError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if once and result is not None and result.errors:
        raise typer.Exit(1)
