"""``devicestate_dra_failures_total{class,reason,namespace}`` on the API's ``/metrics`` (issue 16
item 3): the driver and claim failures of the projection's ``dra_failures``, summed when scraped.

A counter computed from the projection, not kept in a process: every API replica serves the
same value, a restart of the watcher, worker or API neither loses nor repeats a count (the table
holds one row per Event uid with its largest count), and a replay rebuilds it. ``class`` is the
:class:`~services.domain.adoption.failure_classes.FailureClass` (``retryable``,
``non-retryable``, ``needs-cleanup``), ``reason`` the Event's or condition's reason,
``namespace`` the Pod's (the tenant route of the non-retryable alert).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import structlog
from fastapi import Request
from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from services.adapters.projection.failure_sql import FailureCount, FailureReads

log = structlog.get_logger(__name__)

FAILURES_METRIC = "devicestate_dra_failures"
"""The counter's name (exposed as ``devicestate_dra_failures_total``)."""


class _Failures(Collector):
    def __init__(self, counts: Sequence[FailureCount]) -> None:
        self._counts = counts

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            FAILURES_METRIC,
            "Driver and claim failures seen in Pod Events and PodScheduled conditions, by "
            "failure class (retryable, non-retryable, needs-cleanup), reason and the Pod's "
            "namespace (Event counts; from the projection).",
            labels=["class", "reason", "namespace"],
        )
        for c in self._counts:
            family.add_metric([c.failure_class, c.reason, c.namespace], c.total)
        yield family


async def failure_metrics(
    request: Request, registry: CollectorRegistry, errors: tuple[type[BaseException], ...]
) -> None:
    """Add ``devicestate_dra_failures_total`` and ``devicestate_api_dra_failures_up`` (1 when
    ``dra_failures`` could be read; 0 also while the table does not exist) to ``registry``."""
    up = Gauge(
        "devicestate_api_dra_failures_up",
        "1 when the API could read the driver and claim failures for this scrape.",
        registry=registry,
    )
    reads: FailureReads | None = getattr(request.app.state, "failures", None)
    if reads is None:
        up.set(0)
        return
    try:
        counts = await reads.counts()
    except errors as exc:
        log.warning("failure metrics read failed", error=repr(exc))
        up.set(0)
        return
    up.set(1)
    registry.register(_Failures(counts))
