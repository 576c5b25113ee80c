"""A real Kubernetes API server for tests: kube-apiserver + etcd, built from the Go module proxy.

``ensure_binaries`` (:mod:`devtools.testenv.kubeapi_build`) builds ``kube-apiserver`` and ``etcd``
from the wrapper Go modules in ``tools/kube-apiserver`` into
``<cache>/kube/<kubernetes>-etcd<etcd>/`` and reuses them from then on. ``start`` runs etcd and
kube-apiserver on 127.0.0.1 (free ports, all state in one directory), waits for ``/readyz`` and
writes two kubeconfigs (:mod:`devtools.testenv.kubeapi_pki`): the admin (``system:masters``) and
the service identity ``system:serviceaccount:devicestate:devicestate``, which has no RBAC rights
until a test grants some. ``stop`` ends both by their recorded PIDs
(:mod:`devtools.testenv.processes`).

No controller-manager, scheduler or kubelet runs here: objects are only stored and validated, which
is what the watcher sees of a cluster. :mod:`devtools.testenv.control_plane` adds kube-scheduler
and kube-controller-manager to a server for the tests that need them. See docs/kube-apiserver.md for the flags and why.

``python -m devtools.testenv.kubeapi build`` builds (or reuses) the binaries, as CI does.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import shutil
import ssl
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from devtools.stack.supervisor import HOST, Reporter
from devtools.testenv.errors import KubeAPIError
from devtools.testenv.kubeapi_build import (
    ETCD_PACKAGE,
    KUBE_APISERVER_PACKAGE,
    REPO_ROOT,
    Binaries,
    Versions,
    _stderr,
    cache_dir,
    cached_binaries,
    ensure_binaries,
    tools_dir,
    versions,
)
from devtools.testenv.kubeapi_pki import (
    ADMIN_GROUPS,
    ADMIN_USER,
    CONTROLLER_MANAGER_USER,
    SCHEDULER_USER,
    SERVICE_ACCOUNT,
    SERVICE_GROUPS,
    SERVICE_NAMESPACE,
    SERVICE_USER,
    make_pki,
    write_kubeconfig,
    write_token_file,
)
from devtools.testenv.processes import (
    ProcessRef,
    free_port,
    free_ports,
    http_get,
    spawn,
    stop_process,
    wait_until,
)

__all__ = [
    "ADMIN_GROUPS",
    "ADMIN_USER",
    "CONTROLLER_MANAGER_USER",
    "ETCD_PACKAGE",
    "KUBE_APISERVER_PACKAGE",
    "REPO_ROOT",
    "SCHEDULER_USER",
    "SERVICE_ACCOUNT",
    "SERVICE_CLUSTER_IP_RANGE",
    "SERVICE_GROUPS",
    "SERVICE_NAMESPACE",
    "SERVICE_USER",
    "STATE_FILE",
    "Binaries",
    "KubeAPI",
    "KubeAPIError",
    "ProcessRef",
    "Versions",
    "apiserver_flags",
    "cache_dir",
    "cached_binaries",
    "ensure_binaries",
    "free_port",
    "main",
    "read_state",
    "running",
    "start",
    "stop",
    "tools_dir",
    "versions",
]

SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"  # only a setting: nothing routes to it


@dataclass(frozen=True)
class KubeAPI:
    """A running etcd + kube-apiserver (what ``start`` returns and ``state.json`` records)."""

    work_dir: Path
    server_url: str
    admin_token: str
    service_token: str
    kubeconfig_admin: Path
    kubeconfig_service: Path
    ca_file: Path
    etcd_url: str
    etcd: ProcessRef
    apiserver: ProcessRef
    kubernetes_version: str
    etcd_version: str

    service_user: str = SERVICE_USER
    # Tokens of system:kube-scheduler and system:kube-controller-manager, for the control plane
    # that devtools.testenv.control_plane may start against this server.
    scheduler_token: str = ""
    controller_manager_token: str = ""

    def env(self) -> dict[str, str]:
        """Settings for the service (as its identity) and for tools (as admin)."""
        return {
            "DEVICESTATE_KUBECONFIG": str(self.kubeconfig_service),
            "DEVICESTATE_KUBEAPI_SERVER": self.server_url,
            "DEVICESTATE_KUBEAPI_ADMIN_KUBECONFIG": str(self.kubeconfig_admin),
            "DEVICESTATE_KUBEAPI_SERVICE_KUBECONFIG": str(self.kubeconfig_service),
            "DEVICESTATE_KUBEAPI_ADMIN_TOKEN": self.admin_token,
            "DEVICESTATE_KUBEAPI_CA_FILE": str(self.ca_file),
            "KUBECONFIG": str(self.kubeconfig_admin),
        }

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def alive(self) -> bool:
        return self.etcd.alive() and self.apiserver.alive()

    def to_json(self) -> str:
        data = asdict(self)
        for key, value in data.items():
            if isinstance(value, Path):
                data[key] = str(value)
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> KubeAPI:
        data = json.loads(text)
        for key in ("work_dir", "kubeconfig_admin", "kubeconfig_service", "ca_file"):
            data[key] = Path(data[key])
        data["etcd"] = ProcessRef(**data["etcd"])
        data["apiserver"] = ProcessRef(**data["apiserver"])
        return cls(**data)


STATE_FILE = "state.json"


def read_state(work_dir: Path) -> KubeAPI | None:
    try:
        return KubeAPI.from_json((work_dir / STATE_FILE).read_text())
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _etcd_command(binary: Path, data: Path, client_port: int, peer_port: int) -> list[str]:
    client, peer = f"http://{HOST}:{client_port}", f"http://{HOST}:{peer_port}"
    return [
        str(binary),
        "--name=testenv",
        f"--data-dir={data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=testenv={peer}",
        "--initial-cluster-state=new",
        "--unsafe-no-fsync",  # a throwaway test store: durability buys nothing here
        "--log-level=warn",
    ]


def apiserver_flags(work_dir: Path, pki: Path, etcd_url: str, port: int) -> list[str]:
    """kube-apiserver's flags; docs/kube-apiserver.md says why each one is there."""
    return [
        f"--etcd-servers={etcd_url}",
        f"--bind-address={HOST}",
        f"--advertise-address={HOST}",
        f"--secure-port={port}",
        f"--cert-dir={work_dir / 'apiserver-certs'}",
        f"--tls-cert-file={pki / 'serving.crt'}",
        f"--tls-private-key-file={pki / 'serving.key'}",
        f"--token-auth-file={work_dir / 'tokens.csv'}",
        "--authorization-mode=RBAC",
        "--service-account-issuer=https://kubernetes.default.svc",
        f"--service-account-key-file={pki / 'service-account.pub'}",
        f"--service-account-signing-key-file={pki / 'service-account.key'}",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        "--allow-privileged=true",
        # No controller-manager creates the "default" ServiceAccount of each namespace.
        "--disable-admission-plugins=ServiceAccount",
        # DeviceTaintRule is served at resource.k8s.io/v1beta2 (and v1alpha3) in 1.36, both off
        # by default; its gate is beta but off by default. DRADeviceTaints and
        # ResourceHealthStatus (allocatedResourcesStatus) are on by default in 1.36.
        "--feature-gates=DRADeviceTaintRules=true",
        "--runtime-config=resource.k8s.io/v1beta2=true",
        # No kubernetes Service endpoints to keep on loopback; nothing here would use them.
        "--endpoint-reconciler-type=none",
        "--profiling=false",
        "--v=1",
    ]


def start(
    work_dir: Path,
    report: Reporter = _stderr,
    timeout: float = 120.0,
    binaries: Binaries | None = None,
    extra_flags: Sequence[str] = (),
) -> KubeAPI:
    """Start etcd and kube-apiserver with all their state in ``work_dir``; wait for /readyz.

    ``extra_flags`` go to kube-apiserver after :func:`apiserver_flags` (a later flag wins), e.g.
    ``--watch-cache=false`` for a server whose watches read etcd directly."""
    started = time.monotonic()
    binaries = ensure_binaries(report) if binaries is None else binaries
    work_dir = work_dir.resolve()
    work_dir.mkdir(parents=True, exist_ok=True)
    pki = work_dir / "pki"
    make_pki(pki)
    admin_token, service_token = secrets.token_hex(24), secrets.token_hex(24)
    scheduler_token, controller_manager_token = secrets.token_hex(24), secrets.token_hex(24)
    write_token_file(
        work_dir / "tokens.csv",
        admin_token,
        service_token,
        {SCHEDULER_USER: scheduler_token, CONTROLLER_MANAGER_USER: controller_manager_token},
    )
    etcd_client, etcd_peer, api_port = free_ports(3)
    etcd_url = f"http://{HOST}:{etcd_client}"
    server_url = f"https://{HOST}:{api_port}"
    data = work_dir / "etcd-data"
    shutil.rmtree(data, ignore_errors=True)

    etcd = spawn(
        "etcd", _etcd_command(binaries.etcd, data, etcd_client, etcd_peer), work_dir / "etcd.log"
    )
    apiserver: ProcessRef | None = None
    try:
        waited = wait_until(
            f"etcd at {etcd_url}",
            etcd,
            lambda: '"health":"true"' in http_get(f"{etcd_url}/health")[1],
            timeout,
            report,
        )
        report(f"etcd v{binaries.versions.etcd} ready at {etcd_url} in {waited:.1f} s")
        apiserver = spawn(
            "kube-apiserver",
            [
                str(binaries.kube_apiserver),
                *apiserver_flags(work_dir, pki, etcd_url, api_port),
                *extra_flags,
            ],
            work_dir / "kube-apiserver.log",
        )
        context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        waited = wait_until(
            f"kube-apiserver at {server_url}/readyz",
            apiserver,
            lambda: http_get(f"{server_url}/readyz", admin_token, context)[0] == 200,
            timeout,
            report,
        )
        report(
            f"kube-apiserver v{binaries.versions.kubernetes} ready at {server_url} in {waited:.1f} s"
        )
    except BaseException:
        if apiserver is not None:
            stop_process(apiserver, report)
        stop_process(etcd, report)
        raise

    api = KubeAPI(
        work_dir=work_dir,
        server_url=server_url,
        admin_token=admin_token,
        service_token=service_token,
        kubeconfig_admin=work_dir / "kubeconfig-admin.yaml",
        kubeconfig_service=work_dir / "kubeconfig-service.yaml",
        ca_file=pki / "ca.crt",
        etcd_url=etcd_url,
        etcd=etcd,
        apiserver=apiserver,
        kubernetes_version=binaries.versions.kubernetes,
        etcd_version=binaries.versions.etcd,
        scheduler_token=scheduler_token,
        controller_manager_token=controller_manager_token,
    )
    write_kubeconfig(api.kubeconfig_admin, server_url, api.ca_file, ADMIN_USER, admin_token)
    write_kubeconfig(api.kubeconfig_service, server_url, api.ca_file, SERVICE_USER, service_token)
    (work_dir / STATE_FILE).write_text(api.to_json())
    report(f"test API server up in {time.monotonic() - started:.1f} s; state in {work_dir}")
    return api


def stop(api: KubeAPI, report: Reporter = _stderr) -> None:
    """Stop kube-apiserver, then etcd, by their recorded PIDs (checked against start times), and
    delete etcd's data."""
    stop_process(api.apiserver, report)
    stop_process(api.etcd, report)
    (api.work_dir / STATE_FILE).unlink(missing_ok=True)
    # Every start begins with an empty store (new tokens, new ports): the old data is no use,
    # and etcd preallocates 64 MB of WAL.
    if not api.etcd.alive():
        shutil.rmtree(api.work_dir / "etcd-data", ignore_errors=True)


@contextlib.contextmanager
def running(
    work_dir: Path, report: Reporter = _stderr, timeout: float = 120.0
) -> Iterator[KubeAPI]:
    api = start(work_dir, report, timeout)
    try:
        yield api
    finally:
        stop(api, report)


def main(argv: list[str] | None = None) -> int:
    """``python -m devtools.testenv.kubeapi build``: build or reuse the binaries (used by CI)."""
    args = sys.argv[1:] if argv is None else argv
    if args not in (["build"], ["build", "--force"]):
        print("usage: python -m devtools.testenv.kubeapi build [--force]", file=sys.stderr)
        return 2
    try:
        binaries = ensure_binaries(force="--force" in args)
    except KubeAPIError as exc:
        _stderr(f"ERROR: {exc}")
        return 1
    print(f"KUBE_APISERVER={binaries.kube_apiserver}")
    print(f"ETCD={binaries.etcd}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
