"""DeviceTaintRule enforcement against the real kube-apiserver (v1.36, ``resource.k8s.io/v1beta2``
with ``DRADeviceTaintRules``) and the real PostgreSQL projection.

Quarantine rows are written into a fresh migrated schema as the governor writes them (upserts on
``quarantine_id``); the reconciler reads them with :class:`PostgresQuarantineSource` and writes
rules with :class:`KubernetesTaintRules`. DeviceTaintRules are cluster-scoped and the API server
is shared by the session: every test starts and ends without rules of ours, and rules that are
not ours (e.g. ``test_apiserver.py``'s) must be exactly as they were.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import urllib.request
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncEngine

from devtools.testenv import kubeapi
from services.adapters.kube.errors import KubeApiError
from services.adapters.kube.taint_rules import KubernetesTaintRules
from services.adapters.projection.governance_tables import device_governance, quarantines
from services.adapters.projection.tables import in_schema
from services.processes.enforcement.desired import LABEL_SELECTOR, label_hash, rule_name
from services.processes.enforcement.metrics import EnforcementMetrics
from services.processes.enforcement.reconciler import Reconciler
from services.processes.enforcement.source import PostgresQuarantineSource
from services.runtime.config import Settings
from tests.conftest import SchemaFactory
from tests.kubeapi.conftest import NAMESPACE

DRIVER = "gpu.example.com"
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
REPO = Path(__file__).resolve().parents[2]


# --- helpers -------------------------------------------------------------------------------------
def _quarantine(
    resource_id: str,
    *,
    node: str = "gpu-node-a",
    status: str = "active",
    quarantine_id: str | None = None,
    kind: str = "system",
    reason: str = "pod-status-unhealthy",
    at: float = 0,
) -> dict[str, Any]:
    """A ``quarantines`` row as the governor writes it."""
    created = T0 + timedelta(seconds=at)
    released = status == "released"
    return {
        "quarantine_id": quarantine_id or f"{node}/{resource_id}@{int(at) + 1}",
        "node": node,
        "resource_id": resource_id,
        "resource_claim": "team-a/train-gpus" if "/" in resource_id else None,
        "kind": kind,
        "status": status,
        "reason": reason,
        "actor": "system",
        "created_at": created,
        "expires_at": None,
        "released_at": created + timedelta(minutes=30) if released else None,
        "release_reason": "recovered" if released else None,
        "released_by": "system" if released else None,
        "confirmed_fault": True,
        "lease_holder": None,
        "fencing_token": 0,
        "lease_expires_at": None,
        "recovery_stage": "canary" if status == "recovering" else None,
        "recovery_attempts": 1 if status == "recovering" else 0,
    }


async def _write(engine: AsyncEngine, schema: str, rows: Sequence[dict[str, Any]]) -> None:
    """Upsert ``rows`` into ``quarantines`` (what the governor's writer does, replays included)."""
    if not rows:
        return
    statement = pg_insert(quarantines).values(list(rows))
    statement = statement.on_conflict_do_update(
        index_elements=["quarantine_id"],
        set_={c: statement.excluded[c] for c in rows[0] if c != "quarantine_id"},
    )
    async with engine.begin() as conn:
        await conn.execution_options(**in_schema(schema))
        await conn.execute(statement)


async def _governed(
    engine: AsyncEngine, schema: str, node: str, resource_id: str, source: str
) -> None:
    """A ``device_governance`` row: what says whether a device is DRA or device-plugin."""
    async with engine.begin() as conn:
        await conn.execution_options(**in_schema(schema))
        await conn.execute(
            device_governance.insert().values(
                node=node,
                resource_id=resource_id,
                resource_name="nvidia.com/gpu" if source == "device-plugin" else "claim:gpus/gpu",
                source=source,
                observed_health="Unhealthy",
                effective_health="Unhealthy",
                state="Quarantined",
                state_since=T0,
                snapshot={},
            )
        )


async def _rules(admin: client.ApiClient, selector: str | None = None) -> dict[str, dict[str, Any]]:
    extra = {"label_selector": selector} if selector else {}
    response = await client.ResourceV1beta2Api(admin).list_device_taint_rule(
        _preload_content=False, **extra
    )
    listed = json.loads(await response.read())
    return {item["metadata"]["name"]: item for item in listed["items"]}


async def _own(admin: client.ApiClient) -> dict[str, dict[str, Any]]:
    return await _rules(admin, LABEL_SELECTOR)


def _device_of(rule: dict[str, Any]) -> tuple[str, str, str]:
    selector = rule["spec"]["deviceSelector"]
    return (selector["driver"], selector["pool"], selector["device"])


def _reconciler(
    api_client: client.ApiClient,
    engine: AsyncEngine,
    schema: str,
    *,
    dry_run: bool = False,
    no_execute: bool = False,
) -> Reconciler:
    """A new reconciler (as after a restart: nothing carried over)."""
    return Reconciler(
        KubernetesTaintRules(api_client),
        PostgresQuarantineSource(engine, schema),
        dry_run=dry_run,
        no_execute=no_execute,
        metrics=EnforcementMetrics(),
    )


async def _unlabelled_rule(admin: client.ApiClient, driver: str, pool: str, device: str) -> str:
    """An administrator's own rule (no devicestate labels) on a device."""
    name = f"admin-{device}-{uuid.uuid4().hex[:6]}"
    await client.ResourceV1beta2Api(admin).create_device_taint_rule(
        {
            "metadata": {"name": name, "labels": {"team": "gpu-infra"}},
            "spec": {
                "deviceSelector": {"driver": driver, "pool": pool, "device": device},
                "taint": {"key": "example.com/maintenance", "value": "rma", "effect": "NoSchedule"},
            },
        }
    )
    return name


@pytest.fixture
async def clean(admin_client: client.ApiClient) -> AsyncIterator[list[str]]:
    """No rules of ours before and after the test; the test appends the names of other rules it
    makes to the yielded list (deleted at the end). Rules that existed before and are not ours
    must be unchanged at the end."""
    api = client.ResourceV1beta2Api(admin_client)
    await api.delete_collection_device_taint_rule(label_selector=LABEL_SELECTOR)
    before = await _rules(admin_client)
    extra: list[str] = []
    yield extra
    after = await _rules(admin_client)
    for name, rule in before.items():
        assert after.get(name) == rule, f"rule {name} (not ours) was changed"
    await api.delete_collection_device_taint_rule(label_selector=LABEL_SELECTOR)
    for name in extra:
        await api.delete_device_taint_rule(name)


# --- the tests ---------------------------------------------------------------------------------
async def test_one_rule_per_quarantined_dra_device_and_a_second_pass_changes_nothing(
    admin_client: client.ApiClient, engine: AsyncEngine, fresh_schema: str, clean: list[str]
) -> None:
    gpu0 = _quarantine(f"{DRIVER}/gpu-node-a/gpu-0")
    gpu1 = _quarantine(f"{DRIVER}/gpu-node-a/gpu-1", status="recovering", at=5)
    released = _quarantine(f"{DRIVER}/gpu-node-a/gpu-2", status="released", at=9)
    plugin = _quarantine("GPU-a5ced723-33de-5eef-89d7-909771744097", node="gpu-node-b")
    legacy_mig = _quarantine("MIG-GPU-a5ced723/1/0", node="gpu-node-b", at=3)
    cdi = _quarantine("k8s.gpu.example.com/claim=5f1e9a2c-gpu-0", node="gpu-node-a", at=4)
    await _write(engine, fresh_schema, [gpu0, gpu1, released, plugin, legacy_mig, cdi])
    await _governed(engine, fresh_schema, "gpu-node-b", "MIG-GPU-a5ced723/1/0", "device-plugin")

    reconciler = _reconciler(admin_client, engine, fresh_schema)
    first = await reconciler.reconcile()
    assert not first.failed and first.errors == 0
    assert sorted(first.created) == sorted(
        [rule_name(gpu0["quarantine_id"]), rule_name(gpu1["quarantine_id"])]
    )
    assert sorted((s.reason.value, s.resource_id) for s in first.skipped) == [
        ("device-plugin", "MIG-GPU-a5ced723/1/0"),
        ("unresolved", "GPU-a5ced723-33de-5eef-89d7-909771744097"),
        ("unresolved", "k8s.gpu.example.com/claim=5f1e9a2c-gpu-0"),
    ]

    own = await _own(admin_client)
    assert sorted(_device_of(r) for r in own.values()) == [
        (DRIVER, "gpu-node-a", "gpu-0"),
        (DRIVER, "gpu-node-a", "gpu-1"),
    ]
    response = await client.ResourceV1beta2Api(admin_client).read_device_taint_rule(
        rule_name(gpu0["quarantine_id"]), _preload_content=False
    )
    stored = json.loads(await response.read())
    assert (stored["apiVersion"], stored["kind"]) == ("resource.k8s.io/v1beta2", "DeviceTaintRule")
    assert stored["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "devicestate",
        "app.kubernetes.io/component": "quarantine-enforcement",
        "devicestate.io/quarantine-id": label_hash(gpu0["quarantine_id"]),
    }
    annotations = stored["metadata"]["annotations"]
    assert annotations["devicestate.io/quarantine-id"] == gpu0["quarantine_id"]
    assert annotations["devicestate.io/device"] == f"{DRIVER}/gpu-node-a/gpu-0"
    taint = stored["spec"]["taint"]
    assert (taint["key"], taint["value"], taint["effect"]) == (
        "devicestate.io/quarantined",
        "pod-status-unhealthy",
        "NoSchedule",
    )
    assert taint["timeAdded"]  # set by the server

    second = await reconciler.reconcile()
    assert not second.changed and second.errors == 0 and second.present == 2
    assert await _own(admin_client) == own  # same objects, same resourceVersions


async def test_release_removes_the_rule_and_leaves_an_unlabelled_rule_alone(
    admin_client: client.ApiClient, engine: AsyncEngine, fresh_schema: str, clean: list[str]
) -> None:
    device = f"{DRIVER}/gpu-node-a/gpu-3"
    clean.append(await _unlabelled_rule(admin_client, DRIVER, "gpu-node-a", "gpu-3"))
    admins = {n: r for n, r in (await _rules(admin_client)).items() if n in clean}
    quarantine = _quarantine(device)
    await _write(engine, fresh_schema, [quarantine])

    reconciler = _reconciler(admin_client, engine, fresh_schema)
    assert (await reconciler.reconcile()).created == [rule_name(quarantine["quarantine_id"])]
    everything = await _rules(admin_client)
    on_device = [
        n for n, r in everything.items() if _device_of(r) == (DRIVER, "gpu-node-a", "gpu-3")
    ]
    assert sorted(on_device) == sorted([rule_name(quarantine["quarantine_id"]), *clean])

    await _write(engine, fresh_schema, [{**quarantine, **_released_fields()}])
    result = await reconciler.reconcile()
    assert result.deleted == [rule_name(quarantine["quarantine_id"])] and result.errors == 0
    assert await _own(admin_client) == {}
    remaining = await _rules(admin_client)
    assert {n: remaining[n] for n in clean} == admins  # untouched, same resourceVersion
    assert not (await reconciler.reconcile()).changed


def _released_fields() -> dict[str, Any]:
    return {
        "status": "released",
        "released_at": T0 + timedelta(hours=1),
        "release_reason": "recovered",
        "released_by": "system",
    }


async def test_an_unlabelled_rule_holding_our_name_is_left_alone(
    admin_client: client.ApiClient, engine: AsyncEngine, fresh_schema: str, clean: list[str]
) -> None:
    quarantine = _quarantine(f"{DRIVER}/gpu-node-a/gpu-4")
    name = rule_name(quarantine["quarantine_id"])
    await client.ResourceV1beta2Api(admin_client).create_device_taint_rule(
        {
            "metadata": {"name": name},
            "spec": {
                "deviceSelector": {"driver": DRIVER},
                "taint": {"key": "example.com/other", "effect": "NoSchedule"},
            },
        }
    )
    clean.append(name)
    squatter = (await _rules(admin_client))[name]
    await _write(engine, fresh_schema, [quarantine])
    result = await _reconciler(admin_client, engine, fresh_schema).reconcile()
    assert result.errors == 1 and result.created == [] and result.present == 0
    assert (await _rules(admin_client))[name] == squatter


async def test_restarted_and_replayed_reconcilers_keep_exactly_one_rule_per_device(
    admin_client: client.ApiClient,
    engine: AsyncEngine,
    new_schema: SchemaFactory,
    clean: list[str],
) -> None:
    live = await new_schema()
    rows = [
        _quarantine(f"{DRIVER}/gpu-node-a/gpu-{i}", status=s, at=i)
        for i, s in enumerate(["active", "recovering", "active"])
    ]
    await _write(engine, live, rows)
    first = await _reconciler(admin_client, engine, live).reconcile()
    assert len(first.created) == 3
    own = await _own(admin_client)

    # A restart: new reconcilers (and engines' connections), same database: nothing to do.
    for _ in range(2):
        again = await _reconciler(admin_client, engine, live).reconcile()
        assert not again.changed and again.errors == 0
    # The governor writes the same rows again (a redelivered batch, a replay in place).
    await _write(engine, live, rows)
    assert not (await _reconciler(admin_client, engine, live).reconcile()).changed
    # A projection rebuilt from the log into a new schema holds the same quarantine ids.
    replayed = await new_schema()
    await _write(engine, replayed, list(reversed(rows)))
    assert not (await _reconciler(admin_client, engine, replayed).reconcile()).changed
    assert await _own(admin_client) == own

    # Two reconcilers at once (e.g. two replicas during a rollout): still one rule per device.
    more = [*rows, _quarantine(f"{DRIVER}/gpu-node-b/gpu-0", node="gpu-node-b", at=7)]
    await _write(engine, live, more)
    results = await asyncio.gather(
        _reconciler(admin_client, engine, live).reconcile(),
        _reconciler(admin_client, engine, live).reconcile(),
    )
    # One creates the new rule; the other saw it listed, or its create was refused (409).
    assert sum(len(r.created) for r in results) == 1
    devices = [_device_of(r) for r in (await _own(admin_client)).values()]
    assert len(devices) == 4 and len(set(devices)) == 4


async def test_dry_run_creates_updates_and_deletes_nothing_but_reports(
    admin_client: client.ApiClient, engine: AsyncEngine, fresh_schema: str, clean: list[str]
) -> None:
    keep = _quarantine(f"{DRIVER}/gpu-node-a/gpu-5")
    gone = _quarantine(f"{DRIVER}/gpu-node-a/gpu-6", at=1)
    await _write(engine, fresh_schema, [keep, gone])

    dry = _reconciler(admin_client, engine, fresh_schema, dry_run=True)
    report = await dry.reconcile()
    assert sorted(report.created) == sorted(rule_name(q["quarantine_id"]) for q in (keep, gone))
    assert report.dry_run and report.errors == 0
    assert await _own(admin_client) == {}
    assert (
        dry.metrics.registry.get_sample_value(
            "devicestate_enforcement_actions_total", {"action": "create", "dry_run": "true"}
        )
        == 2
    )

    await _reconciler(admin_client, engine, fresh_schema).reconcile()  # live: two rules
    own = await _own(admin_client)
    assert len(own) == 2
    await _write(engine, fresh_schema, [{**gone, **_released_fields()}])
    dry = _reconciler(admin_client, engine, fresh_schema, dry_run=True, no_execute=True)
    report = await dry.reconcile()
    # It would delete one rule and switch the other to NoExecute; the server accepted both as
    # dry runs (a DELETE's dryRun must travel in its body: the query parameter is ignored then).
    assert report.deleted == [rule_name(gone["quarantine_id"])]
    assert report.updated == [rule_name(keep["quarantine_id"])]
    assert report.errors == 0
    assert await _own(admin_client) == own


async def test_no_execute_is_an_update_in_place(
    admin_client: client.ApiClient, engine: AsyncEngine, fresh_schema: str, clean: list[str]
) -> None:
    quarantine = _quarantine(f"{DRIVER}/gpu-node-a/gpu-7", kind="manual", reason="INC 4711: xid")
    await _write(engine, fresh_schema, [quarantine])
    await _reconciler(admin_client, engine, fresh_schema).reconcile()
    (before,) = (await _own(admin_client)).values()
    assert before["spec"]["taint"]["value"] == "manual"  # free text stays in the annotation
    assert before["metadata"]["annotations"]["devicestate.io/reason"] == "INC 4711: xid"
    result = await _reconciler(admin_client, engine, fresh_schema, no_execute=True).reconcile()
    assert result.updated == [before["metadata"]["name"]] and result.errors == 0
    (after,) = (await _own(admin_client)).values()
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert after["spec"]["taint"]["effect"] == "NoExecute"


async def test_the_documented_rbac_is_enough(
    admin_client: client.ApiClient,
    service_client: client.ApiClient,
    engine: AsyncEngine,
    fresh_schema: str,
    clean: list[str],
) -> None:
    """The service identity with exactly the ClusterRole of docs/enforcement.md (list, create,
    update, delete on devicetaintrules) runs every kind of write, dry and live."""
    quarantine = _quarantine(f"{DRIVER}/gpu-node-a/gpu-8")
    await _write(engine, fresh_schema, [quarantine])
    denied = await _reconciler(service_client, engine, fresh_schema).reconcile()
    assert denied.failed  # 403 on the list: nothing written

    rbac = client.RbacAuthorizationV1Api(admin_client)
    name = f"devicestate-enforcement-{uuid.uuid4().hex[:6]}"
    await rbac.create_cluster_role(
        {
            "metadata": {"name": name},
            "rules": [
                {
                    "apiGroups": ["resource.k8s.io"],
                    "resources": ["devicetaintrules"],
                    "verbs": ["list", "create", "update", "delete"],
                }
            ],
        }
    )
    await rbac.create_cluster_role_binding(
        {
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [{"kind": "ServiceAccount", "namespace": NAMESPACE, "name": "devicestate"}],
        }
    )
    try:
        rules = KubernetesTaintRules(service_client)
        async with asyncio.timeout(15):  # the authorizer's cache picks the binding up
            while True:
                try:
                    await rules.list_rules(LABEL_SELECTOR)
                    break
                except KubeApiError as exc:
                    assert exc.status == 403, exc
                    await asyncio.sleep(0.1)
        for dry_run in (True, False):
            created = await _reconciler(
                service_client, engine, fresh_schema, dry_run=dry_run
            ).reconcile()
            assert created.created and created.errors == 0
            updated = await _reconciler(
                service_client, engine, fresh_schema, dry_run=dry_run, no_execute=True
            ).reconcile()
            assert updated.errors == 0 and updated.updated == (
                created.created if not dry_run else []
            )
        await _write(engine, fresh_schema, [{**quarantine, **_released_fields()}])
        for dry_run in (True, False):
            deleted = await _reconciler(
                service_client, engine, fresh_schema, dry_run=dry_run
            ).reconcile()
            assert deleted.errors == 0 and deleted.deleted == [
                rule_name(quarantine["quarantine_id"])
            ]
        assert await _own(admin_client) == {}
        # Nothing beyond the four verbs: no get.
        with pytest.raises(client.ApiException) as caught:
            await client.ResourceV1beta2Api(service_client).read_device_taint_rule("anything")
        assert caught.value.status == 403
    finally:
        await rbac.delete_cluster_role_binding(name)
        await rbac.delete_cluster_role(name)


async def _eventually(admin: client.ApiClient, count: int, seconds: float) -> None:
    """Until exactly ``count`` rules of ours exist."""
    async with asyncio.timeout(seconds):
        while True:
            if len(await _own(admin)) == count:
                return
            await asyncio.sleep(0.1)


async def _metrics(port: int) -> str:
    def get() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            return str(response.read().decode())

    return await asyncio.to_thread(get)


async def test_the_enforce_command_runs_and_stops_on_sigterm(
    kube_api: kubeapi.KubeAPI,
    admin_client: client.ApiClient,
    engine: AsyncEngine,
    fresh_schema: str,
    clean: list[str],
    tmp_path: Path,
) -> None:
    """``devicestate enforce --live`` as a process: creates the rule, serves metrics, removes the
    rule on release, exits 0 on SIGTERM. ``--once`` without ``--live`` is a dry run."""
    quarantine = _quarantine(f"{DRIVER}/gpu-node-a/gpu-9")
    await _write(engine, fresh_schema, [quarantine])
    env = {
        **os.environ,
        "DEVICESTATE_KUBECONFIG": str(kube_api.kubeconfig_admin),
        "DEVICESTATE_DATABASE_URL": Settings().database_url,
        "DEVICESTATE_DATABASE_SCHEMA": fresh_schema,
        "DEVICESTATE_ENFORCE_DEVICE_TAINT_RULES": "true",
        "DEVICESTATE_LOG_FORMAT": "json",
    }
    command = [sys.executable, "-m", "services.cli.main", "enforce"]
    once = await asyncio.create_subprocess_exec(
        *command, "--once", env=env, cwd=REPO, stderr=asyncio.subprocess.PIPE
    )
    _, stderr = await asyncio.wait_for(once.communicate(), 60)
    assert once.returncode == 0, stderr.decode()
    assert "would create (dry run)" in stderr.decode()
    assert await _own(admin_client) == {}

    port = kubeapi.free_port()
    log_path = tmp_path / "enforce.log"
    with log_path.open("wb") as log_file:
        process = await asyncio.create_subprocess_exec(
            *command,
            "--live",
            "--interval=0.2",
            "--no-follow-decisions",
            f"--metrics-port={port}",
            env=env,
            cwd=REPO,
            stderr=log_file,
        )
        try:
            await _eventually(admin_client, 1, 60)
            text = await _metrics(port)
            assert "devicestate_enforcement_rules_desired 1.0" in text
            assert (
                'devicestate_enforcement_actions_total{action="create",dry_run="false"} 1.0' in text
            )
            assert "devicestate_enforcement_dry_run 0.0" in text
            await _write(engine, fresh_schema, [{**quarantine, **_released_fields()}])
            await _eventually(admin_client, 0, 30)
            process.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(process.wait(), 30) == 0
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    lines = [json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{")]
    events = [line["event"] for line in lines]
    assert "device taint rule create" in events
    assert "device taint rule delete" in events
    assert events[-1] == "device taint rule enforcement stopped"
