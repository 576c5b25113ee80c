"""Recovery executors: run a probe or canary of one device and say whether it passed.

- :class:`InProcessExecutor` runs nothing: it answers from a configured function or set of
  failing devices (tests, the demo, clusters without GPUs).
- :class:`KubernetesJobExecutor` runs ``nvidia-smi`` in a Job pinned to the device's node
  (:mod:`services.processes.recovery.manifests`). Dry-run by default: the Job (and, for DRA, its
  ResourceClaim) is created with ``dryRun=All``: the API server validates and admits it, nothing
  runs, and the check passes with a detail saying so. Live: create, poll until the Job succeeds or
  fails (bounded by the stage deadline and the lease), delete it (its Pods and ResourceClaim go
  with it), and pass only on success.

The probe uses the same executor as the canary with a lighter command (a short query of the
device instead of the full report, :func:`~services.processes.recovery.manifests.stage_command`): a probe
that ran nothing on the node would say nothing about the device.

Anything that keeps the executor from knowing the device fails closed: an unknown node, a DRA
device whose physical identity cannot be established (neither ``<driver>/<pool>/<device>`` nor
named by an allocated ResourceClaim, or without a unique identifying attribute), no DeviceClass,
an API error. The detail says which.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Final

import structlog

from services.adapters.kube.errors import KubeApiError
from services.domain.events import DeviceSource
from services.domain.governance.device_state import DeviceKey
from services.processes.recovery.checks import CheckResult, Executor, RecoveryCheck
from services.processes.recovery.dra_devices import (
    DraDevice,
    claim_device_class,
    device_in_claim,
    identify_dra_device,
    split_dra_resource_id,
)
from services.processes.recovery.kube import KubeObjects
from services.processes.recovery.manifests import (
    HOSTNAME_LABEL,
    job_manifest,
    job_name,
    resource_claim_manifest,
)

__all__ = [
    "CheckResult",
    "Executor",
    "InProcessExecutor",
    "KubernetesJobExecutor",
    "RecoveryCheck",
]

log = structlog.get_logger(__name__)

DRY_RUN_DETAIL: Final = "dry-run: Job accepted by the API server, not executed"
DEFAULT_CHECK_SECONDS: Final = 600.0
"""Longest run of a check when neither a stage deadline nor a lease expiry bounds it."""


def utcnow() -> datetime:
    return datetime.now(UTC)


class InProcessExecutor:
    """Answers without running anything: ``decide(check)`` when given (a bool or a
    :class:`CheckResult`), else fails the devices in ``fail`` and passes the others.
    ``delay_seconds`` simulates the time a check takes."""

    def __init__(
        self,
        fail: Iterable[DeviceKey] = (),
        decide: Callable[[RecoveryCheck], bool | CheckResult] | None = None,
        delay_seconds: float = 0.0,
    ) -> None:
        self.failing = frozenset(fail)
        self._decide = decide
        self._delay = delay_seconds
        self.runs: list[RecoveryCheck] = []

    async def run(self, check: RecoveryCheck) -> CheckResult:
        self.runs.append(check)
        if self._delay:
            await asyncio.sleep(self._delay)
        if self._decide is not None:
            answer = self._decide(check)
            if isinstance(answer, CheckResult):
                return answer
            return CheckResult(answer, f"in-process {check.stage.value}: configured result")
        if (check.node, check.resource_id) in self.failing:
            return CheckResult(False, f"in-process {check.stage.value}: device configured to fail")
        return CheckResult(True, f"in-process {check.stage.value}: passed (nothing executed)")


class _FailClosed(Exception):
    """The check cannot be set up for this device; the message is the report's detail."""


def _job_outcome(job: Mapping[str, Any]) -> CheckResult | None:
    """Passed/failed from a Job's status, or ``None`` while it runs."""
    status = job.get("status") or {}
    for condition in status.get("conditions") or ():
        if condition.get("status") != "True":
            continue
        if condition.get("type") in ("Complete", "SuccessCriteriaMet"):
            return CheckResult(True, "Job succeeded")
        if condition.get("type") in ("Failed", "FailureTarget"):
            reason = condition.get("reason") or "Failed"
            message = condition.get("message") or ""
            return CheckResult(False, f"Job failed: {reason} {message}".strip())
    if int(status.get("succeeded") or 0) > 0:
        return CheckResult(True, "Job succeeded")
    if int(status.get("failed") or 0) > 0:
        return CheckResult(False, "Job failed: its Pod failed")
    return None


class KubernetesJobExecutor:
    """Runs checks as Jobs (see the module docstring). ``objects``: the Kubernetes port;
    ``ttl_seconds``: ``ttlSecondsAfterFinished`` (what is left after a crash goes by itself);
    ``poll_seconds``: how often a live Job's status is read; ``clock``: wall clock (UTC)."""

    def __init__(
        self,
        objects: KubeObjects,
        *,
        namespace: str,
        image: str,
        dry_run: bool = True,
        ttl_seconds: int = 600,
        poll_seconds: float = 2.0,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self._objects = objects
        self.namespace = namespace
        self.image = image
        self.dry_run = dry_run
        self._ttl = ttl_seconds
        self._poll = poll_seconds
        self._clock = clock

    def _seconds_left(self, check: RecoveryCheck) -> float:
        if check.budget_seconds is not None:
            return check.budget_seconds
        end = check.must_end_by
        if end is None:
            return DEFAULT_CHECK_SECONDS
        return (end - self._clock()).total_seconds()

    async def run(self, check: RecoveryCheck) -> CheckResult:
        try:
            return await self._run(check)
        except _FailClosed as exc:
            return CheckResult(False, str(exc))
        except KubeApiError as exc:
            log.warning("kubernetes API error in a recovery check", error=exc.described)
            return CheckResult(False, f"kubernetes API error: {exc.described}")

    async def _node(self, check: RecoveryCheck) -> tuple[str, list[dict[str, Any]]]:
        node = await self._objects.read_node(check.node)
        if node is None:
            raise _FailClosed(f"node {check.node} not found")
        metadata = node.get("metadata") or {}
        hostname = str((metadata.get("labels") or {}).get(HOSTNAME_LABEL) or check.node)
        taints = list((node.get("spec") or {}).get("taints") or [])
        return hostname, taints

    async def resolve_dra_device(self, check: RecoveryCheck) -> DraDevice:
        """The physical DRA device of ``check`` and how to select it; raises
        :class:`_FailClosed` when it cannot be established."""
        parts = split_dra_resource_id(check.resource_id)
        claim: dict[str, Any] | None = None
        result: dict[str, Any] | None = None
        if check.resource_claim:
            found = [
                (c, r)
                for c in await self._objects.list_resource_claims(check.resource_claim)
                if (r := device_in_claim(c, check.resource_id)) is not None
            ]
            if len(found) == 1:
                claim, result = found[0]
        if parts is None and result is not None:
            parts = (str(result["driver"]), str(result["pool"]), str(result["device"]))
        if parts is None:
            where = (
                f"ResourceClaim {check.resource_claim} does not name it"
                if check.resource_claim
                else "no ResourceClaim is known"
            )
            raise _FailClosed(
                f"physical identity unknown: resourceID {check.resource_id!r} is not "
                f"<driver>/<pool>/<device> and {where}; check not run"
            )
        driver, pool, device = parts
        slices = await self._objects.list_resource_slices(check.node, driver)
        identity = identify_dra_device(slices, driver, pool, device)
        if isinstance(identity, str):
            raise _FailClosed(f"physical identity unknown: {identity}; check not run")
        attribute, value = identity
        device_class = None
        if claim is not None and result is not None:
            device_class = claim_device_class(claim, result.get("request"))
        if device_class is None and await self._objects.read_device_class(driver) is not None:
            device_class = driver
        if device_class is None:
            raise _FailClosed(
                f"no DeviceClass for {driver}: the device's ResourceClaim is unknown and no "
                f"DeviceClass is named {driver!r}; check not run"
            )
        return DraDevice(driver, pool, device, device_class, attribute, value)

    async def _run(self, check: RecoveryCheck) -> CheckResult:
        left = self._seconds_left(check)
        if left <= 0:
            return CheckResult(False, "stage deadline or lease expiry already passed; not run")
        hostname, taints = await self._node(check)
        name = job_name(check)
        dra: DraDevice | None = None
        claim_name: str | None = None
        if check.source is DeviceSource.DRA:
            dra = await self.resolve_dra_device(check)
            claim_name = f"{name}-gpu"
        job = job_manifest(
            check,
            name=name,
            namespace=self.namespace,
            image=self.image,
            hostname=hostname,
            taints=taints,
            active_deadline_seconds=int(left),
            ttl_seconds_after_finished=self._ttl,
            claim_name=claim_name,
            dra_device=dra,
        )
        if self.dry_run:
            await self._objects.create_job(self.namespace, job, dry_run=True)
            if dra is not None and claim_name is not None:
                claim = resource_claim_manifest(claim_name, self.namespace, check, dra)
                await self._objects.create_resource_claim(self.namespace, claim, dry_run=True)
            log.info("recovery check dry-run accepted", job=name, stage=check.stage.value)
            return CheckResult(True, DRY_RUN_DETAIL)
        return await self._run_live(check, job, dra, claim_name, left)

    async def _run_live(
        self,
        check: RecoveryCheck,
        job: dict[str, Any],
        dra: DraDevice | None,
        claim_name: str | None,
        left: float,
    ) -> CheckResult:
        name = job["metadata"]["name"]
        try:
            try:
                created = await self._objects.create_job(self.namespace, job, dry_run=False)
            except KubeApiError as exc:
                if exc.status != 409:
                    raise
                created = await self._objects.read_job(self.namespace, name) or {}
                log.info("recovery check Job exists already; following it", job=name)
            if dra is not None and claim_name is not None:
                owner = {"name": name, "uid": (created.get("metadata") or {}).get("uid")}
                claim = resource_claim_manifest(claim_name, self.namespace, check, dra, owner)
                try:
                    await self._objects.create_resource_claim(self.namespace, claim, dry_run=False)
                except KubeApiError as exc:
                    if exc.status != 409:
                        raise
            log.info("recovery check Job created", job=name, stage=check.stage.value)
            return await self._wait(name, left)
        finally:
            try:
                await asyncio.shield(self._objects.delete_job(self.namespace, name))
            except KubeApiError as exc:
                log.warning("recovery check Job not deleted", job=name, error=exc.described)

    async def _wait(self, name: str, left: float) -> CheckResult:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + left
        while True:
            job = await self._objects.read_job(self.namespace, name)
            if job is None:
                return CheckResult(False, f"Job {name} disappeared before it finished")
            outcome = _job_outcome(job)
            if outcome is not None:
                return CheckResult(outcome.passed, f"{outcome.detail} (Job {name})")
            if loop.time() >= deadline:
                return CheckResult(False, f"Job {name} did not finish before the stage deadline")
            await asyncio.sleep(min(self._poll, max(0.0, deadline - loop.time())))
