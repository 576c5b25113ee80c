"""The replacement of a migrated workload: its new Pods holding devices, from the directory."""

from __future__ import annotations

from typing import Any

from services.processes.migration.api import MigrationsApi
from services.processes.migration.plan import MigrationView


async def replacements(api: MigrationsApi, m: MigrationView) -> list[dict[str, Any]]:
    """Pods of the same workload (top-level owner UID) that are not the migrated ones and
    hold devices, from the directory (``GET /v1/workloads``); for a ``sharded`` migration
    only those of its shard (the other shards never moved: they are not its replacement)."""
    old_uids = {uid for _, _, uid in m.pods if uid}
    old_names = {(ns, name) for ns, name, _ in m.pods}
    found: list[dict[str, Any]] = []
    for namespace in sorted({ns for ns, _, _ in m.pods}):
        for item in await api.workloads(namespace):
            pod = item["pod"]
            if item["workload"]["uid"] != m.workload_uid or not item.get("devices"):
                continue
            if m.shard is not None and (item.get("migration") or {}).get("shard") != m.shard:
                continue
            if pod["uid"] in old_uids or (not old_uids and (namespace, pod["name"]) in old_names):
                continue
            found.append(item)
    return found
