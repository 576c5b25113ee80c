"""One pass of the migration executor over the governor's migrations (:class:`MigrationExecutor`).

Per migration (:func:`~.plan.next_step`): take the lease (``lease-requested``) and renew it at
half the lease period; then, by the recorded phase, set the ``devicestate.io/serving`` condition
to False on its Pods, do the checkpoint handshake (:mod:`.handshake`), evict the Pods through
the Eviction API, and report the replacement; for a non-recoverable workload, post the evidence,
write a Warning Event on each Pod and mark it done with an annotation; for a failed migration,
give its running Pods their serving condition back (:mod:`.restore`). Every write is preceded
by a read of what it would change, so a pass repeated after a crash writes nothing twice. A
report of ours refused for a lease reason (stale token, expired lease) stops the work on that
migration until the governor grants us a new lease. Dry-run: no report is posted, and every
Kubernetes write is sent with ``dryRun=All`` (checked by the API server, nothing changes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import structlog

from services.adapters.kube.errors import KubeApiError
from services.domain.events import format_time
from services.processes.migration import handshake
from services.processes.migration.api import (
    ApiCallError,
    MigrationsApi,
    evidence_body,
    report_body,
)
from services.processes.migration.events import (
    EVENT_REASON,
    EVICTION_REASON,
    eviction_message,
    evidence_message,
)
from services.processes.migration.kube import MigrationPods
from services.processes.migration.marker import eviction_marked, write_event
from services.processes.migration.metrics import ExecutorMetrics
from services.processes.migration.plan import (
    ACTIONABLE_PHASES,
    MigrationView,
    Step,
    checkpoint_overdue,
    lease_lost,
    next_step,
    renew_due,
)
from services.processes.migration.replacement import replacements
from services.processes.migration.restore import (
    FAILED_LISTED,
    SERVING_OFF_REASON,
    restore_serving,
    serving_off_message,
)

log = structlog.get_logger(__name__)

EVIDENCE_DONE: Final = "devicestate.io/evidence-kept"
"""Annotation on a non-recoverable Pod: the migration whose evidence and Event are written."""
DRY_STEPS: Final = {
    "planned": Step.REQUEST_LEASE,
    "checkpoint-requested": Step.CHECKPOINT,
    "eviction-requested": Step.EVICT,
    "released": Step.REPLACEMENT,
    "evidence-kept": Step.EVIDENCE,
}


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(slots=True)
class PassResult:
    """What a pass did (``actions``, ``would ...`` in dry-run) and what failed (``errors``)."""

    dry_run: bool
    actions: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class MigrationExecutor:
    """Acts for ``holder`` on the migrations ``api`` serves, through ``pods``. ``lease_seconds``
    is the governor's lease period (``DEVICESTATE_MIGRATION_LEASE_SECONDS``)."""

    def __init__(
        self,
        api: MigrationsApi,
        pods: MigrationPods,
        holder: str,
        *,
        dry_run: bool = True,
        lease_seconds: float = 60.0,
        clock: Callable[[], datetime] = utc_now,
        metrics: ExecutorMetrics | None = None,
    ) -> None:
        self.api, self.pods, self.holder = api, pods, holder
        self.metrics = metrics or ExecutorMetrics()
        self.metrics.dry_run.set(1 if dry_run else 0)
        self.dry_run, self.lease_seconds, self.clock = dry_run, lease_seconds, clock
        # (migration, token, kind, checkpoint ID) posted: another checkpoint is another report
        self._reported: set[tuple[str, int, str, str]] = set()
        self._requested: dict[str, datetime] = {}  # lease requests not decided yet
        self._renewed: dict[tuple[str, int], datetime] = {}
        self._stopped: set[tuple[str, int]] = set()  # leases the governor told us we lost
        self._evidence_done: set[str] = set()
        self._restored: set[str] = set()  # failed migrations whose Pods were looked at
        self._result = PassResult(dry_run)

    async def run_pass(self) -> PassResult:
        """One pass over every actionable migration; a failure of one is recorded, the others
        go on. Raises :class:`ApiCallError` only when the migrations cannot be listed."""
        self._result = PassResult(self.dry_run)
        work = [
            (item, self.act)
            for p in ACTIONABLE_PHASES
            for item in await self.api.list_migrations(p)
        ]
        work += [
            (item, self._restore)
            for item in await self.api.list_migrations("failed", FAILED_LISTED)
        ]
        for item, step in work:
            try:
                await step(MigrationView.of(item), item)
            except (ApiCallError, KubeApiError, KeyError, ValueError) as exc:
                mid = item.get("migrationID")
                log.warning("migration step failed", migration=mid, error=str(exc))
                self._result.errors.append(f"{mid}: {exc}")
        self.metrics.passes.labels("partial" if self._result.errors else "ok").inc()
        if not self._result.errors:
            self.metrics.last_success.set(self.clock().timestamp())
        return self._result

    async def _restore(self, m: MigrationView, item: dict[str, Any]) -> None:
        """A failed migration's Pods get their serving condition back (:mod:`.restore`)."""
        if m.migration_id in self._restored:
            return
        reason = str((item.get("details") or {}).get("reason") or item.get("reason") or "")
        await restore_serving(
            self.pods, m, await self._read(m), reason,
            dry_run=self.dry_run, now=self.clock(), say=self._do,
        )  # fmt: skip
        if not self.dry_run:
            self._restored.add(m.migration_id)

    def _do(self, text: str) -> None:
        self._result.actions.append(("would " if self.dry_run else "") + text)
        log.info(("would " if self.dry_run else "") + text)

    async def act(self, m: MigrationView, item: dict[str, Any]) -> None:
        now = self.clock()
        step = DRY_STEPS.get(m.phase, Step.NONE) if self.dry_run else next_step(m, self.holder, now)
        if step is Step.EVIDENCE:
            return await self._evidence(m)
        if step is Step.NONE:
            return
        if step is Step.REQUEST_LEASE:
            return await self._request_lease(m, now)
        if step is Step.WAIT:
            return
        if not self.dry_run and await self._lease_lost(m, item):
            return
        self._requested.pop(m.migration_id, None)
        if not self.dry_run and renew_due(m, now, self.lease_seconds):
            last = self._renewed.get((m.migration_id, m.fencing_token))
            if last is None or now - last >= timedelta(seconds=self.lease_seconds / 4):
                self._renewed[(m.migration_id, m.fencing_token)] = now
                await self.api.report(
                    m.migration_id, report_body("lease-renewed", self.holder, m.fencing_token)
                )
                self.metrics.reports.labels("lease-renewed").inc()
        if step is Step.CHECKPOINT:
            await self._checkpoint(m, now)
        elif step is Step.EVICT:
            await self._evict(m)
        elif step is Step.REPLACEMENT:
            await self._replacement(m)

    async def _lease_lost(self, m: MigrationView, item: dict[str, Any]) -> bool:
        """Whether the governor refused a report of ours under this lease for a lease reason
        (then :meth:`act` stops; the reason is read back from ``GET /v1/migrations/{id}``)."""
        key = (m.migration_id, m.fencing_token)
        if key in self._stopped:
            return True
        if lease_lost(item, self.holder, m.fencing_token):
            self._stopped.add(key)
            history = await self.api.get_migration(m.migration_id)
            last = (history or {}).get("decisions", [{}])[-1].get("summary", "")
            log.warning("lease lost: stopping work", migration=m.migration_id, decision=last)
            self._result.actions.append(f"stop {m.migration_id}: lease lost ({last})")
            return True
        return False

    async def _report(self, m: MigrationView, kind: str, **fields: Any) -> None:
        """Post ``kind`` under the current lease once (a duplicate would be refused); a
        ``checkpoint-committed`` once per checkpoint: the governor may refuse one (too old on its
        event time) while the lease holds, and the workload's next answer must still be posted."""
        key = (m.migration_id, m.fencing_token, kind, str(fields.get("checkpointID", "")))
        if key in self._reported:
            return
        self._do(f"report {kind} for {m.migration_id}")
        if not self.dry_run:
            await self.api.report(
                m.migration_id, report_body(kind, self.holder, m.fencing_token, **fields)
            )
            self._reported.add(key)
            self.metrics.reports.labels(kind).inc()

    async def _request_lease(self, m: MigrationView, now: datetime) -> None:
        asked = self._requested.get(m.migration_id)
        if asked is not None and now - asked < timedelta(seconds=self.lease_seconds / 2):
            return  # asked already; the governor's answer is not in the record yet
        self._do(f"request the lease of {m.migration_id} as {self.holder}")
        if not self.dry_run:
            await self.api.report(m.migration_id, report_body("lease-requested", self.holder, 0))
            self._requested[m.migration_id] = now
            self.metrics.reports.labels("lease-requested").inc()

    async def _read(self, m: MigrationView) -> list[dict[str, Any] | None]:
        """The migration's Pods as they are now (``None``: gone, or another Pod of that name)."""
        found: list[dict[str, Any] | None] = []
        for namespace, name, uid in m.pods:
            pod = await self.pods.read_pod(namespace, name)
            if pod is not None and uid and pod["metadata"].get("uid") != uid:
                pod = None
            found.append(pod)
        return found

    async def _serving_off(self, m: MigrationView, pod: dict[str, Any]) -> None:
        """Condition ``devicestate.io/serving=False`` through ``pods/status`` (ours alone: a
        strategic merge of one condition; kubelet-owned fields are never sent)."""
        meta = pod["metadata"]
        for condition in (pod.get("status") or {}).get("conditions") or []:
            if (
                condition.get("type") == handshake.SERVING_CONDITION
                and condition.get("status") == "False"
            ):
                return
        self._do(f"set {handshake.SERVING_CONDITION}=False on {meta['namespace']}/{meta['name']}")
        await self.pods.patch_pod_condition(
            meta["namespace"],
            meta["name"],
            {
                "type": handshake.SERVING_CONDITION,
                "status": "False",
                "reason": SERVING_OFF_REASON,
                "message": serving_off_message(m),
                "lastTransitionTime": format_time(self.clock().replace(microsecond=0)),
            },
            self.dry_run,
        )

    async def _checkpoint(self, m: MigrationView, now: datetime) -> None:
        pods = [p for p in await self._read(m) if p is not None]
        if not pods:
            return await self._report(m, "workload-gone", detail="no Pod of the migration exists")
        for pod in pods:
            await self._serving_off(m, pod)
        newest, problems = handshake.newest_committed(
            [pod["metadata"].get("annotations") or {} for pod in pods],
            m.migration_id,
            m.checkpoint_max_age_seconds,
            m.checkpoint_requested_at,
            now,
        )
        for problem in problems:
            log.warning("checkpoint annotation not used", migration=m.migration_id, why=problem)
        if newest is not None:
            return await self._report(
                m,
                "checkpoint-committed",
                checkpointID=newest.checkpoint_id,
                checkpointAt=format_time(newest.checkpoint_at),
            )
        if checkpoint_overdue(m, now):
            due = format_time(m.checkpoint_due) if m.checkpoint_due else "?"
            return await self._report(
                m, "checkpoint-timed-out", detail=f"no checkpoint answer by {due}"
            )
        for pod in pods:
            meta = pod["metadata"]
            if (meta.get("annotations") or {}).get(handshake.CHECKPOINT_REQUEST) != m.migration_id:
                self._do(f"ask {meta['namespace']}/{meta['name']} for a checkpoint")
                await self.pods.annotate_pod(
                    meta["namespace"],
                    meta["name"],
                    {handshake.CHECKPOINT_REQUEST: m.migration_id},
                    self.dry_run,
                )

    async def _evict(self, m: MigrationView) -> None:
        evicted = 0
        names: list[str] = []
        for pod in await self._read(m):
            if pod is None:
                continue
            meta = pod["metadata"]
            if meta.get("deletionTimestamp"):
                evicted += 1  # evicted already (before a restart): terminating
                continue
            await self._serving_off(m, pod)
            if not self.dry_run:  # first the marker: it outlives the Pod (see below)
                await write_event(
                    self.pods, m, pod, "Normal", EVICTION_REASON, eviction_message(m), self.clock()
                )
            self._do(f"evict {meta['namespace']}/{meta['name']} (policy/v1 Eviction)")
            try:
                await self.pods.evict_pod(
                    meta["namespace"], meta["name"], meta["uid"], self.dry_run
                )
            except KubeApiError as exc:
                if exc.status == 429:  # a budget refused: say which Pods went before it
                    gone = f" (evicted before the refusal: {', '.join(names)})" if names else ""
                    return await self._report(m, "eviction-refused", detail=exc.message + gone)
                if exc.status in (404, 409):  # gone, or another Pod of that name (uid precondition)
                    continue
                raise
            self.metrics.evictions.labels(str(self.dry_run).lower()).inc()
            evicted += 1
            names.append(f"{meta['namespace']}/{meta['name']}")
        if evicted:
            return await self._report(m, "evicted")
        # Every Pod is gone and none was left to evict: evicted by an executor of this
        # migration (killed before its report) when its marker Event exists, else gone.
        if await eviction_marked(self.pods, m, self.clock()):
            return await self._report(m, "evicted", detail="the Pods were evicted before")
        await self._report(m, "workload-gone", detail="every Pod of the migration is gone")

    async def _replacement(self, m: MigrationView) -> None:
        devices = [
            {"node": item["pod"]["node"], "resourceID": d["resourceID"]}
            for item in await replacements(self.api, m)
            for d in item["devices"]
        ]
        if devices:
            await self._report(m, "replacement-observed", devices=devices[:64])

    async def _evidence(self, m: MigrationView) -> None:
        if m.migration_id in self._evidence_done:
            return
        pods = [p for p in await self._read(m) if p is not None]
        if not pods:  # gone since (an old migration): nothing left to collect or to tell
            self._evidence_done.add(m.migration_id)
            return
        todo = [
            p
            for p in pods
            if (p["metadata"].get("annotations") or {}).get(EVIDENCE_DONE) != m.migration_id
        ]
        if not todo:
            self._evidence_done.add(m.migration_id)
            return
        # One Pod per post, and the tenant's Warning Event whatever the post answers: a large
        # workload's statuses would pass the API's 64 Pods or 256 KiB per body, and a refused
        # post must not keep the tenant from being told (the post is retried next pass).
        now, refused = self.clock(), None
        for pod in todo:
            meta = pod["metadata"]
            self._do(
                f"post the evidence of {m.migration_id} for {meta['namespace']}/{meta['name']}"
            )
            accepted = True
            if not self.dry_run:
                try:
                    accepted = await self.api.post_evidence(
                        m.migration_id, evidence_body(self.holder, now, [pod])
                    )
                except ApiCallError as exc:
                    accepted, refused = False, exc
                if not accepted:
                    log.warning("evidence not accepted", migration=m.migration_id, pod=meta["name"])
            await self._warn(m, pod, now)
            if accepted:
                await self.pods.annotate_pod(
                    meta["namespace"], meta["name"], {EVIDENCE_DONE: m.migration_id}, self.dry_run
                )
        if refused is not None:
            raise refused
        if not self.dry_run:
            self._evidence_done.add(m.migration_id)

    async def _warn(self, m: MigrationView, pod: dict[str, Any], now: datetime) -> None:
        """A Warning Event on the Pod: the tenant is told nothing moves."""
        meta = pod["metadata"]
        self._do(f"write a Warning Event {EVENT_REASON} on {meta['namespace']}/{meta['name']}")
        if self.dry_run:
            return
        await write_event(
            self.pods, m, pod, "Warning", EVENT_REASON, evidence_message(m), self.clock()
        )
