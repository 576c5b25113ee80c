"""Grafana dashboards as code (issue 14 item 2): ``python -m devtools.grafana_dashboards`` writes
``deploy/grafana/dashboards/{fleet,pipeline,migrations}.json`` with grafana-foundation-sdk's builders
(``--check``: exit 1 when the committed files differ from what this module generates;
``--markdown``: print the panel list of ``docs/operations.md``).

Panels read two datasources, provisioned by ``deploy/grafana/provisioning/datasources``:
PostgreSQL (``devicestate-postgres``: the views of migration ``0008_dashboard_views``, as the
read-only role ``devicestate_dashboards``) and Prometheus (``devicestate-prometheus``: the
services' metrics and the recording rules of ``deploy/prometheus/rules.yml``). The views' schema
is the dashboard constant ``views_schema`` (``public_views``: the views of the default projection
schema ``public``). The panels and their queries are :mod:`devtools.grafana_panels`;
``docs/operations.md`` lists every panel with its query.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Final

from grafana_foundation_sdk.builders import dashboard, prometheus, stat, table, timeseries
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef

from devtools.grafana_panels import DASHBOARDS, Panel

REPO: Final = Path(__file__).resolve().parents[1]
OUT_DIR: Final = REPO / "deploy" / "grafana" / "dashboards"
POSTGRES: Final = DataSourceRef(
    type_val="grafana-postgresql-datasource", uid="devicestate-postgres"
)
PROMETHEUS: Final = DataSourceRef(type_val="prometheus", uid="devicestate-prometheus")


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
