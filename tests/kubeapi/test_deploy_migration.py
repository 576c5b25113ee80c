"""deploy/overlays/migration (``devicestate migrate``) rendered by the real kustomize and checked
on the real test API server: the executor's identity can do exactly what
``services/adapters/kube/pods.py`` calls (pods get/list/watch/patch, pods/status patch,
pods/eviction create, events create) and nothing more, only with that overlay; its settings
are dry-run, with the API's URL and a token file on a mounted Secret. The generic checks
(hardening, probes, server-side dry-run apply, one image) run on it in test_deploy.py."""

from __future__ import annotations

import os
from typing import Any

import pytest
from kubernetes_asyncio import client

from devtools.testenv import kubeapi
from services.runtime.config import MigrationProcessSettings
from tests.kubeapi.kube_rest import KubeREST, apply_identities, wait_until_allowed
from tests.kubeapi.test_deploy import (
    NOTHING,
    NS,
    RECOVERY_MAY_NOT,
    WATCHER_MAY_NOT,
    Rendered,
    _check,
    _container,
    _settings_env,
    deployments,
    of_kind,
)

ACCOUNT = "devicestate-migrator"
MIGRATOR_MAY = [
    *[(v, "pods", "", "") for v in ("get", "list", "watch", "patch")],
    ("patch", "pods", "", "ml-team"),
    ("patch", "pods/status", "", "ml-team"),
    ("create", "pods/eviction", "", "ml-team"),
    ("create", "events", "", "ml-team"),
]
MIGRATOR_MAY_NOT = [
    *[(v, "pods", "", "ml-team") for v in ("create", "delete", "update", "deletecollection")],
    ("update", "pods/status", "", "ml-team"),  # a full replace would carry kubelet's fields
    ("get", "pods/eviction", "", "ml-team"),
    ("patch", "pods/ephemeralcontainers", "", "ml-team"),
    ("create", "pods/exec", "", "ml-team"),
    *[(v, "events", "", "ml-team") for v in ("get", "list", "update", "patch", "delete")],
    ("create", "events", "events.k8s.io", "ml-team"),
    ("patch", "nodes", "", ""),
    ("get", "secrets", "", NS),
    ("get", "configmaps", "", NS),
    ("create", "jobs", "batch", NS),
    ("update", "deployments", "apps", "ml-team"),
    ("create", "devicetaintrules", "resource.k8s.io", ""),
]


async def test_the_migrator_can_do_what_it_calls_and_nothing_more(
    kube_api: kubeapi.KubeAPI, admin_client: client.ApiClient, rendered: Rendered
) -> None:
    async with KubeREST(kube_api) as rest:
        await apply_identities(rest, rendered["migration"])
        await wait_until_allowed(rest, ACCOUNT, "patch", "pods")
        await _check(rest, ACCOUNT, True, MIGRATOR_MAY)
        await _check(rest, ACCOUNT, False, MIGRATOR_MAY_NOT)
        # The other identities did not gain anything from it.
        await _check(rest, "devicestate-watcher", False, WATCHER_MAY_NOT)
        await _check(rest, "devicestate-recovery", False, RECOVERY_MAY_NOT)
        for account in ("devicestate-worker", "devicestate-api", "devicestate-alerts"):
            await _check(rest, account, False, NOTHING)


WRITE_VERBS = {"create", "update", "patch", "delete", "*"}


def _writes(rule: dict[str, Any], resources: set[str], verbs: set[str]) -> bool:
    """Whether an RBAC rule grants one of `verbs` on one of `resources`.

    Reading Events (list, watch) is the watcher's job (DRA failure signals); writing them is the
    migrator's alone.
    """
    return bool(resources & set(rule.get("resources") or [])) and bool(
        verbs & set(rule.get("verbs") or [])
    )


def test_only_the_migration_overlay_lets_devicestate_evict(rendered: Rendered) -> None:
    for overlay, manifests in rendered.items():
        grants = [
            (role["metadata"]["name"], rule)
            for role in [
                *of_kind(manifests, "ClusterRole").values(),
                *of_kind(manifests, "Role").values(),
            ]
            for rule in role.get("rules") or []
            if _writes(rule, {"pods/eviction", "pods/status", "events"}, WRITE_VERBS)
            or _writes(rule, {"pods"}, {"patch", "update", "*"})
        ]
        if overlay == "migration":
            assert {name for name, _ in grants} == {ACCOUNT}, grants
        else:
            assert not grants, f"{overlay}: {grants}"


def test_the_migrator_is_dry_run_with_the_api_and_a_token_file(
    rendered: Rendered, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifests = rendered["migration"]
    deployment = deployments(manifests)["migrator"]
    for name in list(os.environ):
        if name.startswith("DEVICESTATE_"):
            monkeypatch.delenv(name)
    for name, value in _settings_env(manifests, deployment).items():
        monkeypatch.setenv(name, value)
    settings = MigrationProcessSettings()
    assert settings.migrate_dry_run is True  # until an operator sets it to false
    assert settings.migrate_api_url == "http://devicestate-api.devicestate.svc:8080"
    api = of_kind(manifests, "Service")["devicestate-api"]
    assert [p["port"] for p in api["spec"]["ports"]] == [8080]
    container: dict[str, Any] = _container(deployment)
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    token_file = settings.migrate_api_token_file or ""
    (mount,) = [m for m in mounts if token_file.startswith(m + "/")]
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes[mounts[mount]]["secret"]["secretName"] == "devicestate-migrate-token"
    # The holder is the Pod's name: a replacement Pod takes the lease with a new fencing token.
    (holder,) = [e for e in container["env"] if e["name"] == "DEVICESTATE_MIGRATE_HOLDER"]
    assert holder["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
