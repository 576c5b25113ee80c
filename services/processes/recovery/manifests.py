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
a unique identifying attribute (:class:`DraDevice`), tolerating ``NoSchedule`` device taints; the
Job references it in ``spec.resourceClaims``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from services.domain.events import DeviceSource
from services.domain.governance.inputs import RecoveryStage
from services.processes.recovery.checks import RecoveryCheck

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

IDENTIFYING_ATTRIBUTES: Final = ("uuid", "resource.kubernetes.io/pciBusID")
"""Device attributes that name one physical device, in order of preference (an unqualified name
is in the driver's own domain)."""

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


# --- DRA ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DraDevice:
    """One physical DRA device and how to select exactly it: ``attribute`` (fully qualified,
    ``<domain>/<name>``) has ``value`` on this device and on no other device of the driver on
    the node; ``device_class`` is the DeviceClass the request names."""

    driver: str
    pool: str
    device: str
    device_class: str
    attribute: str
    value: str | int


def split_dra_resource_id(resource_id: str) -> tuple[str, str, str] | None:
    """``<driver>/<pool>/<device>`` -> its parts (a pool name may itself contain ``/``); ``None``
    for any other form, e.g. a CDI device ID (``vendor.com/class=name``)."""
    if "=" in resource_id:
        return None
    parts = resource_id.split("/")
    if len(parts) < 3 or not all(parts):
        return None
    return parts[0], "/".join(parts[1:-1]), parts[-1]


def _qualified(attribute: str, driver: str) -> tuple[str, str]:
    domain, _, name = attribute.rpartition("/")
    return (domain or driver), name


def _attribute_value(device: Mapping[str, Any], attribute: str, driver: str) -> str | int | None:
    """A device's string or int attribute ``attribute`` (qualified or in the driver's domain)."""
    attributes = device.get("attributes") or {}
    domain, name = _qualified(attribute, driver)
    candidates = [f"{domain}/{name}"]
    if domain == driver:
        candidates.append(name)
    for key in candidates:
        raw = attributes.get(key)
        if isinstance(raw, dict):
            if isinstance(raw.get("string"), str):
                return str(raw["string"])
            if type(raw.get("int")) is int:
                return int(raw["int"])
    return None


def slice_devices(
    slices: Iterable[Mapping[str, Any]], driver: str
) -> list[tuple[str, Mapping[str, Any]]]:
    """``(pool, device)`` of every device the driver publishes in ``slices``."""
    found: list[tuple[str, Mapping[str, Any]]] = []
    for item in slices:
        spec = item.get("spec") or {}
        if spec.get("driver") != driver:
            continue
        pool = str((spec.get("pool") or {}).get("name") or "")
        found.extend((pool, device) for device in spec.get("devices") or ())
    return found


def identify_dra_device(
    slices: Iterable[Mapping[str, Any]], driver: str, pool: str, device: str
) -> tuple[str, str | int] | str:
    """The first of :data:`IDENTIFYING_ATTRIBUTES` that the device has and no other device of the
    driver in ``slices`` shares, as ``(qualified attribute, value)``; else the reason (a str)."""
    devices = slice_devices(slices, driver)
    target = [d for p, d in devices if p == pool and d.get("name") == device]
    if not target:
        return f"device {device!r} of pool {pool!r} is not in the node's ResourceSlices of {driver}"
    for attribute in IDENTIFYING_ATTRIBUTES:
        value = _attribute_value(target[0], attribute, driver)
        if value is None:
            continue
        same = [d for _, d in devices if _attribute_value(d, attribute, driver) == value]
        if len(same) == 1:
            domain, name = _qualified(attribute, driver)
            return f"{domain}/{name}", value
    return (
        f"device {driver}/{pool}/{device} publishes no unique identifying attribute "
        f"({', '.join(IDENTIFYING_ATTRIBUTES)})"
    )


def claim_allocation(claim: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``status.allocation.devices.results`` of a ResourceClaim (``[]`` when unallocated)."""
    status = claim.get("status") or {}
    results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
    return [r for r in results if isinstance(r, dict)]


def device_in_claim(claim: Mapping[str, Any], resource_id: str) -> dict[str, Any] | None:
    """The allocation result of ``claim`` that is the device ``resource_id`` reports on: the one
    named ``<driver>/<pool>/<device>``; else the only result; else the one whose device name ends
    a CDI ID (``…/claim=<uid>-<device>``); ``None`` when that is not exactly one."""
    results = claim_allocation(claim)
    for result in results:
        if f"{result.get('driver')}/{result.get('pool')}/{result.get('device')}" == resource_id:
            return result
    if len(results) == 1:
        return results[0]
    suffixed = [r for r in results if r.get("device") and resource_id.endswith(f"-{r['device']}")]
    return suffixed[0] if len(suffixed) == 1 else None


def claim_device_class(claim: Mapping[str, Any], request: str | None) -> str | None:
    """The DeviceClass a claim's ``request`` asked for (``<request>/<subrequest>`` for a
    prioritized list), or ``None``."""
    if not request:
        return None
    main, _, sub = request.partition("/")
    for item in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or ():
        if item.get("name") != main:
            continue
        if not sub:
            name = (item.get("exactly") or {}).get("deviceClassName")
            return str(name) if name else None
        for alternative in item.get("firstAvailable") or ():
            if alternative.get("name") == sub and alternative.get("deviceClassName"):
                return str(alternative["deviceClassName"])
    return None


def _cel_string(value: str) -> str:
    # A JSON string literal is a valid CEL string literal (same escapes for ", \ and controls).
    return json.dumps(value)


def cel_selector(device: DraDevice) -> str:
    """``device.driver == "<driver>" && device.attributes["<domain>"].<name> == <value>``."""
    domain, name = _qualified(device.attribute, device.driver)
    value = _cel_string(device.value) if isinstance(device.value, str) else str(device.value)
    return (
        f"device.driver == {_cel_string(device.driver)} && "
        f"device.attributes[{_cel_string(domain)}].{name} == {value}"
    )


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
