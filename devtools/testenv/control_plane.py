"""kube-scheduler and kube-controller-manager against a test kube-apiserver.

``start(api, work_dir)`` runs both (built by :mod:`devtools.testenv.control_plane_build`, the
same ``k8s.io/kubernetes`` release as the API server) on 127.0.0.1, each with a kubeconfig of its
own bootstrap-RBAC user (``system:kube-scheduler``, ``system:kube-controller-manager``, tokens
from :class:`~devtools.testenv.kubeapi.KubeAPI`), waits for their ``/readyz`` and ``/healthz``,
and ``stop`` ends them by recorded PID. No kubelet runs: a test that wants a Pod to run plays the
kubelet's part (Node and Pod status). docs/kube-apiserver.md says why each flag is there.
"""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devtools.stack.supervisor import HOST, Reporter
from devtools.testenv import control_plane_build, gobuild
from devtools.testenv.control_plane_build import ControlPlaneBinaries
from devtools.testenv.kubeapi import (
    CONTROLLER_MANAGER_USER,
    SCHEDULER_USER,
    KubeAPI,
    KubeAPIError,
)
from devtools.testenv.kubeapi_pki import write_kubeconfig
from devtools.testenv.processes import (
    ProcessRef,
    free_ports,
    http_get,
    spawn_ready,
    stop_process,
)

_stderr = gobuild.stderr_reporter("control-plane")

FEATURE_GATES = "DRADeviceTaintRules=true"
"""As on the API server: DeviceTaintRule is beta but off by default in 1.36. The scheduler needs it
to apply rules' taints to the devices it allocates from; the controller-manager's
device-taint-eviction controller to evict for NoExecute rules."""

CONTROLLERS = "*"
"""The default controllers, node lifecycle included: it removes the ``node.kubernetes.io/not-ready``
taint that admission puts on every new Node once the Node reports Ready, and taints the Node
unreachable when its Lease is not renewed for 50 s: a test that wants a Node to stay schedulable
renews its Lease (``kube-node-lease``) as kubelet does."""


@dataclass(frozen=True)
class ControlPlane:
    """A running kube-scheduler + kube-controller-manager (what ``start`` returns)."""

    work_dir: Path
    scheduler: ProcessRef
    controller_manager: ProcessRef
    scheduler_url: str
    controller_manager_url: str
    scheduler_config: Path

    def alive(self) -> bool:
        return self.scheduler.alive() and self.controller_manager.alive()


def scheduler_configuration(
    kubeconfig: Path,
    extenders: Sequence[Mapping[str, Any]] = (),
    scheduler_name: str = "default-scheduler",
) -> dict[str, Any]:
    """A ``KubeSchedulerConfiguration`` (kubescheduler.config.k8s.io/v1): one profile named
    ``scheduler_name`` with the default plugins, no leader election, and ``extenders``
    (``Extender`` objects of that API) if any."""
    config: dict[str, Any] = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": scheduler_name}],
    }
    if extenders:
        config["extenders"] = [dict(extender) for extender in extenders]
    return config


def scheduler_flags(cert_dir: Path, config: Path, port: int) -> list[str]:
    return [
        f"--config={config}",
        f"--bind-address={HOST}",
        f"--secure-port={port}",  # never the default 10259: other servers share the machine
        f"--cert-dir={cert_dir}",  # a self-signed serving certificate made there
        f"--feature-gates={FEATURE_GATES}",
        "--v=1",
    ]


def controller_manager_flags(
    api: KubeAPI, work_dir: Path, kubeconfig: Path, port: int
) -> list[str]:
    pki = api.ca_file.parent
    return [
        f"--kubeconfig={kubeconfig}",
        f"--bind-address={HOST}",
        f"--secure-port={port}",  # never the default 10257
        f"--cert-dir={work_dir / 'controller-manager-certs'}",
        "--leader-elect=false",
        # Each controller as its own ServiceAccount in kube-system, with the bootstrap RBAC
        # roles a real cluster gives it (job-controller, resource-claim-controller, ...).
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={pki / 'service-account.key'}",
        f"--root-ca-file={api.ca_file}",
        f"--cluster-signing-cert-file={api.ca_file}",
        f"--cluster-signing-key-file={pki / 'ca.key'}",
        f"--controllers={CONTROLLERS}",
        f"--feature-gates={FEATURE_GATES}",
        "--profiling=false",
        "--v=1",
    ]


def _ok(url: str) -> bool:
    context = ssl.create_default_context()
    # Their serving certificates are self-signed, made at start in --cert-dir; loopback only.
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return http_get(url, None, context)[0] == 200


def start(
    api: KubeAPI,
    work_dir: Path,
    report: Reporter = _stderr,
    timeout: float = 120.0,
    binaries: ControlPlaneBinaries | None = None,
    extenders: Sequence[Mapping[str, Any]] = (),
) -> ControlPlane:
    """Start kube-controller-manager, then kube-scheduler, against ``api``; state in ``work_dir``.

    ``extenders`` go into the scheduler's configuration. Raises :class:`KubeAPIError` (a build
    failed, a process exited or was not ready within ``timeout`` seconds: its log's tail in the
    message); nothing is left running then."""
    started = time.monotonic()
    binaries = control_plane_build.ensure_binaries(report) if binaries is None else binaries
    if binaries.kubernetes != api.kubernetes_version:
        raise KubeAPIError(
            f"control plane v{binaries.kubernetes} against kube-apiserver v{api.kubernetes_version}"
        )
    if not api.scheduler_token or not api.controller_manager_token:
        raise KubeAPIError("this API server was started without control-plane tokens")
    work_dir = work_dir.resolve()
    work_dir.mkdir(parents=True, exist_ok=True)
    manager_kubeconfig = work_dir / "kubeconfig-controller-manager.yaml"
    write_kubeconfig(
        manager_kubeconfig,
        api.server_url,
        api.ca_file,
        CONTROLLER_MANAGER_USER,
        api.controller_manager_token,
    )
    manager_port = free_ports(1)[0]
    manager_url = f"https://{HOST}:{manager_port}"
    manager = spawn_ready(
        "kube-controller-manager",
        [
            str(binaries.kube_controller_manager),
            *controller_manager_flags(api, work_dir, manager_kubeconfig, manager_port),
        ],
        work_dir / "kube-controller-manager.log",
        f"kube-controller-manager at {manager_url}/healthz",
        lambda: _ok(f"{manager_url}/healthz"),
        timeout,
        report,
    )
    try:
        scheduler = start_scheduler(api, work_dir, report, timeout, binaries, extenders=extenders)
    except BaseException:
        stop_process(manager, report)
        raise
    report(
        f"kube-controller-manager and kube-scheduler v{binaries.kubernetes} ready in "
        f"{time.monotonic() - started:.1f} s; logs in {work_dir}"
    )
    return ControlPlane(
        work_dir=work_dir,
        scheduler=scheduler.process,
        controller_manager=manager,
        scheduler_url=scheduler.url,
        controller_manager_url=manager_url,
        scheduler_config=scheduler.config,
    )


@dataclass(frozen=True)
class Scheduler:
    """A running kube-scheduler (what ``start_scheduler`` returns)."""

    process: ProcessRef
    url: str
    config: Path
    name: str  # the profile's schedulerName: Pods with spec.schedulerName == name are its own


def start_scheduler(
    api: KubeAPI,
    work_dir: Path,
    report: Reporter = _stderr,
    timeout: float = 120.0,
    binaries: ControlPlaneBinaries | None = None,
    *,
    extenders: Sequence[Mapping[str, Any]] = (),
    scheduler_name: str = "default-scheduler",
) -> Scheduler:
    """Start one kube-scheduler against ``api`` (files in ``work_dir``, named after
    ``scheduler_name``) and wait for its ``/readyz``. Another name than ``default-scheduler``
    gives a second scheduler beside the default one, for the Pods that name it. Raises
    :class:`KubeAPIError` as :func:`start` does; stop it with ``stop_process(s.process)``."""
    binaries = control_plane_build.ensure_binaries(report) if binaries is None else binaries
    work_dir = work_dir.resolve()
    work_dir.mkdir(parents=True, exist_ok=True)
    kubeconfig = work_dir / f"kubeconfig-{scheduler_name}.yaml"
    write_kubeconfig(kubeconfig, api.server_url, api.ca_file, SCHEDULER_USER, api.scheduler_token)
    config = work_dir / f"{scheduler_name}-config.json"  # JSON is YAML too
    configuration = scheduler_configuration(kubeconfig, extenders, scheduler_name)
    config.write_text(json.dumps(configuration, indent=2) + "\n")
    port = free_ports(1)[0]
    url = f"https://{HOST}:{port}"
    process = spawn_ready(
        f"kube-scheduler ({scheduler_name})",
        [
            str(binaries.kube_scheduler),
            *scheduler_flags(work_dir / f"{scheduler_name}-certs", config, port),
        ],
        work_dir / f"{scheduler_name}.log",
        f"kube-scheduler {scheduler_name} at {url}/readyz",
        lambda: _ok(f"{url}/readyz"),  # its informers have synced
        timeout,
        report,
    )
    return Scheduler(process, url, config, scheduler_name)


def stop(plane: ControlPlane, report: Reporter = _stderr) -> None:
    """Stop kube-scheduler, then kube-controller-manager, by their recorded PIDs."""
    stop_process(plane.scheduler, report)
    stop_process(plane.controller_manager, report)
