"""``devicestate adoption enforce``: the rollback admission policies of rolled-back adoption pools
(issue 16, item 4), one reconcile pass (:meth:`AdmissionReconciler.reconcile`) and its loop.

A pass reads the pools (the governor's ``AdoptionPhaseDeclared`` and ``AdoptionPoolRetired``
decisions in PostgreSQL, folded by :func:`services.domain.governance.adoption.fold`: a retired
pool's objects are deleted like those of a pool that left rolled-back; a failed read ends the
pass with nothing written), computes the wanted objects (:mod:`.admission_desired`), lists ours (label selector),
then creates, replaces (with resourceVersion: a concurrent change fails with 409, redone next
pass) and deletes (uid precondition) what differs. A failed write is logged and counted; the pass
goes on. Dry run (the default, ``DEVICESTATE_ENFORCE_DRY_RUN``): every write carries
``dryRun=All``, so the API server validates and authorizes it and nothing changes.

RBAC (cluster-scoped: ``deploy/components/adoption-enforcement``)::

    - apiGroups: ["admissionregistration.k8s.io"]
      resources: ["validatingadmissionpolicies", "validatingadmissionpolicybindings"]
      verbs: ["list", "create", "update", "delete"]
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from services.adapters.kube.errors import KubeApiError
from services.adapters.projection.reads_adoption import AdoptionReads
from services.domain.governance.adoption import PoolState, fold
from services.processes.enforcement.admission_desired import (
    KINDS,
    LABEL_SELECTOR,
    AdmissionPlan,
    Kind,
    SkippedPool,
    desired_policies,
    plan,
)

log = structlog.get_logger(__name__)


class AdmissionPolicyApi(Protocol):
    """ValidatingAdmissionPolicies (``policy``) and bindings (``binding``), cluster-scoped.
    Anything but a success raises :class:`KubeApiError`, except that :meth:`delete` returns
    ``False`` when the object is already gone."""

    async def list(self, kind: Kind, label_selector: str) -> list[dict[str, Any]]: ...

    async def create(self, kind: Kind, body: dict[str, Any], dry_run: bool) -> dict[str, Any]: ...

    async def replace(
        self, kind: Kind, name: str, body: dict[str, Any], dry_run: bool
    ) -> dict[str, Any]: ...

    async def delete(self, kind: Kind, name: str, uid: str | None, dry_run: bool) -> bool: ...


class PoolSource(Protocol):
    async def pools(self) -> Mapping[str, PoolState]:
        """Every declared pool; raises when they cannot be read (never an empty mapping
        instead: that would delete every policy)."""
        ...


class PostgresPoolSource:
    """:class:`PoolSource` on the governance projection (``AdoptionReads.declarations``)."""

    def __init__(self, reads: AdoptionReads) -> None:
        self._reads = reads

    async def pools(self) -> Mapping[str, PoolState]:
        return fold(await self._reads.declarations())


@dataclass(slots=True)
class AdmissionResult:
    """What one pass did: ``created``/``updated``/``deleted`` as ``kind/name`` the server accepted
    (with ``dry_run``, would have made); ``failed``: nothing read, nothing written; ``errors``:
    failed writes; ``skipped``: rolled-back pools without a DeviceClass."""

    dry_run: bool
    failed: bool = False
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    skipped: list[SkippedPool] = field(default_factory=list)
    errors: int = 0
    plan: AdmissionPlan | None = None


class AdmissionReconciler:
    """Makes the cluster's rollback policies match the rolled-back pools (one pass per call)."""

    def __init__(
        self, api: AdmissionPolicyApi, source: PoolSource, *, dry_run: bool = True
    ) -> None:
        self.api = api
        self.source = source
        self.dry_run = dry_run
        self._last: Any = None

    async def reconcile(self) -> AdmissionResult:
        result = AdmissionResult(dry_run=self.dry_run)
        try:
            pools = await self.source.pools()
        except Exception as exc:
            log.warning("adoption pools not read; nothing changed", error=repr(exc))
            result.failed = True
            return result
        wanted, result.skipped = desired_policies(pools)
        for skipped in result.skipped:
            log.warning("rolled-back pool not enforced", pool=skipped.pool, reason=skipped.reason)
        present: dict[Kind, list[dict[str, Any]]] = {}
        try:
            for kind in KINDS:
                present[kind] = await self.api.list(kind, LABEL_SELECTOR)
        except KubeApiError as exc:
            log.warning("admission policies not listed; nothing changed", error=str(exc))
            result.failed = True
            return result
        todo = plan(wanted, present)
        result.plan = todo
        loud = not self.dry_run or todo.signature() != self._last
        self._last = todo.signature()
        emit = log.info if loud else log.debug
        for write in todo.writes:
            label = f"{write.kind}/{write.name}"
            try:
                if write.op == "create":
                    assert write.body is not None
                    await self.api.create(write.kind, write.body, self.dry_run)
                    result.created.append(label)
                elif write.op == "update":
                    assert write.body is not None
                    await self.api.replace(write.kind, write.name, write.body, self.dry_run)
                    result.updated.append(label)
                elif await self.api.delete(write.kind, write.name, write.uid, self.dry_run):
                    result.deleted.append(label)
            except KubeApiError as exc:
                result.errors += 1
                log.warning(
                    f"admission {write.kind} {write.op} failed",
                    name=write.name,
                    status=exc.status,
                    error=exc.message,
                    dry_run=self.dry_run,
                )
                continue
            emit(
                f"admission {write.kind} "
                + (f"would {write.op} (dry run)" if self.dry_run else write.op),
                name=write.name,
            )
        return result


async def run_admission_enforcer(
    reconciler: AdmissionReconciler, interval_seconds: float, stop: asyncio.Event, once: bool
) -> AdmissionResult | None:
    """Passes every ``interval_seconds`` until ``stop`` (one with ``once``: its result)."""
    result = None
    while not stop.is_set():
        try:
            result = await reconciler.reconcile()
        except Exception as exc:  # a pass that raises is logged; the loop goes on
            log.error("adoption enforcement pass failed", error=repr(exc))
        if once:
            return result
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=interval_seconds)
    return result
