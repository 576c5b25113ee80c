"""The shared DRA examples as health-topic records, for the inventory tests (fold, store, worker,
replay): the ResourceSlice of gpu-node-a, the allocated ResourceClaim of pod-04, the DeviceClass,
pod-04's observations, and stream-09's device-plugin GPU (the UUID the slice publishes for gpu-2).
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from services.domain.events import (
    ContainerRef,
    DeviceHealthObserved,
    DeviceSource,
    Health,
)
from services.domain.inventory.events import InventoryObserved, record_key
from services.domain.inventory.objects import (
    DeviceClassInfo,
    ResourceSliceInfo,
    parse_device_class,
    parse_resource_claim,
    parse_resource_slice,
)
from services.domain.pod_reader import read_pod

EXAMPLES = Path(__file__).resolve().parents[3] / "shared" / "examples"
T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
NODE = "gpu-node-a"
CLAIM_UID = "fdce17bd-c0bb-5f8c-9301-0b06386c9967"
CDI_GPU_2 = f"k8s.gpu.example.com/claim={CLAIM_UID}-gpu-2"
CDI_GPU_3 = f"k8s.gpu.example.com/claim={CLAIM_UID}-gpu-3"
GPU_2 = "gpu.example.com/gpu-node-a/gpu-2"
GPU_3 = "gpu.example.com/gpu-node-a/gpu-3"
UUID_GPU_2 = "GPU-0e18c688-f23f-5391-a735-114e22f43e9f"
UUID_GPU_3 = "GPU-3f2160e8-38ed-5520-bec5-83b59d01584d"
"""stream-09's device-plugin GPU on gpu-node-a is UUID_GPU_2: the slice's gpu-2."""


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def example(name: str) -> Any:
    return json.loads((EXAMPLES / name).read_text())


def resource_slice() -> ResourceSliceInfo:
    return parse_resource_slice(example("dra-resourceslice-gpu-node-a.json"))


def inventory_record(obj: Any, seconds: float = 0, deleted: bool = False) -> InventoryObserved:
    return InventoryObserved(record_key(obj), obj, deleted, at(seconds))


def slice_event(seconds: float = 0, without: tuple[str, ...] = ()) -> InventoryObserved:
    """The example ResourceSlice (without the devices named in ``without``)."""
    obj = resource_slice()
    if without:
        obj = dataclasses.replace(
            obj, devices=tuple(d for d in obj.devices if d.name not in without)
        )
    return inventory_record(obj, seconds)


def claim_event(seconds: float = 0) -> InventoryObserved:
    return inventory_record(
        parse_resource_claim(example("dra-resourceclaim-allocated.json")), seconds
    )


def device_class() -> DeviceClassInfo:
    return parse_device_class(example("dra-deviceclass-gpu.json"))


def class_event(seconds: float = 0) -> InventoryObserved:
    return inventory_record(device_class(), seconds)


def inventory_events(seconds: float = 0) -> list[InventoryObserved]:
    """DeviceClass, ResourceSlice, ResourceClaim (the order a watcher's LISTs publish them)."""
    return [class_event(seconds), slice_event(seconds), claim_event(seconds)]


def pod_04(seconds: float = 10) -> list[DeviceHealthObserved]:
    """pod-04's observations as the watcher reads them: the two CDI-form GPUs and the accel."""
    observations = read_pod(example("pod-04-dra-claim-names.json"), at(seconds)).observations
    assert len(observations) == 3
    return list(observations)


def plugin_gpu(
    seconds: float = 20, version: int = 73200, health: Health = Health.HEALTHY
) -> DeviceHealthObserved:
    """stream-09's Pod: a device-plugin observation of GPU_2's UUID on gpu-node-a."""
    return DeviceHealthObserved(
        node=NODE,
        namespace="ml-serving",
        pod_name="chat-6f7d8c9b5-r5s6t",
        pod_uid="d2c0cf9f-9599-519a-b3d4-7cbddfc7c4d3",
        containers=(ContainerRef("server"),),
        resource_name="nvidia.com/gpu",
        resource_id=UUID_GPU_2,
        health=health,
        source=DeviceSource.DEVICE_PLUGIN,
        status_version=version,
        observed_at=at(seconds),
    )
