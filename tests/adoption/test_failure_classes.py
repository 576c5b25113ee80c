"""Golden cases of the driver and claim failure classes (issue 16 item 3), with messages shaped
as the kubelet, kube-scheduler and a DRA driver write them."""

from __future__ import annotations

import pytest

from services.domain.adoption.failure_classes import (
    LEAKED_CLAIM,
    PREPARE_FAILED,
    SCHEDULING_FAILED,
    UNPREPARE_FAILED,
    UNSCHEDULABLE,
    ClassifiedFailure,
    FailureClass,
    classify,
)

PREPARE = (
    "Failed to prepare dynamic resources: prepare dynamic resources: NodePrepareResources failed "
    "for ResourceClaim train-0-gpu: "
)


@pytest.mark.parametrize(
    ("reason", "message", "expected"),
    [
        (
            PREPARE_FAILED,
            PREPARE + "rpc error: code = DeadlineExceeded desc = context deadline exceeded",
            ClassifiedFailure(FailureClass.RETRYABLE, "prepare-error"),
        ),
        (
            PREPARE_FAILED,
            PREPARE + "error creating GPU instance for 'gpu-2-mig-4g': Insufficient Resources",
            ClassifiedFailure(FailureClass.RETRYABLE, "prepare-error"),
        ),
        (
            # "canceled" holds "cel": still a transient error, not an invalid CEL selector.
            PREPARE_FAILED,
            PREPARE + "rpc error: code = Canceled desc = context canceled",
            ClassifiedFailure(FailureClass.RETRYABLE, "prepare-error"),
        ),
        (
            PREPARE_FAILED,
            PREPARE + 'failed to decode opaque device configuration: unknown field "sharing"',
            ClassifiedFailure(FailureClass.NON_RETRYABLE, "prepare-invalid-claim"),
        ),
        (
            UNPREPARE_FAILED,
            "NodeUnprepareResources failed for ResourceClaim train-0-gpu: driver not registered",
            ClassifiedFailure(FailureClass.NEEDS_CLEANUP, "unprepare-failed"),
        ),
        (
            LEAKED_CLAIM,
            "allocated 3600 s ago with no consumer reserved",
            ClassifiedFailure(FailureClass.NEEDS_CLEANUP, "leaked-claim"),
        ),
        (
            SCHEDULING_FAILED,
            "0/4 nodes are available: 4 cannot allocate all claims. preemption: 0/4 nodes are "
            "available: 4 Preemption is not helpful for scheduling.",
            ClassifiedFailure(FailureClass.RETRYABLE, "unschedulable-no-device"),
        ),
        (
            UNSCHEDULABLE,
            "0/4 nodes are available: 4 cannot allocate all claims.",
            ClassifiedFailure(FailureClass.RETRYABLE, "unschedulable-no-device"),
        ),
        (
            SCHEDULING_FAILED,
            'running Reserve plugin "DynamicResources": device class gpu.example.com does not '
            "exist",
            ClassifiedFailure(FailureClass.NON_RETRYABLE, "unschedulable-invalid-claim"),
        ),
        (
            SCHEDULING_FAILED,
            "0/4 nodes are available: 4 claims: selector: CEL expression failed to compile: "
            "undeclared reference to 'devic'",
            ClassifiedFailure(FailureClass.NON_RETRYABLE, "unschedulable-invalid-claim"),
        ),
    ],
)
def test_failures_are_classified(reason: str, message: str, expected: ClassifiedFailure) -> None:
    assert classify(reason, message) == expected


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        # Not the DRA plugin's: CPU, memory, taints.
        (SCHEDULING_FAILED, "0/4 nodes are available: 4 Insufficient cpu."),
        (UNSCHEDULABLE, "0/4 nodes are available: 4 node(s) had untolerated taint {a: b}."),
        # Not a failure reason at all.
        ("Scheduled", "Successfully assigned default/train-0 to node-1"),
        ("BackOff", "Back-off restarting failed container"),
    ],
)
def test_other_failures_are_not_driver_failures(reason: str, message: str) -> None:
    assert classify(reason, message) is None


def test_class_names_are_stable() -> None:
    # They label metrics and alert routes: renaming one breaks dashboards and Alertmanager.
    assert [c.value for c in FailureClass] == ["retryable", "non-retryable", "needs-cleanup"]
