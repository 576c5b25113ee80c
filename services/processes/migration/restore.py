"""Give a Pod its ``devicestate.io/serving`` condition back when its migration failed.

The executor sets the condition to ``False`` before a checkpoint or an eviction so the Pod
leaves its Services' endpoints (:mod:`.executor`). When the migration then fails while the Pod
still runs (a PodDisruptionBudget refused the eviction, the checkpoint never came, the lease was
lost), nothing moves it any more: left ``False``, the condition would keep a running Pod out of
its endpoints for good, an outage devicestate caused and nobody planned. So for a failed
migration the executor sets it back to ``True``, but only on a Pod whose condition is still the
one it wrote for that migration (status ``False``, reason ``MigratingOffQuarantinedDevice``, the
message naming the migration): a condition the workload set itself, or one of a later migration,
is left alone. The device stays quarantined; the alert ``MigrationFailed`` tells the operator.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Final

from services.domain.events import format_time
from services.processes.migration import handshake
from services.processes.migration.kube import MigrationPods
from services.processes.migration.plan import MigrationView

SERVING_OFF_REASON: Final = "MigratingOffQuarantinedDevice"
"""The reason of the ``False`` condition the executor writes."""
SERVING_BACK_REASON: Final = "DeviceMigrationFailed"
"""The reason of the ``True`` condition it writes back when the migration failed."""
FAILED_LISTED: Final = 100
"""Failed migrations looked at per pass, the most recent first (``GET /v1/migrations?phase=failed``)."""


def serving_off_message(m: MigrationView) -> str:
    """The message of the ``False`` condition: it names the migration, so a restore finds it."""
    return f"migration {m.migration_id}: device {m.node}/{m.resource_id}"


def ours_off(pod: dict[str, Any], m: MigrationView) -> bool:
    """Whether ``pod``'s serving condition is the ``False`` one the executor wrote for ``m``."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == handshake.SERVING_CONDITION:
            return (
                condition.get("status") == "False"
                and condition.get("reason") == SERVING_OFF_REASON
                and str(condition.get("message", "")).startswith(f"migration {m.migration_id}:")
            )
    return False


async def restore_serving(
    pods: MigrationPods,
    m: MigrationView,
    found: list[dict[str, Any] | None],
    reason: str,
    *,
    dry_run: bool,
    now: datetime,
    say: Callable[[str], None],
) -> None:
    """Set the serving condition of each Pod of ``found`` (the failed migration ``m``'s Pods as
    read now, ``None`` when gone) that still carries ours back to ``True``. ``reason``: why the
    migration failed (its ``FailReason``). Raises
    :class:`~services.adapters.kube.errors.KubeApiError` when the API server refuses."""
    for pod in found:
        if pod is None or not ours_off(pod, m):
            continue
        meta = pod["metadata"]
        say(f"set {handshake.SERVING_CONDITION}=True on {meta['namespace']}/{meta['name']}")
        await pods.patch_pod_condition(
            meta["namespace"],
            meta["name"],
            {
                "type": handshake.SERVING_CONDITION,
                "status": "True",
                "reason": SERVING_BACK_REASON,
                "message": f"migration {m.migration_id} failed ({reason}): serving again, "
                "the device stays quarantined",
                "lastTransitionTime": format_time(now.replace(microsecond=0)),
            },
            dry_run,
        )
