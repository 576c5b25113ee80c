"""The executor when part of a multi-Pod workload fails, with the fakes of
``test_executor_checkpoint``: a PodDisruptionBudget that refuses the second Pod's eviction (the
report names the Pod evicted before it), and an evidence post the API refuses for one Pod (the
tenant's Warning Event is written for every Pod anyway; the refused Pod is posted again next
pass)."""

from __future__ import annotations

from typing import Any

from services.adapters.kube.errors import KubeApiError
from services.processes.migration.api import ApiCallError
from services.processes.migration.executor import EVIDENCE_DONE, MigrationExecutor
from tests.migration.test_executor_checkpoint import NOW, Api, Pods, migration


class BudgetPods(Pods):
    """The first eviction goes through, every later one is refused (HTTP 429)."""

    def __init__(self) -> None:
        super().__init__()
        self.evicted: list[str] = []
        self.events: list[tuple[str, str]] = []
        self.per_pod: dict[str, dict[str, str]] = {}

    async def evict_pod(self, namespace: str, name: str, uid: str, dry_run: bool) -> None:
        if self.evicted:
            raise KubeApiError(
                429, "Cannot evict pod as it would violate the pod's disruption budget."
            )
        self.evicted.append(name)

    async def create_event(
        self, namespace: str, body: dict[str, Any], dry_run: bool = False
    ) -> dict[str, Any]:
        if not dry_run:
            self.events.append((body["involvedObject"]["name"], body["type"]))
        return {}

    async def annotate_pod(
        self, namespace: str, name: str, annotations: dict[str, str], dry_run: bool
    ) -> dict[str, Any]:
        self.per_pod.setdefault(name, {}).update(annotations)
        self.by_pod.setdefault(name, {}).update(annotations)
        return {}


class RefusingApi(Api):
    """Refuses the evidence of the Pods in ``refuse`` (HTTP 413: too large)."""

    def __init__(self, item: dict[str, Any], refuse: set[str]) -> None:
        super().__init__(item)
        self.refuse = refuse
        self.posted: list[list[str]] = []

    async def post_evidence(self, migration_id: str, body: dict[str, Any]) -> bool:
        names = [p["name"] for p in body["pods"]]
        if self.refuse & set(names):
            raise ApiCallError("HTTP 413: evidence body too large", 413)
        self.posted.append(names)
        return True


async def test_a_budget_refusal_after_a_first_eviction_names_the_evicted_pod() -> None:
    item = migration("train-0", "train-1")
    item["phase"] = "eviction-requested"
    api, pods = Api(item), BudgetPods()
    executor = MigrationExecutor(
        api, pods, "exec-a", dry_run=False, lease_seconds=120, clock=lambda: NOW
    )
    await executor.run_pass()
    assert pods.evicted == ["train-0"]
    (report,) = api.reports
    assert report["kind"] == "eviction-refused"
    assert "disruption budget" in report["detail"]
    assert report["detail"].endswith("(evicted before the refusal: ml/train-0)")


async def test_a_refused_evidence_post_still_tells_the_tenant_and_is_retried() -> None:
    item = migration("serve-0", "serve-1")
    item["phase"] = "evidence-kept"
    item["migrationClass"] = "non-recoverable"
    api, pods = RefusingApi(item, refuse={"serve-1"}), BudgetPods()
    executor = MigrationExecutor(
        api, pods, "exec-a", dry_run=False, lease_seconds=120, clock=lambda: NOW
    )
    result = await executor.run_pass()
    # One Pod per post; the refused one is an error of the pass, the other is stored.
    assert api.posted == [["serve-0"]]
    assert result.errors and "413" in result.errors[0]
    # Both tenants' Pods got their Warning Event; only the stored one is marked done.
    assert pods.events == [("serve-0", "Warning"), ("serve-1", "Warning")]
    assert pods.per_pod == {"serve-0": {EVIDENCE_DONE: item["migrationID"]}}
    # The API takes it next pass: serve-1 is posted and marked; serve-0 is not posted again.
    api.refuse = set()
    result = await executor.run_pass()
    assert result.errors == [] and api.posted == [["serve-0"], ["serve-1"]]
    assert pods.per_pod["serve-1"] == {EVIDENCE_DONE: item["migrationID"]}
    # Done: a third pass does nothing.
    await executor.run_pass()
    assert api.posted == [["serve-0"], ["serve-1"]]
