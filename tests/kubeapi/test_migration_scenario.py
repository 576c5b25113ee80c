"""A checkpointed training Job migrates off a failing GPU end to end (issue 13 item 4), on the
real control plane: the real Job controller, kube-scheduler (with the devicestate extender),
watcher, worker, governor, API and migration executor.

On ``kube_control_plane`` (``tests/kubeapi/migration_scene.py`` plays kubelet and the
workload): a Job of one 8-GPU Pod runs on the first node. One of its GPUs turns Unhealthy. Then:

1. the governor quarantines the GPU and plans the migration (``MigrationPlanned``, the Job's
   UID, checkpointed);
2. ``devicestate migrate --apply`` takes the lease, sets the Pod's ``devicestate.io/serving``
   condition False (its readiness gate), asks for a checkpoint; the workload answers; the
   checkpoint is committed;
3. the executor evicts the Pod through the Eviction API; the Job controller makes a
   replacement; the scheduler places it on the spare node (the first one's only 8 GPUs include
   the quarantined one: kubelet's allocatable and the extender both say so);
4. kubelet runs the replacement on the spare node's GPUs; the executor reports it and the
   migration completes: one eviction, one completed migration;
5. ``devicestate replay --governance --verify`` rebuilds the same decisions from the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from sqlalchemy.ext.asyncio import AsyncEngine

from devtools.testenv import control_plane
from devtools.testenv.processes import free_port, stop_process
from services.processes.api.app import create_app
from services.runtime.config import Settings
from tests.api.conftest import TOKENS, tokens_json
from tests.kubeapi.conftest import ControlPlaneEnv
from tests.kubeapi.kube_rest import KubeREST
from tests.kubeapi.kubelet import eventually, node_heartbeats
from tests.kubeapi.migration_scene import (
    GPUS,
    SERVING,
    Json,
    MigrationScene,
    answer_checkpoint,
    condition,
    gpu_fails,
    job,
    job_pods,
    kubelet_runs,
    make_cluster,
    placed,
)
from tests.kubeapi.test_adoption_scenario import Governed
from tests.kubeapi.test_watcher_live import WatcherProcess
from tests.replay.test_replay import drop, run_replay
from tests.streams.conftest import with_governance_topics

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SCHEDULER = "devicestate-migration"
POLICY = {"breaker_min_devices": 1000, "breaker_min_nodes": 1000}
LEASE_SECONDS = 10.0
"""The migration lease of the takeover case (event time), so another executor takes over
soon."""


@contextlib.asynccontextmanager
async def _served(settings: Settings) -> AsyncIterator[str]:
    """The real API (scheduler extender on, test tokens) over HTTP: its URL."""
    app = create_app(
        settings.model_copy(
            update={
                "api_tokens": tokens_json(),
                "api_read_cache": False,
                "scheduler_extender": True,
            }
        )
    )
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    serving = asyncio.create_task(server.serve())

    async def started() -> bool | None:
        return True if server.started else None

    await eventually("the API listening", started, 30)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, 30)


@contextlib.asynccontextmanager
async def _extender_scheduler(plane: ControlPlaneEnv, api_url: str) -> AsyncIterator[None]:
    extender = {
        "urlPrefix": f"{api_url}/scheduler",
        "filterVerb": "filter",
        "nodeCacheCapable": True,
        "ignorable": False,
        "httpTimeout": "10s",
        "managedResources": [{"name": "nvidia.com/gpu", "ignoredByScheduler": False}],
    }
    scheduler = await asyncio.to_thread(
        control_plane.start_scheduler,
        plane.api,
        plane.plane.work_dir,
        extenders=[extender],
        scheduler_name=SCHEDULER,
    )
    try:
        yield
    finally:
        await asyncio.to_thread(stop_process, scheduler.process, print)


class Executor:
    """``devicestate migrate --apply`` as a subprocess against the API and the cluster; output
    appended to ``log``."""

    def __init__(self, plane: ControlPlaneEnv, api_url: str, holder: str, log: Path) -> None:
        self.plane, self.api_url, self.holder, self.log = plane, api_url, holder, log
        self.process: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DEVICESTATE_")}
        env.update(
            {
                "DEVICESTATE_KUBECONFIG": str(self.plane.api.kubeconfig_admin),
                "DEVICESTATE_MIGRATE_API_URL": self.api_url,
                "DEVICESTATE_MIGRATE_API_TOKEN": TOKENS["operator"],
                "PYTHONPATH": str(REPO),
            }
        )
        with self.log.open("ab") as out:
            self.process = await asyncio.create_subprocess_exec(
                *[sys.executable, "-m", "services.cli.main", "migrate", "--apply"],
                *["--holder", self.holder, "--interval", "0.5"],
                env=env,
                cwd=REPO,
                stdout=out,
                stderr=out,
            )

    def check_running(self) -> None:
        assert self.process is not None
        if self.process.returncode is not None:
            raise AssertionError(f"the executor exited:\n{self.log.read_text()[-4000:]}")

    async def kill(self) -> None:
        """kill -9: no clean-up of any kind."""
        assert self.process is not None
        self.process.kill()
        await self.process.wait()

    async def stop(self) -> int:
        assert self.process is not None
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
        return await asyncio.wait_for(self.process.wait(), 30)


async def _decisions(governed: Governed, kind: str) -> list[Json]:
    rows = await governed.rows(
        "SELECT payload FROM {s}.governance_decisions WHERE kind = '" + kind + "' ORDER BY seq, idx"
    )
    return [r.payload for r in rows]


async def _one(governed: Governed, kind: str, what: str, within: float = 60) -> Json:
    async def probe() -> Json | None:
        found = await _decisions(governed, kind)
        return found[0] if found else None

    return await eventually(what, probe, within)


async def _uncordon(rest: KubeREST, node: str, unschedulable: bool = False) -> None:
    await rest.request(
        "PATCH",
        f"/api/v1/nodes/{node}",
        body={"spec": {"unschedulable": unschedulable}},
        content_type="application/merge-patch+json",
    )


async def _pod_or_none(rest: KubeREST, s: MigrationScene, name: str) -> Json | None:
    answer = await rest.request("GET", s.pod(name), ok=(200, 404))
    return None if answer.status == 404 else dict(answer.body)


@pytest.mark.parametrize(
    ("kill_at", "takeover"),
    [(None, False), ("checkpoint-requested", False), ("released", False), ("released", True)],
)
async def test_a_checkpointed_job_migrates_off_a_failing_gpu(
    kill_at: str | None,
    takeover: bool,
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
    time (a higher fencing token)."""
    rest, s = control_plane_rest, MigrationScene()
    policy = {**POLICY, "migration_lease_seconds": LEASE_SECONDS} if takeover else POLICY
    settings = with_governance_topics(stream_settings).model_copy(update=policy)
    await make_cluster(rest, s)
    watcher = executor = None
    try:
        async with (
            node_heartbeats(rest, [s.first, s.spare]),
            _served(settings) as api_url,
            _extender_scheduler(kube_control_plane, api_url),
        ):
            await _uncordon(rest, s.spare, unschedulable=True)  # the first Pod lands on `first`
            worker = worker_process(settings)
            watcher = WatcherProcess(
                settings, kube_control_plane.api.kubeconfig_admin, tmp_path / "watcher.log"
            )
            governed = Governed(engine, settings, worker)
            await rest.create(job(s, SCHEDULER))
            first = await placed(rest, s, set())
            name = first["metadata"]["name"]
            assert first["spec"]["nodeName"] == s.first
            devices = [s.device(s.first, i) for i in range(GPUS)]
            await kubelet_runs(rest, s, name, devices)

            async def governed_devices() -> dict[str, str] | None:
                assert watcher is not None
                watcher.check_running()
                found = await governed.devices()
                return found if set(devices) <= found.keys() else None

            states = await eventually("the Pod's 8 GPUs governed", governed_devices, 60)
            assert {states[d] for d in devices} == {"Available"}

            # --- 1. a GPU fails: quarantined, the migration planned ----------------------------
            sick = devices[3]
            await gpu_fails(rest, s, name, devices, sick)
            planned = await _one(governed, "MigrationPlanned", "the migration planned")
            assert (await governed.devices())[sick] == "Quarantined"
            details = planned["details"]
            assert (details["migrationClass"], details["pods"]) == (
                "checkpointed",
                [f"{s.namespace}/{name}"],
            )
            assert details["workloadUID"] == first["metadata"]["ownerReferences"][0]["uid"]
            migration = details["migrationID"]
            await _uncordon(rest, s.spare)

            # --- 2. the executor: lease, readiness gate False, checkpoint ----------------------
            executor = Executor(kube_control_plane, api_url, "executor-0", tmp_path / "exec.log")
            await executor.start()

            async def serving_false() -> Json | None:
                assert executor is not None
                executor.check_running()
                pod = await _pod_or_none(rest, s, name)
                return pod if pod is not None and condition(pod, SERVING) == "False" else None

            await eventually("the readiness gate's condition False", serving_false, 60)
            if kill_at == "checkpoint-requested":
                await _one(governed, "MigrationCheckpointRequested", "the checkpoint requested")
                await executor.kill()
                await executor.start()
            answer = await answer_checkpoint(rest, s, name)
            assert answer["migrationID"] == migration
            committed = await _one(governed, "MigrationCheckpointCommitted", "the checkpoint")
            assert committed["details"]["checkpointID"] == answer["checkpointID"]

            # --- 3. eviction through the Eviction API; the Job controller replaces the Pod ----
            async def evicted() -> bool | None:
                assert executor is not None
                executor.check_running()
                return True if await _pod_or_none(rest, s, name) is None else None

            await eventually(f"Pod {name} evicted", evicted, 60)
            if kill_at == "released":
                await _one(governed, "MigrationDeviceReleased", "the device released")
                await executor.kill()
                if takeover:
                    executor = Executor(
                        kube_control_plane, api_url, "executor-1", tmp_path / "exec-1.log"
                    )
                await executor.start()
            replacement = await placed(rest, s, {name})
            assert replacement["spec"]["nodeName"] == s.spare
            spare_devices = [s.device(s.spare, i) for i in range(GPUS)]

            # --- 4. kubelet runs it on the spare node's GPUs: the migration completes ----------
            await kubelet_runs(rest, s, replacement["metadata"]["name"], spare_devices)
            done = await _one(governed, "MigrationCompleted", "the migration completed", 90)
            assert sorted(d[1] for d in done["details"]["replacementDevices"]) == sorted(
                spare_devices
            ), done
            assert await executor.stop() == 0
            executor = None
            # Exactly one eviction: the Job lost one Pod and runs its replacement.
            status = (
                await rest.request("GET", f"/apis/batch/v1/namespaces/{s.namespace}/jobs/{s.job}")
            ).body["status"]
            assert (status.get("failed"), status.get("active")) == (1, 1), status
            assert [p["metadata"]["name"] for p in await job_pods(rest, s)] == [
                replacement["metadata"]["name"]
            ]
            for kind in ("MigrationDeviceReleased", "MigrationCompleted"):
                assert len(await _decisions(governed, kind)) == 1, kind
            assert not await _decisions(governed, "MigrationFailed")
            if takeover:
                grants = await _decisions(governed, "MigrationLeaseGranted")
                # Renewals are grants too (same holder and token): the distinct leases, in order.
                leases = [(g["details"]["holder"], g["details"]["fencingToken"]) for g in grants]
                assert list(dict.fromkeys(leases)) == [("executor-0", 1), ("executor-1", 2)]
                assert await _decisions(governed, "MigrationLeaseExpired")

        # --- 5. the same decisions from the log --------------------------------------------------
        assert watcher.stop() == 0
        watcher = None
        worker.signal(signal.SIGTERM)
        assert await worker.wait(60) == 0, worker.log_text()[-4000:]
        replayed = f"replay_{uuid.uuid4().hex[:12]}"
        try:
            result = await run_replay(settings, "--governance", "--schema", replayed, "--verify")
            assert result.returncode == 0, result.stdout + result.stderr
            assert f"verify: {replayed} is identical to {settings.database_schema}" in result.stdout
        finally:
            await drop(engine, replayed)
    finally:
        if executor is not None:
            await executor.stop()
        if watcher is not None:
            watcher.stop()
        await rest.request("DELETE", f"/api/v1/namespaces/{s.namespace}", ok=(200, 202))
