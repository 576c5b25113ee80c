"""Live mode of the watcher: the LIST/WATCH loops and the ticker, run together until SIGTERM or
SIGINT, or until one of them fails; then all of them stop.

The loops (which resources to watch): Pods; node Leases unless ``watch_leases`` is off; Nodes
unless ``watch_nodes`` is off; Warning Events about Pods (core/v1) unless ``watch_events`` is off; DeviceClasses, ResourceSlices and ResourceClaims unless
``watch_dra`` is off, with Namespaces (their admin-access label, for the claims), and
DeviceTaintRules (resource.k8s.io/v1beta2) -- each DRA one is
*optional*: it ends by itself, with a warning, on a cluster that does not serve it. The ticker sends a ``WatcherTick`` to every
partition every ``tick_interval_seconds`` of wall clock. Every item goes to one
:class:`~services.processes.watcher.session.WatchSession`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import signal
from collections.abc import Callable, Coroutine
from typing import Any, Final

import structlog

from services.adapters.kube.client import ApiClient, kubernetes_api_client
from services.adapters.kube.owners import KubernetesOwners
from services.adapters.kube.watch_apis import (
    KubernetesObjectApi,
    KubernetesPodApi,
    device_class_api,
    device_taint_rule_api,
    event_api,
    lease_api,
    namespace_api,
    node_api,
    resource_claim_api,
    resource_slice_api,
)
from services.domain.watch.owner_cache import OwnerCache
from services.processes.watcher.node_source import PLURALS, ObjectSource
from services.processes.watcher.pod_source import KubeSource
from services.processes.watcher.session import POD_STREAM, WatchSession
from services.processes.watcher.watch_loop import ListWatchSource
from services.processes.watcher.workloads import WorkloadResolver
from services.runtime.config import WatcherProcessSettings, WatchSettings

log = structlog.get_logger(__name__)

DRA_APIS: Final[tuple[Callable[[ApiClient, WatchSettings], KubernetesObjectApi], ...]] = (
    device_class_api,
    resource_slice_api,
    resource_claim_api,
    device_taint_rule_api,
)
"""The DRA watches, in the order the watcher starts them (DeviceTaintRules of others: issue 15).
With them, the Namespaces (core/v1, always served: not optional), for their admin-access label
(issue 16, the gate's ``tenant-boundary``)."""


async def tick_every(session: WatchSession, interval_seconds: float, stop: asyncio.Event) -> None:
    """Send a tick (at ``session.clock.now()``) at once, then every ``interval_seconds`` of the
    event loop's clock, until ``stop`` is set. A late tick does not make the next ones come in a
    burst: the schedule restarts from it."""
    loop = asyncio.get_running_loop()
    due = loop.time()
    while not stop.is_set():
        await session.tick(session.clock.now())
        due += interval_seconds
        if due < loop.time():
            due = loop.time()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), due - loop.time())


def _live_tasks(
    session: WatchSession,
    settings: WatcherProcessSettings,
    api_client: ApiClient,
    stop: asyncio.Event,
) -> dict[str, Coroutine[Any, Any, None]]:
    metrics = session.metrics

    def restarts(resource: str) -> Any:
        return lambda reason: metrics.watch_restarts.labels(reason, resource).inc()

    silence = settings.watch_silence_seconds
    pods = KubeSource(
        KubernetesPodApi(api_client, settings),
        on_restart=restarts("pods"),
        silence_seconds=silence,
    )
    sources: list[tuple[ListWatchSource, str]] = [(pods, POD_STREAM)]

    def objects(api: KubernetesObjectApi) -> tuple[ListWatchSource, str]:
        restarted = restarts(PLURALS[api.object_kind])
        source = ObjectSource(api, on_restart=restarted, silence_seconds=silence)
        return source, api.object_kind

    if settings.watch_leases:
        sources.append(objects(lease_api(api_client, settings)))
    if settings.watch_nodes:
        sources.append(objects(node_api(api_client, settings)))
    if settings.watch_events:
        sources.append(objects(event_api(api_client, settings)))
    if settings.watch_dra:
        sources.append(objects(namespace_api(api_client, settings)))
        for make_api in DRA_APIS:
            api = make_api(api_client, settings)
            source = ObjectSource(
                api,
                on_restart=restarts(PLURALS[api.object_kind]),
                silence_seconds=silence,
                optional=True,
                on_not_served=functools.partial(session.not_served, PLURALS[api.object_kind]),
            )
            sources.append((source, api.object_kind))
    tasks: dict[str, Coroutine[Any, Any, None]] = {
        source.resource: source.run(functools.partial(session.handle, stream=stream), stop)
        for source, stream in sources
    }
    tasks["ticker"] = tick_every(session, settings.tick_interval_seconds, stop)
    if settings.watch_workloads:
        resolver = WorkloadResolver(
            KubernetesOwners(api_client),
            session.publish_workload,
            OwnerCache(settings.owner_cache_size),
        )
        session.workloads = resolver
        tasks["workloads"] = resolver.run(stop)
    return tasks


async def _until(stop: asyncio.Event) -> None:
    await stop.wait()


async def run_live(session: WatchSession, settings: WatcherProcessSettings) -> None:
    """Run the loops and the ticker for ``session`` (kubeconfig from ``settings``) until SIGTERM
    or SIGINT (returns) or until one loop fails (raises what ended it, e.g. ``ApiRejected``);
    every loop is stopped either way."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = (signal.SIGTERM, signal.SIGINT)
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    try:
        async with kubernetes_api_client(settings) as api_client:
            tasks = {
                asyncio.create_task(coroutine, name=f"watcher-{name}")
                for name, coroutine in _live_tasks(session, settings, api_client, stop).items()
            }
            stopping = asyncio.create_task(_until(stop))
            failed: asyncio.Task[None] | None = None
            try:
                running = set(tasks)
                while running and failed is None and not stop.is_set():
                    done, running = await asyncio.wait(
                        running | {stopping}, return_when=asyncio.FIRST_COMPLETED
                    )
                    running.discard(stopping)
                    failed = next(
                        (t for t in done if t is not stopping and t.exception() is not None),
                        None,
                    )
                if failed is None:
                    log.info(
                        "stopping",
                        resume_from=session.summary.resource_version,
                        object_versions=session.summary.object_versions,
                    )
            finally:
                # Every loop stops with the watcher, whatever ended it (signal, a failed loop,
                # the caller cancelling).
                for task in (*tasks, stopping):
                    task.cancel()
                await asyncio.gather(*tasks, stopping, return_exceptions=True)
            error = failed.exception() if failed is not None else None
            if error is not None:
                # What ended that loop (e.g. ApiRejected) ends the watcher.
                raise error
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
