"""The DeviceTaintRule reconciler and the ``devicestate enforce`` loop.

One pass (:meth:`Reconciler.reconcile`):

1. read the active and recovering quarantines from PostgreSQL (a failure ends the pass: no
   write is made on a guess; an empty read is never assumed);
2. :func:`~services.processes.enforcement.desired.desired_rules` (pure);
3. list the rules labelled as ours (:data:`~services.processes.enforcement.desired.LABEL_SELECTOR`);
4. :func:`~services.processes.enforcement.desired.plan`: create the missing rules, then replace the changed
   ones (with ``resourceVersion``: a concurrent change fails with 409 and is redone next pass),
   then delete ours whose quarantine is no longer enforced (released, or gone), each delete
   preconditioned on the listed object's ``uid``. Creating before deleting means a device whose
   quarantine is replaced by a new one is never without a rule in between.

A failed write is logged and counted and the pass goes on with the others; the next pass retries.
Everything is idempotent: names follow from quarantine ids, so a second pass, a restarted
reconciler or a replayed projection finds the same rules and changes nothing. Rules without our
labels are never listed, updated or deleted; if one holds the name we want, the create fails with
409 AlreadyExists (logged, counted, left alone).

Dry run (``enforce_dry_run``, the default): every write is sent with ``dryRun=All``, so the API
server validates and authorizes it and nothing changes; it is logged as what it would do (at
INFO when the plan differs from the previous pass, at DEBUG when it repeats) and counted with
``dry_run="true"``.

The loop (:func:`run_enforcer`) runs a pass every ``interval_seconds``, and early when a
``DeviceQuarantined`` or ``QuarantineReleased`` decision arrives on the decisions topic (read from
its end, no consumer group: the periodic pass covers anything missed). The governor publishes a
decision just before it commits the projection, so a decision becomes an expectation (that
quarantine present, or absent); passes repeat every ``retry_seconds`` until the database shows
it, for at most ``expectation_seconds``. SIGTERM or SIGINT lets the running pass finish (each call
has a timeout), then the process exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from services.adapters.kube.errors import KubeApiError
from services.domain.governance.decisions import Decision, DecisionKind, decode_decision
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
from services.runtime.config import Settings

log = structlog.get_logger(__name__)

TRIGGER_KINDS = frozenset({DecisionKind.QUARANTINED, DecisionKind.QUARANTINE_RELEASED})


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


# --- the loop ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class EnforceOptions:
    """How ``devicestate enforce`` runs besides :class:`Settings`."""

    interval_seconds: float = 30.0
    metrics_port: int = 9111
    follow_decisions: bool = True
    once: bool = False
    retry_seconds: float = 1.0
    expectation_seconds: float = 30.0
    debounce_seconds: float = 0.2


class Expectations:
    """Quarantines a decision announced that the database does not show yet (``present``: it
    should be enforced; ``not present``: released). Settled by a pass that reads them so, or
    dropped after ``ttl`` seconds."""

    def __init__(self, ttl: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self.clock = clock
        self._pending: dict[str, tuple[bool, float]] = {}

    def add(self, decision: Decision) -> bool:
        quarantine_id = decision.details.get("quarantineID")
        if decision.kind not in TRIGGER_KINDS or not isinstance(quarantine_id, str):
            return False
        present = decision.kind is DecisionKind.QUARANTINED
        self._pending[quarantine_id] = (present, self.clock() + self.ttl)
        return True

    def settle(self, enforced: frozenset[str]) -> None:
        now = self.clock()
        self._pending = {
            q: (present, deadline)
            for q, (present, deadline) in self._pending.items()
            if deadline > now and (q in enforced) != present
        }

    @property
    def pending(self) -> bool:
        return bool(self._pending)


async def kafka_decisions(settings: Settings, stop: asyncio.Event) -> AsyncIterator[Decision]:
    """Decisions appended to ``settings.decisions_topic`` from now on (no consumer group, nothing
    committed); waits and retries while Kafka is unreachable."""
    from services.adapters.kafka.follow import Start, TopicFollower

    async with TopicFollower(
        settings,
        [settings.decisions_topic],
        decode_decision,
        client_id="devicestate-enforce",
        group_id=None,
        start=Start.LATEST,
    ) as follower:
        if not await follower.start(stop):
            return
        async for batches in follower.batches(stop):
            for records in batches.values():
                for record in records:
                    if record.value is not None:  # undecodable: skipped
                        yield record.value


async def _follow(
    decisions: AsyncIterator[Decision],
    expectations: Expectations,
    wake: asyncio.Event,
    metrics: EnforcementMetrics,
) -> None:
    try:
        async for decision in decisions:
            if expectations.add(decision):
                metrics.triggers.labels(decision.kind.value).inc()
                wake.set()
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("decisions no longer followed; reconciling every interval only")


async def _wait(stop: asyncio.Event, wake: asyncio.Event, seconds: float) -> None:
    """Until ``stop`` or ``wake`` is set, or ``seconds`` passed."""
    waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(wake.wait())]
    try:
        await asyncio.wait(waiters, timeout=max(seconds, 0.0), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
        for waiter in waiters:
            with contextlib.suppress(asyncio.CancelledError):
                await waiter


async def run_enforcer(
    settings: Settings,
    options: EnforceOptions | None = None,
    *,
    rules: TaintRuleApi | None = None,
    source: QuarantineSource | None = None,
    decisions: AsyncIterator[Decision] | None = None,
    stop: asyncio.Event | None = None,
    metrics: EnforcementMetrics | None = None,
    on_result: Callable[[ReconcileResult], None] | None = None,
) -> ReconcileResult | None:
    """Run the reconciler until ``stop`` (SIGTERM/SIGINT when not given), or one pass with
    ``options.once`` (its result is returned). ``rules``/``source``/``decisions`` replace the
    Kubernetes client, the PostgreSQL reader and the Kafka follower that ``settings`` name."""
    options = options or EnforceOptions()
    metrics = metrics or EnforcementMetrics()
    loop = asyncio.get_running_loop()
    handled: list[signal.Signals] = []
    if stop is None:
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
            handled.append(sig)
    metrics.enabled.set(1 if settings.enforce_device_taint_rules else 0)
    metrics.dry_run.set(1 if settings.enforce_dry_run else 0)
    if not options.once:
        try:
            metrics.serve(options.metrics_port)
        except OSError as exc:
            log.warning("metrics server not started", port=options.metrics_port, error=str(exc))
    try:
        if not settings.enforce_device_taint_rules:
            log.warning(
                "DeviceTaintRule enforcement is off (DEVICESTATE_ENFORCE_DEVICE_TAINT_RULES="
                "false): nothing is read or written" + ("" if options.once else "; idle")
            )
            if not options.once:
                await stop.wait()
            return None
        async with contextlib.AsyncExitStack() as stack:
            if source is None:
                from services.processes.enforcement.source import (
                    PostgresQuarantineSource,
                    make_engine,
                )

                engine = make_engine(settings.database_url)
                stack.push_async_callback(engine.dispose)
                source = PostgresQuarantineSource(engine, settings.database_schema)
            if rules is None:
                from services.adapters.kube.taint_rules import kubernetes_taint_rules

                rules = await stack.enter_async_context(kubernetes_taint_rules(settings))
            reconciler = Reconciler(
                rules,
                source,
                dry_run=settings.enforce_dry_run,
                no_execute=settings.enforce_no_execute,
                metrics=metrics,
            )
            log.info(
                "device taint rule enforcement started",
                dry_run=settings.enforce_dry_run,
                effect="NoExecute" if settings.enforce_no_execute else "NoSchedule",
                interval_seconds=options.interval_seconds,
                schema=settings.database_schema,
                decisions=settings.decisions_topic if options.follow_decisions else None,
            )
            if options.once:
                result = await reconciler.reconcile()
                if on_result is not None:
                    on_result(result)
                return result
            return await _loop(settings, options, reconciler, decisions, stop, metrics, on_result)
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)


async def _loop(
    settings: Settings,
    options: EnforceOptions,
    reconciler: Reconciler,
    decisions: AsyncIterator[Decision] | None,
    stop: asyncio.Event,
    metrics: EnforcementMetrics,
    on_result: Callable[[ReconcileResult], None] | None,
) -> ReconcileResult | None:
    wake = asyncio.Event()
    expectations = Expectations(options.expectation_seconds)
    if decisions is None and options.follow_decisions:
        decisions = kafka_decisions(settings, stop)
    follower = (
        asyncio.create_task(_follow(decisions, expectations, wake, metrics))
        if decisions is not None
        else None
    )
    last: ReconcileResult | None = None
    failures = 0
    try:
        while not stop.is_set():
            wake.clear()  # a decision arriving during the pass sets it again: one more pass
            try:
                last = await reconciler.reconcile()
            except Exception:
                log.exception("reconcile pass failed")
                last = ReconcileResult(dry_run=reconciler.dry_run, failed=True)
            if on_result is not None:
                on_result(last)
            if not last.failed:
                expectations.settle(last.quarantine_ids)
            if last.failed or last.errors:
                failures += 1
                delay = min(options.interval_seconds, options.retry_seconds * 2 ** (failures - 1))
            else:
                failures = 0
                delay = options.interval_seconds
            if expectations.pending:
                delay = min(delay, options.retry_seconds)
            await _wait(stop, wake, delay)
            if wake.is_set() and not stop.is_set():
                with contextlib.suppress(TimeoutError):  # let a burst of decisions settle
                    await asyncio.wait_for(stop.wait(), options.debounce_seconds)
    finally:
        if follower is not None:
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follower
        log.info("device taint rule enforcement stopped")
    return last
