"""The executor killed at every call it makes, then restarted (a new process: nothing kept in
memory), against fakes that keep the cluster's and the governor's state between the two: the
work ends as if no kill had happened. Three paths of docs/migration.md "The executor":

- the eviction of a multi-Pod workload: each Pod evicted once, one marker Event per Pod, the
  ``evicted`` report once the Pods are gone (read back from the marker after a kill between the
  evictions and the report);
- a non-recoverable workload: every Pod's evidence stored (the governor keeps the first per
  Pod, so a repeat is harmless), one Warning Event per Pod, every Pod marked done;
- a sharded migration: after the Pods' eviction the replacement reported is its shard's only.

A kill is :class:`Killed`, raised at the n-th call either before the call takes effect or after
it (the effect happened, the answer was lost): a ``BaseException``, which the executor's per-
migration error handling does not catch, as a SIGKILL is not caught.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from services.adapters.kube.errors import KubeApiError
from services.processes.migration.executor import EVIDENCE_DONE, MigrationExecutor
from tests.migration.test_executor_checkpoint import NOW, migration


class Killed(BaseException):
    """The executor's process died here."""


class Kill:
    """Counts every call of the fakes; the ``at``-th one dies ``before`` its effect or after."""

    def __init__(self, at: int | None, before: bool) -> None:
        self.at, self.before, self.calls = at, before, 0

    def enter(self) -> None:
        self.calls += 1
        if self.before and self.calls == self.at:
            raise Killed

    def leave(self) -> None:
        if not self.before and self.calls == self.at:
            raise Killed


class Cluster:
    """Pods, their annotations and conditions, Evictions (the Pod is deleted at once) and
    Events named once (a second create is a 409), as the API server keeps them."""

    def __init__(self, *names: str) -> None:
        self.pods = {n: {"uid": "u" + n[-1], "annotations": {}, "serving": None} for n in names}
        self.evictions: dict[str, int] = {}
        self.events: dict[str, str] = {}  # name -> reason
        self.kill = Kill(None, True)

    async def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.kill.enter()
        p = self.pods.get(name)
        self.kill.leave()
        if p is None:
            return None
        meta = {"namespace": namespace, "name": name, "uid": p["uid"]}
        conditions = [] if p["serving"] is None else [p["serving"]]
        return {
            "metadata": {**meta, "annotations": dict(p["annotations"])},
            "status": {"conditions": conditions},
        }

    async def patch_pod_condition(
        self, namespace: str, name: str, condition: dict[str, Any], dry_run: bool
    ) -> dict[str, Any]:
        self.kill.enter()
        if name not in self.pods:
            raise KubeApiError(404, "not found")
        self.pods[name]["serving"] = condition
        self.kill.leave()
        return {}

    async def annotate_pod(
        self, namespace: str, name: str, annotations: dict[str, str], dry_run: bool
    ) -> dict[str, Any]:
        self.kill.enter()
        if name not in self.pods:
            raise KubeApiError(404, "not found")
        self.pods[name]["annotations"].update(annotations)
        self.kill.leave()
        return {}

    async def evict_pod(self, namespace: str, name: str, uid: str, dry_run: bool) -> None:
        self.kill.enter()
        pod = self.pods.get(name)
        if pod is None:
            raise KubeApiError(404, "not found")
        if pod["uid"] != uid:
            raise KubeApiError(409, "uid precondition")
        del self.pods[name]
        self.evictions[name] = self.evictions.get(name, 0) + 1
        self.kill.leave()

    async def create_event(
        self, namespace: str, body: dict[str, Any], dry_run: bool = False
    ) -> dict[str, Any]:
        self.kill.enter()
        name = body["metadata"]["name"]
        if name in self.events:
            raise KubeApiError(409, "already exists")
        if not dry_run:
            self.events[name] = body["reason"]
        self.kill.leave()
        return {}


class Governor:
    """The API as the executor sees it: the migration's record, moved on by the reports the
    governor accepts (a report of a phase already left is refused, as a duplicate would be)."""

    def __init__(self, item: dict[str, Any], cluster: Cluster, workloads: list[Any]) -> None:
        self.item, self.cluster, self._workloads = item, cluster, workloads
        self.accepted: list[dict[str, Any]] = []
        self.evidence: dict[str, int] = {}  # Pod name -> posts stored

    @property
    def kill(self) -> Kill:
        return self.cluster.kill

    async def list_migrations(self, phase: str, limit: int = 1000) -> list[dict[str, Any]]:
        self.kill.enter()
        found = [dict(self.item)][:limit] if self.item["phase"] == phase else []
        self.kill.leave()
        return found

    async def get_migration(self, migration_id: str) -> dict[str, Any] | None:
        self.kill.enter()
        self.kill.leave()
        return {"migration": self.item, "decisions": []}

    async def report(self, migration_id: str, body: dict[str, Any]) -> None:
        self.kill.enter()
        step = {"eviction-requested": "evicted", "released": "replacement-observed"}
        if step.get(self.item["phase"]) == body["kind"]:
            self.accepted.append(body)
            self.item["phase"] = {"evicted": "released", "replacement-observed": "completed"}[
                body["kind"]
            ]
        self.kill.leave()

    async def post_evidence(self, migration_id: str, body: dict[str, Any]) -> bool:
        self.kill.enter()
        for pod in body["pods"]:
            self.evidence[pod["name"]] = self.evidence.get(pod["name"], 0) + 1
        self.kill.leave()
        return True

    async def workloads(self, namespace: str) -> list[dict[str, Any]]:
        self.kill.enter()
        self.kill.leave()
        return self._workloads


def leased(item: dict[str, Any], phase: str, cls: str = "checkpointed") -> dict[str, Any]:
    item["phase"], item["migrationClass"] = phase, cls
    item["details"] = {**item["details"], "phase": phase, "migrationClass": cls}
    item["leaseExpiresAt"] = (NOW + timedelta(seconds=100)).isoformat()
    return item


def executor_of(governor: Governor) -> MigrationExecutor:
    return MigrationExecutor(
        governor, governor.cluster, "exec-a", dry_run=False, lease_seconds=120, clock=lambda: NOW
    )


async def run_with_a_kill(governor: Governor, at: int, before: bool, passes: int) -> bool:
    """Passes of one executor until it dies at call ``at`` (counted over its whole life), then
    ``passes`` passes of a new one (a restarted process: nothing kept in memory). Whether the
    kill happened (False: ``at`` is past the last call the work makes, which ends the search)."""
    governor.cluster.kill = Kill(at, before)
    executor, killed, left = executor_of(governor), False, passes
    while left:
        left -= 1
        try:
            await executor.run_pass()
        except Killed:
            killed, left = True, passes
            governor.cluster.kill = Kill(None, True)
            executor = executor_of(governor)
    return killed


@pytest.mark.parametrize("before", [True, False], ids=["before-effect", "after-effect"])
async def test_a_killed_eviction_of_two_pods_evicts_each_once_and_reports_once(
    before: bool,
) -> None:
    at, killed = 0, True
    while killed:
        at += 1
        cluster = Cluster("train-0", "train-1")
        governor = Governor(
            leased(migration("train-0", "train-1"), "eviction-requested"), cluster, []
        )
        killed = await run_with_a_kill(governor, at, before, passes=4)
        assert cluster.pods == {}, at
        assert cluster.evictions == {"train-0": 1, "train-1": 1}, at
        assert sorted(cluster.events.values()) == ["DeviceMigrationEviction"] * 2, at
        assert [r["kind"] for r in governor.accepted] == ["evicted"], at
        assert governor.item["phase"] == "released", at
    assert at > 5  # the kill points covered the reads, conditions, markers and evictions


@pytest.mark.parametrize("before", [True, False], ids=["before-effect", "after-effect"])
async def test_a_killed_non_recoverable_pass_tells_every_tenant_once_and_keeps_all_evidence(
    before: bool,
) -> None:
    at, killed = 0, True
    while killed:
        at += 1
        cluster = Cluster("serve-0", "serve-1", "serve-2")
        item = leased(
            migration("serve-0", "serve-1", "serve-2"), "evidence-kept", "non-recoverable"
        )
        governor = Governor(item, cluster, [])
        killed = await run_with_a_kill(governor, at, before, passes=3)
        assert sorted(governor.evidence) == ["serve-0", "serve-1", "serve-2"], at
        assert sorted(cluster.events.values()) == ["DeviceQuarantinedNoMigration"] * 3, at
        marks = {n: p["annotations"].get(EVIDENCE_DONE) for n, p in cluster.pods.items()}
        assert marks == dict.fromkeys(marks, item["migrationID"]), at
        assert cluster.evictions == {}, at
        # A repeat is at most the post a kill cut off (the governor keeps the first).
        assert sum(governor.evidence.values()) <= 4, at
    assert at > 5


def workload_pod(name: str, uid: str, shard: str, resource_id: str) -> dict[str, Any]:
    return {
        "pod": {"namespace": "ml", "name": name, "uid": uid, "node": "gpu-node-b"},
        "workload": {"uid": "w-uid"},
        "migration": {"shard": shard},
        "devices": [{"resourceID": resource_id}],
    }


@pytest.mark.parametrize("before", [True, False], ids=["before-effect", "after-effect"])
async def test_a_killed_sharded_migration_reports_its_own_shard_s_replacement(
    before: bool,
) -> None:
    at, killed = 0, True
    while killed:
        at += 1
        cluster = Cluster("shard-1-a")
        item = leased(migration("shard-1-a"), "eviction-requested", "sharded")
        item["details"]["shard"] = "1"
        pods = [
            workload_pod("shard-0-new", "n0", "0", "GPU-7"),  # another shard: it never moved
            workload_pod("shard-1-new", "n1", "1", "GPU-9"),
        ]
        governor = Governor(item, cluster, pods)
        killed = await run_with_a_kill(governor, at, before, passes=4)
        assert cluster.evictions == {"shard-1-a": 1}, at
        assert [r["kind"] for r in governor.accepted] == ["evicted", "replacement-observed"], at
        (observed,) = [r for r in governor.accepted if r["kind"] == "replacement-observed"]
        assert observed["devices"] == [{"node": "gpu-node-b", "resourceID": "GPU-9"}], at
    assert at > 3
