"""``devicestate enforce``: the DeviceTaintRule reconciler (registered in ``services/cli/main.py``)."""

from __future__ import annotations

import typer

from services.runtime.config import EnforcementProcessSettings
from services.runtime.logs import configure_logging


def enforce(
    live: bool | None = typer.Option(
        None,
        "--live/--dry-run",
        help="Really write DeviceTaintRules (--live) or only have the API server accept the "
        "writes with dryRun=All (--dry-run, the default). Overrides DEVICESTATE_ENFORCE_DRY_RUN.",
    ),
    interval: float = typer.Option(
        30.0, "--interval", min=0.1, help="Seconds between reconcile passes."
    ),
    follow_decisions: bool = typer.Option(
        True,
        "--follow-decisions/--no-follow-decisions",
        help="Reconcile early on DeviceQuarantined/QuarantineReleased decisions "
        "(DEVICESTATE_DECISIONS_TOPIC); without it, every --interval only.",
    ),
    once: bool = typer.Option(
        False, "--once", help="One reconcile pass, then exit (1 if it failed or a write failed)."
    ),
    metrics_port: int = typer.Option(
        9111, "--metrics-port", help="Port of the Prometheus /metrics endpoint (0: off)."
    ),
) -> None:
    """Enforce quarantines of DRA devices with DeviceTaintRules (resource.k8s.io/v1beta2).

    One rule (taint devicestate.io/quarantined, effect NoSchedule, or NoExecute with
    DEVICESTATE_ENFORCE_NO_EXECUTE=true) per active or recovering quarantine of a driver/pool/device,
    read from PostgreSQL; rules of released quarantines are deleted. Only rules labelled
    app.kubernetes.io/managed-by=devicestate are touched. Off unless
    DEVICESTATE_ENFORCE_DEVICE_TAINT_RULES=true; dry-run unless --live or
    DEVICESTATE_ENFORCE_DRY_RUN=false. Runs until SIGTERM or Ctrl-C.
    """
    settings = EnforcementProcessSettings()
    if live is not None:
        settings = settings.model_copy(update={"enforce_dry_run": not live})
    configure_logging(settings)
    from services.adapters.kafka.topics import TopicCheckError
    from services.adapters.kube.client import KubeConfigUnavailable
    from services.processes.enforcement.run import EnforceOptions, run_enforcer
    from services.runtime.loop import run

    try:
        result = run(
            run_enforcer(
                settings,
                EnforceOptions(
                    interval_seconds=interval,
                    metrics_port=metrics_port,
                    follow_decisions=follow_decisions,
                    once=once,
                ),
            )
        )
    except (TopicCheckError, KubeConfigUnavailable) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if once and result is not None and (result.failed or result.errors):
        raise typer.Exit(1)
