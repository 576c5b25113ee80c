"""``POST /scheduler/filter``: the kube-scheduler extender ``filter`` verb (issue 4, item 5b),
served only when ``DEVICESTATE_SCHEDULER_EXTENDER=true`` (otherwise the route does not exist:
404). The decision is :mod:`services.domain.placement`.

The scheduler calls extenders without credentials, so this route takes no bearer token; it only
reads the projection and answers which candidate nodes to drop. Scheduler configuration
(``KubeSchedulerConfiguration``)::

    extenders:
    - urlPrefix: http://devicestate-api.devicestate.svc:8080/scheduler
      filterVerb: filter
      nodeCacheCapable: true        # send NodeNames, not whole Node objects
      ignorable: true               # schedule anyway when devicestate cannot answer
      managedResources:
      - name: nvidia.com/gpu        # call the extender only for Pods requesting these
        ignoredByScheduler: false

Errors: the answer is always HTTP 200. When the projection cannot be read, or the request is not
an ``ExtenderArgs``, ``Error`` says why and no node is filtered by devicestate; kube-scheduler then
skips the extender if it is ``ignorable`` (recommended: devicestate fails open) or else fails this
scheduling attempt and retries the Pod.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import orjson
import structlog
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from prometheus_client import CollectorRegistry
from prometheus_client import Counter as PromCounter

from services.adapters.projection.errors import DatabaseError
from services.adapters.projection.reads_node_facts import NodeFactReads
from services.domain.placement import (
    ExtenderArgsError,
    NodeFacts,
    candidate_nodes,
    error_result,
    field_of,
    filter_nodes,
    filter_result,
    pod_extended_requests,
)
from services.processes.api.routing import ServiceRoute
from services.processes.api.warm_node_facts import WarmNodeFacts, node_facts_metrics

log = structlog.get_logger(__name__)

router = APIRouter(tags=["scheduler extender"], route_class=ServiceRoute)


@dataclass(slots=True)
class ExtenderStats:
    """Counts of this process's filter calls, for ``/metrics``."""

    calls: Counter[str] = field(default_factory=Counter)
    failed_nodes: int = 0


def _stats(request: Request) -> ExtenderStats:
    stats: ExtenderStats | None = getattr(request.app.state, "extender_stats", None)
    if stats is None:
        stats = request.app.state.extender_stats = ExtenderStats()
    return stats


def _pod_name(args: Any) -> str:
    pod = field_of(args, "Pod") if isinstance(args, dict) else None
    metadata = pod.get("metadata") if isinstance(pod, dict) else None
    if not isinstance(metadata, dict):
        return "?"
    return f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"


@router.post(
    "/scheduler/filter",
    response_class=JSONResponse,
    responses={
        200: {
            "description": "ExtenderFilterResult {Nodes|NodeNames, FailedNodes, "
            "FailedAndUnresolvableNodes, Error}; Error is set (and nothing filtered) when "
            "devicestate could not decide."
        }
    },
)
async def scheduler_filter(request: Request) -> JSONResponse:
    """kube-scheduler extender filter (k8s.io/kube-scheduler/extender/v1 `ExtenderArgs` ->
    `ExtenderFilterResult`). Drops nodes where the Pod's device-plugin resources fit only by
    counting quarantined or restricted devices (`FailedNodes`, with the reason); every other
    node passes, including nodes devicestate knows nothing about (fail open)."""
    stats = _stats(request)
    args: Any = None
    try:
        args = orjson.loads(await request.body())
        if not isinstance(args, dict):
            raise ExtenderArgsError("the body must be an ExtenderArgs object")
        names, _ = candidate_nodes(args)
        requests = pod_extended_requests(field_of(args, "Pod"))
        facts: dict[str, NodeFacts] = {}
        if requests and names:
            warm: WarmNodeFacts | None = request.app.state.warm_node_facts
            held = warm.facts(names, requests) if warm is not None else None
            if held is None:  # no read model, or not ready: read PostgreSQL
                reads: NodeFactReads = request.app.state.node_facts
                held = await reads.for_nodes(names, requests)
            facts = held
        passed, failed = filter_nodes(names, requests, facts)
    except (orjson.JSONDecodeError, ExtenderArgsError) as exc:
        stats.calls["error"] += 1
        log.warning("scheduler extender: bad request", error=str(exc))
        return JSONResponse(error_result(f"devicestate: invalid ExtenderArgs: {exc}"))
    except (DatabaseError, OSError, TimeoutError) as exc:
        stats.calls["error"] += 1
        log.warning("scheduler extender: projection unreadable", error=repr(exc))
        return JSONResponse(
            error_result(f"devicestate: projection unavailable: {type(exc).__name__}")
        )
    stats.calls["ok"] += 1
    stats.failed_nodes += len(failed)
    if failed:
        log.info(
            "scheduler extender filtered nodes",
            pod=_pod_name(args),
            requests=requests,
            failed=failed,
        )
    return JSONResponse(filter_result(args, passed, failed))


def extender_metrics(request: Request, registry: CollectorRegistry) -> None:
    """``devicestate_scheduler_extender_calls_total{outcome=ok|error}`` and
    ``devicestate_scheduler_extender_failed_nodes_total`` of this API process."""
    stats = _stats(request)
    calls = PromCounter(
        "devicestate_scheduler_extender_calls",
        "Scheduler-extender filter calls answered by this process, by outcome (error: Error set).",
        ["outcome"],
        registry=registry,
    )
    for outcome in ("ok", "error"):
        calls.labels(outcome).inc(stats.calls[outcome])
    PromCounter(
        "devicestate_scheduler_extender_failed_nodes",
        "Candidate nodes the filter dropped (only quarantined devices free).",
        registry=registry,
    ).inc(stats.failed_nodes)
    warm: WarmNodeFacts | None = getattr(request.app.state, "warm_node_facts", None)
    if warm is not None:
        node_facts_metrics(warm, registry)
