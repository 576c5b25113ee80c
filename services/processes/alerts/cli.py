"""``devicestate alerts``: forward governance alerts to Alertmanager (registered in
``services/cli/main.py``)."""

from __future__ import annotations

import typer

from services.runtime.config import AlertsProcessSettings
from services.runtime.logs import configure_logging


def alerts(
    metrics_port: int = typer.Option(
        9109, "--metrics-port", help="Port of the Prometheus /metrics endpoint (0: off)."
    ),
    resend_interval: float = typer.Option(
        60.0,
        "--resend-interval",
        min=1.0,
        help="Seconds between posts of the alerts still firing. Keep it below Alertmanager's "
        "resolve_timeout (default 5m), which resolves an alert not posted again in time.",
    ),
    generator_url: str | None = typer.Option(
        None,
        "--generator-url",
        help="Base URL of the directory API; each alert's generatorURL then links to its device "
        "(or node). Default: no link.",
    ),
    group: str = typer.Option(
        "devicestate-alerts", "--group", help="Kafka consumer group (one active sender per group)."
    ),
) -> None:
    """Send governance alerts to Alertmanager (API v2).

    Reads the decisions topic (DEVICESTATE_DECISIONS_TOPIC); every decision that starts or ends an
    alert is POSTed to DEVICESTATE_ALERT_WEBHOOK_URL + /api/v2/alerts, firing and resolved with
    identical labels (alertname, incident, node, resourceID, namespace,
    reason, severity). Retries connection
    errors and 5xx (DEVICESTATE_ALERT_RETRIES times, then reads again), skips alerts refused
    with a 4xx, commits offsets only after delivery. Runs until SIGTERM or Ctrl-C.
    """
    settings = AlertsProcessSettings()
    if not settings.alert_webhook_url:
        typer.echo(
            "devicestate alerts: no Alertmanager configured. Set DEVICESTATE_ALERT_WEBHOOK_URL "
            "to its base URL, e.g. http://alertmanager:9093 (alerts go to <url>/api/v2/alerts).",
            err=True,
        )
        raise typer.Exit(2)
    configure_logging(settings)
    from services.adapters.kafka.topics import TopicCheckError
    from services.processes.alerts.service import (  # the Kafka client only when running
        AlertOptions,
        run_alerts,
    )
    from services.runtime.loop import run

    try:
        run(
            run_alerts(
                settings,
                AlertOptions(
                    group_id=group,
                    resend_interval_seconds=resend_interval,
                    generator_base_url=generator_url,
                    metrics_port=metrics_port,
                ),
            )
        )
    except TopicCheckError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
