"""The executor's checkpoint step with fakes of the API and of the Pods: a checkpoint the governor
refused (too old on its event time, from before the request) does not stop a later answer of the
workload from being reported under the same lease."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from services.processes.migration import handshake
from services.processes.migration.executor import MigrationExecutor

NOW = datetime(2026, 12, 3, 12, 0, 30, tzinfo=UTC)
MID = "m-0123456789abcdef0123"


class Api:
    def __init__(self, item: dict[str, Any]) -> None:
        self.item = item
        self.reports: list[dict[str, Any]] = []

    async def list_migrations(self, phase: str) -> list[dict[str, Any]]:
        return [self.item] if self.item["phase"] == phase else []

    async def get_migration(self, migration_id: str) -> dict[str, Any] | None:
        return {"migration": self.item, "decisions": []}

    async def report(self, migration_id: str, body: dict[str, Any]) -> None:
        self.reports.append(body)

    async def post_evidence(self, migration_id: str, body: dict[str, Any]) -> bool:
        return True

    async def workloads(self, namespace: str) -> list[dict[str, Any]]:
        return []


class Pods:
    def __init__(self) -> None:
        self.annotations: dict[str, str] = {}

    async def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        meta = {"namespace": namespace, "name": name, "uid": "u0"}
        return {"metadata": {**meta, "annotations": dict(self.annotations)}, "status": {}}

    async def patch_pod_condition(self, *args: Any) -> dict[str, Any]:
        return {}

    async def annotate_pod(
        self, namespace: str, name: str, annotations: dict[str, str], dry_run: bool
    ) -> dict[str, Any]:
        self.annotations.update(annotations)
        return {}

    async def evict_pod(self, *args: Any) -> None:
        raise AssertionError("no eviction in the checkpoint step")

    async def create_event(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return {}


def answer(checkpoint_id: str, at: datetime) -> str:
    return json.dumps(
        {"migrationID": MID, "checkpointID": checkpoint_id, "checkpointAt": at.isoformat()}
    )


async def test_a_refused_checkpoint_does_not_hide_the_workloads_next_answer() -> None:
    requested = NOW - timedelta(seconds=20)
    item: dict[str, Any] = {
        "migrationID": MID,
        "phase": "checkpoint-requested",
        "node": "gpu-node-a",
        "resourceID": "GPU-1",
        "workloadUID": "w-uid",
        "migrationClass": "checkpointed",
        "pods": ["ml/train-0"],
        "holder": "exec-a",
        "fencingToken": 1,
        "leaseExpiresAt": (NOW + timedelta(seconds=100)).isoformat(),
    }
    item["details"] = {
        **item,
        "podUIDs": ["u0"],
        "checkpointRequestedAt": requested.isoformat(),
        "checkpointDue": (NOW + timedelta(minutes=10)).isoformat(),
    }
    api, pods = Api(item), Pods()
    executor = MigrationExecutor(
        api, pods, "exec-a", dry_run=False, lease_seconds=120, clock=lambda: NOW
    )
    # The sidecar answers first with the checkpoint it had (taken before the request).
    pods.annotations[handshake.CHECKPOINT_RESPONSE] = answer("ckpt-old", NOW - timedelta(hours=1))
    await executor.run_pass()
    assert [r.get("checkpointID") for r in api.reports] == ["ckpt-old"]
    # The governor refuses it (older than the request: not a lease reason, the lease holds)...
    item["lastDecision"] = "MigrationReportRejected"
    item["details"] = {
        **item["details"],
        "reportHolder": "exec-a",
        "reportFencingToken": 1,
        "rejectReason": "checkpoint ckpt-old is older than the request",
    }
    # ...and the workload then takes a fresh one and answers again.
    pods.annotations[handshake.CHECKPOINT_RESPONSE] = answer("ckpt-new", NOW - timedelta(seconds=5))
    await executor.run_pass()
    assert [r.get("checkpointID") for r in api.reports] == ["ckpt-old", "ckpt-new"]
    # The same answer again is not posted twice.
    await executor.run_pass()
    assert [r.get("checkpointID") for r in api.reports] == ["ckpt-old", "ckpt-new"]
