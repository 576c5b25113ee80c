"""One small fleet written into the projection the way the pipeline would (health agent: directory
through ``apply_batch``, inventory rows, identities resolved by the domain's
:class:`InventoryState`; governor: ``device_governance``), shared by the inventory, capacity,
extender and CLI tests.

- ``gpu-node-a`` (DRA): the shared examples' ResourceSlice (gpu-0..gpu-7, gpu-5 tainted
  NoSchedule), DeviceClass ``gpu.example.com`` and ResourceClaim
  ``ml-serving/infer-dra-0-gpus-7xk2q`` (gpu-2, gpu-3; request count 2), here reserved for two
  Pods that both report the devices (one with CDI names, one with ``driver/pool/device``): a
  shared device counts once. gpu-5 read Unhealthy in an old Pod and is Quarantined.
- ``gpu-node-b`` (device plugin, capacity 2): GPU-b0 allocated to ml/train-0; GPU-b1 read
  Unhealthy, its Pod is gone, Quarantined -> its only free GPU is quarantined.
- ``gpu-node-c`` (device plugin, capacity 2): GPU-c0 allocated to batch/job-0; the other GPU was
  never reported (unseen) and is free and healthy.
- ``gpu-node-e`` (device plugin, capacity 4): nothing reported.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from services.adapters.projection.store import ProjectionStore
from services.domain.batch import LoggedBatch
from services.domain.events import (
    ClaimRef,
    DeviceHealthObserved,
    DeviceSource,
    Health,
    PodDevicesReleased,
    ReleaseReason,
)
from services.domain.inventory.events import InventoryObserved
from services.domain.inventory.objects import ResourceClaimInfo
from services.domain.inventory.state import InventoryState
from tests.api.conftest import Governor, InventoryWriter, example_object
from tests.conftest import T0, TOPIC, LogFactory, ObservationFactory

DRIVER = "gpu.example.com"
NODE_A, NODE_B, NODE_C, NODE_E = "gpu-node-a", "gpu-node-b", "gpu-node-c", "gpu-node-e"
CLAIM = "infer-dra-0-gpus-7xk2q"
CLAIM_UID = "fdce17bd-c0bb-5f8c-9301-0b06386c9967"
GPU = {i: f"{DRIVER}/{NODE_A}/gpu-{i}" for i in range(8)}
CDI = {i: f"k8s.gpu.example.com/claim={CLAIM_UID}-gpu-{i}" for i in (2, 3)}
GPU5_QID = f"{NODE_A}/{GPU[5]}@900"
B1_QID = f"{NODE_B}/GPU-b1@700"


def claim_for_two_pods() -> ResourceClaimInfo:
    claim = example_object("dra-resourceclaim-allocated.json")
    assert isinstance(claim, ResourceClaimInfo)
    return replace(
        claim,
        reserved_for=(*claim.reserved_for, ("infer-dra-1", "uid-infer-1")),
    )


def dra_objects() -> list[Any]:
    return [
        example_object("dra-deviceclass-gpu.json"),
        example_object("dra-resourceslice-gpu-node-a.json"),
        claim_for_two_pods(),
    ]


async def load_fleet(
    writer: InventoryWriter,
    store: ProjectionStore,
    governor: Governor,
    observation: ObservationFactory,
    logged: LogFactory,
) -> None:
    objects = dra_objects()
    await writer.objects(*objects)
    state = InventoryState()
    for obj in objects:
        state.apply(InventoryObserved("k", obj, False, T0))

    def dra(pod: str, uid: str, resource_id: str, version: int, **fields: Any) -> Any:
        fields.setdefault("claim", ClaimRef("gpus", "main", CLAIM))
        return observation(
            version,
            node=NODE_A,
            namespace="ml-serving",
            pod_name=pod,
            pod_uid=uid,
            resource_name="claim:gpus/main",
            resource_id=resource_id,
            source=DeviceSource.DRA,
            **fields,
        )

    events: list[Any] = [
        dra("infer-dra-0", "uid-infer-0", CDI[2], 100, at=60),
        dra("infer-dra-0", "uid-infer-0", CDI[3], 100, at=60),
        dra("infer-dra-1", "uid-infer-1", GPU[2], 110, at=70),
        dra("infer-dra-1", "uid-infer-1", GPU[3], 110, at=70),
        dra("old-0", "uid-old-0", GPU[5], 90, health=Health.UNHEALTHY, at=10, claim=None),
        observation(200, node=NODE_B, resource_id="GPU-b0"),
        observation(
            201,
            Health.UNHEALTHY,
            at=5,
            node=NODE_B,
            resource_id="GPU-b1",
            pod_name="old-1",
            pod_uid="uid-old-1",
        ),
        observation(
            300,
            node=NODE_C,
            resource_id="GPU-c0",
            namespace="batch",
            pod_uid="uid-job-0",
            pod_name="job-0",
        ),
    ]
    pairs = []
    for event in events:
        assert isinstance(event, DeviceHealthObserved)
        identity, conflicts = state.resolve(event)
        assert not conflicts
        pairs.append((event, identity))
    releases = [
        PodDevicesReleased(
            node=NODE_A,
            namespace="ml-serving",
            pod_name="old-0",
            pod_uid="uid-old-0",
            reason=ReleaseReason.DELETED,
            status_version=95,
            observed_at=T0 + timedelta(seconds=20),
        ),
        PodDevicesReleased(
            node=NODE_B,
            namespace="ml",
            pod_name="old-1",
            pod_uid="uid-old-1",
            reason=ReleaseReason.DELETED,
            status_version=205,
            observed_at=T0 + timedelta(seconds=20),
        ),
    ]
    await store.apply_batch(
        LoggedBatch(logged([*events, *releases]), highwaters={(TOPIC, 0): len(events) + 2})
    )
    await writer.identities(pairs)
    await writer.node(NODE_A, {})
    await writer.node(NODE_B, {"nvidia.com/gpu": 2})
    await writer.node(NODE_C, {"nvidia.com/gpu": 2})
    await writer.node(NODE_E, {"nvidia.com/gpu": 4})
    await governor.device(
        NODE_A,
        GPU[5],
        "Quarantined",
        T0 + timedelta(seconds=10),
        resource_name="claim:gpus/main",
        source="dra",
        observed_health="Unhealthy",
        effective_health="Unhealthy",
        quarantine_id=GPU5_QID,
    )
    await governor.device(
        NODE_B,
        "GPU-b1",
        "Quarantined",
        T0 + timedelta(seconds=5),
        observed_health="Unhealthy",
        effective_health="Unhealthy",
        quarantine_id=B1_QID,
    )
    await governor.device(NODE_B, "GPU-b0", "Available", T0)
