"""The devicestate side of the migration scenarios (issue 13 item 4) on ``kube_control_plane``:
the real API over HTTP (the scheduler extender on, the test tokens), a second kube-scheduler
calling that extender, the real watcher (subprocess), worker and governor (``worker_process``),
and ``devicestate migrate --apply`` subprocesses (:class:`Executor`).

:func:`migration_run` starts them around a :class:`~tests.kubeapi.migration_scene.MigrationScene`
(nodes heartbeating, the spare cordoned); :meth:`MigrationRun.running_workload` makes the
workload, plays kubelet for its first Pod and waits until the governor holds its GPUs;
:meth:`MigrationRun.replay_identical` stops the pipeline and checks ``devicestate replay
--governance --verify``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
    GPU,
    GPUS,
    Json,
    MigrationScene,
    kubelet_runs,
    make_cluster,
    placed,
)
from tests.kubeapi.test_adoption_scenario import Governed
from tests.kubeapi.test_watcher_live import WatcherProcess
from tests.replay.test_replay import drop, run_replay

REPO = Path(__file__).resolve().parents[2]
SCHEDULER = "devicestate-migration"
POLICY = {"breaker_min_devices": 1000, "breaker_min_nodes": 1000}
"""No breaker: one quarantined GPU of a 16-GPU test fleet must not open it."""


@contextlib.asynccontextmanager
async def served_api(settings: Settings) -> AsyncIterator[str]:
    """The real API (scheduler extender on, test tokens) over HTTP: its URL."""
    update = {"api_tokens": tokens_json(), "api_read_cache": False, "scheduler_extender": True}
    app = create_app(settings.model_copy(update=update))
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
async def extender_scheduler(plane: ControlPlaneEnv, api_url: str) -> AsyncIterator[None]:
    """A kube-scheduler named :data:`SCHEDULER` whose filter asks the API's extender."""
    extender = {
        "urlPrefix": f"{api_url}/scheduler",
        "filterVerb": "filter",
        "nodeCacheCapable": True,
        "ignorable": False,
        "httpTimeout": "10s",
        "managedResources": [{"name": GPU, "ignoredByScheduler": False}],
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
                *["--holder", self.holder, "--interval", "0.5", "--metrics-port", "0"],
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


async def set_unschedulable(rest: KubeREST, node: str, unschedulable: bool) -> None:
    """Cordon (True) or uncordon (False) ``node``."""
    await rest.request(
        "PATCH",
        f"/api/v1/nodes/{node}",
        body={"spec": {"unschedulable": unschedulable}},
        content_type="application/merge-patch+json",
    )


async def pod_or_none(rest: KubeREST, s: MigrationScene, name: str) -> Json | None:
    """The Pod, or None once it is gone."""
    answer = await rest.request("GET", s.pod(name), ok=(200, 404))
    return None if answer.status == 404 else dict(answer.body)


@dataclass
class MigrationRun:
    """One scenario's devicestate processes (see the module docstring)."""

    plane: ControlPlaneEnv
    rest: KubeREST
    scene: MigrationScene
    settings: Settings
    engine: AsyncEngine
    api_url: str
    worker: Any
    watcher: WatcherProcess | None
    governed: Governed
    logs: Path
    executors: list[Executor] = field(default_factory=list)

    def executor(self, holder: str) -> Executor:
        made = Executor(self.plane, self.api_url, holder, self.logs / f"{holder}.log")
        self.executors.append(made)
        return made

    async def decisions(self, kind: str) -> list[Json]:
        """The governor's decisions of ``kind``, in log order (payloads)."""
        assert kind.isalnum(), kind  # a decision kind (a constant of the tests), never input
        # Only this scene's nodes: the watcher also sees what other tests left on the cluster.
        nodes = f"'{self.scene.first}', '{self.scene.spare}'"
        rows = await self.governed.rows(
            f"SELECT payload FROM {{s}}.governance_decisions WHERE kind = '{kind}' "
            f"AND node IN ({nodes}) ORDER BY seq, idx"
        )
        return [r.payload for r in rows]

    async def first_decision(self, kind: str, what: str, within: float = 60) -> Json:
        """Wait for the first decision of ``kind``: its payload."""

        async def probe() -> Json | None:
            found = await self.decisions(kind)
            return found[0] if found else None

        return await eventually(what, probe, within)

    async def running_workload(self, workload: Json) -> tuple[Json, list[str]]:
        """Create ``workload`` (its controller makes the Pod), wait for the Pod placed on the
        first node, play kubelet running it on the node's 8 GPUs, wait until the governor holds
        them Available: the Pod and its devices."""
        await self.rest.create(workload)
        pod = await placed(self.rest, self.scene, set())
        assert pod["spec"]["nodeName"] == self.scene.first
        devices = [self.scene.device(self.scene.first, i) for i in range(GPUS)]
        await kubelet_runs(self.rest, self.scene, pod["metadata"]["name"], devices)

        async def governed_devices() -> dict[str, str] | None:
            assert self.watcher is not None
            self.watcher.check_running()
            found = await self.governed.devices()
            return found if set(devices) <= found.keys() else None

        states = await eventually("the Pod's 8 GPUs governed", governed_devices, 60)
        assert {states[d] for d in devices} == {"Available"}
        return pod, devices

    async def replay_identical(self) -> None:
        """Stop the executors, watcher and worker; ``replay --governance --verify`` into a new
        schema must report it identical."""
        for executor in self.executors:
            if executor.process is not None:
                assert await executor.stop() in (0, -9), executor.log.read_text()[-2000:]
        assert self.watcher is not None
        assert self.watcher.stop() == 0
        self.watcher = None
        self.worker.signal(signal.SIGTERM)
        assert await self.worker.wait(60) == 0, self.worker.log_text()[-4000:]
        replayed = f"replay_{uuid.uuid4().hex[:12]}"
        try:
            result = await run_replay(
                self.settings, "--governance", "--schema", replayed, "--verify"
            )
            assert result.returncode == 0, result.stdout + result.stderr
            schema = self.settings.database_schema
            assert f"verify: {replayed} is identical to {schema}" in result.stdout
        finally:
            await drop(self.engine, replayed)


@contextlib.asynccontextmanager
async def migration_run(
    plane: ControlPlaneEnv,
    rest: KubeREST,
    settings: Settings,
    engine: AsyncEngine,
    worker_process: Any,
    logs: Path,
) -> AsyncIterator[MigrationRun]:
    """The scene's cluster and every devicestate process around it; the spare node cordoned
    (the first Pod lands on the first node). Cleans up the processes and the namespace."""
    s = MigrationScene()
    await make_cluster(rest, s)
    run = None
    try:
        async with (
            node_heartbeats(rest, [s.first, s.spare]),
            served_api(settings) as api_url,
            extender_scheduler(plane, api_url),
        ):
            await set_unschedulable(rest, s.spare, True)
            worker = worker_process(settings)
            watcher = WatcherProcess(settings, plane.api.kubeconfig_admin, logs / "watcher.log")
            run = MigrationRun(
                plane,
                rest,
                s,
                settings,
                engine,
                api_url,
                worker,
                watcher,
                Governed(engine, settings, worker),
                logs,
            )
            yield run
    finally:
        if run is not None:
            for executor in run.executors:
                if executor.process is not None and executor.process.returncode is None:
                    await executor.stop()
            if run.watcher is not None:
                run.watcher.stop()
        await rest.request("DELETE", f"/api/v1/namespaces/{s.namespace}", ok=(200, 202))

        async def deleted() -> bool | None:
            answer = await rest.request("GET", f"/api/v1/namespaces/{s.namespace}", ok=(200, 404))
            return True if answer.status == 404 else None

        # Gone before the next test's watcher LISTs the cluster (its Pods read Unhealthy).
        await eventually(f"namespace {s.namespace} deleted", deleted, 120)
