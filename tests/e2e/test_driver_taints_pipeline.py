"""Driver-published device taints through the real parts (issue 15 item 1): recorded watch stream ->
watcher -> Kafka -> Faust worker (inventory, forwarder, governor) -> PostgreSQL -> API, then
``replay --governance --verify``.

The shared examples' node ``gpu-node-a``: its ResourceSlice, the ResourceClaim allocating
``gpu-2``/``gpu-3`` and the Pod ``infer-dra-0`` holding them (pod-04), whose status reads Healthy.
The Pod fails; kubelet no longer updates a terminated Pod's status (kubernetes#132978), so its
status still reads Healthy. The DRA driver then taints ``gpu-2`` in the slice with a fatal XID
(``gpu.nvidia.com/xid=79``, NoSchedule, with ``timeAdded``): the only fault signal. The governor
quarantines ``gpu.example.com/gpu-node-a/gpu-2`` with reason ``driver-taint:...``. When the taint
goes away, the staged recovery starts (probe) and the device stays quarantined: no release.

DeviceTaintRules in the same stream: one exactly as ``devicestate enforce`` writes it, on ``gpu-3``
with the XID key, is never read back (``gpu-3`` is never quarantined); an administrator's rule on
``gpu-4`` with the lost-GPU key quarantines ``gpu-4``, the decision naming the rule.
"""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from devtools.demo.catchup import wait_caught_up
from services.processes.api.app import create_app
from services.processes.enforcement.desired import DesiredRule, Effect, rule_manifest
from services.processes.watcher.run import run_watch
from services.runtime.config import Settings
from tests.replay.test_replay import drop, run_replay

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).parents[2].parent / "shared" / "examples"
NODE = "gpu-node-a"
GPU_2 = "gpu.example.com/gpu-node-a/gpu-2"
GPU_4 = "gpu.example.com/gpu-node-a/gpu-4"
REASON = "driver-taint:gpu.nvidia.com/xid=79"


def own_rule() -> dict[str, Any]:
    """The rule ``devicestate enforce`` writes for a quarantine of gpu-3, tainting with the XID
    key: read back, it would quarantine gpu-3."""
    manifest = rule_manifest(
        DesiredRule(
            name="devicestate-quarantine-e2e",
            quarantine_id="gpu-node-a/gpu.example.com/gpu-node-a/gpu-3@1",
            node=NODE,
            driver="gpu.example.com",
            pool=NODE,
            device="gpu-3",
            kind="manual",
            reason="maintenance",
            effect=Effect.NO_SCHEDULE,
        )
    )
    manifest["metadata"]["resourceVersion"] = "700"
    manifest["spec"]["taint"]["key"] = "gpu.nvidia.com/xid"
    return manifest


def admin_rule() -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1beta2",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "sre-gpu-4-lost", "resourceVersion": "701"},
        "spec": {
            "deviceSelector": {"driver": "gpu.example.com", "pool": NODE, "device": "gpu-4"},
            "taint": {"key": "gpu.nvidia.com/gpu-lost", "effect": "NoExecute"},
        },
    }


def example(name: str) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads((EXAMPLES / name).read_text())
    return obj


def resource_slice(version: int, tainted: bool) -> dict[str, Any]:
    obj = copy.deepcopy(example("dra-resourceslice-gpu-node-a.json"))
    obj["metadata"]["resourceVersion"] = str(version)
    for device in obj["spec"]["devices"]:
        device.pop("taints", None)
        if tainted and device["name"] == "gpu-2":
            device["taints"] = [
                {
                    "key": "gpu.nvidia.com/xid",
                    "value": "79",
                    "effect": "NoSchedule",
                    "timeAdded": "2026-12-01T10:00:07Z",
                }
            ]
    return obj


def failed_pod(version: int) -> dict[str, Any]:
    """pod-04 failed: phase Failed, its last (frozen) device status still Healthy."""
    pod = copy.deepcopy(example("pod-04-dra-claim-names.json"))
    pod["metadata"]["resourceVersion"] = str(version)
    pod["status"]["phase"] = "Failed"
    for status in pod["status"].get("containerStatuses") or []:
        status["ready"] = False
        status["state"] = {"terminated": {"exitCode": 1, "reason": "Error"}}
    return pod


def stream() -> list[dict[str, Any]]:
    def at(second: int) -> dict[str, Any]:
        return {"type": "_CLOCK", "now": f"2026-12-01T10:00:{second:02}Z"}

    return [
        at(0),
        {"type": "ADDED", "object": resource_slice(88120, tainted=False)},
        {"type": "ADDED", "object": example("dra-resourceclaim-allocated.json")},
        {"type": "ADDED", "object": example("pod-04-dra-claim-names.json")},
        at(5),
        {"type": "MODIFIED", "object": failed_pod(51900)},
        at(8),
        {"type": "MODIFIED", "object": resource_slice(88130, tainted=True)},
        at(20),
        {"type": "MODIFIED", "object": resource_slice(88140, tainted=False)},
        at(25),
        {"type": "ADDED", "object": own_rule()},
        {"type": "ADDED", "object": admin_rule()},
        at(30),
        at(40),
    ]


async def _poll(client: httpx.AsyncClient, path: str, ok: Any) -> Any:
    body: Any = None
    for _ in range(120):
        response = await client.get(path)
        assert response.status_code == 200, response.text
        body = response.json()
        if ok(body):
            return body
        await asyncio.sleep(0.5)
    raise AssertionError(f"{path}: {body}")


async def test_a_driver_taint_quarantines_and_its_removal_starts_recovery_without_release(
    stream_settings: Settings,
    kafka_bootstrap: str,
    worker_process: Any,
    engine: AsyncEngine,
    tmp_path: Path,
) -> None:
    settings = stream_settings.model_copy(
        update={"breaker_min_devices": 1000, "breaker_min_nodes": 1000}
    )
    watch_file = tmp_path / "driver-taints.jsonl"
    watch_file.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in stream()))
    await run_watch(settings, from_file=watch_file)
    worker = worker_process(settings)
    for topic in (settings.topic, settings.governance_topic):
        await wait_caught_up(kafka_bootstrap, topic, settings.consumer_group, 120)
    assert worker.process.poll() is None, worker.log_text()[-4000:]
    app = create_app(settings)
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api")
    async with app.router.lifespan_context(app), client:
        page = await _poll(
            client,
            f"/v1/quarantines?node={NODE}",
            lambda b: (
                {q["resourceID"] for q in b["items"]} == {GPU_2, GPU_4}
                and any(q["status"] == "recovering" for q in b["items"])
            ),
        )
        # gpu-2 by its driver taint, gpu-4 by the administrator's rule; gpu-3 (the rule of
        # devicestate's own) never
        by_device = {q["resourceID"]: q for q in page["items"]}
        assert len(page["items"]) == 2, page
        lost = by_device[GPU_4]
        assert (
            lost["reason"] == "driver-taint:gpu.nvidia.com/gpu-lost" and lost["status"] == "active"
        )
        quarantine = by_device[GPU_2]
        assert quarantine["reason"] == REASON
        assert quarantine["confirmedFault"] is True
        assert quarantine["recoveryStage"] == "probe"  # recovery started, nothing released
        assert quarantine["releasedAt"] is None

        timeline = await _poll(
            client,
            f"/v1/nodes/{NODE}/timeline/{GPU_2}",
            lambda b: any(i["kind"] == "decision" for i in b["items"]),
        )
        decisions = [i["fields"] for i in timeline["items"] if i["kind"] == "decision"]
        text = orjson.dumps(decisions).decode()
        assert "DeviceQuarantined" in text and "RecoveryStageStarted" in text, decisions
        assert "QuarantineReleased" not in text, decisions
        quarantined = [d for d in decisions if REASON in orjson.dumps(d).decode()]
        assert any(
            "NoSchedule" in orjson.dumps(d).decode()
            and "2026-12-01T10:00:07Z" in orjson.dumps(d).decode()
            for d in quarantined
        ), quarantined

        rule_timeline = await _poll(
            client,
            f"/v1/nodes/{NODE}/timeline/{GPU_4}",
            lambda b: any(i["kind"] == "decision" for i in b["items"]),
        )
        assert "sre-gpu-4-lost" in orjson.dumps(rule_timeline["items"]).decode()

    schemas = (f"{settings.database_schema}_r", f"{settings.database_schema}_g")
    try:
        directory = await run_replay(settings, "--schema", schemas[0], "--verify")
        assert directory.returncode == 0, directory.stdout + directory.stderr
        assert "is identical to" in directory.stdout, directory.stdout
        governance = await run_replay(settings, "--governance", "--schema", schemas[1], "--verify")
        assert governance.returncode == 0, governance.stdout + governance.stderr
        assert "is identical to" in governance.stdout, governance.stdout
    finally:
        await drop(engine, *schemas)
