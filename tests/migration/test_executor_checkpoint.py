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

    async def list_migrations(self, phase: str, limit: int = 1000) -> list[dict[str, Any]]:
        return [self.item][:limit] if self.item["phase"] == phase else []

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
        self.by_pod: dict[str, dict[str, str]] = {}

    async def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        meta = {"namespace": namespace, "name": name, "uid": "u" + name[-1]}
        annotations = {**self.annotations, **self.by_pod.get(name, {})}
        return {"metadata": {**meta, "annotations": annotations}, "status": {}}

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


def migration(*pods: str) -> dict[str, Any]:
    item: dict[str, Any] = {
        "migrationID": MID,
        "phase": "checkpoint-requested",
        "node": "gpu-node-a",
        "resourceID": "GPU-1",
        "workloadUID": "w-uid",
        "migrationClass": "checkpointed",
        "pods": [f"ml/{p}" for p in pods],
        "holder": "exec-a",
        "fencingToken": 1,
        "leaseExpiresAt": (NOW + timedelta(seconds=100)).isoformat(),
    }
    item["details"] = {
        **item,
        "podUIDs": ["u" + p[-1] for p in pods],
        "checkpointRequestedAt": (NOW - timedelta(seconds=20)).isoformat(),
        "checkpointDue": (NOW + timedelta(minutes=10)).isoformat(),
    }
    return item


async def test_a_refused_checkpoint_does_not_hide_the_workloads_next_answer() -> None:
    item = migration("train-0")
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


async def test_the_newest_answer_of_the_pods_is_reported() -> None:
    # Every Pod of a checkpointed workload may answer; an older answer on the first Pod (the
    # governor would refuse it) must not hide a fresh one on another.
    api, pods = Api(migration("train-0", "train-1")), Pods()
    pods.by_pod["train-0"] = {
        handshake.CHECKPOINT_RESPONSE: answer("ckpt-old", NOW - timedelta(hours=1))
    }
    pods.by_pod["train-1"] = {
        handshake.CHECKPOINT_RESPONSE: answer("ckpt-new", NOW - timedelta(seconds=5))
    }
    executor = MigrationExecutor(
        api, pods, "exec-a", dry_run=False, lease_seconds=120, clock=lambda: NOW
    )
    await executor.run_pass()
    assert [r.get("checkpointID") for r in api.reports] == ["ckpt-new"]
