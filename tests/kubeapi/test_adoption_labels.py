"""A pool selected by node labels on a real control plane (issue 16): the real watcher publishes
the Node's labels, the real worker keeps them in ``node_labels`` and forwards them to the
governor; ``GET /v1/adoption`` (evaluated on read) lists the node once it is labelled into the
pool, no longer once the label is removed, and no longer once the labelled Node is deleted (its
``node_labels`` row goes too). Each step waits for its condition with a deadline
(``eventually``), never for a fixed time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from services.runtime.config import Settings
from tests.api.conftest import bearer
from tests.kubeapi.conftest import ControlPlaneEnv
from tests.kubeapi.dra_canary import RESOURCE, Scene, make_cluster
from tests.kubeapi.kube_rest import KubeREST
from tests.kubeapi.kubelet import eventually, node_heartbeats
from tests.kubeapi.test_adoption_scenario import _api
from tests.kubeapi.test_watcher_live import WatcherProcess
from tests.streams.conftest import with_governance_topics

pytestmark = pytest.mark.integration

KEY = "devicestate.example.com/adoption-pool"


async def _label(rest: KubeREST, node: str, value: str | None) -> None:
    """Set (or, with ``None``, remove) the pool label on the Node (a JSON merge patch)."""
    await rest.request(
        "PATCH",
        f"/api/v1/nodes/{node}",
        body={"metadata": {"labels": {KEY: value}}},
        content_type="application/merge-patch+json",
    )


async def test_a_node_labelled_into_a_pool_joins_it_and_leaves_when_unlabelled(
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
            worker = worker_process(settings)
            watcher = WatcherProcess(
                settings, kube_control_plane.api.kubeconfig_admin, tmp_path / "watcher.log"
            )

            async def labels_row() -> dict[str, str] | None:
                assert watcher is not None
                watcher.check_running()
                if worker.process.poll() is not None:
                    raise AssertionError(f"the worker exited:\n{worker.log_text()[-4000:]}")
                async with engine.connect() as conn:
                    rows = list(
                        await conn.execute(
                            text(
                                f'SELECT labels FROM "{settings.database_schema}".node_labels '
                                "WHERE node = :node"
                            ),
                            {"node": s.node},
                        )
                    )
                return dict(rows[0].labels) if rows else None

            # The node's facts first: its labels (none of ours yet) in the projection.
            first = await eventually("the node's labels projected", labels_row, 60)
            assert KEY not in first

            body = {
                "pool": s.pool,
                "phase": "canary",
                "selector": {"labelSelector": {"matchLabels": {KEY: s.pool}}},
                "deviceClass": s.device_class,
                "reason": "canary by node label",
            }
            response = await api.post(
                "/v1/adoption", params={"wait": "30"}, json=body, headers=bearer("operator")
            )
            assert response.status_code == 200, response.text

            async def pool_nodes(want: list[str]) -> list[str] | None:
                assert watcher is not None
                watcher.check_running()
                listed = (await api.get("/v1/adoption", headers=bearer("viewer"))).json()
                [pool] = [p for p in listed["pools"] if p["pool"] == s.pool]
                return pool["nodes"] if pool["nodes"] == want else None

            assert await eventually("the unlabelled pool empty", lambda: pool_nodes([]), 30) == []
            await _label(rest, s.node, s.pool)
            joined = await eventually(
                "the labelled node in the pool", lambda: pool_nodes([s.node]), 60
            )
            assert joined == [s.node]
            await _label(rest, s.node, None)
            assert await eventually("the node out of the pool", lambda: pool_nodes([]), 60) == []
            # Labelled in again, then the Node deleted: it leaves the pool and the projection.
            await _label(rest, s.node, s.pool)
            await eventually("the node in the pool again", lambda: pool_nodes([s.node]), 60)
            await rest.request("DELETE", f"/api/v1/nodes/{s.node}")

            async def row_gone() -> bool | None:
                return True if await labels_row() is None else None

            await eventually("the deleted node's labels row gone", row_gone, 60)
            assert await eventually("the deleted node out", lambda: pool_nodes([]), 60) == []
    finally:
        if watcher is not None:
            watcher.stop()
        await rest.request("DELETE", f"/api/v1/namespaces/{s.namespace}", ok=(200, 202))
        await rest.request(
            "DELETE", f"{RESOURCE}/resourceslices/{s.node}-{s.driver}", ok=(200, 404)
        )
        await rest.request("DELETE", f"{RESOURCE}/deviceclasses/{s.device_class}", ok=(200, 404))
