"""``devicestate adoption enforce``: the rollback admission policies of rolled-back adoption pools
(:mod:`.admission_reconciler`; registered under ``adoption`` in ``services/cli/main.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from services.runtime.config import EnforcementProcessSettings
from services.runtime.logs import configure_logging

if TYPE_CHECKING:
    from services.processes.enforcement.admission_reconciler import AdmissionResult


def adoption_enforce(
    live: bool | None = typer.Option(
        None,
        "--live/--dry-run",
        help="Really write the ValidatingAdmissionPolicies (--live) or only have the API server "
        "accept the writes with dryRun=All (--dry-run, the default). Overrides "
        "DEVICESTATE_ENFORCE_DRY_RUN.",
    ),
    interval: float = typer.Option(
        30.0, "--interval", min=0.1, help="Seconds between reconcile passes."
    ),
    once: bool = typer.Option(
        False, "--once", help="One pass, then exit (1 if it failed or a write failed)."
    ),
) -> None:
    """Refuse new ResourceClaims for the DeviceClass of every pool in phase rolled-back.

    One ValidatingAdmissionPolicy and binding (admissionregistration.k8s.io/v1, action Deny)
    per rolled-back pool with a DeviceClass, named devicestate-adoption-rollback-<pool>;
    removed when the pool leaves rolled-back. Existing claims and their Pods are untouched.
    Reads the pools from PostgreSQL; only objects labelled app.kubernetes.io/managed-by=
    devicestate,devicestate.io/component=adoption-rollback are touched. Dry-run unless --live
    or DEVICESTATE_ENFORCE_DRY_RUN=false. Runs until SIGTERM or Ctrl-C.
    """
    settings = EnforcementProcessSettings()
    dry_run = settings.enforce_dry_run if live is None else not live
    configure_logging(settings)
    from services.adapters.kube.client import KubeConfigUnavailable
    from services.runtime.loop import run

    try:
        result = run(_main(settings, dry_run, interval, once))
    except KubeConfigUnavailable as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if once and (result is None or result.failed or result.errors):
        raise typer.Exit(1)


async def _main(
    settings: EnforcementProcessSettings, dry_run: bool, interval: float, once: bool
) -> AdmissionResult | None:
    from services.adapters.kube.admission_policies import kubernetes_admission_policies
    from services.adapters.projection.reads_adoption import AdoptionReads
    from services.processes.enforcement.admission_reconciler import (
        AdmissionReconciler,
        PostgresPoolSource,
        run_admission_enforcer,
    )
    from services.processes.enforcement.source import make_engine
    from services.runtime.loop import stop_on_signals

    stop, remove = stop_on_signals(None)
    engine = make_engine(settings.database_url)
    try:
        async with kubernetes_admission_policies(settings) as api:
            source = PostgresPoolSource(AdoptionReads(engine, settings.database_schema))
            reconciler = AdmissionReconciler(api, source, dry_run=dry_run)
            return await run_admission_enforcer(reconciler, interval, stop, once)
    finally:
        remove()
        await engine.dispose()
