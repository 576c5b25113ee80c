"""Kubernetes manifests of a recovery check (pure functions over plain dicts).

A check is a ``batch/v1`` Job pinned to the device's node:

- ``nodeSelector`` ``kubernetes.io/hostname`` (the node's own label value) and a required node
  affinity on ``metadata.name`` (the hostname label need not equal the node name);
- tolerations for the node's ``NoSchedule`` taints (a quarantine or a cordon must not keep the
  check off the node it is about); ``NoExecute`` taints are not tolerated;
- ``backoffLimit: 0`` (one try: a retry is the governor's decision), ``activeDeadlineSeconds``
  (the stage deadline), ``ttlSecondsAfterFinished``;
- labels ``app.kubernetes.io/managed-by=devicestate``, ``devicestate.io/quarantine-id`` (a
  label-safe hash; the id itself is in an annotation), ``devicestate.io/stage``;
- one container running ``nvidia-smi`` (:func:`stage_command`).

The device itself: for a device plugin, one unit of the resource name in ``limits`` and
``NVIDIA_VISIBLE_DEVICES`` = the physical resourceID (a time-slicing suffix ``::<n>`` removed).
The kubelet, not the Pod, picks which unit a container gets, and the NVIDIA device plugin sets
``NVIDIA_VISIBLE_DEVICES`` itself; so for a UUID resourceID (``GPU-…``/``MIG-…``) the command
selects the device with ``nvidia-smi -i <uuid>``, which fails when another GPU was allocated: the
check fails closed instead of passing on the wrong device. For DRA, a ResourceClaim
(``resource.k8s.io/v1``) requests exactly one device whose CEL selector matches the driver and
a unique identifying attribute (a :class:`~services.processes.recovery.dra_devices.DraDevice`, found
by :mod:`services.processes.recovery.dra_devices`), tolerating ``NoSchedule`` device taints; the
Job references it in ``spec.resourceClaims`` (:func:`resource_claim_manifest`). :func:`job_manifest`
raises ``ValueError`` for a DRA device's check without its claim.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from services.domain.events import DeviceSource
from services.domain.governance.inputs import RecoveryStage
from services.processes.recovery.checks import RecoveryCheck
from services.processes.recovery.dra_devices import DraDevice, cel_selector

MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "devicestate"
QUARANTINE_LABEL: Final = "devicestate.io/quarantine-id"
STAGE_LABEL: Final = "devicestate.io/stage"
COMPONENT_LABEL: Final = "app.kubernetes.io/component"
COMPONENT: Final = "recovery-check"
HOSTNAME_LABEL: Final = "kubernetes.io/hostname"
ANNOTATION_PREFIX: Final = "devicestate.io/"
CLAIM_REQUEST: Final = "gpu"
"""Name of the request in the check's ResourceClaim and of the Pod's claim reference."""
CONTAINER: Final = "check"

_NAME_SAFE = re.compile(r"[^a-z0-9-]+")
_REPLICA_SUFFIX = re.compile(r"::\d+$")


def label_hash(value: str) -> str:
    """A label-safe stand-in for ``value`` (40 hex characters of its SHA-256)."""
    return hashlib.sha256(value.encode("utf-8")).hexdigest()[:40]


def job_name(check: RecoveryCheck) -> str:
    """``devicestate-<stage>-<hash of quarantine and device>-<fencing token>``: a DNS label (at
    most 63 characters) that is the same for a retry under the same lease."""
    digest = label_hash(f"{check.quarantine_id}\n{check.node}\n{check.resource_id}")[:12]
    stage = _NAME_SAFE.sub("-", check.stage.value.lower())
    return f"devicestate-{stage}-{digest}-{check.fencing_token}"[:63].rstrip("-")


def physical_resource_id(resource_id: str) -> str:
    """A device-plugin resourceID without a time-slicing/MPS replica suffix (``GPU-x::3`` ->
    ``GPU-x``)."""
    return _REPLICA_SUFFIX.sub("", resource_id)


def nvidia_smi_selector(device_id: str | None) -> list[str]:
    """``["-i", id]`` when ``id`` names one GPU unambiguously inside any container (a UUID);
    nothing otherwise (an index means a different GPU inside the container)."""
    if device_id and device_id.startswith(("GPU-", "MIG-")):
        return ["-i", device_id]
    return []


def stage_command(stage: RecoveryStage, device_id: str | None) -> list[str]:
    """The container command of a stage.

    - probe: a light query of the device (identity, PCI bus, performance state, temperature);
    - canary: the full ``nvidia-smi -q`` report of the device (ECC, retired pages and remapped
      rows, clocks, temperature): the driver must answer for every section.
    """
    selector = nvidia_smi_selector(device_id)
    if stage is RecoveryStage.PROBE:
        return [
            "nvidia-smi",
            "--query-gpu=uuid,name,pci.bus_id,pstate,temperature.gpu",
            "--format=csv,noheader",
            *selector,
        ]
    return ["nvidia-smi", "-q", *selector]


def tolerations_for(taints: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Tolerations of exactly the ``NoSchedule`` taints given (a Node's ``spec.taints``)."""
    tolerations: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    for taint in taints:
        if taint.get("effect") != "NoSchedule" or not taint.get("key"):
            continue
        key, value = str(taint["key"]), taint.get("value")
        if (key, value or "") in seen:
            continue
        seen.add((key, value or ""))
        toleration: dict[str, Any] = {"key": key, "effect": "NoSchedule"}
        if value:
            toleration.update(operator="Equal", value=str(value))
        else:
            toleration["operator"] = "Exists"
        tolerations.append(toleration)
    return tolerations


def _metadata(name: str, namespace: str, check: RecoveryCheck) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": namespace,
        "labels": {
            MANAGED_BY_LABEL: MANAGED_BY,
            COMPONENT_LABEL: COMPONENT,
            QUARANTINE_LABEL: label_hash(check.quarantine_id),
            STAGE_LABEL: check.stage.value,
        },
        "annotations": {
            f"{ANNOTATION_PREFIX}quarantine-id": check.quarantine_id,
            f"{ANNOTATION_PREFIX}node": check.node,
            f"{ANNOTATION_PREFIX}resource-id": check.resource_id,
            f"{ANNOTATION_PREFIX}resource-name": check.resource_name,
            f"{ANNOTATION_PREFIX}holder": check.holder,
            f"{ANNOTATION_PREFIX}fencing-token": str(check.fencing_token),
            f"{ANNOTATION_PREFIX}attempt": str(check.attempt),
        },
    }


def resource_claim_manifest(
    name: str,
    namespace: str,
    check: RecoveryCheck,
    device: DraDevice,
    owner: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A ResourceClaim for exactly ``device``, tolerating ``NoSchedule`` device taints (a
    quarantine taint must not keep the check off the device). ``owner``: the Job (``name`` and
    ``uid``), so the claim goes when the Job goes."""
    metadata = _metadata(name, namespace, check)
    metadata["annotations"][f"{ANNOTATION_PREFIX}device"] = (
        f"{device.driver}/{device.pool}/{device.device}"
    )
    if owner is not None and owner.get("uid"):
        metadata["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": owner["name"], "uid": owner["uid"]}
        ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": metadata,
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": CLAIM_REQUEST,
                        "exactly": {
                            "deviceClassName": device.device_class,
                            "allocationMode": "ExactCount",
                            "count": 1,
                            "selectors": [{"cel": {"expression": cel_selector(device)}}],
                            "tolerations": [{"operator": "Exists", "effect": "NoSchedule"}],
                        },
                    }
                ]
            }
        },
    }


# --- the Job --------------------------------------------------------------------------------


def job_manifest(
    check: RecoveryCheck,
    *,
    name: str,
    namespace: str,
    image: str,
    hostname: str,
    taints: Sequence[Mapping[str, Any]] = (),
    active_deadline_seconds: int = 600,
    ttl_seconds_after_finished: int = 600,
    claim_name: str | None = None,
    dra_device: DraDevice | None = None,
) -> dict[str, Any]:
    """The check's Job (see the module docstring). ``hostname``: the node's
    ``kubernetes.io/hostname`` label; ``claim_name``: the check's ResourceClaim (DRA devices,
    required for them)."""
    if check.source is DeviceSource.DRA and claim_name is None:
        raise ValueError("a DRA device's check needs its ResourceClaim (claim_name)")
    metadata = _metadata(name, namespace, check)
    resources: dict[str, Any] = {
        "requests": {"cpu": "10m", "memory": "32Mi"},
        "limits": {"memory": "256Mi"},
    }
    env: list[dict[str, str]] = []
    pod_spec: dict[str, Any] = {}
    if check.source is DeviceSource.DRA:
        resources["claims"] = [{"name": CLAIM_REQUEST}]
        pod_spec["resourceClaims"] = [{"name": CLAIM_REQUEST, "resourceClaimName": claim_name}]
        uuid = dra_device.value if dra_device and dra_device.attribute.endswith("/uuid") else None
        command = stage_command(check.stage, uuid if isinstance(uuid, str) else None)
    else:
        device_id = physical_resource_id(check.resource_id)
        resources["limits"][check.resource_name] = "1"
        env.append({"name": "NVIDIA_VISIBLE_DEVICES", "value": device_id})
        command = stage_command(check.stage, device_id)
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": image,
        "command": command,
        "resources": resources,
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    if env:
        container["env"] = env
    pod_spec.update(
        restartPolicy="Never",
        nodeSelector={HOSTNAME_LABEL: hostname},
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [check.node]}
                            ]
                        }
                    ]
                }
            }
        },
        tolerations=tolerations_for(taints),
        automountServiceAccountToken=False,
        enableServiceLinks=False,
        terminationGracePeriodSeconds=5,
        containers=[container],
    )
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": max(1, int(active_deadline_seconds)),
            "ttlSecondsAfterFinished": max(0, int(ttl_seconds_after_finished)),
            "template": {
                "metadata": {"labels": dict(metadata["labels"])},
                "spec": pod_spec,
            },
        },
    }
