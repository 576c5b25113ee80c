"""DeviceTaintRules in the live watcher against the real kube-apiserver (v1.36, ``resource.k8s.io/
v1beta2`` with the ``DRADeviceTaintRules`` gate), publishing to the real Kafka broker (issue 15).

``devicestate watch`` runs as a subprocess with the ``devicestate-watcher`` ServiceAccount's token
and the RBAC of ``deploy/``. An administrator's rule tainting ``gpu-0`` reaches the device-health
topic as a taint of ``gpu-0`` in its ResourceSlice (``DeviceTaint.rule`` naming the rule, with the
``timeAdded`` the API server set); a rule exactly as ``devicestate enforce`` writes it, on
``gpu-1``, is never read back; deleting the administrator's rule publishes the slice without it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from kubernetes_asyncio import client

from devtools.testenv import kubeapi
from services.domain.inventory.events import InventoryObserved
from services.domain.inventory.objects import ResourceSliceInfo
from services.domain.records import TopicRecord
from services.processes.enforcement.desired import DesiredRule, Effect, rule_manifest
from services.runtime.config import Settings
from tests.kubeapi.kube_rest import KubeREST, apply_identities, wait_until_allowed
from tests.kubeapi.test_watcher_live import (  # noqa: F401  (watcher_process: a fixture)
    WATCHER_ACCOUNT,
    Cluster,
    TopicTail,
    WatcherProcess,
    inventory,
    watcher_process,
)

pytestmark = pytest.mark.integration

XID = "gpu.nvidia.com/xid"


def rule_taints(event: InventoryObserved) -> dict[str, list[tuple[str, str | None, str | None]]]:
    assert isinstance(event.obj, ResourceSliceInfo)
    out = {
        d.name: [(t.key, t.value, t.rule) for t in d.taints if t.rule] for d in event.obj.devices
    }
    return {name: taints for name, taints in out.items() if taints}


async def test_rules_of_others_taint_their_devices_and_devicestates_own_are_never_read(
    kube_api: kubeapi.KubeAPI,
    admin_client: client.ApiClient,
    rendered: dict[str, list[dict[str, Any]]],
    stream_settings: Settings,
    watcher_process: Callable[..., WatcherProcess],  # noqa: F811
    tmp_path: Path,
) -> None:
    tag = uuid4().hex[:6]
    node, driver = f"gpu-t-{tag}", f"gpu-{tag}.example.com"
    slice_name, admin_name = f"{node}-{driver}", f"sre-xid-{tag}"
    async with KubeREST(kube_api) as rest:
        await apply_identities(rest, rendered["base"])  # ServiceAccount + the watcher's RBAC
        await wait_until_allowed(
            rest, WATCHER_ACCOUNT, "list", "devicetaintrules", group="resource.k8s.io"
        )
        kubeconfig = await rest.service_account_kubeconfig(
            "devicestate", WATCHER_ACCOUNT, tmp_path / "watcher.kubeconfig"
        )
    cluster = Cluster(admin_client)
    rules = client.ResourceV1beta2Api(admin_client)
    await cluster.node(node)
    await cluster.resource.create_resource_slice(
        {
            "metadata": {"name": slice_name},
            "spec": {
                "driver": driver,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": f"gpu-{i}"} for i in range(2)],
            },
        }
    )
    own = rule_manifest(
        DesiredRule(
            name=f"devicestate-quarantine-{tag}",
            quarantine_id=f"{node}/{driver}/{node}/gpu-1@7",
            node=node,
            driver=driver,
            pool=node,
            device="gpu-1",
            kind="system",
            reason="pod-status-unhealthy",
            effect=Effect.NO_SCHEDULE,
        )
    )
    await rules.create_device_taint_rule(own)
    await rules.create_device_taint_rule(
        {
            "metadata": {"name": admin_name, "labels": {"team": "sre"}},
            "spec": {
                "deviceSelector": {"driver": driver, "pool": node, "device": "gpu-0"},
                "taint": {"key": XID, "value": "79", "effect": "NoSchedule"},
            },
        }
    )
    settings = stream_settings
    watcher = watcher_process(settings, kubeconfig)
    try:
        async with TopicTail(settings.kafka_bootstrap_servers, settings.topic, watcher) as tail:

            def tainted(records: list[TopicRecord]) -> bool:
                return any(
                    rule_taints(e) for e in inventory(records, ResourceSliceInfo, slice_name)
                )

            records = await tail.wait_for(tainted, "the slice with the administrator's taint", 60)
            last = inventory(records, ResourceSliceInfo, slice_name)[-1]
            assert rule_taints(last) == {"gpu-0": [(XID, "79", admin_name)]}  # not gpu-1's own
            assert isinstance(last.obj, ResourceSliceInfo)
            (taint,) = [t for t in last.obj.devices[0].taints if t.rule]
            assert taint.effect == "NoSchedule" and taint.time_added is not None  # set by the API

            await rules.delete_device_taint_rule(admin_name)

            def cleared(records: list[TopicRecord]) -> bool:
                events = inventory(records, ResourceSliceInfo, slice_name)
                return bool(events) and not rule_taints(events[-1])

            records = await tail.wait_for(cleared, "the slice without the rule's taint", 60)
            assert not [r for r in records if isinstance(r, InventoryObserved) and r.deleted]
            assert (
                watcher.metrics().get(
                    'devicestate_watcher_dra_not_served{resource="devicetaintrules"}', 0
                )
                == 0
            )
    finally:
        for name in (own["metadata"]["name"], admin_name):
            try:
                await rules.delete_device_taint_rule(name)
            except client.ApiException as exc:
                if exc.status != 404:
                    raise
        await cluster.resource.delete_resource_slice(slice_name)
        await cluster.core.delete_node(node)
