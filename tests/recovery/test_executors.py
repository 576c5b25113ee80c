"""Executors: the in-process one, and the Kubernetes Job one against an in-memory API."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from services.adapters.kube.errors import KubeApiError
from services.domain.events import DeviceSource
from services.domain.governance.inputs import RecoveryStage
from services.processes.recovery.executors import (
    DRY_RUN_DETAIL,
    CheckResult,
    InProcessExecutor,
    KubernetesJobExecutor,
    RecoveryCheck,
)
from services.processes.recovery.manifests import job_name
from tests.fakes.kube_objects import FakeKube

EXAMPLES = Path(__file__).resolve().parents[3] / "shared" / "examples"
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
GPU = "GPU-a5ced723-33de-5eef-89d7-909771744097"


def example(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((EXAMPLES / name).read_text())
    return data


def check(source: DeviceSource = DeviceSource.DEVICE_PLUGIN, **fields: Any) -> RecoveryCheck:
    values: dict[str, Any] = dict(
        node="gpu-node-a",
        resource_id=GPU,
        stage=RecoveryStage.PROBE,
        quarantine_id=f"gpu-node-a/{GPU}@7",
        attempt=1,
        resource_name="nvidia.com/gpu"
        if source is DeviceSource.DEVICE_PLUGIN
        else "claim:gpus/main",
        source=source,
        holder="h/1/x",
        fencing_token=5,
        deadline=NOW + timedelta(minutes=10),
        lease_expires_at=NOW + timedelta(minutes=5),
    )
    values.update(fields)
    return RecoveryCheck(**values)


def dra_check(**fields: Any) -> RecoveryCheck:
    return check(
        DeviceSource.DRA,
        resource_id=fields.pop("resource_id", "gpu.example.com/gpu-node-a/gpu-2"),
        resource_claim=fields.pop("resource_claim", "infer-dra-0-gpus-7xk2q"),
        **fields,
    )


def kube(**fields: Any) -> FakeKube:
    fake = FakeKube(**fields)
    fake.add_node(
        "gpu-node-a",
        taints=[{"key": "devicestate.io/quarantined", "effect": "NoSchedule"}],
        hostname="host-a",
    )
    fake.slices.append(example("dra-resourceslice-gpu-node-a.json"))
    fake.claims.append(example("dra-resourceclaim-allocated.json"))
    return fake


def executor(fake: FakeKube, dry_run: bool = True, **options: Any) -> KubernetesJobExecutor:
    return KubernetesJobExecutor(
        fake,
        namespace="devicestate",
        image="cuda:base",
        dry_run=dry_run,
        poll_seconds=0.001,
        clock=lambda: NOW,
        **options,
    )


# --- in-process ------------------------------------------------------------------------------


async def test_in_process_passes_by_default_and_fails_listed_devices() -> None:
    run = InProcessExecutor(fail=[("gpu-node-a", "GPU-bad")])
    assert (await run.run(check())).passed
    failed = await run.run(check(resource_id="GPU-bad"))
    assert not failed.passed and "configured to fail" in failed.detail
    assert [c.resource_id for c in run.runs] == [GPU, "GPU-bad"]


async def test_in_process_decide_function() -> None:
    by_stage = InProcessExecutor(decide=lambda c: c.stage is RecoveryStage.PROBE)
    assert (await by_stage.run(check())).passed
    assert not (await by_stage.run(check(stage=RecoveryStage.CANARY))).passed
    custom = InProcessExecutor(decide=lambda c: CheckResult(False, "xid 79"))
    assert await custom.run(check()) == CheckResult(False, "xid 79")


# --- Kubernetes Job: dry run ------------------------------------------------------------------


async def test_dry_run_device_plugin_job() -> None:
    fake = kube()
    result = await executor(fake).run(check())
    assert result == CheckResult(True, DRY_RUN_DETAIL)
    [(kind, namespace, job, dry_run)] = fake.created
    assert (kind, namespace, dry_run) == ("Job", "devicestate", True)
    assert job["metadata"]["name"] == job_name(check())
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kubernetes.io/hostname": "host-a"}
    assert pod["tolerations"] == [
        {"key": "devicestate.io/quarantined", "effect": "NoSchedule", "operator": "Exists"}
    ]
    assert job["spec"]["activeDeadlineSeconds"] == 300  # the lease ends before the stage
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert fake.deleted == []


async def test_dry_run_dra_claim_and_job() -> None:
    fake = kube()
    result = await executor(fake).run(dra_check())
    assert result.passed and result.detail == DRY_RUN_DETAIL
    (k1, _, job, d1), (k2, _, claim, d2) = fake.created
    assert (k1, d1, k2, d2) == ("Job", True, "ResourceClaim", True)
    claim_name = claim["metadata"]["name"]
    assert job["spec"]["template"]["spec"]["resourceClaims"] == [
        {"name": "gpu", "resourceClaimName": claim_name}
    ]
    exactly = claim["spec"]["devices"]["requests"][0]["exactly"]
    assert exactly["deviceClassName"] == "gpu.example.com"  # from the device's own claim
    assert (
        '"GPU-0e18c688-f23f-5391-a735-114e22f43e9f"' in exactly["selectors"][0]["cel"]["expression"]
    )


async def test_dra_cdi_resource_id_resolved_through_the_claim() -> None:
    fake = kube()
    cdi = "k8s.gpu.example.com/claim=fdce17bd-c0bb-5f8c-9301-0b06386c9967-gpu-3"
    result = await executor(fake).run(dra_check(resource_id=cdi))
    assert result.passed
    claim = fake.created[1][2]
    expression = claim["spec"]["devices"]["requests"][0]["exactly"]["selectors"][0]["cel"]
    assert "GPU-" in expression["expression"]
    assert claim["metadata"]["annotations"]["devicestate.io/device"] == (
        "gpu.example.com/gpu-node-a/gpu-3"
    )


async def test_dra_without_physical_identity_fails_closed() -> None:
    fake = kube()
    result = await executor(fake).run(
        dra_check(resource_id="k8s.gpu.example.com/claim=unknown", resource_claim=None)
    )
    assert not result.passed
    assert result.detail.startswith("physical identity unknown")
    assert "check not run" in result.detail
    assert fake.created == []


async def test_dra_device_missing_from_the_slices_fails_closed() -> None:
    fake = kube()
    result = await executor(fake).run(
        dra_check(resource_id="gpu.example.com/gpu-node-a/gpu-42", resource_claim=None)
    )
    assert not result.passed and "physical identity unknown" in result.detail
    assert fake.created == []


async def test_dra_device_class_named_after_the_driver_or_fail() -> None:
    fake = kube()
    fake.claims.clear()
    without = await executor(fake).run(dra_check())
    assert not without.passed and "no DeviceClass" in without.detail
    fake.device_classes.add("gpu.example.com")
    assert (await executor(fake).run(dra_check())).passed


async def test_unknown_node_fails_closed() -> None:
    fake = kube()
    result = await executor(fake).run(check(node="gpu-node-z"))
    assert not result.passed and "gpu-node-z not found" in result.detail


async def test_api_error_fails_the_check() -> None:
    fake = kube(fail_on={"create_job": KubeApiError(403, "Forbidden: cannot create jobs")})
    result = await executor(fake).run(check())
    assert not result.passed and "403" in result.detail and "Forbidden" in result.detail


async def test_no_time_left_runs_nothing() -> None:
    fake = kube()
    result = await executor(fake).run(check(deadline=NOW, lease_expires_at=None))
    assert not result.passed and fake.created == []


# --- Kubernetes Job: live ---------------------------------------------------------------------


async def test_live_job_success_passes_and_is_deleted() -> None:
    fake = kube(job_status=lambda name, reads: {"succeeded": 1} if reads >= 3 else {"active": 1})
    result = await executor(fake, dry_run=False).run(check())
    name = job_name(check())
    assert result == CheckResult(True, f"Job succeeded (Job {name})")
    assert [c[3] for c in fake.created] == [False]
    assert fake.deleted == [name]


async def test_live_job_failure_fails_with_the_reason() -> None:
    failed = {
        "failed": 1,
        "conditions": [
            {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "x"}
        ],
    }
    fake = kube(job_status=lambda name, reads: failed)
    result = await executor(fake, dry_run=False).run(check())
    assert not result.passed and "BackoffLimitExceeded" in result.detail
    assert fake.deleted == [job_name(check())]


async def test_live_job_past_the_deadline_fails_and_is_deleted() -> None:
    fake = kube(job_status=lambda name, reads: {"active": 1})
    run = executor(fake, dry_run=False)
    result = await run.run(check(lease_expires_at=NOW + timedelta(seconds=0.05)))
    assert not result.passed and "did not finish" in result.detail
    assert fake.deleted == [job_name(check())]


async def test_live_dra_claim_is_owned_by_the_job() -> None:
    fake = kube(job_status=lambda name, reads: {"succeeded": 1})
    result = await executor(fake, dry_run=False).run(dra_check())
    assert result.passed
    (_, _, job, _), (_, _, claim, dry_run) = fake.created
    assert dry_run is False
    assert claim["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": job["metadata"]["name"],
            "uid": f"uid-{job['metadata']['name']}",
        }
    ]


async def test_live_job_that_exists_already_is_followed() -> None:
    fake = kube(job_status=lambda name, reads: {"succeeded": 1})
    name = job_name(check())
    fake.jobs[name] = {"metadata": {"name": name, "uid": "earlier"}}
    result = await executor(fake, dry_run=False).run(check())
    assert result.passed and fake.deleted == [name]


@pytest.mark.parametrize("stage", [RecoveryStage.PROBE, RecoveryStage.CANARY])
async def test_stage_picks_the_command(stage: RecoveryStage) -> None:
    fake = kube()
    await executor(fake).run(check(stage=stage))
    command = fake.created[0][2]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[0] == "nvidia-smi"
    assert ("-q" in command) is (stage is RecoveryStage.CANARY)
