"""The adoption gate in the governor end to end against the real broker and PostgreSQL (issue
16): the worker (``python -m streams.cli``) folds the shared examples' ResourceSlice,
ResourceClaim and DeviceClass, forwards each node's gate facts (``NodeAdoptionFacts``) to the
governance topic, and the governor records the pool's verdict as ``AdoptionVerdictChanged``
decisions: ``expand`` for the clean canary, ``hold`` (AdoptionHold firing) once the Node's
capacity disagrees with its slices, ``expand`` (resolved) when they agree again; and the
``claim-failures`` signal: the worker forwards each ``DRAFailureObserved`` that raised its
source's projected count as a ``NodeFailureObserved`` with the increase (a re-published Event
forwards nothing), the pool holds at the threshold and expands once they leave the window; and
the ``ready-latency`` signal: the worker forwards each ``PodLifecycleObserved``'s bound-to-Ready
stages as a ``NodeReadyObserved`` (a plugin sample naming the DeviceClass whose
``extendedResourceName`` it is), the pool holds on a slow DRA p95 and expands once the samples
leave the window; ``GET /v1/adoption``'s reading of the same rows is in the API tests."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from services.domain.adoption.failure_classes import FailureClass
from services.domain.adoption.failure_events import (
    DRAFailureObserved,
    FailureOrigin,
    encode_failure,
)
from services.domain.governance.adoption import AdoptionDeclaration, Phase, PoolSelector
from services.domain.governance.inputs import CommandAction, OperatorCommand, Role
from services.domain.governance.inputs_adoption import NodeAdoptionFacts
from services.domain.governance.inputs_failures import NodeFailureObserved
from services.domain.governance.inputs_ready import NodeReadyObserved
from services.domain.governance.policy import GovernancePolicy
from services.domain.lifecycle import DevicePath, Stage
from services.domain.lifecycle_events import PodLifecycleObserved, StageSample, encode_lifecycle
from services.domain.node_events import NodeResourcesChanged, encode_node_event
from services.runtime.config import Settings
from tests.projection.inventory_examples import NODE, inventory_events, resource_slice
from tests.streams.test_governor_integration import Pipeline, Record, at, governance
from tests.streams.test_inventory_integration import governance_records, inventory, of_type, ticks

pytestmark = pytest.mark.integration
DRIVER = "gpu.example.com"


def capacity(gpus: int, seconds: float) -> Record:
    event = NodeResourcesChanged(
        node=NODE,
        capacity=(("example.com/gpu", gpus),),
        allocatable=(("example.com/gpu", gpus),),
        status_version=None,
        observed_at=at(seconds),
    )
    return (NODE.encode(), encode_node_event(event), None)


def declare(seconds: float) -> Record:
    return governance(
        OperatorCommand(
            command_id="adopt-1",
            action=CommandAction.ADOPTION_SET,
            actor="olga",
            role=Role.OPERATOR,
            requested_at=at(seconds),
            reason="canary of DRA on gpu-node-a",
            adoption=AdoptionDeclaration("east", PoolSelector(driver=DRIVER), Phase.CANARY, DRIVER),
        )
    )


async def verdicts(pipe: Pipeline) -> list[tuple[Any, Any, Any]]:
    return [
        (d["incident"], d["alert"], d["details"]["verdict"])
        for d in await pipe.decisions()
        if d["type"] == "AdoptionVerdictChanged"
    ]


async def test_the_governor_holds_a_canary_on_divergence_from_forwarded_facts(
    stream_settings: Settings, engine: AsyncEngine, kafka_bootstrap: str, worker_process: Any
) -> None:
    devices = len(resource_slice().devices)
    async with Pipeline(stream_settings, engine, kafka_bootstrap) as pipe:
        pipe.worker = worker_process(stream_settings)
        await pipe.wave([*map(inventory, inventory_events(0)), *ticks(1)])
        # One record, after the slice: the example claim has a consumer reserved (it cannot
        # leak), so it changes nothing the gate reads.
        [facts] = of_type(await governance_records(pipe), NodeAdoptionFacts)
        assert (facts.node, facts.slices, facts.claims) == (NODE, ((DRIVER, NODE),), ())
        await pipe.append([declare(2)])
        assert await verdicts(pipe) == [(None, None, "expand")]

        # The Node's capacity now offers the class's extended resource too (a device plugin):
        # plugin-and-dra on the node (rollback), and its count disagrees with the slice (hold).
        await pipe.wave([capacity(devices + 2, 10), *ticks(11)])
        assert (await verdicts(pipe))[-1] == ("adoption-rollback/east", "firing", "rollback")
        [rolled] = [d for d in await pipe.decisions() if d["incident"] == "adoption-rollback/east"]
        reasons = {r["code"]: r for r in rolled["details"]["reasons"]}
        assert reasons["ownership-conflict"]["verdict"] == "rollback"
        # The conflict is forwarded before the node's new facts (the same record raised both):
        # the divergence follows in the facts, and the verdict stays rollback (no new decision).
        [divergence] = of_type(await governance_records(pipe), NodeAdoptionFacts)[-1].divergences
        assert (divergence.slice_devices, divergence.node_capacity) == (devices, devices + 2)
        assert [v[2] for v in await verdicts(pipe)] == ["expand", "rollback"]

        # The plugin is gone from the node: nothing is offered twice, nothing diverges.
        # The conflict clears first (the divergence still held: hold), then the facts (expand).
        await pipe.wave([capacity(0, 20), *ticks(21)])
        assert (await verdicts(pipe))[2:] == [
            ("adoption-hold/east", "firing", "hold"),
            ("adoption-rollback/east", "resolved", "hold"),
            ("adoption-hold/east", "resolved", "expand"),
        ]


def failure(uid: str, occurrences: int, seconds: float) -> Record:
    record = DRAFailureObserved(
        source_uid=uid,
        occurrences=occurrences,
        origin=FailureOrigin.EVENT,
        namespace="ml",
        pod_name="infer-0",
        pod_uid="uid-infer-0",
        node_name=NODE,
        reason="FailedPrepareDynamicResources",
        message="NodePrepareResources: rpc error: DeadlineExceeded",
        failure_class=FailureClass.RETRYABLE,
        why="prepare-error",
        observed_at=at(seconds),
    )
    return (record.node.encode(), encode_failure(record), None)


async def test_forwarded_driver_failures_hold_a_canary_until_they_leave_the_window(
    stream_settings: Settings, engine: AsyncEngine, kafka_bootstrap: str, worker_process: Any
) -> None:
    window = GovernancePolicy().adoption.failure_window_seconds
    async with Pipeline(stream_settings, engine, kafka_bootstrap) as pipe:
        pipe.worker = worker_process(stream_settings)
        await pipe.wave([*map(inventory, inventory_events(0)), *ticks(1)])
        await pipe.append([declare(2)])
        assert await verdicts(pipe) == [(None, None, "expand")]

        # Event e1 seen with count 3, published again with 3 (a re-LIST), then with 4 and 5.
        await pipe.wave([failure("e1", 3, 10), failure("e1", 3, 11), *ticks(12)])
        await pipe.wave([failure("e1", 4, 20), *ticks(21)])
        assert (await verdicts(pipe))[-1] == (None, None, "expand")  # 4 failures: below 5
        await pipe.wave([failure("e1", 3, 25), failure("e1", 5, 30), *ticks(31)])
        forwarded = of_type(await governance_records(pipe), NodeFailureObserved)
        assert [(f.occurrences, f.increase) for f in forwarded] == [(3, 3), (4, 1), (5, 1)]
        [hold] = [d for d in await pipe.decisions() if d["incident"] == "adoption-hold/east"]
        reasons = {r["code"]: r for r in hold["details"]["reasons"]}
        assert reasons["claim-failures"]["figures"]["failures"] == 5
        rows = await pipe.rows("SELECT occurrences FROM {s}.dra_failures")
        assert [r[0] for r in rows] == [5]  # the projection counts the Event once

        # Event time passes the window of the first three: the count drops below the hold.
        await pipe.wave(ticks(10 + window + 1))
        assert (await verdicts(pipe))[-1] == ("adoption-hold/east", "resolved", "expand")


def ready_pod(pod: str, node: str, path: DevicePath, seconds: float, t: float) -> Record:
    device_class = DRIVER if path is DevicePath.DRA else "example.com/gpu"
    stages = (
        StageSample(Stage.POD_BOUND, device_class, path, 1.0),
        StageSample(Stage.POD_READY, device_class, path, seconds),
    )
    record = PodLifecycleObserved(node, "ml", pod, f"uid-{pod}", at(t), stages)
    return (node.encode(), encode_lifecycle(record), None)


async def test_forwarded_ready_latencies_hold_a_canary_until_they_leave_the_window(
    stream_settings: Settings, engine: AsyncEngine, kafka_bootstrap: str, worker_process: Any
) -> None:
    policy = GovernancePolicy().adoption
    window, least = policy.ready_window_seconds, policy.ready_min_samples
    async with Pipeline(stream_settings, engine, kafka_bootstrap) as pipe:
        pipe.worker = worker_process(stream_settings)
        await pipe.wave([*map(inventory, inventory_events(0)), *ticks(1)])
        await pipe.append([declare(2)])
        assert await verdicts(pipe) == [(None, None, "expand")]

        # The plugin path of the class's extended resource on another node, 2 s to Ready; the
        # canary's DRA Pods, 10 s: the DRA p95 is 5 times the plugin's (hold above 2).
        plugin = [
            ready_pod(f"p{i}", "plug-node", DevicePath.DEVICE_PLUGIN, 2, 10) for i in range(least)
        ]
        slow = [ready_pod(f"d{i}", NODE, DevicePath.DRA, 10, 20) for i in range(least)]
        await pipe.wave([*plugin, *slow, plugin[0], *ticks(21)])  # p0 published twice
        forwarded = of_type(await governance_records(pipe), NodeReadyObserved)
        assert len(forwarded) == 2 * least + 1  # the copy too: the governor counts a Pod once
        plugin_samples = [s for f in forwarded for s in f.samples if s.path == "device-plugin"]
        assert {s.classes for s in plugin_samples} == {(DRIVER,)}
        assert {len(f.samples) for f in forwarded} == {1}  # pod_ready only
        assert (await verdicts(pipe))[-1] == ("adoption-hold/east", "firing", "hold")
        [hold] = [d for d in await pipe.decisions() if d["incident"] == "adoption-hold/east"]
        reasons = {r["code"]: r for r in hold["details"]["reasons"]}
        figures = reasons["ready-latency"]["figures"]
        assert (figures["draP95"], figures["pluginP95"], figures["ratio"]) == (10.0, 2.0, 5.0)
        assert (figures["draSamples"], figures["pluginSamples"]) == (least, least)

        # Event time passes the plugin samples' window: not enough samples, expand.
        await pipe.wave(ticks(10 + window + 1))
        assert (await verdicts(pipe))[-1] == ("adoption-hold/east", "resolved", "expand")
