"""A checkpointed training Job migrates off a failing GPU end to end (issue 13 item 4), on the
real control plane: the real Job controller, kube-scheduler (with the devicestate extender),
watcher, worker, governor, API and migration executor (``tests/kubeapi/migration_run.py``).

On ``kube_control_plane`` (``tests/kubeapi/migration_scene.py`` plays kubelet and the
workload): a Job of one 8-GPU Pod runs on the first node. One of its GPUs turns Unhealthy. Then:

1. the governor quarantines the GPU and plans the migration (``MigrationPlanned``, the Job's
   UID, checkpointed);
2. ``devicestate migrate --apply`` takes the lease, sets the Pod's ``devicestate.io/serving``
   condition False (its readiness gate), asks for a checkpoint; the workload answers; the
   checkpoint is committed;
3. the executor evicts the Pod through the Eviction API; the Job controller makes a
   replacement; the scheduler places it on the spare node (the first node's 8 GPUs include the
   quarantined one: kubelet's allocatable and the extender both say so);
4. kubelet runs the replacement on the spare node's GPUs; the executor reports it and the
   migration completes: one eviction, one completed migration;
5. ``devicestate replay --governance --verify`` rebuilds the same decisions from the log.

The executor is also killed (-9) in the middle, at two steps, and restarted: the same holder
resumes under its lease, or another holder takes the lease over once it expired.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from services.runtime.config import Settings
from tests.kubeapi.conftest import ControlPlaneEnv
from tests.kubeapi.kube_rest import KubeREST
from tests.kubeapi.kubelet import eventually
from tests.kubeapi.migration_run import (
    POLICY,
    SCHEDULER,
    migration_run,
    pod_or_none,
    set_unschedulable,
)
from tests.kubeapi.migration_scene import (
    GPUS,
    SERVING,
    Json,
    answer_checkpoint,
    condition,
    gpu_fails,
    job,
    job_pods,
    kubelet_runs,
    placed,
    sharded_job,
)
from tests.streams.conftest import with_governance_topics

pytestmark = pytest.mark.integration

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
LEASE_SECONDS = 10.0
"""The migration lease of the takeover case (event time), so another executor takes over
soon."""


@pytest.mark.parametrize(
    ("kill_at", "takeover", "racers"),
    [
        (None, False, 1),
        (None, False, 2),
        ("checkpoint-requested", False, 1),
        ("checkpoint-committed", False, 1),
        ("released", False, 1),
        ("released", True, 1),
    ],
)
async def test_a_checkpointed_job_migrates_off_a_failing_gpu(
    kill_at: str | None,
    takeover: bool,
    racers: int,
    kube_control_plane: ControlPlaneEnv,
    control_plane_rest: KubeREST,
    stream_settings: Settings,
    engine: AsyncEngine,
    worker_process: Any,
    tmp_path: Path,
) -> None:
    """The whole flow; with ``kill_at``, the executor is killed (-9) once the migration reaches
    that phase and a new one finishes it: the same holder (the restarted container) resumes
    under its lease; with ``takeover`` another holder takes the lease once it expired on event
    time (a higher fencing token). With two ``racers`` started at once, one wins the lease and
    the Pod is evicted once."""
    rest = control_plane_rest
    policy = {**POLICY, "migration_lease_seconds": LEASE_SECONDS} if takeover else POLICY
    settings = with_governance_topics(stream_settings).model_copy(update=policy)
    async with migration_run(
        kube_control_plane, rest, settings, engine, worker_process, tmp_path
    ) as run:
        s = run.scene
        first, devices = await run.running_workload(job(s, SCHEDULER))
        name = first["metadata"]["name"]

        # --- 1. a GPU fails: quarantined, the migration planned --------------------------------
        sick = devices[3]
        await gpu_fails(rest, s, name, devices, sick)
        planned = await run.first_decision("MigrationPlanned", "the migration planned")
        assert (await run.governed.devices())[sick] == "Quarantined"
        details = planned["details"]
        assert (details["migrationClass"], details["pods"]) == (
            "checkpointed",
            [f"{s.namespace}/{name}"],
        )
        assert details["workloadUID"] == first["metadata"]["ownerReferences"][0]["uid"]
        await set_unschedulable(rest, s.spare, False)

        # --- 2. the executor: lease, readiness gate False, checkpoint --------------------------
        executor = run.executor("executor-0")
        await executor.start()
        if racers == 2:
            await run.executor("executor-racer").start()

        async def serving_false() -> Json | None:
            executor.check_running()
            pod = await pod_or_none(rest, s, name)
            return pod if pod is not None and condition(pod, SERVING) == "False" else None

        await eventually("the readiness gate's condition False", serving_false, 60)
        if kill_at == "checkpoint-requested":
            await run.first_decision("MigrationCheckpointRequested", "the checkpoint requested")
            await executor.kill()
            await executor.start()
        answer = await answer_checkpoint(rest, s, name)
        assert answer["migrationID"] == details["migrationID"]
        committed = await run.first_decision("MigrationCheckpointCommitted", "the checkpoint")
        assert committed["details"]["checkpointID"] == answer["checkpointID"]
        if kill_at == "checkpoint-committed":  # the eviction may have been sent, or not yet
            await executor.kill()
            await executor.start()

        # --- 3. eviction through the Eviction API; the Job controller replaces the Pod --------
        async def evicted() -> bool | None:
            executor.check_running()
            return True if await pod_or_none(rest, s, name) is None else None

        await eventually(f"Pod {name} evicted", evicted, 60)
        if kill_at == "released":
            await run.first_decision("MigrationDeviceReleased", "the device released")
            await executor.kill()
            if takeover:
                executor = run.executor("executor-1")
            await executor.start()
        replacement = await placed(rest, s, {name})
        assert replacement["spec"]["nodeName"] == s.spare
        spare_devices = [s.device(s.spare, i) for i in range(GPUS)]

        # --- 4. kubelet runs it on the spare node's GPUs: the migration completes --------------
        await kubelet_runs(rest, s, replacement["metadata"]["name"], spare_devices)
        done = await run.first_decision("MigrationCompleted", "the migration completed", 90)
        assert sorted(d[1] for d in done["details"]["replacementDevices"]) == spare_devices, done
        # Exactly one eviction: the Job lost one Pod and runs its replacement.
        status = (
            await rest.request("GET", f"/apis/batch/v1/namespaces/{s.namespace}/jobs/{s.job}")
        ).body["status"]
        assert (status.get("failed"), status.get("active")) == (1, 1), status
        assert [p["metadata"]["name"] for p in await job_pods(rest, s)] == [
            replacement["metadata"]["name"]
        ]
        for kind in ("MigrationDeviceReleased", "MigrationCompleted"):
            assert len(await run.decisions(kind)) == 1, kind
        assert not await run.decisions("MigrationFailed")
        holders = {g["details"]["holder"] for g in await run.decisions("MigrationLeaseGranted")}
        assert len(holders) == (2 if takeover else 1), holders
        if takeover:
            grants = await run.decisions("MigrationLeaseGranted")
            # Renewals are grants too (same holder and token): the distinct leases, in order.
            leases = [(g["details"]["holder"], g["details"]["fencingToken"]) for g in grants]
            assert list(dict.fromkeys(leases)) == [("executor-0", 1), ("executor-1", 2)]
            assert await run.decisions("MigrationLeaseExpired")

        # --- 5. the same decisions from the log ------------------------------------------------
        await run.replay_identical()


async def test_a_sharded_job_moves_only_the_shard_on_the_failing_gpu(
    kube_control_plane: ControlPlaneEnv,
    control_plane_rest: KubeREST,
    stream_settings: Settings,
    engine: AsyncEngine,
    worker_process: Any,
    tmp_path: Path,
) -> None:
    """An Indexed Job of two 4-GPU shards on the first node; a GPU of shard 0 fails: only shard
    0 is evicted (no checkpoint: ``sharded``), the Job controller recreates index 0, the
    scheduler places it on the spare node; shard 1 keeps running on its GPUs."""
    rest = control_plane_rest
    settings = with_governance_topics(stream_settings).model_copy(update=POLICY)
    async with migration_run(
        kube_control_plane, rest, settings, engine, worker_process, tmp_path
    ) as run:
        s = run.scene
        await rest.create(sharded_job(s, SCHEDULER, shards=2, gpus=4))

        async def both_placed() -> list[Json] | None:
            pods = [p for p in await job_pods(rest, s) if p["spec"].get("nodeName")]
            return pods if len(pods) == 2 else None

        pods = await eventually("both shards placed", both_placed, 90)
        pods.sort(key=lambda p: p["metadata"]["annotations"][COMPLETION_INDEX])
        assert {p["spec"]["nodeName"] for p in pods} == {s.first}
        held = {
            p["metadata"]["name"]: [s.device(s.first, 4 * k + i) for i in range(4)]
            for k, p in enumerate(pods)
        }
        for name, devices in held.items():
            await kubelet_runs(rest, s, name, devices)
        shard0, shard1 = (p["metadata"]["name"] for p in pods)

        async def governed_devices() -> dict[str, str] | None:
            found = await run.governed.devices()
            return (
                found if len(found.keys() & {d for ds in held.values() for d in ds}) == 8 else None
            )

        await eventually("the shards' 8 GPUs governed", governed_devices, 60)
        await gpu_fails(rest, s, shard0, held[shard0], held[shard0][1])
        planned = await run.first_decision("MigrationPlanned", "the shard's migration planned")
        assert (planned["details"]["migrationClass"], planned["details"]["pods"]) == (
            "sharded",
            [f"{s.namespace}/{shard0}"],
        )
        await set_unschedulable(rest, s.spare, False)
        await run.executor("executor-0").start()

        replacement = await placed(rest, s, {shard0, shard1})
        assert replacement["spec"]["nodeName"] == s.spare
        assert replacement["metadata"]["annotations"][COMPLETION_INDEX] == "0"
        spare = [s.device(s.spare, i) for i in range(4)]
        await kubelet_runs(rest, s, replacement["metadata"]["name"], spare)
        done = await run.first_decision("MigrationCompleted", "the shard's migration completed", 90)
        assert sorted(d[1] for d in done["details"]["replacementDevices"]) == spare, done
        # Shard 1 never moved: the same Pod, on its GPUs; one migration in all, no checkpoint.
        still = await pod_or_none(rest, s, shard1)
        assert still is not None and still["metadata"]["uid"] == pods[1]["metadata"]["uid"]
        assert still["metadata"].get("deletionTimestamp") is None
        assert condition(still, SERVING) is None
        assert len(await run.decisions("MigrationPlanned")) == 1
        assert not await run.decisions("MigrationCheckpointRequested")
        await run.replay_identical()
