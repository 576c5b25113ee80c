"""The panels of the Grafana dashboards (issue 14 item 2) and their queries: SQL over the views of
migration ``0008_dashboard_views`` (schema :data:`VIEWS`) or PromQL over the services' metrics and
the recording rules of ``deploy/prometheus/rules.yml``. :mod:`devtools.grafana_dashboards` builds
them into ``deploy/grafana/dashboards/``; the tests parse every query with the real promtool or
run it on the real PostgreSQL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

VIEWS: Final = "${views_schema}"
"""The views' schema in panel SQL: the dashboard constant ``views_schema``."""


@dataclass(frozen=True, slots=True)
class Panel:
    """One panel: its title, what it shows (``description``), the visualisation, a SQL query over
    the views or a PromQL expression, and its unit."""

    title: str
    description: str
    kind: Literal["table", "stat", "timeseries"]
    sql: str | None = None
    promql: str | None = None
    unit: str | None = None
    legend: str | None = None


FLEET: Final = (
    Panel(
        "Devices by governance state per node",
        "One row per node, a column per governance state (the heatmap's table form).",
        "table",
        sql="SELECT node,\n"
        + ",\n".join(
            f"  sum(devices) FILTER (WHERE state = '{s}') AS \"{s}\""
            for s in (
                "Available",
                "UnknownTolerated",
                "Restricted",
                "Deferred",
                "Quarantined",
                "Recovering",
            )
        )
        + f"\nFROM {VIEWS}.devices_by_state GROUP BY node ORDER BY node",
    ),
    Panel(
        "Quarantined devices",
        "Devices in the Quarantined state.",
        "stat",
        sql=f"SELECT count(*) AS quarantined FROM {VIEWS}.device_states WHERE state = 'Quarantined'",
    ),
    Panel(
        "UnknownTolerated devices",
        "Devices reading Unknown inside their tolerance window.",
        "stat",
        sql=f"SELECT count(*) AS unknown_tolerated FROM {VIEWS}.device_states "
        "WHERE state = 'UnknownTolerated'",
    ),
    Panel(
        "Quarantines",
        "Active and recovering quarantines: reason, actor, age and expiry (seconds, event time).",
        "table",
        sql=f"SELECT node, resource_id, kind, status, reason, actor, created_at, expires_at,\n"
        f"  age_seconds, expires_in_seconds, recovery_stage, recovery_attempts\n"
        f"FROM {VIEWS}.quarantines WHERE status <> 'released' ORDER BY created_at, quarantine_id",
    ),
    Panel(
        "Unknown episodes",
        "Episodes of Unknown health per device and their duration (open: still Unknown).",
        "table",
        sql=f"SELECT node, resource_id, started_at, ended_at, open, duration_seconds\n"
        f"FROM {VIEWS}.unknown_episodes ORDER BY open DESC, duration_seconds DESC, node, resource_id",
    ),
    Panel(
        "Status age",
        "The devices observed longest ago (seconds before the newest event time).",
        "table",
        sql=f"SELECT node, resource_id, health, last_observed_at, age_seconds\n"
        f"FROM {VIEWS}.status_age ORDER BY age_seconds DESC, node, resource_id LIMIT 50",
    ),
    Panel(
        "Breaker and automation",
        "The governor's breaker (1: open, quarantines deferred) and paused automation.",
        "stat",
        sql=f"SELECT breaker_open::int AS breaker_open, automation_paused::int AS automation_paused"
        f"\nFROM {VIEWS}.governor",
    ),
    Panel(
        "Breaker open (Prometheus)",
        "The breaker as the services report it (recording rule).",
        "timeseries",
        promql="devicestate:breaker_open:max",
    ),
    Panel(
        "Capacity",
        "Devices idle, allocated, unavailable and fragmented (idle but below the common request"
        " size on their node).",
        "stat",
        sql=f"SELECT sum(idle) AS idle, sum(allocated) AS allocated,\n"
        f"  sum(unavailable) AS unavailable, sum(fragmented) AS fragmented\n"
        f"FROM {VIEWS}.capacity",
    ),
    Panel(
        "Capacity per node",
        "The capacity view per node and device class.",
        "table",
        sql=f"SELECT node, device_class, total, allocated, idle, unavailable, fragmented\n"
        f"FROM {VIEWS}.capacity ORDER BY node, device_class",
    ),
    Panel(
        "Recovery funnel",
        "Recovery stages started, passed and failed (probe, canary, stability), then released.",
        "table",
        sql=f"SELECT stage, started, passed, failed FROM {VIEWS}.recovery_funnel ORDER BY ord",
    ),
    Panel(
        "False quarantines",
        "Released quarantines without a confirmed fault, and their share of all released.",
        "stat",
        sql=f"SELECT released, released_without_fault, false_rate FROM {VIEWS}.false_quarantines",
        unit="percentunit",
    ),
    Panel(
        "DRA against plugin: bound to Ready p95",
        "Seconds from PodScheduled to Ready (p95) per DeviceClass, adoption pool and path, from the"
        " API's comparison report (docs/dra-adoption.md); a figure with too few samples has none.",
        "timeseries",
        promql='devicestate_adoption_stage_seconds{stage="bound_to_ready",quantile="0.95"}',
        unit="s",
        legend="{{class}} {{pool}} {{path}}",
    ),
    Panel(
        "DRA against plugin: idle device-hours",
        "Device-hours idle over the report window (capacity minus allocated) per DeviceClass,"
        " adoption pool and path.",
        "timeseries",
        promql='devicestate_adoption_device_hours{state="idle"}',
        legend="{{class}} {{pool}} {{path}}",
    ),
)

PIPELINE: Final = (
    Panel(
        "Ingest rate",
        "Events the watcher publishes and the worker applies, per second.",
        "timeseries",
        promql="sum by (type) (rate(devicestate_watcher_events_published_total[5m]))",
        unit="ops",
        legend="published {{type}}",
    ),
    Panel(
        "Events applied",
        "Events the worker applies to the projection, per second.",
        "timeseries",
        promql="sum(rate(devicestate_worker_events_applied_total[5m]))",
        unit="ops",
    ),
    Panel(
        "Consumer lag (records)",
        "Records behind per topic (recording rule).",
        "timeseries",
        promql="devicestate:consumer_lag:sum",
        legend="{{topic}}",
    ),
    Panel(
        "Consumer lag (seconds)",
        "Event time behind per topic (recording rule).",
        "timeseries",
        promql="devicestate:consumer_lag_seconds:max",
        unit="s",
        legend="{{topic}}",
    ),
    Panel(
        "Projection lag per partition",
        "What the projection recorded: records behind the highwater per partition.",
        "table",
        sql=f'SELECT topic, "partition", "offset", highwater, lag, last_event_at\n'
        f'FROM {VIEWS}.partition_lag ORDER BY topic, "partition"',
    ),
    Panel(
        "Dead letters",
        "Records dead-lettered per second, by stage (watcher and worker).",
        "timeseries",
        promql="devicestate:dead_letters:rate5m",
        unit="ops",
        legend="{{stage}}",
    ),
    Panel(
        "Replay progress",
        "Share of each partition applied (offset + 1 over the highwater): a replay or a catch-up"
        " reaches 1.",
        "table",
        sql=f'SELECT topic, "partition",\n'
        f'  round(coalesce("offset" + 1, 0)::numeric / nullif(highwater, 0), 4) AS progress\n'
        f'FROM {VIEWS}.partition_lag ORDER BY topic, "partition"',
        unit="percentunit",
    ),
    Panel(
        "Governor watermark",
        "The governor's event-time watermark (UTC) and how far it is behind the newest event.",
        "table",
        sql=f"SELECT watermark, as_of, watermark_behind_seconds FROM {VIEWS}.governor",
    ),
    Panel(
        "Governor staleness",
        "Seconds since the governor's watermark last moved (recording rule).",
        "timeseries",
        promql="devicestate:governor_watermark_age_seconds:min",
        unit="s",
    ),
)

MIGRATIONS: Final = (
    Panel(
        "Migrations finished",
        "Migrations off quarantined devices finished per hour, by outcome and failure reason"
        " (docs/migration.md, Metrics and alerts).",
        "timeseries",
        promql="sum by (outcome, reason) (increase(devicestate_migrations_total[1h]))",
        legend="{{outcome}} {{reason}}",
    ),
    Panel(
        "Migrations waiting",
        "Migrations waiting now, by what they wait for (a token bucket, the breaker, paused"
        " automation).",
        "timeseries",
        promql="sum by (waiting_for) (devicestate_migrations_waiting)",
        legend="{{waiting_for}}",
    ),
    Panel(
        "Refused by limits",
        "Migrations deferred per hour by the per-node and fleet limits (MigrationDeferred).",
        "timeseries",
        promql="sum by (waiting_for) (increase(devicestate_migrations_deferred_total[1h]))",
        legend="{{waiting_for}}",
    ),
    Panel(
        "Time to checkpoint p95",
        "Seconds of event time from the checkpoint request to its commit (p95 over 1 h).",
        "timeseries",
        promql="histogram_quantile(0.95, sum by (le) "
        "(rate(devicestate_migration_checkpoint_seconds_bucket[1h])))",
        unit="s",
    ),
    Panel(
        "Time to rebuild p95",
        "Seconds of event time from the device released to the replacement on a healthy device"
        " (p95 over 1 h).",
        "timeseries",
        promql="histogram_quantile(0.95, sum by (le) "
        "(rate(devicestate_migration_rebuild_seconds_bucket[1h])))",
        unit="s",
    ),
    Panel(
        "Idle quarantined GPUs",
        "GPUs quarantined with no migration under way (GPU-seconds per second: how many sit idle).",
        "timeseries",
        promql="rate(devicestate_quarantined_idle_gpu_seconds_total[15m])",
    ),
)

DASHBOARDS: Final = {
    "fleet": ("devicestate fleet", FLEET),
    "pipeline": ("devicestate pipeline", PIPELINE),
    "migrations": ("devicestate migrations", MIGRATIONS),
}
