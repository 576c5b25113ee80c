"""The migration's failure paths end to end (issue 13 item 4) on the real control plane, with
the harness of ``tests/kubeapi/migration_run.py``: each time one GPU of the workload's 8 turns
Unhealthy and ``devicestate migrate --apply`` runs, and each time nothing is evicted.

- a PodDisruptionBudget that allows no disruption: the checkpoint is committed, the Eviction API
  refuses (429), the migration fails ``pdb-refused`` and the Pod keeps running;
- a checkpoint that never comes: the workload never answers, the migration fails
  ``checkpoint-timeout`` on event time and the Pod keeps running;
- after both, the Pod gets its ``devicestate.io/serving`` condition back (``True``);
- a non-recoverable Deployment Pod (no class declared): ``MigrationEvidenceKept``, a Warning
  Event on the Pod for its tenant, the evidence stored and served (the Pod's last status, the
  device's timeline and decisions), no eviction.

``devicestate replay --governance --verify`` is identical after each.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from services.runtime.config import Settings
from tests.api.conftest import bearer
from tests.kubeapi.conftest import ControlPlaneEnv
from tests.kubeapi.kube_rest import KubeREST
from tests.kubeapi.kubelet import eventually
from tests.kubeapi.migration_run import (
    POLICY,
    SCHEDULER,
    MigrationRun,
    migration_run,
    pod_or_none,
)
from tests.kubeapi.migration_scene import (
    Json,
    answer_checkpoint,
    deployment,
    disruption_budget,
    gpu_fails,
    job,
    job_pods,
)
from tests.streams.conftest import with_governance_topics

pytestmark = pytest.mark.integration

CHECKPOINT_TIMEOUT_SECONDS = 10.0


async def _sick(run: MigrationRun, workload: Json) -> tuple[Json, list[str]]:
    """Run ``workload``, fail GPU 3 of its Pod, start an executor: the Pod and its GPUs."""
    pod, devices = await run.running_workload(workload)
    await gpu_fails(run.rest, run.scene, pod["metadata"]["name"], devices, devices[3])
    await run.executor("executor-0").start()
    return pod, devices


async def _failed(run: MigrationRun) -> Json:
    failed = await run.first_decision("MigrationFailed", "the migration failed", 90)
    return dict(failed["details"])


async def _still_running(run: MigrationRun, pod: Json) -> None:
    """The Pod was never evicted: the same Pod (UID) is the workload's only one."""
    [found] = await job_pods(run.rest, run.scene)
    assert found["metadata"]["uid"] == pod["metadata"]["uid"]
    assert not await run.decisions("MigrationDeviceReleased")


async def _serving_again(run: MigrationRun, pod: Json) -> None:
    """The failed migration's Pod gets its ``devicestate.io/serving`` condition back."""

    async def restored() -> Json | None:
        found = await pod_or_none(run.rest, run.scene, pod["metadata"]["name"]) or {}
        for condition in found.get("status", {}).get("conditions") or []:
            if condition["type"] == "devicestate.io/serving" and condition["status"] == "True":
                return dict(condition)
        return None

    condition = await eventually("the serving condition back to True", restored, 60)
    assert condition["reason"] == "DeviceMigrationFailed", condition


async def test_a_disruption_budget_refuses_the_eviction(
    kube_control_plane: ControlPlaneEnv,
    control_plane_rest: KubeREST,
    stream_settings: Settings,
    engine: AsyncEngine,
    worker_process: Any,
    tmp_path: Path,
) -> None:
    settings = with_governance_topics(stream_settings).model_copy(update=POLICY)
    async with migration_run(
        kube_control_plane, control_plane_rest, settings, engine, worker_process, tmp_path
    ) as run:
        await control_plane_rest.create(disruption_budget(run.scene))

        async def budget_counted() -> bool | None:
            path = (
                f"/apis/policy/v1/namespaces/{run.scene.namespace}/poddisruptionbudgets/"
                f"{run.scene.job}"
            )
            status = (await control_plane_rest.request("GET", path)).body.get("status") or {}
            return True if status.get("currentHealthy") == 1 else None

        pod, devices = await run.running_workload(job(run.scene, SCHEDULER))
        # The disruption controller must have counted the Pod, or the API server's answer
        # would not be the budget's.
        await eventually("the PodDisruptionBudget counting the Pod", budget_counted, 60)
        name = pod["metadata"]["name"]
        await gpu_fails(control_plane_rest, run.scene, name, devices, devices[3])
        await run.executor("executor-0").start()
        await answer_checkpoint(control_plane_rest, run.scene, name)
        details = await _failed(run)
        assert details["reason"] == "pdb-refused", details
        assert "disruption budget" in details["detail"].lower(), details
        await _still_running(run, pod)
        await _serving_again(run, pod)
        await run.replay_identical()


async def test_a_checkpoint_that_never_comes_fails_without_an_eviction(
    kube_control_plane: ControlPlaneEnv,
    control_plane_rest: KubeREST,
    stream_settings: Settings,
    engine: AsyncEngine,
    worker_process: Any,
    tmp_path: Path,
) -> None:
    policy = {**POLICY, "migration_checkpoint_timeout_seconds": CHECKPOINT_TIMEOUT_SECONDS}
    settings = with_governance_topics(stream_settings).model_copy(update=policy)
    async with migration_run(
        kube_control_plane, control_plane_rest, settings, engine, worker_process, tmp_path
    ) as run:
        pod, _ = await _sick(run, job(run.scene, SCHEDULER))
        await run.first_decision("MigrationCheckpointRequested", "the checkpoint requested")
        details = await _failed(run)
        assert details["reason"] == "checkpoint-timeout", details
        await _still_running(run, pod)
        await _serving_again(run, pod)
        await run.replay_identical()


async def test_a_non_recoverable_pod_keeps_its_evidence_and_its_tenant_is_told(
    kube_control_plane: ControlPlaneEnv,
    control_plane_rest: KubeREST,
    stream_settings: Settings,
    engine: AsyncEngine,
    worker_process: Any,
    tmp_path: Path,
) -> None:
    settings = with_governance_topics(stream_settings).model_copy(update=POLICY)
    async with migration_run(
        kube_control_plane, control_plane_rest, settings, engine, worker_process, tmp_path
    ) as run:
        pod, devices = await _sick(run, deployment(run.scene, SCHEDULER))
        kept = await run.first_decision("MigrationEvidenceKept", "the evidence kept")
        assert kept["details"]["migrationClass"] == "non-recoverable", kept
        name, namespace = pod["metadata"]["name"], run.scene.namespace

        async def warned() -> list[Json] | None:
            listed = await control_plane_rest.request(
                "GET",
                f"/api/v1/namespaces/{namespace}/events",
                params={"fieldSelector": f"involvedObject.name={name}"},
            )
            found = [e for e in listed.body["items"] if e["type"] == "Warning"]
            return found or None

        [event] = await eventually("a Warning Event on the Pod", warned, 60)
        assert event["reason"] == "DeviceQuarantinedNoMigration", event
        assert kept["details"]["migrationID"] in event["message"], event
        assert event["involvedObject"]["uid"] == pod["metadata"]["uid"]
        # The evidence, as the executor collected it: the Pod's last status, the device's
        # timeline and decisions (GET /v1/migrations/{id}/evidence).
        migration = kept["details"]["migrationID"]

        async def evidence() -> Json | None:
            async with httpx.AsyncClient(base_url=run.api_url, timeout=30) as api:
                answer = await api.get(
                    f"/v1/migrations/{migration}/evidence", headers=bearer("viewer")
                )
            assert answer.status_code in (200, 404), answer.text
            return dict(answer.json()) if answer.status_code == 200 else None

        stored = await eventually("the evidence stored", evidence, 60)
        [kept_pod] = stored["pods"]
        assert (kept_pod["uid"], kept_pod["holder"]) == (pod["metadata"]["uid"], "executor-0")
        assert kept_pod["status"]["phase"] == "Running"
        statuses = kept_pod["status"]["containerStatuses"][0]["allocatedResourcesStatus"]
        assert {"resourceID": devices[3], "health": "Unhealthy"} in statuses[0]["resources"]
        assert (stored["device"]["node"], stored["device"]["resourceID"]) == (
            run.scene.first,
            devices[3],
        )
        assert "MigrationEvidenceKept" in {d["type"] for d in stored["device"]["decisions"]}
        assert stored["device"]["timeline"], stored["device"]
        await _still_running(run, pod)
        assert not await run.decisions("MigrationEvictionRequested")
        await run.replay_identical()
