"""``devicestate watch``: the watcher command (registered in ``services/cli/main.py``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import typer

from services.runtime.config import WatcherProcessSettings
from services.runtime.logs import configure_logging


def watch(
    from_file: Path | None = typer.Option(
        None,
        "--from-file",
        exists=True,
        dir_okay=False,
        readable=True,
        help="Read a recorded watch stream (JSONL, one watch event a line, as in "
        "devtools/examples/) instead of the cluster; exits at its end and prints a summary.",
    ),
    label_selector: str | None = typer.Option(
        None,
        "--label-selector",
        help="Only watch Pods matching this label selector (overrides DEVICESTATE_LABEL_SELECTOR).",
    ),
    field_selector: str | None = typer.Option(
        None,
        "--field-selector",
        help="Only watch Pods matching this field selector, e.g. spec.nodeName=gpu-node-a "
        "(overrides DEVICESTATE_FIELD_SELECTOR).",
    ),
    kubeconfig: Path | None = typer.Option(
        None,
        "--kubeconfig",
        dir_okay=False,
        help="Kubeconfig file (overrides DEVICESTATE_KUBECONFIG; default: in-cluster service "
        "account, then ~/.kube/config).",
    ),
) -> None:
    """Watch Pods and publish device-health events (KEP-4680 allocatedResourcesStatus) to Kafka.

    Live: LIST, then WATCH Pods in all namespaces, node Leases (coarsened NodeHeartbeat),
    Nodes (extended-resource NodeResourcesChanged) and the DRA inventory (ResourceSlices,
    ResourceClaims, DeviceClasses: InventoryObserved; off with DEVICESTATE_WATCH_DRA=false, and
    skipped with a warning on clusters without resource.k8s.io/v1) until SIGTERM or Ctrl-C, and
    send a WatcherTick to every partition every DEVICESTATE_TICK_INTERVAL_SECONDS.
    Only what changed is published, keyed by node; malformed input is dead-lettered.
    """
    overrides = {
        name: value
        for name, value in (
            ("label_selector", label_selector),
            ("field_selector", field_selector),
            ("kubeconfig", str(kubeconfig) if kubeconfig else None),
        )
        if value is not None
    }
    settings = WatcherProcessSettings().model_copy(update=overrides)
    configure_logging(settings)
    from services.adapters.kafka.topics import TopicCheckError
    from services.processes.watcher.run import (
        run_watch,  # the Kafka and Kubernetes clients only when running
    )

    try:
        summary = asyncio.run(run_watch(settings, from_file=from_file))
    except TopicCheckError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if from_file is not None:
        typer.echo(summary.line())
