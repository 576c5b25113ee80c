"""Which physical device an ``allocatedResourcesStatus`` entry is (issue 4, item 2).

Facts (``../shared/notes/kubernetes-device-health.md``, "resourceID"):

- device plugin: the ID the plugin advertised. NVIDIA: ``GPU-<uuid>``, ``MIG-<uuid>``, an index,
  or ``<id>::<n>`` for time-sliced/MPS replicas (the physical GPU is ``<id>``);
- DRA, documented form: ``<driver>/<pool>/<device>`` (a device name is a DNS label: no ``/``);
- DRA, CDI form (kubelet's first CDI device ID, e.g. ``k8s.gpu.example.com/claim=<claimUID>-gpu-0``):
  changes with every claim. Resolved through ``pod.status.resourceClaimStatuses`` (already in the
  event's :class:`~services.domain.events.ClaimRef`) -> the ResourceClaim's allocation results for
  the request -> the device whose name ends the CDI ID after the claim UID; a CDI ID that names no
  single result (a shared ``...=common`` device listed first) is *ambiguous*, never guessed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from services.domain.events import ClaimRef, DeviceSource
from services.domain.inventory.objects import ResourceClaimInfo, ResourceSliceInfo


class IdentityStatus(StrEnum):
    REPORTED = "as-reported"  # the resourceID is the identity (device plugin, driver/pool/device)
    RESOLVED = "resolved"  # a CDI-form ID resolved through the ResourceClaim
    AMBIGUOUS = "ambiguous"  # several devices could be meant: flagged, not merged
    UNRESOLVED = "unresolved"  # the ResourceClaim (or its allocation) is not known (yet)


@dataclass(frozen=True, slots=True)
class Identity:
    """The physical identity of a reported device on its node.

    ``device_id``: ``<driver>/<pool>/<device>`` for DRA (when known), the physical GPU ID for a
    device plugin (replica suffix removed), else the resourceID as reported. ``uuid``: the GPU
    UUID where known (``GPU-``/``MIG-`` IDs, or the ResourceSlice's ``uuid`` attribute).
    ``candidates``: the devices an ambiguous ID could be.
    """

    device_id: str
    owner: DeviceSource
    status: IdentityStatus
    uuid: str | None = None
    candidates: tuple[str, ...] = ()
    reason: str | None = None


ClaimIndex = Mapping[tuple[str, str], ResourceClaimInfo]
"""``(namespace, name)`` -> ResourceClaim."""
SliceIndex = Mapping[tuple[str, str], Sequence[ResourceSliceInfo]]
"""``(driver, pool)`` -> the pool's ResourceSlices."""


def plugin_identity(resource_id: str) -> Identity:
    """Identity of a device-plugin resourceID: ``<id>::<n>`` replicas map to ``<id>``."""
    base, separator, replica = resource_id.rpartition("::")
    physical = base if separator and base and replica.isdigit() else resource_id
    uuid = physical if physical.startswith(("GPU-", "MIG-")) else None
    return Identity(physical, DeviceSource.DEVICE_PLUGIN, IdentityStatus.REPORTED, uuid)


def split_device_id(device_id: str) -> tuple[str, str, str] | None:
    """``driver/pool/device`` -> its parts (the pool may itself contain ``/``); ``None`` for
    anything else (fewer than three parts, or a CDI ID, which holds ``=``)."""
    if "=" in device_id:
        return None
    driver, _, rest = device_id.partition("/")
    pool, _, device = rest.rpartition("/")
    if not driver or not pool or not device:
        return None
    return driver, pool, device


def slice_uuid(slices: SliceIndex, driver: str, pool: str, device: str) -> str | None:
    """The ``uuid`` attribute of ``driver/pool/device`` in the pool's slices, if published."""
    for resource_slice in slices.get((driver, pool), ()):
        for candidate in resource_slice.devices:
            if candidate.name == device:
                return candidate.uuid
    return None


def dra_identity(
    resource_id: str,
    namespace: str,
    claim: ClaimRef | None,
    claims: ClaimIndex,
    slices: SliceIndex,
) -> Identity:
    """Identity of a DRA-reported device (see the module docstring for the rules)."""
    parts = split_device_id(resource_id)
    if parts is not None:
        return Identity(
            resource_id,
            DeviceSource.DRA,
            IdentityStatus.REPORTED,
            slice_uuid(slices, *parts),
        )
    if claim is None or claim.resource_claim_name is None:
        return Identity(
            resource_id,
            DeviceSource.DRA,
            IdentityStatus.UNRESOLVED,
            reason="the Pod status names no ResourceClaim for this claim",
        )
    info = claims.get((namespace, claim.resource_claim_name))
    if info is None or not info.results:
        return Identity(
            resource_id,
            DeviceSource.DRA,
            IdentityStatus.UNRESOLVED,
            reason=f"ResourceClaim {namespace}/{claim.resource_claim_name} "
            + ("not seen" if info is None else "not allocated"),
        )
    results = info.results_for(claim.request)
    matching = [r for r in results if resource_id.endswith(f"{info.uid}-{r.device}")]
    if len(matching) != 1 and len(results) == 1:
        matching = list(results)
    if len(matching) == 1:
        (result,) = matching
        return Identity(
            result.device_id,
            DeviceSource.DRA,
            IdentityStatus.RESOLVED,
            slice_uuid(slices, result.driver, result.pool, result.device),
        )
    return Identity(
        resource_id,
        DeviceSource.DRA,
        IdentityStatus.AMBIGUOUS,
        candidates=tuple(sorted(r.device_id for r in results)),
        reason=f"{resource_id} names none or several of the {len(results)} devices allocated to "
        f"ResourceClaim {namespace}/{info.name}",
    )
