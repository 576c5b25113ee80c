"""The Events the executor writes on a migration's Pods, and whether the Pods of a migration
were evicted by an executor killed before its report.

Just before each eviction the executor writes a Normal Event on the Pod (:mod:`.events`), named
after the Pod, the migration and the reason: a restarted executor that finds every Pod gone
asks whether that Event exists. It may create Events, not read them, so it asks with a dry-run
create, which the API server refuses with 409 for an existing name. Events live for the API
server's ``--event-ttl`` (1 h by default).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from services.adapters.kube.errors import KubeApiError
from services.processes.migration.events import EVICTION_REASON, event_body, eviction_message
from services.processes.migration.kube import MigrationPods
from services.processes.migration.plan import MigrationView


async def eviction_marked(pods: MigrationPods, m: MigrationView, now: datetime) -> bool:
    """Whether the eviction marker Event of ``m`` exists for one of its Pods (``now``: UTC, the
    time the dry-run body carries). Raises :class:`KubeApiError` for any refusal but 409."""
    for namespace, name, uid in m.pods:
        pod = {"metadata": {"namespace": namespace, "name": name, "uid": uid}}
        body = event_body(m, pod, "Normal", EVICTION_REASON, eviction_message(m), now)
        try:
            await pods.create_event(namespace, body, dry_run=True)
        except KubeApiError as exc:
            if exc.status == 409:
                return True
            raise
    return False


async def write_event(
    pods: MigrationPods,
    m: MigrationView,
    pod: dict[str, Any],
    kind: str,
    reason: str,
    message: str,
    now: datetime,
) -> None:
    """Create the core/v1 Event ``reason`` of ``m`` on ``pod`` (``kind``: ``Normal`` or
    ``Warning``; ``now``: UTC). An existing one (409: written by an earlier pass, the name is
    the Pod's, the migration's and the reason's) is left as it is; any other refusal raises
    :class:`KubeApiError`."""
    try:
        await pods.create_event(
            pod["metadata"]["namespace"], event_body(m, pod, kind, reason, message, now)
        )
    except KubeApiError as exc:
        if exc.status != 409:
            raise
