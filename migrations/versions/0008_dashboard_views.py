"""The dashboards' read model (issue 14 item 1): versioned SQL views over the projection, in a
schema of their own, and the read-only role ``devicestate_dashboards`` that may read them.

The views live in ``<projection schema>_views`` (``public_views`` for the default schema, a
test's ``test_<hex>_views`` for a test's): they follow ``DEVICESTATE_DATABASE_SCHEMA`` as the
tables do. Their SQL is here, frozen (version 1): a change of a view is a new revision. Views run with their owner's rights, so the role reads the views and nothing else:
no base table, no write. The role is cluster-wide and ``NOLOGIN``: the migration creates it
when its user may create roles, else an administrator does (``docs/operations.md``), and grants
it the views when it exists; a dashboard's login is a member of it. Downgrade drops the views' schema and keeps the role (other
projection schemas may grant it).

Revision ID: 0008_dashboard_views
Revises: 0007_retention
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0008_dashboard_views"
down_revision: str | None = "0007_retention"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

READER_ROLE = "devicestate_dashboards"
VIEWS_VERSION = 1

# Each view reads the projection schema ``{p}``. Times are event times from the log (UTC);
# ages are seconds before ``as_of`` (the newest event time the projection applied), never the
# database's clock, so a replay gives the same rows.
VIEWS: dict[str, str] = {
    "as_of": """
        SELECT greatest(
            (SELECT max(last_event_at) FROM {p}.partition_progress),
            (SELECT watermark FROM {p}.governor_fleet WHERE id = 1)
        ) AS as_of""",
    "device_states": """
        SELECT d.node, d.resource_id, d.resource_name, d.source,
            CASE WHEN d.source = 'dra'
                THEN split_part(d.resource_id, '/', 1) || '/' || split_part(d.resource_id, '/', 2)
            END AS pool,
            CASE WHEN d.source = 'dra' THEN split_part(d.resource_id, '/', 1)
                ELSE d.resource_name END AS device_class,
            d.health, coalesce(g.state, 'Available') AS state, g.state_since,
            g.effective_health, g.effective_reason, g.quarantine_id,
            jsonb_array_length(d.allocations) > 0 AS allocated,
            d.last_observed_at,
            ARRAY(SELECT DISTINCT a ->> 'namespace' FROM jsonb_array_elements(d.allocations) AS a
                ORDER BY 1) AS namespaces
        FROM {p}.devices AS d
        LEFT JOIN {p}.device_governance AS g
            ON g.node = d.node AND g.resource_id = d.resource_id""",
    "devices_by_state": """
        SELECT s.node, s.pool, s.device_class, ns.namespace, s.state, count(*) AS devices
        FROM {v}.device_states AS s
        CROSS JOIN LATERAL unnest(
            CASE WHEN cardinality(s.namespaces) = 0 THEN ARRAY[''] ELSE s.namespaces END
        ) AS ns(namespace)
        GROUP BY s.node, s.pool, s.device_class, ns.namespace, s.state""",
    "quarantines": """
        SELECT q.quarantine_id, q.node, q.resource_id, q.resource_claim, q.kind, q.status,
            q.reason, q.actor, q.created_at, q.expires_at, q.released_at, q.release_reason,
            q.released_by, q.confirmed_fault, q.recovery_stage, q.recovery_attempts,
            extract(epoch FROM coalesce(q.released_at, a.as_of) - q.created_at)
                AS age_seconds,
            extract(epoch FROM q.expires_at - a.as_of) AS expires_in_seconds
        FROM {p}.quarantines AS q CROSS JOIN {v}.as_of AS a""",
    "unknown_episodes": """
        WITH marked AS (
            SELECT node, resource_id, observed_at, health,
                lag(health) OVER w AS previous_health,
                lead(health) OVER w AS next_health,
                lead(observed_at) OVER w AS next_at
            FROM {p}.device_history WHERE kind = 'observed'
            WINDOW w AS (PARTITION BY node, resource_id ORDER BY observed_at, "offset")
        ), numbered AS (
            SELECT *, count(*) FILTER (WHERE previous_health IS DISTINCT FROM 'Unknown')
                OVER (PARTITION BY node, resource_id ORDER BY observed_at
                    ROWS UNBOUNDED PRECEDING) AS episode
            FROM marked WHERE health = 'Unknown'
        ), episodes AS (
            -- an episode ends at the first observation that is not Unknown (none: still open)
            SELECT node, resource_id, episode, min(observed_at) AS started_at,
                max(next_at) FILTER (WHERE next_health <> 'Unknown') AS ended_at
            FROM numbered GROUP BY node, resource_id, episode
        )
        SELECT e.node, e.resource_id, e.started_at, e.ended_at, e.ended_at IS NULL AS open,
            extract(epoch FROM coalesce(e.ended_at, a.as_of) - e.started_at) AS duration_seconds
        FROM episodes AS e CROSS JOIN {v}.as_of AS a""",
    "status_age": """
        SELECT d.node, d.resource_id, d.health, d.last_observed_at,
            extract(epoch FROM a.as_of - d.last_observed_at) AS age_seconds
        FROM {p}.devices AS d CROSS JOIN {v}.as_of AS a""",
    "recovery_funnel": """
        WITH steps AS (
            SELECT payload -> 'details' ->> 'stage' AS stage, 'started' AS step
            FROM {p}.governance_decisions WHERE kind = 'RecoveryStageStarted'
            UNION ALL
            SELECT payload -> 'details' ->> 'stage', 'passed'
            FROM {p}.governance_decisions WHERE kind = 'RecoveryStagePassed'
            UNION ALL
            SELECT payload -> 'details' ->> 'stage', 'failed'
            FROM {p}.governance_decisions WHERE kind = 'RecoveryFailed'
        ), stages(stage, ord) AS (
            VALUES ('probe', 1), ('canary', 2), ('stability', 3)
        )
        SELECT s.ord, s.stage,
            count(*) FILTER (WHERE t.step = 'started') AS started,
            count(*) FILTER (WHERE t.step = 'passed') AS passed,
            count(*) FILTER (WHERE t.step = 'failed') AS failed
        FROM stages AS s LEFT JOIN steps AS t ON t.stage = s.stage
        GROUP BY s.ord, s.stage
        UNION ALL
        SELECT 4, 'released', count(*), count(*), 0
        FROM {p}.quarantines WHERE status = 'released'""",
    "false_quarantines": """
        SELECT count(*) FILTER (WHERE status = 'released') AS released,
            count(*) FILTER (WHERE status = 'released' AND NOT confirmed_fault)
                AS released_without_fault,
            (count(*) FILTER (WHERE status = 'released' AND NOT confirmed_fault))::float8
                / nullif(count(*) FILTER (WHERE status = 'released'), 0) AS false_rate
        FROM {p}.quarantines""",
    "capacity": """
        WITH sized AS (
            SELECT count(*) AS size FROM {p}.devices AS d,
                jsonb_array_elements(d.allocations) AS a
            GROUP BY a ->> 'podUID'
        ), request AS (
            -- the most frequent request size, ties to the smaller (as the capacity API)
            SELECT coalesce((SELECT size FROM sized GROUP BY size
                ORDER BY count(*) DESC, size LIMIT 1), 1) AS size
        ), classified AS (
            SELECT s.node, s.device_class, s.allocated,
                NOT s.allocated AND (s.state IN ('Quarantined', 'Recovering', 'Restricted')
                    OR s.health = 'Unhealthy') AS unavailable
            FROM {v}.device_states AS s
        ), per_node AS (
            SELECT node, device_class, count(*) AS total,
                count(*) FILTER (WHERE allocated) AS allocated,
                count(*) FILTER (WHERE unavailable) AS unavailable,
                count(*) FILTER (WHERE NOT allocated AND NOT unavailable) AS idle
            FROM classified GROUP BY node, device_class
        )
        SELECT n.node, n.device_class, n.total, n.allocated, n.idle, n.unavailable,
            CASE WHEN n.idle < r.size THEN n.idle ELSE 0 END AS fragmented,
            r.size AS request_size
        FROM per_node AS n CROSS JOIN request AS r""",
    "partition_lag": """
        SELECT topic, "partition", "offset", highwater,
            greatest(coalesce(highwater, 0) - coalesce("offset" + 1, 0), 0) AS lag,
            last_event_at, updated_at
        FROM {p}.partition_progress""",
    "governor": """
        SELECT f.watermark, f.breaker_open, f.automation_paused, a.as_of,
            extract(epoch FROM a.as_of - f.watermark) AS watermark_behind_seconds
        FROM {p}.governor_fleet AS f CROSS JOIN {v}.as_of AS a WHERE f.id = 1""",
}
"""Views in creation order (a view reads only the ones before it)."""


def views_schema(schema: str) -> str:
    """The views' schema of projection schema ``schema``; ``ValueError`` when the name would
    pass PostgreSQL's 63 characters (it would be cut, silently)."""
    name = f"{schema}_views"
    if len(name) > 63:
        raise ValueError(f"schema name {schema!r} is too long for its views' schema (57 at most)")
    return name


def _schema() -> str:
    """The target schema env.py was given (also where the version table lives)."""
    schema: str | None = op.get_context().version_table_schema
    assert schema is not None, "env.py always sets version_table_schema"
    return schema


def upgrade() -> None:
    schema = _schema()
    p, v = f'"{schema}"', f'"{views_schema(schema)}"'
    # A schema dropped without its views' schema (DROP SCHEMA ... CASCADE) leaves it empty: the
    # views went with the tables they read.
    op.execute(f"CREATE SCHEMA IF NOT EXISTS {v}")
    op.execute(f"COMMENT ON SCHEMA {v} IS 'devicestate dashboard views, version {VIEWS_VERSION}'")
    for name, sql in VIEWS.items():
        op.execute(f"CREATE VIEW {v}.{name} AS {sql.format(p=p, v=v)}")
    # Roles are cluster-wide: schemas migrating together must not both create it. A migrating
    # user without CREATEROLE leaves it to the documented SQL step (docs/operations.md).
    op.execute("SELECT pg_advisory_xact_lock(hashtext('devicestate_dashboards role'))")
    op.execute(
        f"""DO $$ BEGIN
            IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{READER_ROLE}')
                AND (SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user)
            THEN CREATE ROLE {READER_ROLE} NOLOGIN;
            END IF;
            IF EXISTS (SELECT FROM pg_roles WHERE rolname = '{READER_ROLE}') THEN
                GRANT USAGE ON SCHEMA {v} TO {READER_ROLE};
                GRANT SELECT ON ALL TABLES IN SCHEMA {v} TO {READER_ROLE};
            END IF;
        END $$"""
    )


def downgrade() -> None:
    op.execute(f'DROP SCHEMA IF EXISTS "{views_schema(_schema())}" CASCADE')
