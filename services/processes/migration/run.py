"""``devicestate migrate``: the loop of executor passes (:func:`run_executor`).

It polls ``GET /v1/migrations`` every ``migrate_poll_seconds`` rather than following the
governance topic: the governor's record (phase, holder, fencing token, lease expiry) is what
every step is decided from, the API serves it whole, and a restarted executor needs nothing but
that record to resume; a topic follower would have to rebuild it from the decisions. A pass that
fails is logged and the loop goes on; SIGTERM or SIGINT ends it after the running pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Callable
from pathlib import Path

import structlog

from services.processes.migration.api import ApiCallError, HttpMigrationsApi, MigrationsApi
from services.processes.migration.executor import MigrationExecutor, PassResult
from services.processes.migration.kube import MigrationPods
from services.processes.migration.metrics import ExecutorMetrics
from services.runtime.config import MigrationProcessSettings
from services.runtime.loop import serve_metrics, stop_on_signals

log = structlog.get_logger(__name__)


def default_holder() -> str:
    """``<hostname>-<pid>``: unique per executor process (a restarted one takes a new token)."""
    return f"{socket.gethostname()}-{os.getpid()}"


def api_token(settings: MigrationProcessSettings) -> str | None:
    if settings.migrate_api_token_file:
        return Path(settings.migrate_api_token_file).read_text().strip() or None
    return settings.migrate_api_token


def api_url(settings: MigrationProcessSettings) -> str:
    return settings.migrate_api_url or f"http://{settings.api_host}:{settings.api_port}"


async def run_executor(
    settings: MigrationProcessSettings,
    *,
    once: bool = False,
    metrics_port: int = 0,
    api: MigrationsApi | None = None,
    pods: MigrationPods | None = None,
    stop: asyncio.Event | None = None,
    on_result: Callable[[PassResult], None] | None = None,
) -> PassResult | None:
    """Passes until ``stop`` (SIGTERM/SIGINT when not given), or one with ``once`` (returned).
    ``api``/``pods`` replace the HTTP client and the Kubernetes client ``settings`` name."""
    stop, remove_signal_handlers = stop_on_signals(stop)
    holder = settings.migrate_holder or default_holder()
    metrics = ExecutorMetrics()
    if not once:
        serve_metrics(metrics.serve, metrics_port)
    try:
        async with contextlib.AsyncExitStack() as stack:
            if api is None:
                http = HttpMigrationsApi(api_url(settings), api_token(settings))
                stack.push_async_callback(http.aclose)
                api = http
            if pods is None:
                from services.adapters.kube.pods import kubernetes_pods

                pods = await stack.enter_async_context(kubernetes_pods(settings))
            executor = MigrationExecutor(
                api,
                pods,
                holder,
                dry_run=settings.migrate_dry_run,
                lease_seconds=settings.migration_lease_seconds,
                metrics=metrics,
            )
            log.info(
                "migration executor started",
                holder=holder,
                dry_run=settings.migrate_dry_run,
                api=api_url(settings),
                poll_seconds=settings.migrate_poll_seconds,
            )
            last: PassResult | None = None
            while not stop.is_set():
                try:
                    last = await executor.run_pass()
                except ApiCallError as exc:
                    log.warning("cannot list the migrations", error=str(exc))
                    last = PassResult(settings.migrate_dry_run, errors=[str(exc)])
                    metrics.passes.labels("failed").inc()
                if on_result is not None:
                    on_result(last)
                if once:
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), settings.migrate_poll_seconds)
            log.info("migration executor stopped", holder=holder)
            return last
    finally:
        remove_signal_handlers()
