"""The core/v1 Events the executor writes on a Pod (pure): a Warning for a non-recoverable
workload (nothing moves, the evidence is kept) and a Normal one before an eviction, which is
also its marker (an executor restarted after the eviction but before its report finds it).

Each is named after the Pod, the migration and the reason, so it is written once: a second
create is a 409. Times RFC 3339 UTC.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final

from services.domain.events import format_time
from services.processes.migration.plan import MigrationView

EVENT_REASON: Final = "DeviceQuarantinedNoMigration"
"""Reason of the Warning Event on a non-recoverable workload's Pod."""
EVICTION_REASON: Final = "DeviceMigrationEviction"
"""Reason of the Normal Event written just before a Pod's eviction."""
COMPONENT: Final = "devicestate-migrate"


def evidence_message(m: MigrationView) -> str:
    return (
        f"device {m.node}/{m.resource_id} is quarantined and this workload is "
        f"non-recoverable: migration {m.migration_id} evicts nothing; its evidence is kept"
    )


def eviction_message(m: MigrationView) -> str:
    return (
        f"device {m.node}/{m.resource_id} is quarantined: migration {m.migration_id} "
        "evicts this Pod through the Eviction API"
    )


def event_body(
    m: MigrationView, pod: dict[str, Any], kind: str, reason: str, message: str, now: datetime
) -> dict[str, Any]:
    """The Event (``kind``: ``Warning`` or ``Normal``) about ``pod`` (its ``metadata``:
    namespace, name, uid) at ``now``."""
    meta = pod["metadata"]
    stamp = format_time(now.replace(microsecond=0))
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            # a DNS subdomain of at most 253 characters: the Pod's name cut to fit
            "name": f"{meta['name'][:200].rstrip('-.')}.{m.migration_id}.{reason.lower()}",
            "namespace": meta["namespace"],
        },
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": meta.get("uid", ""),
        },
        "type": kind,
        "reason": reason,
        "message": message,
        "source": {"component": COMPONENT},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
