"""Shape checks of the recovery check's Job and ResourceClaim manifests (pure builders)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from services.domain.events import DeviceSource
from services.domain.governance.inputs import RecoveryStage
from services.processes.recovery.checks import RecoveryCheck
from services.processes.recovery.dra_devices import (
    DraDevice,
    cel_selector,
    claim_device_class,
    device_in_claim,
    identify_dra_device,
    split_dra_resource_id,
)
from services.processes.recovery.manifests import (
    job_manifest,
    job_name,
    label_hash,
    nvidia_smi_selector,
    physical_resource_id,
    resource_claim_manifest,
    stage_command,
    tolerations_for,
)

EXAMPLES = Path(__file__).resolve().parents[3] / "shared" / "examples"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
DEADLINE = datetime(2026, 11, 29, 12, 10, tzinfo=UTC)


def example(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((EXAMPLES / name).read_text())
    return data


def check(
    source: DeviceSource = DeviceSource.DEVICE_PLUGIN,
    resource_id: str = "GPU-a5ced723-33de-5eef-89d7-909771744097",
    stage: RecoveryStage = RecoveryStage.CANARY,
    **fields: Any,
) -> RecoveryCheck:
    values: dict[str, Any] = dict(
        node="gpu-node-b",
        resource_id=resource_id,
        stage=stage,
        quarantine_id=f"gpu-node-b/{resource_id}@51234",
        attempt=1,
        resource_name="nvidia.com/gpu"
        if source is DeviceSource.DEVICE_PLUGIN
        else "claim:gpus/main",
        source=source,
        holder="host/1/abcd1234",
        fencing_token=3,
        deadline=DEADLINE,
    )
    values.update(fields)
    return RecoveryCheck(**values)


DRA = DraDevice(
    driver="gpu.example.com",
    pool="gpu-node-a",
    device="gpu-2",
    device_class="gpu.example.com",
    attribute="gpu.example.com/uuid",
    value="GPU-0e18c688-f23f-5391-a735-114e22f43e9f",
)


def test_job_name_is_a_dns_label_stable_per_lease() -> None:
    name = job_name(check())
    assert DNS_LABEL.match(name) and len(name) <= 63
    assert name.startswith("devicestate-canary-") and name.endswith("-3")
    assert job_name(check()) == name
    assert job_name(check(fencing_token=4)) != name
    assert job_name(check(quarantine_id="other")) != name
    long = job_name(check(fencing_token=10**30))
    assert DNS_LABEL.match(long) and len(long) <= 63


def test_label_hash_is_label_safe() -> None:
    value = label_hash("manual/" + "x" * 500 + "/GPU-1@9")
    assert LABEL_VALUE.match(value) and len(value) <= 63


def test_device_plugin_job_shape() -> None:
    taints = [
        {"key": "devicestate.io/quarantine", "value": "GPU-a5", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
        {"key": "gpu", "effect": "PreferNoSchedule"},
    ]
    job = job_manifest(
        check(resource_id="GPU-a5ced723-33de-5eef-89d7-909771744097::2"),
        name="devicestate-canary-x-3",
        namespace="devicestate",
        image="nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
        hostname="ip-10-0-0-7",
        taints=taints,
        active_deadline_seconds=540,
        ttl_seconds_after_finished=600,
    )
    assert job["apiVersion"] == "batch/v1" and job["kind"] == "Job"
    meta = job["metadata"]
    assert meta["name"] == "devicestate-canary-x-3" and meta["namespace"] == "devicestate"
    assert meta["labels"]["app.kubernetes.io/managed-by"] == "devicestate"
    assert meta["labels"]["devicestate.io/quarantine-id"] == label_hash(
        "gpu-node-b/GPU-a5ced723-33de-5eef-89d7-909771744097::2@51234"
    )
    assert meta["labels"]["devicestate.io/stage"] == "canary"
    assert all(LABEL_VALUE.match(v) for v in meta["labels"].values())
    assert meta["annotations"]["devicestate.io/fencing-token"] == "3"
    spec = job["spec"]
    assert spec["backoffLimit"] == 0
    assert spec["activeDeadlineSeconds"] == 540
    assert spec["ttlSecondsAfterFinished"] == 600
    assert spec["template"]["metadata"]["labels"] == meta["labels"]
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["nodeSelector"] == {"kubernetes.io/hostname": "ip-10-0-0-7"}
    [term] = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term == {
        "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-node-b"]}]
    }
    assert pod["tolerations"] == [
        {
            "key": "devicestate.io/quarantine",
            "effect": "NoSchedule",
            "operator": "Equal",
            "value": "GPU-a5",
        },
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule", "operator": "Exists"},
    ]
    assert pod["automountServiceAccountToken"] is False
    assert "resourceClaims" not in pod
    [container] = pod["containers"]
    assert container["image"] == "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"
    assert container["command"] == [
        "nvidia-smi",
        "-q",
        "-i",
        "GPU-a5ced723-33de-5eef-89d7-909771744097",
    ]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert "claims" not in container["resources"]
    assert container["env"] == [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "GPU-a5ced723-33de-5eef-89d7-909771744097"}
    ]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    json.dumps(job)  # plain JSON


def test_probe_runs_a_lighter_command() -> None:
    assert stage_command(RecoveryStage.PROBE, "GPU-1")[:2] == [
        "nvidia-smi",
        "--query-gpu=uuid,name,pci.bus_id,pstate,temperature.gpu",
    ]
    assert stage_command(RecoveryStage.PROBE, "GPU-1")[-2:] == ["-i", "GPU-1"]
    assert stage_command(RecoveryStage.CANARY, None) == ["nvidia-smi", "-q"]


def test_index_resource_ids_are_not_used_as_in_container_selectors() -> None:
    assert nvidia_smi_selector("0") == []
    assert nvidia_smi_selector("MIG-1") == ["-i", "MIG-1"]
    assert physical_resource_id("GPU-1::7") == "GPU-1"
    assert physical_resource_id("3") == "3"


def test_tolerations_deduplicate_and_skip_keyless() -> None:
    taints = [
        {"key": "a", "effect": "NoSchedule"},
        {"key": "a", "effect": "NoSchedule"},
        {"effect": "NoSchedule"},
    ]
    assert tolerations_for(taints) == [{"key": "a", "effect": "NoSchedule", "operator": "Exists"}]


def test_dra_job_references_its_claim() -> None:
    dra_check = check(DeviceSource.DRA, resource_id="gpu.example.com/gpu-node-a/gpu-2")
    job = job_manifest(
        dra_check,
        name="devicestate-canary-y-3",
        namespace="devicestate",
        image="img",
        hostname="gpu-node-a",
        claim_name="devicestate-canary-y-3-gpu",
        dra_device=DRA,
    )
    pod = job["spec"]["template"]["spec"]
    assert pod["resourceClaims"] == [
        {"name": "gpu", "resourceClaimName": "devicestate-canary-y-3-gpu"}
    ]
    [container] = pod["containers"]
    assert container["resources"]["claims"] == [{"name": "gpu"}]
    assert not any("/" in k for k in container["resources"]["limits"])  # no extended resource
    assert "env" not in container
    assert container["command"] == ["nvidia-smi", "-q", "-i", DRA.value]
    with pytest.raises(ValueError):
        job_manifest(dra_check, name="x", namespace="n", image="i", hostname="h")


def test_resource_claim_selects_exactly_one_device() -> None:
    dra_check = check(DeviceSource.DRA, resource_id="gpu.example.com/gpu-node-a/gpu-2")
    claim = resource_claim_manifest(
        "devicestate-canary-y-3-gpu",
        "devicestate",
        dra_check,
        DRA,
        owner={"name": "devicestate-canary-y-3", "uid": "u-1"},
    )
    assert claim["apiVersion"] == "resource.k8s.io/v1" and claim["kind"] == "ResourceClaim"
    assert claim["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "devicestate"
    assert claim["metadata"]["ownerReferences"] == [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "devicestate-canary-y-3", "uid": "u-1"}
    ]
    [request] = claim["spec"]["devices"]["requests"]
    assert request["name"] == "gpu"
    exactly = request["exactly"]
    assert exactly["deviceClassName"] == "gpu.example.com"
    assert exactly["allocationMode"] == "ExactCount" and exactly["count"] == 1
    assert exactly["selectors"] == [
        {
            "cel": {
                "expression": 'device.driver == "gpu.example.com" && '
                'device.attributes["gpu.example.com"].uuid == '
                '"GPU-0e18c688-f23f-5391-a735-114e22f43e9f"'
            }
        }
    ]
    assert exactly["tolerations"] == [{"operator": "Exists", "effect": "NoSchedule"}]
    no_owner = resource_claim_manifest("c", "devicestate", dra_check, DRA)
    assert "ownerReferences" not in no_owner["metadata"]


def test_cel_selector_quotes_and_other_attribute_kinds() -> None:
    pci = DraDevice("d.io", "p", "dev", "d.io", "resource.kubernetes.io/pciBusID", '0000:"18"')
    assert cel_selector(pci) == (
        'device.driver == "d.io" && '
        'device.attributes["resource.kubernetes.io"].pciBusID == "0000:\\"18\\""'
    )
    index = DraDevice("d.io", "p", "dev", "d.io", "d.io/index", 2)
    assert cel_selector(index).endswith('device.attributes["d.io"].index == 2')


@pytest.mark.parametrize(
    ("resource_id", "parts"),
    [
        ("gpu.example.com/gpu-node-a/gpu-2", ("gpu.example.com", "gpu-node-a", "gpu-2")),
        ("d.io/pool/with/slashes/dev", ("d.io", "pool/with/slashes", "dev")),
        ("k8s.gpu.nvidia.com/claim=fdce17bd-gpu-0", None),
        ("GPU-a5ced723", None),
        ("a//b", None),
    ],
)
def test_split_dra_resource_id(resource_id: str, parts: tuple[str, str, str] | None) -> None:
    assert split_dra_resource_id(resource_id) == parts


def test_identify_device_in_the_example_resource_slice() -> None:
    slices = [example("dra-resourceslice-gpu-node-a.json")]
    assert identify_dra_device(slices, "gpu.example.com", "gpu-node-a", "gpu-2") == (
        "gpu.example.com/uuid",
        "GPU-0e18c688-f23f-5391-a735-114e22f43e9f",
    )
    missing = identify_dra_device(slices, "gpu.example.com", "gpu-node-a", "gpu-99")
    assert isinstance(missing, str) and "gpu-99" in missing
    assert isinstance(identify_dra_device(slices, "other.io", "gpu-node-a", "gpu-2"), str)


def test_identify_falls_back_to_pci_bus_and_refuses_shared_values() -> None:
    def device(name: str, **attributes: Any) -> dict[str, Any]:
        return {"name": name, "attributes": {k: {"string": v} for k, v in attributes.items()}}

    pci = "resource.kubernetes.io/pciBusID"
    slices = [
        {
            "spec": {
                "driver": "d.io",
                "pool": {"name": "p"},
                "devices": [
                    device("a", uuid="same", **{pci: "0000:01"}),
                    device("b", uuid="same", **{pci: "0000:02"}),
                    device("c", uuid="same"),
                ],
            }
        }
    ]
    assert identify_dra_device(slices, "d.io", "p", "a") == (pci, "0000:01")
    reason = identify_dra_device(slices, "d.io", "p", "c")
    assert isinstance(reason, str) and "no unique identifying attribute" in reason


def test_device_in_the_example_claim() -> None:
    claim = example("dra-resourceclaim-allocated.json")
    named = device_in_claim(claim, "gpu.example.com/gpu-node-a/gpu-3")
    assert named is not None and named["device"] == "gpu-3"
    cdi = device_in_claim(
        claim, "k8s.gpu.example.com/claim=fdce17bd-c0bb-5f8c-9301-0b06386c9967-gpu-2"
    )
    assert cdi is not None and cdi["device"] == "gpu-2"
    assert device_in_claim(claim, "k8s.gpu.example.com/claim=fdce17bd") is None  # two devices
    assert claim_device_class(claim, "main") == "gpu.example.com"
    assert claim_device_class(claim, "other") is None
    assert claim_device_class(claim, None) is None
    assert device_in_claim({"status": {}}, "x") is None


def test_device_class_of_a_prioritized_list_request() -> None:
    claim = {
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "firstAvailable": [
                            {"name": "big", "deviceClassName": "big.example.com"},
                            {"name": "small", "deviceClassName": "small.example.com"},
                        ],
                    }
                ]
            }
        }
    }
    assert claim_device_class(claim, "gpu/small") == "small.example.com"
    assert claim_device_class(claim, "gpu/none") is None
