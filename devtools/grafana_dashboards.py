"""Grafana dashboards as code (issue 14 item 2): ``python -m devtools.grafana_dashboards`` writes
``deploy/grafana/dashboards/{fleet,pipeline,migrations}.json`` with grafana-foundation-sdk's builders
(``--check``: exit 1 when the committed files differ from what this module generates;
``--markdown``: print the panel list of ``docs/operations.md``).

Panels read two datasources, provisioned by ``deploy/grafana/provisioning/datasources``:
PostgreSQL (``devicestate-postgres``: the views of migration ``0008_dashboard_views``, as the
read-only role ``devicestate_dashboards``) and Prometheus (``devicestate-prometheus``: the
services' metrics and the recording rules of ``deploy/prometheus/rules.yml``). The views' schema
is the dashboard constant ``views_schema`` (``public_views``: the views of the default projection
schema ``public``). ``docs/operations.md`` lists every panel with its query.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from grafana_foundation_sdk.builders import dashboard, prometheus, stat, table, timeseries
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef

REPO: Final = Path(__file__).resolve().parents[1]
OUT_DIR: Final = REPO / "deploy" / "grafana" / "dashboards"
POSTGRES: Final = DataSourceRef(
    type_val="grafana-postgresql-datasource", uid="devicestate-postgres"
)
PROMETHEUS: Final = DataSourceRef(type_val="prometheus", uid="devicestate-prometheus")
VIEWS: Final = "${views_schema}"
"""The views' schema in panel SQL: the dashboard constant ``views_schema``."""


class SqlQuery(cogvariants.Dataquery):
    """A PostgreSQL datasource target (the SDK has no builder for it): raw SQL, table format."""

    def __init__(self, ref_id: str, raw_sql: str) -> None:
        self.ref_id = ref_id
        self.raw_sql = raw_sql

    def to_json(self) -> dict[str, Any]:
        return {
            "datasource": {"type": POSTGRES.type_val, "uid": POSTGRES.uid},
            "editorMode": "code",
            "format": "table",
            "rawQuery": True,
            "rawSql": self.raw_sql,
            "refId": self.ref_id,
        }


class Sql(cogbuilder.Builder[cogvariants.Dataquery]):
    def __init__(self, raw_sql: str, ref_id: str = "A") -> None:
        self._query = SqlQuery(ref_id, raw_sql)

    def build(self) -> cogvariants.Dataquery:
        return self._query


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


def _panel(spec: Panel) -> cogbuilder.Builder[Any]:
    builder: Any
    if spec.kind == "table":
        builder = table.Panel()
    elif spec.kind == "stat":
        builder = stat.Panel()
    else:
        builder = timeseries.Panel()
    builder = builder.title(spec.title).description(spec.description).height(8).span(12)
    if spec.sql is not None:
        builder = builder.datasource(POSTGRES).with_target(Sql(spec.sql))
    else:
        assert spec.promql is not None, spec.title
        target = prometheus.Dataquery().expr(spec.promql).ref_id("A").datasource(PROMETHEUS)
        if spec.legend:
            target = target.legend_format(spec.legend)
        builder = builder.datasource(PROMETHEUS).with_target(target)
    if spec.unit:
        builder = builder.unit(spec.unit)
    return builder  # type: ignore[no-any-return]


def build(name: str) -> dict[str, Any]:
    """The dashboard ``name`` (``fleet``, ``pipeline`` or ``migrations``) as Grafana's JSON
    model."""
    title, panels = DASHBOARDS[name]
    board = (
        dashboard.Dashboard(title)
        .uid(f"devicestate-{name}")
        .tags(["devicestate"])
        .timezone("utc")
        .time("now-6h", "now")
        .refresh("30s")
        .readonly()
        .with_variable(
            dashboard.ConstantVariable("views_schema").label("Views schema").value("public_views")
        )
    )
    for spec in panels:
        board = board.with_panel(_panel(spec))
    encoded: dict[str, Any] = json.loads(json.dumps(board.build(), cls=JSONEncoder))
    return encoded


def render(name: str) -> str:
    """The file text of dashboard ``name``: sorted keys, two-space indent, final newline."""
    return json.dumps(build(name), indent=2, sort_keys=True) + "\n"


def markdown() -> str:
    """The panel list of docs/operations.md: each dashboard's panels with their queries."""
    lines = []
    for name, (title, panels) in DASHBOARDS.items():
        lines += [f"#### {title} (`deploy/grafana/dashboards/{name}.json`)", ""]
        for spec in panels:
            source, lang = ("PostgreSQL", "sql") if spec.sql else ("Prometheus", "promql")
            query = spec.sql or spec.promql or ""
            lines += [f"- **{spec.title}** ({spec.kind}, {source}): {spec.description}", ""]
            lines += [f"  ```{lang}", *(f"  {line}" for line in query.splitlines()), "  ```", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the files are stale")
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    parser.add_argument(
        "--markdown", action="store_true", help="print the panel list of docs/operations.md"
    )
    args = parser.parse_args(argv)
    if args.markdown:
        print(markdown(), end="")
        return 0
    stale = []
    for name in DASHBOARDS:
        path: Path = args.out / f"{name}.json"
        text = render(name)
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(str(path))
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    if stale:
        print(f"stale: {', '.join(stale)}; run python -m devtools.grafana_dashboards")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
