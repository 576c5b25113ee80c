"""Rollback without deleting claims (issue 16, item 4) against the real kube-apiserver and the real
PostgreSQL projection: the ValidatingAdmissionPolicy of a rolled-back pool is enforced by the API
server itself (admissionregistration.k8s.io/v1, GA).

The pools are ``AdoptionPhaseDeclared`` rows in a fresh migrated schema, as the governor writes
them; :class:`PostgresPoolSource` reads them and :class:`KubernetesAdmissionPolicies` writes the
policies. Policies are cluster-scoped and the API server is shared by the session: every test
starts and ends without policies of ours.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client
from sqlalchemy.ext.asyncio import AsyncEngine

from devtools.testenv import kubeapi
from services.adapters.kube.admission_policies import KubernetesAdmissionPolicies
from services.adapters.kube.errors import KubeApiError
from services.adapters.projection.governance_tables import governance_decisions
from services.adapters.projection.reads_adoption import AdoptionReads
from services.adapters.projection.tables import in_schema
from services.domain.governance.adoption import (
    AdoptionDeclaration,
    Phase,
    PoolSelector,
    declaration_to_dict,
)
from services.processes.enforcement.admission_desired import LABEL_SELECTOR, object_name
from services.processes.enforcement.admission_reconciler import (
    AdmissionReconciler,
    PostgresPoolSource,
)
from services.runtime.config import Settings
from tests.kubeapi.conftest import NAMESPACE

DRIVER = "gpu.example.com"
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
REPO = Path(__file__).resolve().parents[2]
RBAC = REPO / "deploy" / "components" / "adoption-enforcement" / "rbac-adoption-enforcement.yaml"
Json = dict[str, Any]


async def _declare(
    engine: AsyncEngine, schema: str, seq: int, pool: str, phase: Phase, device_class: str
) -> None:
    """An ``AdoptionPhaseDeclared`` decision row, as the governor's writer stores it."""
    declaration = AdoptionDeclaration(pool, PoolSelector(driver=DRIVER), phase, device_class)
    payload = {
        "type": "AdoptionPhaseDeclared",
        "details": {
            "actor": "olga",
            "reason": f"declare {phase.value}",
            "adoption": declaration_to_dict(declaration),
        },
    }
    async with engine.begin() as conn:
        await conn.execution_options(**in_schema(schema))
        await conn.execute(
            governance_decisions.insert().values(
                seq=seq,
                idx=1,
                kind="AdoptionPhaseDeclared",
                at=T0 + timedelta(minutes=seq),
                payload=payload,
            )
        )


def _reconciler(
    api_client: client.ApiClient, engine: AsyncEngine, schema: str, *, dry_run: bool
) -> AdmissionReconciler:
    """A new reconciler (as after a restart: nothing carried over)."""
    return AdmissionReconciler(
        KubernetesAdmissionPolicies(api_client),
        PostgresPoolSource(AdoptionReads(engine, schema)),
        dry_run=dry_run,
    )


def _claim(name: str, device_class: str) -> Json:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "gpu", "exactly": {"deviceClassName": device_class, "count": 1}}
                ]
            }
        },
    }


async def _create_claim(
    admin: client.ApiClient, name: str, device_class: str, *, dry_run: bool = False
) -> tuple[int, str]:
    """Create a claim; ``(HTTP status, message)``."""
    extra: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
    response = await client.ResourceV1Api(admin).create_namespaced_resource_claim(
        NAMESPACE, _claim(name, device_class), _preload_content=False, **extra
    )
    body = json.loads(await response.read())
    return response.status, str(body.get("message", ""))


async def _until(admin: client.ApiClient, device_class: str, refused: bool) -> None:
    """Wait until the API server's admission sees the policy change (its informer is
    asynchronous): a dry-run create of a claim is refused (or accepted)."""
    async with asyncio.timeout(30):
        while True:
            status, _ = await _create_claim(
                admin, f"probe-{uuid.uuid4().hex[:6]}", device_class, dry_run=True
            )
            if (status >= 400) is refused:
                return
            await asyncio.sleep(0.2)


async def _ours(admin: client.ApiClient) -> dict[str, list[str]]:
    api = client.AdmissionregistrationV1Api(admin)
    policies = await api.list_validating_admission_policy(label_selector=LABEL_SELECTOR)
    bindings = await api.list_validating_admission_policy_binding(label_selector=LABEL_SELECTOR)
    return {
        "policy": sorted(p.metadata.name for p in policies.items),
        "binding": sorted(b.metadata.name for b in bindings.items),
    }


@pytest.fixture
async def clean(admin_client: client.ApiClient) -> AsyncIterator[None]:
    api = client.AdmissionregistrationV1Api(admin_client)
    await api.delete_collection_validating_admission_policy_binding(label_selector=LABEL_SELECTOR)
    await api.delete_collection_validating_admission_policy(label_selector=LABEL_SELECTOR)
    yield
    await api.delete_collection_validating_admission_policy_binding(label_selector=LABEL_SELECTOR)
    await api.delete_collection_validating_admission_policy(label_selector=LABEL_SELECTOR)


async def test_a_rolled_back_pool_refuses_new_claims_keeps_old_ones_and_lifting_it_readmits(
    admin_client: client.ApiClient, engine: AsyncEngine, fresh_schema: str, clean: None
) -> None:
    device_class = f"gpu-{uuid.uuid4().hex[:6]}.example.com"
    pool = f"east-{uuid.uuid4().hex[:6]}"
    resource = client.ResourceV1Api(admin_client)
    await resource.create_device_class(
        {
            "metadata": {"name": device_class},
            "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]},
        }
    )
    before = f"before-{pool}"
    assert (await _create_claim(admin_client, before, device_class))[0] == 201
    await _declare(engine, fresh_schema, 1, pool, Phase.CANARY, device_class)
    assert (
        await _reconciler(admin_client, engine, fresh_schema, dry_run=False).reconcile()
    ).created == []

    await _declare(engine, fresh_schema, 2, pool, Phase.ROLLED_BACK, device_class)
    dry = await _reconciler(admin_client, engine, fresh_schema, dry_run=True).reconcile()
    name = object_name(pool)
    assert dry.created == [f"policy/{name}", f"binding/{name}"] and dry.errors == 0
    assert await _ours(admin_client) == {"policy": [], "binding": []}  # a dry run writes nothing

    live = await _reconciler(admin_client, engine, fresh_schema, dry_run=False).reconcile()
    assert live.created == [f"policy/{name}", f"binding/{name}"] and live.errors == 0
    assert await _ours(admin_client) == {"policy": [name], "binding": [name]}
    again = await _reconciler(admin_client, engine, fresh_schema, dry_run=False).reconcile()
    assert again.plan is not None and again.plan.writes == []  # a second pass changes nothing

    await _until(admin_client, device_class, refused=True)
    status, message = await _create_claim(admin_client, f"after-{pool}", device_class)
    assert status in (403, 422), message
    assert f"adoption pool {pool} is rolled back" in message
    other = f"other-{pool}"  # a claim of another class is not the pool's business
    assert (await _create_claim(admin_client, other, "other.example.com"))[0] == 201
    # The claim made before stays, and its status can still be written (allocation, consumer):
    # the policy refuses CREATE only.
    kept = await resource.read_namespaced_resource_claim(before, NAMESPACE)
    assert kept.metadata.deletion_timestamp is None
    status_body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": before, "resourceVersion": kept.metadata.resource_version},
        "spec": _claim(before, device_class)["spec"],
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": DRIVER, "pool": "node-a", "device": "gpu-0"}
                    ]
                }
            },
            "reservedFor": [{"resource": "pods", "name": "trainer-0", "uid": str(uuid.uuid4())}],
        },
    }
    bound = await resource.replace_namespaced_resource_claim_status(before, NAMESPACE, status_body)
    assert bound.status.reserved_for[0].name == "trainer-0"

    # Removing the phase removes the policy; a new claim is admitted again.
    await _declare(engine, fresh_schema, 3, pool, Phase.PLUGIN, device_class)
    lifted = await _reconciler(admin_client, engine, fresh_schema, dry_run=False).reconcile()
    assert lifted.deleted == [f"binding/{name}", f"policy/{name}"] and lifted.errors == 0
    assert await _ours(admin_client) == {"policy": [], "binding": []}
    await _until(admin_client, device_class, refused=False)
    assert (await _create_claim(admin_client, f"readmitted-{pool}", device_class))[0] == 201
    assert (await resource.read_namespaced_resource_claim(before, NAMESPACE)).status.allocation
    for claim in (before, other, f"readmitted-{pool}"):
        await resource.delete_namespaced_resource_claim(claim, NAMESPACE)
    await resource.delete_device_class(device_class)


async def test_the_deployed_rbac_is_enough_and_no_more(
    admin_client: client.ApiClient,
    service_client: client.ApiClient,
    engine: AsyncEngine,
    fresh_schema: str,
    clean: None,
) -> None:
    """The service identity with exactly the ClusterRole of
    deploy/components/adoption-enforcement runs every kind of write, dry and live."""
    pool = f"west-{uuid.uuid4().hex[:6]}"
    await _declare(engine, fresh_schema, 1, pool, Phase.ROLLED_BACK, "gpu.example.com")
    denied = await _reconciler(service_client, engine, fresh_schema, dry_run=True).reconcile()
    assert denied.failed  # 403 on the list: nothing written

    [role] = [d for d in yaml.safe_load_all(RBAC.read_text()) if d["kind"] == "ClusterRole"]
    rbac = client.RbacAuthorizationV1Api(admin_client)
    name = f"devicestate-adoption-{uuid.uuid4().hex[:6]}"
    await rbac.create_cluster_role({"metadata": {"name": name}, "rules": role["rules"]})
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
        api = KubernetesAdmissionPolicies(service_client)
        async with asyncio.timeout(15):  # the authorizer's cache picks the binding up
            while True:
                try:
                    await api.list("policy", LABEL_SELECTOR)
                    break
                except KubeApiError as exc:
                    assert exc.status == 403, exc
                    await asyncio.sleep(0.1)
        for dry_run in (True, False):
            created = await _reconciler(
                service_client, engine, fresh_schema, dry_run=dry_run
            ).reconcile()
            assert created.errors == 0 and len(created.created) == 2, created
        # An update (labels changed by hand) is put back.
        admission = client.AdmissionregistrationV1Api(admin_client)
        await admission.patch_validating_admission_policy(
            object_name(pool), {"metadata": {"labels": {"devicestate.io/device-class": "x"}}}
        )
        updated = await _reconciler(service_client, engine, fresh_schema, dry_run=False).reconcile()
        assert updated.errors == 0 and updated.updated == [f"policy/{object_name(pool)}"]
        await _declare(engine, fresh_schema, 2, pool, Phase.DRA, "gpu.example.com")
        for dry_run in (True, False):
            deleted = await _reconciler(
                service_client, engine, fresh_schema, dry_run=dry_run
            ).reconcile()
            assert deleted.errors == 0 and len(deleted.deleted) == 2, deleted
        assert await _ours(admin_client) == {"policy": [], "binding": []}
        with pytest.raises(client.ApiException) as caught:  # no get
            await client.AdmissionregistrationV1Api(
                service_client
            ).read_validating_admission_policy(object_name(pool))
        assert caught.value.status == 403
    finally:
        await rbac.delete_cluster_role_binding(name)
        await rbac.delete_cluster_role(name)


async def test_the_command_is_a_dry_run_by_default_and_live_with_live(
    kube_api: kubeapi.KubeAPI,
    admin_client: client.ApiClient,
    engine: AsyncEngine,
    fresh_schema: str,
    clean: None,
) -> None:
    """``devicestate adoption enforce --once`` as a process: a dry run (nothing written, the
    would-be writes logged) unless ``--live``."""
    pool = f"north-{uuid.uuid4().hex[:6]}"
    await _declare(engine, fresh_schema, 1, pool, Phase.ROLLED_BACK, "gpu.example.com")
    env = {
        **os.environ,
        "DEVICESTATE_KUBECONFIG": str(kube_api.kubeconfig_admin),
        "DEVICESTATE_DATABASE_URL": Settings().database_url,
        "DEVICESTATE_DATABASE_SCHEMA": fresh_schema,
        "DEVICESTATE_LOG_FORMAT": "json",
    }
    command = [sys.executable, "-m", "services.cli.main", "adoption", "enforce", "--once"]
    for extra, written in (([], []), (["--live"], [object_name(pool)])):
        process = await asyncio.create_subprocess_exec(
            *command, *extra, env=env, cwd=REPO, stderr=asyncio.subprocess.PIPE
        )
        _, stderr = await asyncio.wait_for(process.communicate(), 60)
        assert process.returncode == 0, stderr.decode()
        verb = "create" if extra else "would create (dry run)"
        assert f"admission policy {verb}" in stderr.decode()
        assert await _ours(admin_client) == {"policy": written, "binding": written}
