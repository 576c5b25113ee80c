"""The DRA adoption scenario end to end (issue 16, item 6): the real objects of a real control
plane flow through the real watcher, worker and governor, and the rollback is enforced by the
real API server.

On ``kube_control_plane`` (kube-apiserver + kube-scheduler + kube-controller-manager; the test
plays kubelet, ``tests/kubeapi/dra_canary.py``): a Node with a ResourceSlice of 8 GPUs of a driver
of its own, the driver's DeviceClass (``extendedResourceName``, KEP-5004), and a ResourceClaim of 5
GPUs with its Pod, allocated and bound by the scheduler (the *existing bound claim*). ``devicestate
watch`` (a subprocess, admin kubeconfig) publishes to the test's Kafka topics, the worker (``python
-m streams.cli``) folds them into a fresh schema and governs them, and the pool is declared through
the real API (``POST /v1/adoption?wait=``, operator token). The verdicts are the governor's
``AdoptionVerdictChanged`` decisions in PostgreSQL:

1. ``expand``: the clean canary;
2. ``hold`` (AdoptionHold firing): kubelet reports one of the claim's GPUs Unhealthy
   (``allocatedResourcesStatus``), the governor quarantines it: 1 of the pool's 5 governed
   devices, under the rollback fraction (0.25);
3. ``rollback`` (AdoptionRollback firing, AdoptionHold resolved): a device plugin starts on the
   canary node, its Node capacity offers the class's extended resource (10, the slice has 8):
   ``plugin-and-dra`` (rollback) and the slice/capacity divergence (hold) at once;
4. the operator declares ``rolled-back``: the gate holds (nothing to roll back on the plugin
   path); ``devicestate adoption enforce --live --once`` writes the ValidatingAdmissionPolicy and
   the API server refuses a new claim of the class, while the bound claim stays allocated and its
   Pod bound; declaring ``plugin`` and enforcing again removes it and a new claim is admitted and
   allocated (the control);
5. ``devicestate replay --governance --verify`` rebuilds the same decisions from the log.

Why not "hold on divergence, then rollback": the gate's divergence rule and its ownership rule
read the same fact, a Node capacity of a DeviceClass's ``extendedResourceName`` on a node where
the class's driver publishes slices (``inventory.adoption_facts.node_divergences``,
``InventoryState.ownership_conflicts``). KEP-5004 never puts a DRA-backed extended resource in
the Node's capacity, so that capacity is a device plugin's: every divergence is a
``plugin-and-dra`` conflict too, and real objects take a canary from ``expand`` straight to
``rollback`` (``test_adoption_integration.py`` shows the same with synthetic records). The hold
that real objects can give first is a quarantined device.
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

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from services.processes.api.app import create_app
from services.processes.enforcement.admission_desired import object_name
from services.runtime.config import Settings
from tests.api.conftest import bearer, tokens_json
from tests.kubeapi.conftest import ControlPlaneEnv
from tests.kubeapi.dra_canary import (
    GPUS,
    RESOURCE,
    Json,
    Scene,
    admission,
    bound,
    claim_and_pod,
    create_claim,
    device_plugin,
    make_cluster,
    report_health,
)
from tests.kubeapi.kube_rest import KubeREST
from tests.kubeapi.kubelet import eventually, node_heartbeats
from tests.kubeapi.test_watcher_live import WatcherProcess
from tests.replay.test_replay import drop, run_replay
from tests.streams.conftest import with_governance_topics

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CLAIMED = 5
PLUGIN_GPUS = 10


async def _enforce(plane: ControlPlaneEnv, settings: Settings) -> str:
    """``devicestate adoption enforce --live --once`` against the cluster: its log."""
    env = {
        **os.environ,
        "DEVICESTATE_KUBECONFIG": str(plane.api.kubeconfig_admin),
        "DEVICESTATE_DATABASE_URL": settings.database_url,
        "DEVICESTATE_DATABASE_SCHEMA": settings.database_schema,
        "PYTHONPATH": str(REPO),
    }
    process = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "services.cli.main", "adoption", "enforce", "--live", "--once"],
        env=env,
        cwd=REPO,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, stderr.decode()
    return stderr.decode()


class Governed:
    """The governance projection of the run, read from PostgreSQL."""

    def __init__(self, engine: AsyncEngine, settings: Settings, worker: Any) -> None:
        self.engine, self.schema, self.worker = engine, settings.database_schema, worker

    async def rows(self, sql: str) -> list[Any]:
        if self.worker.process.poll() is not None:
            raise AssertionError(f"the worker exited:\n{self.worker.log_text()[-4000:]}")
        async with self.engine.connect() as conn:
            return list(await conn.execute(text(sql.replace("{s}", f'"{self.schema}"'))))

    async def verdicts(self) -> list[Json]:
        rows = await self.rows(
            "SELECT payload FROM {s}.governance_decisions "
            "WHERE kind = 'AdoptionVerdictChanged' ORDER BY seq, idx"
        )
        return [r.payload for r in rows]

    async def until_verdicts(self, count: int, what: str) -> list[Json]:
        """Wait until ``count`` verdict decisions are recorded: all of them."""

        async def probe() -> list[Json] | None:
            found = await self.verdicts()
            return found if len(found) >= count else None

        try:
            return await eventually(what, probe, 60)
        except pytest.fail.Exception:
            found = [(d["incident"], d["details"]["verdict"]) for d in await self.verdicts()]
            raise AssertionError(
                f"{what}: {count} verdict decisions wanted, found {found}\n"
                f"worker log:\n{self.worker.log_text()[-3000:]}"
            ) from None

    async def devices(self) -> dict[str, str]:
        rows = await self.rows("SELECT resource_id, state FROM {s}.device_governance")
        return {r.resource_id: r.state for r in rows}


def _summary(decisions: list[Json]) -> list[tuple[Any, Any, Any]]:
    return [(d["incident"], d["alert"], d["details"]["verdict"]) for d in decisions]


def _reasons(decision: Json) -> dict[str, Json]:
    return {r["code"]: r for r in decision["details"]["reasons"]}


@contextlib.asynccontextmanager
async def _api(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """The real API app (lifespan run) on the run's topics and schema, with test tokens."""
    app = create_app(
        settings.model_copy(update={"api_tokens": tokens_json(), "api_read_cache": False})
    )
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://api", timeout=60) as client,
    ):
        yield client


async def _declare(api: httpx.AsyncClient, s: Scene, phase: str, reason: str) -> None:
    """``POST /v1/adoption?wait=30`` as the operator: accepted by the governor (200)."""
    body = {
        "pool": s.pool,
        "phase": phase,
        "selector": {"driver": s.driver},
        "deviceClass": s.device_class,
        "reason": reason,
    }
    response = await api.post(
        "/v1/adoption", params={"wait": "30"}, json=body, headers=bearer("operator")
    )
    assert response.status_code == 200, response.text


async def test_a_canary_holds_rolls_back_and_its_rollback_refuses_new_claims_only(
    kube_control_plane: ControlPlaneEnv,
    control_plane_rest: KubeREST,
    stream_settings: Settings,
    engine: AsyncEngine,
    worker_process: Any,
    tmp_path: Path,
) -> None:
    rest, s = control_plane_rest, Scene()
    settings = with_governance_topics(stream_settings)
    await make_cluster(rest, s)
    watcher = None
    try:
        async with node_heartbeats(rest, [s.node]), _api(settings) as api:
            # --- the existing bound claim: the scheduler allocates 5 GPUs, binds its Pod -------
            await claim_and_pod(rest, s, "bound", CLAIMED)
            devices = await bound(rest, s, "bound")
            assert len(devices) == CLAIMED
            worker = worker_process(settings)
            watcher = WatcherProcess(
                settings, kube_control_plane.api.kubeconfig_admin, tmp_path / "watcher.log"
            )
            governed = Governed(engine, settings, worker)
            await report_health(rest, s, "bound", devices)

            async def governed_devices() -> dict[str, str] | None:
                assert watcher is not None
                watcher.check_running()
                found = await governed.devices()
                return found if len(found) == CLAIMED else None

            states = await eventually("the claim's 5 GPUs governed", governed_devices, 60)
            assert states == {s.device(d): "Available" for d in devices}

            # --- 1. the canary is declared: expand ---------------------------------------------
            await _declare(api, s, "canary", f"canary: DRA driver on {s.node}")
            [first] = await governed.until_verdicts(1, "the canary's first verdict")
            assert _summary([first]) == [(None, None, "expand")], first
            assert first["details"]["nodes"] == 1
            assert {r["verdict"] for r in first["details"]["reasons"]} == {"expand"}

            # --- 2. kubelet reports one GPU Unhealthy: quarantined, 1 of 5: hold ---------------
            sick = devices[0]
            await report_health(rest, s, "bound", devices, unhealthy=sick)
            held = await governed.until_verdicts(2, "hold on the quarantined GPU")
            assert _summary(held[1:]) == [(f"adoption-hold/{s.pool}", "firing", "hold")]
            quarantined = _reasons(held[1])["devices-quarantined"]
            assert quarantined["verdict"] == "hold"
            assert (quarantined["figures"]["quarantined"], quarantined["figures"]["devices"]) == (
                1,
                CLAIMED,
            )
            assert (await governed.devices())[s.device(sick)] == "Quarantined"

            # --- 3. a device plugin on the canary node: plugin-and-dra: rollback ---------------
            await device_plugin(rest, s, PLUGIN_GPUS)
            rolled = await governed.until_verdicts(4, "rollback on plugin-and-dra")
            assert _summary(rolled[2:]) == [
                (f"adoption-rollback/{s.pool}", "firing", "rollback"),
                (f"adoption-hold/{s.pool}", "resolved", "rollback"),
            ]
            ownership = _reasons(rolled[2])["ownership-conflict"]
            assert (ownership["verdict"], ownership["figures"]["conflicts"]) == ("rollback", 1)

            # --- 4. the operator rolls the pool back: the gate holds (plugin path) -------------
            await _declare(api, s, "rolled-back", f"plugin-and-dra on {s.node}")
            back = await governed.until_verdicts(6, "hold once rolled back")
            assert _summary(back[4:]) == [
                (f"adoption-hold/{s.pool}", "firing", "hold"),
                (f"adoption-rollback/{s.pool}", "resolved", "hold"),
            ]
            reasons = _reasons(back[4])
            assert back[4]["details"]["phase"] == "rolled-back"
            assert reasons["ownership-conflict"]["verdict"] == "rollback"  # kept on the reason
            assert reasons["devices-quarantined"]["verdict"] == "hold"
            divergence = reasons["slice-capacity-divergence"]
            assert divergence["verdict"] == "hold"
            assert (
                divergence["figures"]["sliceDevices"],
                divergence["figures"]["nodeCapacity"],
            ) == (GPUS, PLUGIN_GPUS)
            listed = (await api.get("/v1/adoption", headers=bearer("viewer"))).json()
            [pool] = [p for p in listed["pools"] if p["pool"] == s.pool]
            assert (pool["phase"], pool["recorded"]["verdict"]) == ("rolled-back", "hold")

            # The API server refuses a new claim of the class; the bound claim and Pod stay.
            log = await _enforce(kube_control_plane, settings)
            assert "admission policy create" in log, log
            await admission(rest, s, refused=True)
            status, message = await create_claim(rest, s, "after-rollback", dry_run=False)
            assert status in (403, 422), message
            assert f"adoption pool {s.pool} is rolled back" in message, message
            assert await bound(rest, s, "bound") == devices
            assert (await rest.request("GET", s.pod("bound"))).body["metadata"].get(
                "deletionTimestamp"
            ) is None

            # Control: back on the plugin, the policy goes and a new claim is admitted and
            # allocated by the scheduler (3 GPUs are free).
            await _declare(api, s, "plugin", "back on the plugin; DRA driver removed")
            log = await _enforce(kube_control_plane, settings)
            assert "admission policy delete" in log, log
            policies = await rest.request(
                "GET",
                "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/"
                + object_name(s.pool),
                ok=(404,),
            )
            assert policies.status == 404
            await admission(rest, s, refused=False)
            await claim_and_pod(rest, s, "readmitted", 1)
            assert len(await bound(rest, s, "readmitted")) == 1
            assert await bound(rest, s, "bound") == devices

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
        if watcher is not None:
            watcher.stop()
        await rest.request("DELETE", f"/api/v1/namespaces/{s.namespace}", ok=(200, 202))
        await rest.request(
            "DELETE", f"{RESOURCE}/resourceslices/{s.node}-{s.driver}", ok=(200, 404)
        )
        await rest.request("DELETE", f"{RESOURCE}/deviceclasses/{s.device_class}", ok=(200, 404))
