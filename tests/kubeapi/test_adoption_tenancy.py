"""The adoption gate's ``tenant-boundary`` signal against a real control plane (issue 16): a
Namespace labelled ``resource.kubernetes.io/admin-access: "true"`` gets a ResourceClaim with
``exactly.adminAccess: true`` admitted and allocated by the real scheduler (KEP-5018); the label
removed afterwards (the API server checks it only at create and allocation) holds the canary
pool with reason ``tenant-boundary``; labelled again, the pool expands.

The real watcher (a subprocess: it LISTs and WATCHes the Namespaces), the real worker and
governor (``python -m streams.cli``) and the real API (``GET /v1/adoption``: the gate evaluated
on read, and the governor's recorded verdict) on a fresh schema. Every step polls, with a
deadline, until both the on-read and the recorded verdict are the expected one; the first one
waits first until the pool has its node (a pool whose node's facts have not arrived yet reads
``pool-empty``, hold: legitimately transient, never asserted on)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from services.domain.watch.namespace_tracker import ADMIN_ACCESS_LABEL
from services.runtime.config import Settings
from tests.api.conftest import bearer
from tests.kubeapi.conftest import ControlPlaneEnv
from tests.kubeapi.dra_canary import IMAGE, RESOURCE, Json, Scene, make_cluster
from tests.kubeapi.kube_rest import KubeREST
from tests.kubeapi.kubelet import eventually, node_heartbeats
from tests.kubeapi.test_adoption_scenario import _api, _declare
from tests.kubeapi.test_watcher_live import WatcherProcess
from tests.streams.conftest import with_governance_topics

pytestmark = pytest.mark.integration

CLAIM = "admin-probe"
STEP_SECONDS = 90.0


async def _label(rest: KubeREST, s: Scene, value: str | None) -> None:
    """Set (or with ``None`` remove) the Namespace's admin-access label (a merge patch)."""
    await rest.request(
        "PATCH",
        f"/api/v1/namespaces/{s.namespace}",
        body={"metadata": {"labels": {ADMIN_ACCESS_LABEL: value}}},
        content_type="application/merge-patch+json",
    )


def _admin_claim(s: Scene) -> Json:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": CLAIM, "namespace": s.namespace},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {"deviceClassName": s.device_class, "adminAccess": True},
                    }
                ]
            }
        },
    }


async def _admin_claim_and_pod(rest: KubeREST, s: Scene) -> list[Json]:
    """The admin-access claim and a Pod using it; the scheduler allocates and binds: the
    allocation results."""
    created = await rest.create(_admin_claim(s))
    request = created.body["spec"]["devices"]["requests"][0]
    # With DRAAdminAccess off the API server would drop the field: the test needs it on.
    assert request["exactly"].get("adminAccess") is True, created.body
    await rest.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": CLAIM, "namespace": s.namespace},
            "spec": {
                "resourceClaims": [{"name": "gpus", "resourceClaimName": CLAIM}],
                "containers": [
                    {
                        "name": "probe",
                        "image": IMAGE,
                        "resources": {"claims": [{"name": "gpus", "request": "gpu"}]},
                    }
                ],
                "terminationGracePeriodSeconds": 0,
            },
        }
    )

    async def allocated() -> list[Json] | None:
        claim = (await rest.request("GET", s.claims(CLAIM))).body
        pod = (await rest.request("GET", s.pod(CLAIM))).body
        allocation = (claim.get("status") or {}).get("allocation")
        if not allocation or not pod["spec"].get("nodeName"):
            return None
        return list(allocation["devices"]["results"])

    return await eventually("the admin-access claim allocated, its Pod bound", allocated, 60)


async def _pool(api: httpx.AsyncClient, s: Scene) -> Json | None:
    listed = (await api.get("/v1/adoption", headers=bearer("viewer"))).json()
    return next((p for p in listed["pools"] if p["pool"] == s.pool), None)


def _reasons(pool: Json) -> dict[str, Json]:
    return {r["code"]: r for r in pool["reasons"]}


async def _until_verdict(
    api: httpx.AsyncClient, s: Scene, watcher: WatcherProcess, worker: Any, verdict: str, what: str
) -> Json:
    """Poll ``GET /v1/adoption`` until the pool has its node and both the gate on read and the
    governor's recorded verdict are ``verdict``; the pool then."""
    seen: list[Json | None] = [None]

    async def probe() -> Json | None:
        watcher.check_running()
        if worker.process.poll() is not None:
            raise AssertionError(f"the worker exited:\n{worker.log_text()[-4000:]}")
        pool = seen[0] = await _pool(api, s)
        if pool is None or "pool-empty" in _reasons(pool) or pool["nodes"] != [s.node]:
            return None
        recorded = (pool.get("recorded") or {}).get("verdict")
        return pool if (pool["verdict"], recorded) == (verdict, verdict) else None

    try:
        return await eventually(what, probe, STEP_SECONDS)
    except pytest.fail.Exception:
        raise AssertionError(
            f"{what}: last seen {seen[0]}\nworker log:\n{worker.log_text()[-3000:]}"
        ) from None


async def test_an_admin_claim_whose_namespace_loses_its_label_holds_the_pool(
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
            await _label(rest, s, "true")
            results = await _admin_claim_and_pod(rest, s)
            assert [r.get("adminAccess") for r in results] == [True], results
            worker = worker_process(settings)
            watcher = WatcherProcess(
                settings, kube_control_plane.api.kubeconfig_admin, tmp_path / "watcher.log"
            )
            await _declare(api, s, "canary", f"canary: DRA driver on {s.node}")

            # --- 1. labelled: the admin claim is allowed: expand --------------------------------
            pool = await _until_verdict(api, s, watcher, worker, "expand", "labelled: expand")
            tenant = _reasons(pool)["tenant-boundary"]
            assert (tenant["verdict"], tenant["figures"]["claims"]) == ("expand", 0)

            # --- 2. the label removed: the claim keeps its devices: hold ------------------------
            await _label(rest, s, None)
            pool = await _until_verdict(api, s, watcher, worker, "hold", "label removed: hold")
            tenant = _reasons(pool)["tenant-boundary"]
            assert tenant["verdict"] == "hold", pool
            assert tenant["figures"]["claims"] == 1
            assert tenant["figures"]["names"] == f"{s.namespace}/{CLAIM}"
            assert {r["code"] for r in pool["reasons"] if r["verdict"] != "expand"} == {
                "tenant-boundary"
            }
            assert pool["recorded"]["verdict"] == "hold"

            # --- 3. labelled again: expand --------------------------------------------------
            await _label(rest, s, "true")
            pool = await _until_verdict(api, s, watcher, worker, "expand", "labelled again")
            assert _reasons(pool)["tenant-boundary"]["figures"]["claims"] == 0
        assert watcher.stop() == 0
        watcher = None
    finally:
        if watcher is not None:
            watcher.stop()
        await rest.request("DELETE", f"/api/v1/namespaces/{s.namespace}", ok=(200, 202))
        await rest.request(
            "DELETE", f"{RESOURCE}/resourceslices/{s.node}-{s.driver}", ok=(200, 404)
        )
        await rest.request("DELETE", f"{RESOURCE}/deviceclasses/{s.device_class}", ok=(200, 404))
