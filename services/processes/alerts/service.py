"""``devicestate alerts``: the decisions topic -> Alertmanager.

A :class:`~services.adapters.kafka.follow.TopicFollower` (group ``devicestate-alerts``, from the
earliest offset when the group has none) reads decisions; those with ``alert`` set become Alertmanager alerts
(:mod:`services.processes.alerts.mapping`), posted in one request per poll and partition
(:mod:`services.processes.alerts.sender`). Offsets are committed only after Alertmanager accepted the post
(or refused an alert for good, 4xx: logged, counted and skipped): delivery is at least once, and
Alertmanager deduplicates a repeated alert by its labels. When retries are exhausted the
decisions are read again from the last committed offset.

Alertmanager resolves an alert by itself ``resolve_timeout`` (default 5 min) after its last post,
so the alerts still firing are posted again every ``resend_interval_seconds`` (keep it below
``resolve_timeout``). What is firing is folded from the topic: on (re)assignment, the records
before the group's committed offset are read again, silently, to rebuild it.

SIGTERM or SIGINT stops the loop after the batch in hand (at most ``SHUTDOWN_GRACE_SECONDS``; an
interrupted post is simply not committed).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import structlog

from services.adapters.kafka.clients import TopicPartition
from services.adapters.kafka.follow import Received, Start, TopicFollower
from services.adapters.kafka.topics import TopicRole, prepare_topics
from services.domain.governance.decisions import Decision, decode_decision
from services.processes.alerts.mapping import ActiveAlerts, Alert
from services.processes.alerts.metrics import AlertMetrics
from services.processes.alerts.sender import AlertmanagerClient, PostOutcome
from services.runtime.config import AlertsProcessSettings
from services.runtime.loop import serve_metrics, stop_on_signals

log = structlog.get_logger(__name__)

ALERTS_GROUP: Final = "devicestate-alerts"
SHUTDOWN_GRACE_SECONDS: Final = 15.0


@dataclass(frozen=True, slots=True)
class AlertOptions:
    """How ``devicestate alerts`` runs besides :class:`AlertsProcessSettings`.

    ``resend_interval_seconds``: how often firing alerts are posted again (below Alertmanager's
    ``resolve_timeout``); ``generator_base_url``: the directory API's URL for ``generatorURL``
    links (none if unset); ``backoff_seconds``: first wait between retries of a post;
    ``unavailable_pause_seconds``: wait before reading again what could not be delivered.
    """

    group_id: str = ALERTS_GROUP
    resend_interval_seconds: float = 60.0
    generator_base_url: str | None = None
    metrics_port: int = 9109
    max_batch: int = 500
    poll_timeout_ms: int = 500
    backoff_seconds: float = 0.5
    unavailable_pause_seconds: float = 5.0


def _status(alert: Alert) -> str:
    return "resolved" if "endsAt" in alert else "firing"


class AlertForwarder:
    """Posts alerts and counts what happened. :meth:`post` returns ``False`` only when the
    alerts could not be delivered for now (the caller reads them again later)."""

    def __init__(self, client: AlertmanagerClient, metrics: AlertMetrics) -> None:
        self._client = client
        self._metrics = metrics

    def _sent(self, alerts: Sequence[Alert], path: str) -> None:
        for alert in alerts:
            self._metrics.sent.labels(_status(alert), path).inc()

    async def post(self, alerts: Sequence[Alert], path: str = "stream") -> bool:
        outcome = await self._client.post(alerts)
        if outcome is PostOutcome.SENT:
            self._sent(alerts, path)
            return True
        if outcome is PostOutcome.UNAVAILABLE:
            self._metrics.failed.labels("unavailable").inc(len(alerts))
            return False
        if len(alerts) == 1:
            self._metrics.failed.labels("rejected").inc()
            return True
        # One bad alert makes Alertmanager refuse the whole list: post them one by one, so only
        # the bad ones are skipped.
        delivered = True
        for alert in alerts:
            delivered = await self.post([alert], path) and delivered
        return delivered


class _Consumption:
    """Per-partition state of the consumer: where the silent rebuild of firing alerts ends."""

    def __init__(self, active: ActiveAlerts) -> None:
        self.active = active
        self.replay_until: dict[TopicPartition, int] = {}


class _RebuildOnAssign:
    """On assignment, read each partition from its beginning up to the committed offset without
    sending (to rebuild what is firing); on revocation, forget."""

    def __init__(self, consumption: _Consumption) -> None:
        self.consumption = consumption
        self.follower: TopicFollower[Decision] | None = None

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.consumption.active.clear()
        self.consumption.replay_until.clear()

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        assert self.follower is not None
        for tp in assigned:
            committed = await self.follower.committed(tp)
            if committed:
                self.consumption.replay_until[tp] = committed
                await self.follower.seek_to_beginning(tp)
                log.info("rebuilding firing alerts", partition=tp.partition, until=committed)


class AlertService:
    """The consumer loop; :func:`run_alerts` wires it up."""

    def __init__(
        self,
        follower: TopicFollower[Decision],
        forwarder: AlertForwarder,
        consumption: _Consumption,
        metrics: AlertMetrics,
        options: AlertOptions,
    ) -> None:
        self._follower = follower
        self._forwarder = forwarder
        self._state = consumption
        self._metrics = metrics
        self._options = options
        self._next_resend: float | None = None

    @property
    def rebuilding(self) -> bool:
        return bool(self._state.replay_until)

    async def handle(self, tp: TopicPartition, records: Sequence[Received[Decision]]) -> None:
        """Fold one partition's batch (``value`` ``None``: undecodable, skipped), post its alerts,
        commit after delivery (or seek back)."""
        active = self._state.active
        threshold = self._state.replay_until.get(tp)
        fresh: list[tuple[int, Decision | None]] = []
        for record in records:
            decision = record.value
            if threshold is not None and record.offset < threshold:
                if decision is not None:
                    active.apply(decision)
                continue
            fresh.append((record.offset, decision))
        if threshold is not None and records and records[-1].offset + 1 >= threshold:
            del self._state.replay_until[tp]
            log.info("firing alerts rebuilt", partition=tp.partition, firing=len(active))
        if not fresh:
            return
        before = active.snapshot()
        alerts: list[Alert] = []
        for _, decision in fresh:
            if decision is None:
                continue
            self._metrics.decisions.labels(decision.alert or "none").inc()
            alerts.extend(active.apply(decision))
        if alerts and not await self._forwarder.post(alerts):
            active.restore(before)
            self._follower.seek(tp, fresh[0][0])
            await asyncio.sleep(self._options.unavailable_pause_seconds)
            return
        await self._follower.commit({tp: fresh[-1][0] + 1})
        self._metrics.firing.set(len(active))
        if alerts:
            log.info(
                "alerts posted",
                partition=tp.partition,
                firing=sum(1 for a in alerts if "endsAt" not in a),
                resolved=sum(1 for a in alerts if "endsAt" in a),
                next_offset=fresh[-1][0] + 1,
            )

    async def _check_rebuilt(self) -> None:
        for tp, threshold in list(self._state.replay_until.items()):
            # Retention may have deleted everything before the committed offset.
            if await self._follower.position(tp) >= threshold:
                self._state.replay_until.pop(tp, None)

    async def resend_due(self, now: float) -> None:
        """Post the firing alerts again once ``resend_interval_seconds`` have passed."""
        if self.rebuilding:
            return
        if self._next_resend is None:
            self._next_resend = now + self._options.resend_interval_seconds
            return
        if now < self._next_resend:
            return
        self._next_resend = now + self._options.resend_interval_seconds
        alerts = self._state.active.firing()
        if alerts:
            await self._forwarder.post(alerts, path="resend")

    async def run(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        async for batches in self._follower.batches(stop):
            for tp, records in batches.items():
                await self.handle(tp, records)
            if self.rebuilding:
                await self._check_rebuilt()
            await self.resend_due(loop.time())


async def run_alerts(
    settings: AlertsProcessSettings,
    options: AlertOptions | None = None,
    *,
    stop: asyncio.Event | None = None,
    metrics: AlertMetrics | None = None,
) -> None:
    """Forward alerts until ``stop`` is set (or SIGTERM/SIGINT when ``stop`` is not given).

    Raises ``ValueError`` when ``settings.alert_webhook_url`` is unset.
    """
    if not settings.alert_webhook_url:
        raise ValueError("alert_webhook_url (DEVICESTATE_ALERT_WEBHOOK_URL) is not set")
    options = options or AlertOptions()
    metrics = metrics or AlertMetrics()
    stop, remove_signal_handlers = stop_on_signals(stop)
    serve_metrics(metrics.serve, options.metrics_port)

    consumption = _Consumption(ActiveAlerts(options.generator_base_url))
    listener = _RebuildOnAssign(consumption)

    def undecodable(offset: int, exc: Exception) -> None:
        metrics.decisions.labels("undecodable").inc()
        log.warning("undecodable decision skipped", offset=offset, error=str(exc))

    follower = TopicFollower(
        settings,
        [settings.decisions_topic],
        decode_decision,
        client_id="devicestate-alerts",
        group_id=options.group_id,
        start=Start.EARLIEST,
        poll_timeout_ms=options.poll_timeout_ms,
        max_records=options.max_batch,
        on_undecodable=undecodable,
        on_assigned=listener.on_partitions_assigned,
        on_revoked=listener.on_partitions_revoked,
    )
    listener.follower = follower
    client = AlertmanagerClient(
        settings.alert_webhook_url,
        retries=settings.alert_retries,
        timeout_seconds=settings.alert_timeout_seconds,
        backoff_seconds=options.backoff_seconds,
        on_retry=metrics.retried.inc,
    )
    try:
        # Checked (created if missing) first: a consumer of a missing topic waits silently.
        if not await prepare_topics(settings, (TopicRole.DECISIONS,), stop=stop):
            return
        if not await follower.start(stop):
            return
        log.info(
            "alert sender started",
            topic=settings.decisions_topic,
            group=options.group_id,
            alertmanager=client.url,
        )
        service = AlertService(
            follower, AlertForwarder(client, metrics), consumption, metrics, options
        )
        running = asyncio.create_task(service.run(stop))
        stopping = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait({running, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if running in done:
            stopping.cancel()
            running.result()
        else:
            try:
                await asyncio.wait_for(running, SHUTDOWN_GRACE_SECONDS)
            except TimeoutError:
                log.warning("stopped during a post; its decisions will be read again")
            log.info("alert sender stopped")
    finally:
        remove_signal_handlers()
        await follower.close()
        await client.close()
