"""Driver and claim failure classes (issue 16 item 3): what a failure seen in a Pod's Events or
conditions asks of the platform team.

- ``retryable``: a transient node or driver error (the driver not yet registered, a timeout, a
  device busy or momentarily short); the kubelet or scheduler retries it by itself.
- ``non-retryable``: the claim cannot be satisfied as written (invalid opaque parameters, a CEL
  selector that does not compile, an unknown DeviceClass); retrying changes nothing, the claim's
  author must fix it.
- ``needs-cleanup``: a claim left half-done (unprepare failed, so the node still holds the
  device; or allocated with no consumer reserved, the gate's leaked claim).

Sources, as Kubernetes writes them (v1.36):
- kubelet Event reasons ``FailedPrepareDynamicResources`` and ``FailedUnprepareDynamicResources``
  (the DRA manager's ``NodePrepareResources``/``NodeUnprepareResources`` calls to the driver);
- kube-scheduler ``FailedScheduling`` Events and the Pod condition ``PodScheduled=False``,
  reason ``Unschedulable``, whose message names the DRA plugin's problem (``cannot allocate all
  claims``, ``resourceclaim not found``, ``device class ... does not exist``...).

Pure: a function of the reason and message strings. The words matched are lowercase fragments
of the messages the kubelet, the scheduler and the NVIDIA DRA driver write; an unrecognised
prepare error is ``retryable`` (the kubelet retries it), an unrecognised scheduling failure is
not a driver failure at all (it may be CPU, memory or affinity).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final


class FailureClass(StrEnum):
    """What a driver or claim failure asks for (stable names: they label metrics and alerts)."""

    RETRYABLE = "retryable"
    NON_RETRYABLE = "non-retryable"
    NEEDS_CLEANUP = "needs-cleanup"


PREPARE_FAILED: Final = "FailedPrepareDynamicResources"
"""kubelet Event reason: ``NodePrepareResources`` failed for one of the Pod's ResourceClaims."""
UNPREPARE_FAILED: Final = "FailedUnprepareDynamicResources"
"""kubelet Event reason: ``NodeUnprepareResources`` failed; the node may still hold the device."""
SCHEDULING_FAILED: Final = "FailedScheduling"
"""kube-scheduler Event reason for a Pod it could not place."""
UNSCHEDULABLE: Final = "Unschedulable"
"""Reason of the Pod condition ``PodScheduled=False`` the scheduler sets with the same message."""
LEAKED_CLAIM: Final = "LeakedClaim"
"""devicestate's own reason: a ResourceClaim allocated with no consumer reserved past the gate's
threshold (``status.reservedFor`` empty; :mod:`services.domain.governance.adoption_gate`)."""

_INVALID: Final = (
    "invalid",
    "failed to decode",
    "failed to parse config",
    "unknown field",
    "cel expression",
    "compil",
    "does not exist",
    "not supported",
    "unsupported",
    "admin access",
)
"""Fragments that mean the claim as written cannot be satisfied (its parameters, selector or
class). ``cel expression``/``compil``: a selector whose CEL fails (not ``cel`` alone: it is in
``context canceled``)."""

_DRA_SCHEDULING: Final = (
    "resourceclaim",
    "resource claim",
    "claims",
    "deviceclass",
    "device class",
    "dynamic resource",
)
"""Fragments by which a scheduling failure is the DRA plugin's, not CPU, memory or affinity."""


@dataclass(frozen=True, slots=True)
class ClassifiedFailure:
    """A failure's ``failure_class`` and ``why`` (which rule: stable, short, for the alert)."""

    failure_class: FailureClass
    why: str


def classify(reason: str, message: str) -> ClassifiedFailure | None:
    """The class of the failure with Event or condition ``reason`` and ``message``, or ``None``
    when it is not a driver or claim failure (any other reason; a ``FailedScheduling`` whose
    message names no claim, device class or DRA)."""
    text = message.lower()
    if reason == UNPREPARE_FAILED:
        return ClassifiedFailure(FailureClass.NEEDS_CLEANUP, "unprepare-failed")
    if reason == LEAKED_CLAIM:
        return ClassifiedFailure(FailureClass.NEEDS_CLEANUP, "leaked-claim")
    if reason == PREPARE_FAILED:
        if _has(text, _INVALID):
            return ClassifiedFailure(FailureClass.NON_RETRYABLE, "prepare-invalid-claim")
        return ClassifiedFailure(FailureClass.RETRYABLE, "prepare-error")
    if reason in (SCHEDULING_FAILED, UNSCHEDULABLE):
        if not _has(text, _DRA_SCHEDULING):
            return None
        if _has(text, _INVALID):
            return ClassifiedFailure(FailureClass.NON_RETRYABLE, "unschedulable-invalid-claim")
        return ClassifiedFailure(FailureClass.RETRYABLE, "unschedulable-no-device")
    return None


def _has(text: str, fragments: tuple[str, ...]) -> bool:
    return any(fragment in text for fragment in fragments)
