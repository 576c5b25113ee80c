"""deploy/ rendered by the real kustomize and applied to the real test API server.

- Every manifest of every overlay passes server-side apply with ``dryRun=All`` (validation and
  admission, Pod Security included: the Namespace is applied for real first, with its
  ``warn: restricted`` label, so a workload that would break "restricted" comes back with a
  warning, which fails the test).
- The RBAC objects are created for real and SubjectAccessReviews check that each ServiceAccount
  can do what its process needs and nothing more; DeviceTaintRule write access exists only with
  the enforcement overlay.
- The settings the manifests pass (ConfigMap, Secret, env) are ``services.runtime.config.Settings``
  fields and build valid settings; probes, ports, volumes and security contexts fit the processes.
"""

from __future__ import annotations

import base64
import os
from typing import Any

import pytest
from kubernetes_asyncio import client

from devtools.testenv import kubeapi
from services.runtime.config import Settings
from tests.kubeapi.conftest import OVERLAYS
from tests.kubeapi.kube_rest import (
    KubeREST,
    apply_identities,
    object_ref,
    service_account_user,
    wait_until_allowed,
)

NS = "devicestate"
COMPONENTS = {
    "watcher": "watch",
    "worker": "worker",
    "api": "api",
    "alerts": "alerts",
    "recovery": "recovery",
}
"""Component label -> the devicestate subcommand its Deployment runs (every overlay)."""
ENFORCER = {"enforcer": "enforce"}
"""What the enforcement overlay adds."""
MIGRATOR = {"migrator": "migrate"}
"""What the migration overlay adds (its RBAC: tests/kubeapi/test_deploy_migration.py)."""
API_CLIENTS = ("watcher", "recovery", "enforcer", "migrator")
"""The processes that call the Kubernetes API (the only ones with a ServiceAccount token)."""


def components(overlay: str) -> dict[str, str]:
    added = {"enforcement": ENFORCER, "migration": MIGRATOR}.get(overlay, {})
    return {**COMPONENTS, **added}


Manifests = list[dict[str, Any]]
Rendered = dict[str, Manifests]


def of_kind(manifests: Manifests, kind: str) -> dict[str, dict[str, Any]]:
    return {m["metadata"]["name"]: m for m in manifests if m["kind"] == kind}


def deployments(manifests: Manifests) -> dict[str, dict[str, Any]]:
    """Component -> its Deployment."""
    return {
        d["metadata"]["labels"]["app.kubernetes.io/component"]: d
        for d in of_kind(manifests, "Deployment").values()
    }


def _container(deployment: dict[str, Any]) -> dict[str, Any]:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(container)


# --- the rendered manifests ----------------------------------------------------------------------
def test_overlays_hold_the_same_workloads_and_only_enforcement_adds_rights(
    rendered: Rendered,
) -> None:
    base = {object_ref(m) for m in rendered["base"] if m["kind"] != "ConfigMap"}
    for overlay in OVERLAYS:
        refs = {
            object_ref(m) for m in rendered[overlay] if m["kind"] not in ("ConfigMap", "Secret")
        }
        extra = refs - base
        assert base <= refs, f"{overlay} lost {base - refs}"
        if overlay == "enforcement":
            assert extra == {
                f"ServiceAccount {NS}/devicestate-enforcer",
                "ClusterRole devicestate-enforcer",
                "ClusterRoleBinding devicestate-enforcer",
                f"Deployment {NS}/devicestate-enforcer",
            }
        elif overlay == "migration":
            assert extra == {
                f"ServiceAccount {NS}/devicestate-migrator",
                "ClusterRole devicestate-migrator",
                "ClusterRoleBinding devicestate-migrator",
                f"Deployment {NS}/devicestate-migrator",
            }
        elif overlay == "adoption-enforcement":
            assert extra == {
                f"ServiceAccount {NS}/devicestate-adoption-enforcer",
                "ClusterRole devicestate-adoption-enforcer",
                "ClusterRoleBinding devicestate-adoption-enforcer",
                f"CronJob {NS}/devicestate-adoption-enforcer",
            }
        else:
            assert not extra, f"{overlay} adds {extra}"
        assert set(deployments(rendered[overlay])) == set(components(overlay))
    # The RBAC of the base reaches every overlay unchanged.
    for kind in ("ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding"):
        for name, obj in of_kind(rendered["base"], kind).items():
            for overlay in OVERLAYS:
                other = of_kind(rendered[overlay], kind)[name]
                assert other.get("rules") == obj.get("rules")
                assert other.get("subjects") == obj.get("subjects")
    # Only the dev overlay carries a Secret (production: created out of band, docs/deploy.md).
    assert [s["metadata"]["name"] for s in of_kind(rendered["dev"], "Secret").values()]
    assert not of_kind(rendered["production"], "Secret")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_deployments_are_hardened_and_probed(rendered: Rendered, overlay: str) -> None:
    manifests = rendered[overlay]
    workloads = deployments(manifests)
    images = {_container(d)["image"] for d in workloads.values()}
    assert len(images) == 1, images  # one image for every process
    (image,) = images
    if overlay == "dev":
        assert image == "devicestate:0.1.0"  # what docker compose builds
    else:
        assert image == "registry.example.com/platform/devicestate:0.1.0"
    service_accounts = of_kind(manifests, "ServiceAccount")
    for component, deployment in workloads.items():
        where = f"{overlay}: {component}"
        spec = deployment["spec"]
        pod = spec["template"]["spec"]
        container = _container(deployment)
        assert container["args"][0] == components(overlay)[component], where
        assert "command" not in container, where
        assert pod["serviceAccountName"] == f"devicestate-{component}", where
        assert pod["serviceAccountName"] in service_accounts, where
        # Only the processes that call the Kubernetes API get a token.
        assert pod["automountServiceAccountToken"] is (component in API_CLIENTS), where
        assert pod["securityContext"]["runAsNonRoot"] is True, where
        assert pod["securityContext"]["runAsUser"] == 10001, where  # the Dockerfile's USER
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, where
        security = container["securityContext"]
        assert security == {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        }, where
        resources = container["resources"]
        assert {"cpu", "memory"} <= set(resources["requests"]), where
        assert "memory" in resources["limits"], where
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            assert probe in container, f"{where}: no {probe}"
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        if component == "api":
            assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
            assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
            assert ports == {"http": 8080}
        else:
            # No health endpoint of their own: the Prometheus port answers while the process runs.
            for probe in ("livenessProbe", "readinessProbe"):
                assert container[probe]["httpGet"] == {"path": "/metrics", "port": "metrics"}
            assert set(ports) == {"metrics"}, where
        # Writable paths are volumes: /tmp everywhere, the RocksDB directory for the worker.
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert "/tmp" in mounts, where
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert all(name in volumes for name in mounts.values()), where
    for single in ("watcher", "enforcer", "migrator"):
        if single in workloads:
            spec = workloads[single]["spec"]
            assert (spec["replicas"], spec["strategy"]) == (1, {"type": "Recreate"}), single
    api = workloads["api"]["spec"]
    assert api["replicas"] >= 2
    pdb = of_kind(manifests, "PodDisruptionBudget")["devicestate-api"]
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= (
        workloads["api"]["spec"]["template"]["metadata"]["labels"].items()
    )


def _settings_env(manifests: Manifests, deployment: dict[str, Any]) -> dict[str, str]:
    """The DEVICESTATE_* environment a Deployment's container gets (ConfigMap, Secret keys with
    the dev overlay's values or a placeholder, literal env)."""
    config_maps = of_kind(manifests, "ConfigMap")
    secrets = of_kind(manifests, "Secret")
    container = _container(deployment)
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(config_maps[source["configMapRef"]["name"]]["data"])
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"]
        elif "fieldRef" in item["valueFrom"]:  # the downward API: a Pod's name, as example
            env[item["name"]] = f"{deployment['metadata']['name']}-7d9f8c6b5-x2x4q"
        else:
            ref = item["valueFrom"]["secretKeyRef"]
            secret = secrets.get(ref["name"])
            env[item["name"]] = (
                base64.b64decode(secret["data"][ref["key"]]).decode()
                if secret
                else "postgresql+asyncpg://user:password@db:5432/devicestate"  # out of band
            )
    return env


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_settings_are_devicestate_settings(
    rendered: Rendered, overlay: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifests = rendered[overlay]
    fields = set(Settings.model_fields)
    (config_map,) = of_kind(manifests, "ConfigMap").values()
    names = set(config_map["data"])
    for deployment in deployments(manifests).values():
        names |= {e["name"] for e in _container(deployment).get("env", [])}
    unknown = sorted(n for n in names if n.removeprefix("DEVICESTATE_").lower() not in fields)
    assert not unknown, f"not fields of services.runtime.config.Settings: {unknown}"
    assert all(n.startswith("DEVICESTATE_") for n in names)

    for component, deployment in deployments(manifests).items():
        for name in list(os.environ):
            if name.startswith("DEVICESTATE_"):
                monkeypatch.delenv(name)
        env = _settings_env(manifests, deployment)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        settings = Settings()  # raises if a value is invalid
        container = _container(deployment)
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        mounts = [m["mountPath"] for m in container["volumeMounts"]]
        where = f"{overlay}: {component}"
        assert settings.kubeconfig is None, where  # in-cluster config
        assert settings.log_format == "json", where
        if component == "watcher":
            assert ports["metrics"] == settings.watcher_metrics_port, where
        elif component == "worker":
            assert ports["metrics"] == settings.worker_metrics_port, where
            assert any(settings.worker_data_dir.startswith(m + "/") for m in mounts), where
            assert settings.database_url.startswith("postgresql+asyncpg://"), where
        elif component == "api":
            assert (settings.api_host, settings.api_port) == ("0.0.0.0", ports["http"]), where
            assert settings.api_tokens_file is not None
            assert any(settings.api_tokens_file.startswith(m + "/") for m in mounts), where
        else:
            assert container["args"][1:] == ["--metrics-port", str(ports["metrics"])], where
        if component == "alerts":
            assert settings.alert_webhook_url, where  # `devicestate alerts` exits without one
        if component in ("worker", "api", "enforcer"):  # the processes that read PostgreSQL
            assert settings.database_url.startswith("postgresql+asyncpg://"), where
            assert "DEVICESTATE_DATABASE_URL" not in config_map["data"], where  # a Secret only
        if component == "recovery":
            assert settings.recovery_executor == "kubernetes-job", where
            assert settings.recovery_dry_run is True, where  # dry-run until an operator says so
            assert settings.recovery_namespace == NS, where
        assert settings.enforce_dry_run is True, where
        assert settings.enforce_device_taint_rules is (overlay == "enforcement"), where
    if overlay == "dev":
        assert config_map["data"]["DEVICESTATE_LOG_LEVEL"] == "DEBUG"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_services_select_the_pods_and_ports_they_name(rendered: Rendered, overlay: str) -> None:
    manifests = rendered[overlay]
    workloads = deployments(manifests)
    services = of_kind(manifests, "Service")
    assert set(services) == {"devicestate-api", "devicestate-metrics"}
    for service in services.values():
        selector = service["spec"]["selector"].items()
        selected = [
            c
            for c, d in workloads.items()
            if selector <= d["spec"]["template"]["metadata"]["labels"].items()
        ]
        for port in service["spec"]["ports"]:
            for component in selected:
                names = {p["name"] for p in _container(workloads[component])["ports"]}
                assert port["targetPort"] in names, (service["metadata"]["name"], component)
        if service["metadata"]["name"] == "devicestate-api":
            expected = ["api"]
        else:  # every process but the API (which serves /metrics on its http port)
            expected = sorted(set(components(overlay)) - {"api"})
        assert sorted(selected) == expected
    assert services["devicestate-metrics"]["spec"]["clusterIP"] == "None"  # every Pod scraped


# --- against the API server ----------------------------------------------------------------------
@pytest.mark.parametrize("overlay", OVERLAYS)
async def test_every_manifest_passes_server_side_dry_run(
    kube_api: kubeapi.KubeAPI,
    admin_client: client.ApiClient,  # creates the namespace the other tests use first
    rendered: Rendered,
    overlay: str,
) -> None:
    manifests = rendered[overlay]
    async with KubeREST(kube_api) as rest:
        (namespace,) = of_kind(manifests, "Namespace").values()
        await rest.apply(namespace)  # for real: the namespaced objects need it
        assert len(manifests) >= 20
        for obj in manifests:
            answer = await rest.apply(obj, dry_run=True)
            # No deprecated API, no Pod Security warning (the namespace warns on "restricted").
            assert not answer.warnings, f"{object_ref(obj)}: {answer.warnings}"
            assert answer.body["kind"] == obj["kind"], object_ref(obj)
        # The Pods those Deployments would make pass "restricted" when enforced, too.
        probe_ns = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": "devicestate-psa-restricted",
                "labels": {"pod-security.kubernetes.io/enforce": "restricted"},
            },
        }
        await rest.apply(probe_ns)
        for component, deployment in deployments(manifests).items():
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{component}-probe",
                    "namespace": "devicestate-psa-restricted",
                },
                "spec": deployment["spec"]["template"]["spec"],
            }
            answer = await rest.create(pod, dry_run=True)
            assert not answer.warnings, f"{component}: {answer.warnings}"


# (verb, resource, group, namespace, subresource): "" namespace = all namespaces / cluster scope
WATCHER_MAY = [
    *[(v, "pods", "", "") for v in ("get", "list", "watch")],
    ("list", "pods", "", "ml-team"),
    *[(v, "nodes", "", "") for v in ("get", "list", "watch")],
    *[(v, "leases", "coordination.k8s.io", "kube-node-lease") for v in ("get", "list", "watch")],
    *[
        (v, r, "resource.k8s.io", "")
        for r in ("resourceslices", "resourceclaims", "deviceclasses", "devicetaintrules")
        for v in ("get", "list", "watch")
    ],
    # The owners of Pods, read one by one for the controller chains (issue 13).
    *[("get", r, "apps", "ml-team") for r in ("replicasets", "deployments", "statefulsets")],
    *[("get", r, "batch", "ml-team") for r in ("jobs", "cronjobs")],
    ("get", "jobsets", "jobset.x-k8s.io", "ml-team"),
    ("get", "leaderworkersets", "leaderworkerset.x-k8s.io", "ml-team"),
    # Warning Events about Pods: driver and claim failures (issue 16 item 3).
    *[(v, "events", "", "") for v in ("list", "watch")],
    ("list", "events", "", "ml-team"),
    # Namespaces' admin-access label: the adoption gate's tenant-boundary (issue 16).
    *[(v, "namespaces", "", "") for v in ("list", "watch")],
]
WATCHER_MAY_NOT = [
    *[(v, "namespaces", "", "") for v in ("create", "update", "patch", "delete")],
    *[(v, "events", "", "ml-team") for v in ("create", "patch", "delete")],
    ("create", "events", "events.k8s.io", "ml-team"),
    ("list", "replicasets", "apps", ""),
    ("watch", "jobs", "batch", ""),
    ("update", "deployments", "apps", "ml-team"),
    ("delete", "jobs", "batch", "ml-team"),
    *[(v, "pods", "", "ml-team") for v in ("create", "delete", "update", "patch")],
    ("patch", "pods/status", "", "ml-team"),
    ("update", "pods/status", "", "ml-team"),
    ("create", "pods/eviction", "", "ml-team"),
    ("patch", "nodes", "", ""),
    ("patch", "nodes/status", "", ""),
    ("delete", "nodes", "", ""),
    ("get", "secrets", "", NS),
    ("list", "secrets", "", ""),
    ("get", "configmaps", "", NS),
    ("list", "leases", "coordination.k8s.io", ""),
    ("list", "leases", "coordination.k8s.io", "default"),
    ("update", "leases", "coordination.k8s.io", "kube-node-lease"),
    ("create", "devicetaintrules", "resource.k8s.io", ""),  # reads others' rules (issue 15)
    ("delete", "devicetaintrules", "resource.k8s.io", ""),
    ("create", "resourceclaims", "resource.k8s.io", NS),
    ("update", "resourceslices", "resource.k8s.io", ""),
    ("create", "jobs", "batch", NS),
    ("impersonate", "serviceaccounts", "", NS),
]
RECOVERY_MAY = [
    *[(v, "jobs", "batch", NS) for v in ("create", "get", "delete")],
    ("create", "resourceclaims", "resource.k8s.io", NS),
    ("get", "nodes", "", ""),
    ("list", "resourceslices", "resource.k8s.io", ""),
    ("list", "resourceclaims", "resource.k8s.io", ""),
    ("get", "deviceclasses", "resource.k8s.io", ""),
]
RECOVERY_MAY_NOT = [
    ("create", "jobs", "batch", "default"),
    ("create", "jobs", "batch", ""),
    ("list", "jobs", "batch", NS),
    ("update", "jobs", "batch", NS),
    ("create", "resourceclaims", "resource.k8s.io", "default"),
    ("delete", "resourceclaims", "resource.k8s.io", NS),
    ("create", "pods", "", NS),
    ("delete", "pods", "", NS),
    ("list", "pods", "", ""),
    ("patch", "nodes", "", ""),
    ("get", "secrets", "", NS),
    ("create", "devicetaintrules", "resource.k8s.io", ""),
]
NOTHING = [
    ("list", "pods", "", ""),
    ("get", "nodes", "", ""),
    ("get", "secrets", "", NS),
    ("get", "configmaps", "", NS),
    ("create", "jobs", "batch", NS),
    ("list", "resourceslices", "resource.k8s.io", ""),
    ("create", "devicetaintrules", "resource.k8s.io", ""),
]


async def _check(rest: KubeREST, account: str, allowed: bool, rules: list[tuple[str, ...]]) -> None:
    user, groups = service_account_user(NS, account)
    wrong = []
    for verb, resource, group, namespace in rules:
        resource, _, subresource = resource.partition("/")
        answer = await rest.can(
            user,
            groups,
            verb,
            resource,
            group=group,
            namespace=namespace,
            subresource=subresource,
        )
        if answer is not allowed:
            wrong.append(
                f"{verb} {group or 'core'}/{resource}{'/' + subresource if subresource else ''}"
                f" in {namespace or '(all)'}"
            )
    assert not wrong, f"{account} {'cannot' if allowed else 'can'}: {wrong}"


async def test_each_service_account_can_do_what_it_needs_and_nothing_more(
    kube_api: kubeapi.KubeAPI, admin_client: client.ApiClient, rendered: Rendered
) -> None:
    async with KubeREST(kube_api) as rest:
        await apply_identities(rest, rendered["production"])
        await wait_until_allowed(rest, "devicestate-watcher", "list", "pods")
        await wait_until_allowed(
            rest,
            "devicestate-watcher",
            "watch",
            "leases",
            group="coordination.k8s.io",
            namespace="kube-node-lease",
        )
        await wait_until_allowed(
            rest, "devicestate-recovery", "create", "jobs", group="batch", namespace=NS
        )
        await _check(rest, "devicestate-watcher", True, WATCHER_MAY)
        await _check(rest, "devicestate-watcher", False, WATCHER_MAY_NOT)
        await _check(rest, "devicestate-recovery", True, RECOVERY_MAY)
        await _check(rest, "devicestate-recovery", False, RECOVERY_MAY_NOT)
        for account in ("devicestate-worker", "devicestate-api", "devicestate-alerts"):
            await _check(rest, account, False, NOTHING)
        # Without the enforcement overlay nobody of devicestate's may write DeviceTaintRules.
        await _check(
            rest,
            "devicestate-enforcer",
            False,
            [("create", "devicetaintrules", "resource.k8s.io", "")],
        )


async def test_only_the_enforcement_overlay_grants_device_taint_rules(
    kube_api: kubeapi.KubeAPI, admin_client: client.ApiClient, rendered: Rendered
) -> None:
    async with KubeREST(kube_api) as rest:
        await apply_identities(rest, rendered["enforcement"])
        await wait_until_allowed(
            rest, "devicestate-enforcer", "create", "devicetaintrules", group="resource.k8s.io"
        )
        # What services/processes/enforcement calls, and nothing more: no get, watch or patch.
        await _check(
            rest,
            "devicestate-enforcer",
            True,
            [
                (verb, "devicetaintrules", "resource.k8s.io", "")
                for verb in ("list", "create", "update", "delete")
            ],
        )
        await _check(
            rest,
            "devicestate-enforcer",
            False,
            [
                (verb, "devicetaintrules", "resource.k8s.io", "")
                for verb in ("get", "watch", "patch", "deletecollection")
            ],
        )
        await _check(rest, "devicestate-enforcer", False, NOTHING[:-1])
        await _check(
            rest,
            "devicestate-enforcer",
            False,
            [
                ("update", "resourceslices", "resource.k8s.io", ""),
                ("update", "resourceclaims", "resource.k8s.io", NS),
                ("patch", "pods/status", "", NS),
            ],
        )
        # The other identities did not gain anything from it.
        await _check(rest, "devicestate-watcher", False, WATCHER_MAY_NOT)
        await _check(rest, "devicestate-recovery", False, RECOVERY_MAY_NOT)


def test_every_deployment_runs_a_devicestate_command(rendered: Rendered) -> None:
    """Each Deployment's first argument is a command of ``devicestate`` (the image's ENTRYPOINT),
    and its options are options of that command."""
    import typer.main

    from services.cli.main import app

    commands = {c.name or c.callback.__name__: c for c in app.registered_commands if c.callback}
    every = {**deployments(rendered["enforcement"]), **deployments(rendered["migration"])}
    for component, deployment in every.items():
        args = _container(deployment)["args"]
        assert args[0] in commands, component
        command = typer.main.get_command_from_info(
            commands[args[0]],
            pretty_exceptions_short=True,
            rich_markup_mode=None,
        )
        options = {opt for param in command.params for opt in getattr(param, "opts", [])}
        assert {a for a in args[1:] if a.startswith("--")} <= options, component


def test_the_adoption_enforcer_cronjob_is_hardened_dry_run_and_alone(rendered: Rendered) -> None:
    """`devicestate adoption enforce --once` every five minutes, one run at a time, with its own
    ServiceAccount, dry-run (no --live) and the Deployments' hardening."""
    manifests = rendered["adoption-enforcement"]
    (cron,) = of_kind(manifests, "CronJob").values()
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"] == ["adoption", "enforce", "--once"]
    assert container["image"] == "registry.example.com/platform/devicestate:0.1.0"
    assert pod["serviceAccountName"] == "devicestate-adoption-enforcer"
    assert pod["serviceAccountName"] in of_kind(manifests, "ServiceAccount")
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    role = of_kind(manifests, "ClusterRole")["devicestate-adoption-enforcer"]
    assert role["rules"] == [
        {
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["validatingadmissionpolicies", "validatingadmissionpolicybindings"],
            "verbs": ["list", "create", "update", "delete"],
        }
    ]
    (config_map,) = of_kind(manifests, "ConfigMap").values()
    assert container["envFrom"] == [{"configMapRef": {"name": config_map["metadata"]["name"]}}]
    assert config_map["data"].get("DEVICESTATE_ENFORCE_DRY_RUN", "true") == "true"
