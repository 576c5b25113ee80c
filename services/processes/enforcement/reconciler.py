"""The DeviceTaintRule reconciler: one pass, :meth:`Reconciler.reconcile`.

1. read the active and recovering quarantines from PostgreSQL (a failure ends the pass: no
   write is made on a guess; an empty read is never assumed);
2. :func:`~services.processes.enforcement.desired.desired_rules` (pure);
3. list the rules labelled as ours (:data:`~services.processes.enforcement.desired.LABEL_SELECTOR`);
4. :func:`~services.processes.enforcement.desired.plan`: create the missing rules, then replace the changed
   ones (with ``resourceVersion``: a concurrent change fails with 409 and is redone next pass),
   then delete ours whose quarantine is no longer enforced (released, or gone), each delete
   preconditioned on the listed object's ``uid``. Creating before deleting means a device whose
   quarantine is replaced by a new one is never without a rule in between.

A failed write (:class:`~services.adapters.kube.errors.KubeApiError`) is logged and counted and
the pass goes on with the others; the next pass retries. Everything is idempotent: names follow
from quarantine ids, so a second pass, a restarted reconciler or a replayed projection finds the
same rules and changes nothing. Rules without our labels are never listed, updated or deleted; if
one holds the name we want, the create fails with 409 AlreadyExists (logged, counted, left alone).
The pass returns a :class:`ReconcileResult` and raises nothing it can report there; it updates the
:class:`~services.processes.enforcement.metrics.EnforcementMetrics` it was given.

Dry run (``enforce_dry_run``, the default): every write is sent with ``dryRun=All``, so the API
server validates and authorizes it and nothing changes; it is logged as what it would do (at
INFO when the plan differs from the previous pass, at DEBUG when it repeats) and counted with
``dry_run="true"``.

When passes run (periodically, and early on decisions) is :mod:`services.processes.enforcement.run`
with :mod:`services.processes.enforcement.triggers`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import structlog

from services.adapters.kube.errors import KubeApiError
from services.processes.enforcement.desired import (
    LABEL_SELECTOR,
    DesiredState,
    Plan,
    Skipped,
    desired_rules,
    plan,
    updated_object,
)
from services.processes.enforcement.kube import TaintRuleApi
from services.processes.enforcement.metrics import EnforcementMetrics
from services.processes.enforcement.source import QuarantineSource

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class ReconcileResult:
    """What one pass did. ``created``/``updated``/``deleted``: rule names whose write the server
    accepted (with ``dry_run``, that it would have made). ``failed``: nothing could be read, so
    nothing was written; ``errors``: failed writes."""

    dry_run: bool
    failed: bool = False
    desired: int = 0
    present: int = 0
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    skipped: tuple[Skipped, ...] = ()
    errors: int = 0
    quarantine_ids: frozenset[str] = frozenset()
    plan: Plan | None = None

    @property
    def changed(self) -> bool:
        return bool(self.created or self.updated or self.deleted)


class Reconciler:
    """Makes the cluster's DeviceTaintRules match the enforced quarantines (one pass per call)."""

    def __init__(
        self,
        rules: TaintRuleApi,
        source: QuarantineSource,
        *,
        dry_run: bool = True,
        no_execute: bool = False,
        metrics: EnforcementMetrics | None = None,
    ) -> None:
        self.rules = rules
        self.source = source
        self.dry_run = dry_run
        self.no_execute = no_execute
        self.metrics = metrics or EnforcementMetrics()
        self.metrics.dry_run.set(1 if dry_run else 0)
        self._last_signature: Any = None
        self._skipped_seen: set[tuple[str, str]] = set()

    async def reconcile(self) -> ReconcileResult:
        with self.metrics.duration.time():
            result = await self._reconcile()
        outcome = "failed" if result.failed else "partial" if result.errors else "ok"
        self.metrics.reconciles.labels(outcome).inc()
        if outcome == "ok":
            self.metrics.last_success.set(time.time())
        return result

    async def _reconcile(self) -> ReconcileResult:
        result = ReconcileResult(dry_run=self.dry_run)
        try:
            rows = await self.source.enforced()
        except Exception as exc:
            self.metrics.errors.labels("read-quarantines").inc()
            log.warning("quarantines not read; nothing changed", error=repr(exc))
            result.failed = True
            return result
        desired = desired_rules(rows, no_execute=self.no_execute)
        result.quarantine_ids = frozenset(r.quarantine_id for r in rows)
        result.desired = len(desired.rules)
        result.skipped = desired.skipped
        self._report_skipped(desired)
        self.metrics.rules_desired.set(len(desired.rules))
        try:
            present = await self.rules.list_rules(LABEL_SELECTOR)
        except KubeApiError as exc:
            self.metrics.errors.labels("list").inc()
            log.warning("device taint rules not listed; nothing changed", error=str(exc))
            result.failed = True
            return result
        result.present = len(present)
        self.metrics.rules_present.set(len(present))
        todo = plan(desired, present)
        result.plan = todo
        signature = todo.signature()
        loud = not self.dry_run or signature != self._last_signature
        self._last_signature = signature
        await self._apply(todo, result, loud)
        if loud or result.errors:
            log.info(
                "device taint rules reconciled" + (" (dry run)" if self.dry_run else ""),
                desired=result.desired,
                present=result.present,
                created=len(result.created),
                updated=len(result.updated),
                deleted=len(result.deleted),
                unchanged=len(todo.unchanged),
                skipped=len(result.skipped),
                errors=result.errors,
                dry_run=self.dry_run,
            )
        return result

    def _report_skipped(self, desired: DesiredState) -> None:
        for reason, count in desired.skipped_by_reason().items():
            self.metrics.skipped.labels(reason.value).set(count)
        seen: set[tuple[str, str]] = set()
        for item in desired.skipped:
            key = (item.quarantine_id, item.reason.value)
            seen.add(key)
            (log.info if key not in self._skipped_seen else log.debug)(
                "quarantine not enforced by a device taint rule",
                quarantine_id=item.quarantine_id,
                node=item.node,
                resource_id=item.resource_id,
                reason=item.reason.value,
                detail=item.detail,
            )
        self._skipped_seen = seen

    def _verb(self, action: str) -> str:
        return f"would {action} (dry run)" if self.dry_run else action

    def _count(self, action: str) -> None:
        self.metrics.actions.labels(action, "true" if self.dry_run else "false").inc()

    def _failed(self, operation: str, name: str, exc: KubeApiError, **fields: Any) -> None:
        self.metrics.errors.labels(operation).inc()
        note = ""
        if operation == "create" and exc.status == 409:
            note = "the name is taken by a rule without devicestate's labels; it is left alone"
        elif exc.status == 409:
            note = "changed or replaced meanwhile; retried next pass"
        elif exc.status == 403:
            note = "forbidden: see docs/enforcement.md for the RBAC rules"
        log.warning(
            f"device taint rule {operation} failed",
            rule=name,
            status=exc.status,
            error=exc.message,
            note=note or None,
            dry_run=self.dry_run,
            **fields,
        )

    async def _apply(self, todo: Plan, result: ReconcileResult, loud: bool) -> None:
        emit = log.info if loud else log.debug
        for rule in todo.create:
            fields: dict[str, Any] = {
                "quarantine_id": rule.quarantine_id,
                "node": rule.node,
                "device": rule.device_id,
                "effect": rule.effect.value,
                "value": rule.taint_value,
            }
            try:
                await self.rules.create_rule(rule.manifest(), self.dry_run)
            except KubeApiError as exc:
                result.errors += 1
                self._failed("create", rule.name, exc, **fields)
                continue
            result.created.append(rule.name)
            self._count("create")
            emit(f"device taint rule {self._verb('create')}", rule=rule.name, **fields)
        for update in todo.update:
            rule = update.rule
            fields = {
                "quarantine_id": rule.quarantine_id,
                "device": rule.device_id,
                "changed": list(update.changed),
            }
            try:
                await self.rules.replace_rule(
                    rule.name, updated_object(update.existing, rule), self.dry_run
                )
            except KubeApiError as exc:
                result.errors += 1
                self._failed("update", rule.name, exc, **fields)
                continue
            result.updated.append(rule.name)
            self._count("update")
            emit(f"device taint rule {self._verb('update')}", rule=rule.name, **fields)
        for delete in todo.delete:
            fields = {"quarantine_id": delete.quarantine_id, "device": delete.device}
            try:
                existed = await self.rules.delete_rule(delete.name, delete.uid, self.dry_run)
            except KubeApiError as exc:
                result.errors += 1
                self._failed("delete", delete.name, exc, **fields)
                continue
            if existed:
                result.deleted.append(delete.name)
                self._count("delete")
                emit(f"device taint rule {self._verb('delete')}", rule=delete.name, **fields)
