"""A real Kubernetes API server for tests: kube-apiserver + etcd, built from the Go module proxy.

``ensure_binaries`` builds ``kube-apiserver`` (k8s.io/kubernetes) and ``etcd``
(go.etcd.io/etcd/server/v3) from the wrapper Go modules in ``tools/kube-apiserver`` (their go.sum
pins every module) into ``<cache>/kube/<kubernetes>-etcd<etcd>/`` and reuses them from then on;
``<cache>`` is the stack's cache root (``DEVICESTATE_STACK_CACHE_DIR``, default
``~/.cache/devicestate``). ``start`` runs etcd and kube-apiserver on 127.0.0.1 (free ports, all
state in one directory), waits for ``/readyz`` and writes two kubeconfigs: the admin
(``system:masters``) and the service identity ``system:serviceaccount:devicestate:devicestate``,
which has no RBAC rights until a test grants some. ``stop`` ends both by their recorded PIDs.

No controller-manager, scheduler or kubelet runs: objects are only stored and validated, which is
what the watcher sees of a cluster. See docs/kube-apiserver.md for the flags and why.

``python -m devtools.testenv.kubeapi build`` builds (or reuses) the binaries, as CI does.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from devtools.stack.supervisor import (
    HOST,
    Reporter,
    StackLayout,
    file_lock,
    process_start_ticks,
    tail,
    terminate,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVICE_NAMESPACE = "devicestate"
SERVICE_ACCOUNT = "devicestate"
SERVICE_USER = f"system:serviceaccount:{SERVICE_NAMESPACE}:{SERVICE_ACCOUNT}"
SERVICE_GROUPS = (
    "system:serviceaccounts",
    f"system:serviceaccounts:{SERVICE_NAMESPACE}",
    "system:authenticated",
)
ADMIN_USER = "devicestate-admin"
ADMIN_GROUPS = ("system:masters",)
SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"  # only a setting: nothing routes to it
KUBE_APISERVER_PACKAGE = "k8s.io/kubernetes/cmd/kube-apiserver"
ETCD_PACKAGE = "go.etcd.io/etcd/server/v3"  # etcd 3.5/3.6: the module root is package main
_COMPLETE_MARKER = ".complete"


class KubeAPIError(RuntimeError):
    """Building or starting the test API server failed; the message says what and where."""


def _stderr(line: str) -> None:
    print(f"[kubeapi] {line}", file=sys.stderr, flush=True)


# --- versions and binaries ------------------------------------------------------------------------
@dataclass(frozen=True)
class Versions:
    kubernetes: str  # "1.36.3"
    etcd: str  # "3.6.16"

    @property
    def key(self) -> str:
        return f"{self.kubernetes}-etcd{self.etcd}"


@dataclass(frozen=True)
class Binaries:
    kube_apiserver: Path
    etcd: Path
    versions: Versions


def tools_dir(env: Mapping[str, str] | None = None) -> Path:
    """The wrapper Go modules: ``tools/kube-apiserver`` (and its ``etcd/``) in the repository."""
    env = os.environ if env is None else env
    override = env.get("DEVICESTATE_KUBEAPI_TOOLS_DIR")
    return (
        Path(override).expanduser().resolve()
        if override
        else REPO_ROOT / "tools" / "kube-apiserver"
    )


def _required_version(go_mod: Path, module: str) -> str:
    try:
        text = go_mod.read_text()
    except OSError as exc:
        raise KubeAPIError(f"cannot read {go_mod}: {exc}") from exc
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+v(\S+)", text, re.MULTILINE)
    if match is None:
        raise KubeAPIError(f"{go_mod} does not require {module}")
    return match.group(1)


def versions(tools: Path | None = None) -> Versions:
    """The versions the wrapper modules pin (their go.mod files are the single source)."""
    tools = tools_dir() if tools is None else tools
    return Versions(
        kubernetes=_required_version(tools / "go.mod", "k8s.io/kubernetes"),
        etcd=_required_version(tools / "etcd" / "go.mod", "go.etcd.io/etcd/server/v3"),
    )


def cache_dir(vers: Versions, env: Mapping[str, str] | None = None) -> Path:
    """``<stack cache root>/kube/<kubernetes>-etcd<etcd>``, one directory per version pair."""
    root = StackLayout.from_env(env).cache_dir
    return root / "kube" / vers.key


def _go_sum_digest(tools: Path) -> str:
    digest = hashlib.sha256()
    for go_sum in (tools / "go.sum", tools / "etcd" / "go.sum"):
        with contextlib.suppress(OSError):
            digest.update(go_sum.read_bytes())
    return digest.hexdigest()


def _read_marker(directory: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((directory / _COMPLETE_MARKER).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def cached_binaries(
    tools: Path | None = None, env: Mapping[str, str] | None = None
) -> Binaries | None:
    """The cached binaries for the pinned versions, if a finished build left them."""
    tools = tools_dir(env) if tools is None else tools
    vers = versions(tools)
    directory = cache_dir(vers, env)
    binaries = Binaries(directory / "kube-apiserver", directory / "etcd", vers)
    marker = _read_marker(directory)
    if marker is None or marker.get("go_sum_sha256") != _go_sum_digest(tools):
        return None
    if not all(os.access(p, os.X_OK) for p in (binaries.kube_apiserver, binaries.etcd)):
        return None
    return binaries


def _go_command(env: Mapping[str, str]) -> str:
    go = shutil.which("go", path=env.get("PATH"))
    if go is None:
        raise KubeAPIError(
            "`go` is not on the PATH: building kube-apiserver and etcd needs Go >= 1.26 "
            "(the modules come from the Go module proxy)"
        )
    return go


def _build_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("GOMAXPROCS", "2")  # a shared 2-core machine: leave room for the rest
    env["GOFLAGS"] = "-mod=readonly"  # go.mod/go.sum in the repository decide every module
    env["CGO_ENABLED"] = "0"  # static binaries, as Kubernetes releases them
    return env


def _ldflags(vers: Versions, package: str) -> str:
    flags = ["-s", "-w"]
    if package == KUBE_APISERVER_PACKAGE:
        # What Kubernetes' own build stamps in (hack/lib/version.sh): /version then says v1.36.x.
        major, minor = vers.kubernetes.split(".")[:2]
        pkg = "k8s.io/component-base/version"
        flags += [
            f"-X {pkg}.gitVersion=v{vers.kubernetes}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
        ]
    return " ".join(flags)


def _go_build(
    go: str,
    module_dir: Path,
    package: str,
    output: Path,
    vers: Versions,
    log: Path,
    report: Reporter,
) -> float:
    """``go build`` one package into ``output`` (atomically); returns the seconds it took."""
    jobs = os.environ.get("DEVICESTATE_KUBEAPI_BUILD_JOBS", "1")
    tmp = output.with_name(output.name + ".tmp")
    command = [go, "build", "-v", "-p", jobs, "-trimpath", "-ldflags", _ldflags(vers, package)]
    command += ["-o", str(tmp), package]
    nice = shutil.which("nice")
    if nice is not None:
        command = [nice, "-n", "10", *command]
    report(f"building {package} in {module_dir} (log: {log})")
    started = time.monotonic()
    with log.open("w") as out:
        out.write("$ " + " ".join(command) + "\n")
        out.flush()
        process = subprocess.Popen(
            command,
            cwd=module_dir,
            env=_build_env(),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        next_note = started + 30
        while process.poll() is None:
            time.sleep(0.5)
            if time.monotonic() >= next_note:
                packages = sum(1 for line in tail(log, 1_000_000).splitlines() if "/" in line)
                report(
                    f"  still building {package}: {time.monotonic() - started:.0f} s, "
                    f"{packages} packages so far"
                )
                next_note += 30
    seconds = time.monotonic() - started
    if process.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise KubeAPIError(
            f"go build {package} failed (exit {process.returncode}) after {seconds:.0f} s; "
            f"last lines of {log}:\n{tail(log, 30)}"
        )
    tmp.replace(output)
    report(f"built {output.name} in {seconds:.1f} s")
    return seconds


def ensure_binaries(report: Reporter = _stderr, force: bool = False) -> Binaries:
    """Build kube-apiserver and etcd for the pinned versions, or reuse the cached ones."""
    started = time.monotonic()
    tools = tools_dir()
    vers = versions(tools)
    directory = cache_dir(vers)
    directory.mkdir(parents=True, exist_ok=True)
    with file_lock(directory / ".build.lock", report, "kube-apiserver/etcd build"):
        cached = None if force else cached_binaries(tools)
        if cached is not None:
            marker = _read_marker(directory) or {}
            report(
                f"reusing kube-apiserver v{vers.kubernetes} and etcd v{vers.etcd} from "
                f"{directory} (built {marker.get('built_at', '?')}; "
                f"checked in {time.monotonic() - started:.2f} s)"
            )
            return cached
        go = _go_command(os.environ)
        go_version = subprocess.run(
            [go, "version"], capture_output=True, text=True, check=False
        ).stdout.strip()
        report(
            f"building kube-apiserver v{vers.kubernetes} and etcd v{vers.etcd} with {go_version} "
            f"into {directory} (cold: about 5 to 11 minutes on 2 cores, see docs/kube-apiserver.md)"
        )
        (directory / _COMPLETE_MARKER).unlink(missing_ok=True)
        timings = {
            "etcd": _go_build(
                go,
                tools / "etcd",
                ETCD_PACKAGE,
                directory / "etcd",
                vers,
                directory / "build-etcd.log",
                report,
            ),
            "kube-apiserver": _go_build(
                go,
                tools,
                KUBE_APISERVER_PACKAGE,
                directory / "kube-apiserver",
                vers,
                directory / "build-kube-apiserver.log",
                report,
            ),
        }
        marker = {
            "kubernetes": vers.kubernetes,
            "etcd": vers.etcd,
            "go": go_version,
            "go_sum_sha256": _go_sum_digest(tools),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "build_seconds": {name: round(s, 1) for name, s in timings.items()},
        }
        (directory / _COMPLETE_MARKER).write_text(json.dumps(marker, indent=2) + "\n")
    report(f"kube-apiserver and etcd ready in {time.monotonic() - started:.1f} s")
    return Binaries(directory / "kube-apiserver", directory / "etcd", vers)


# --- certificates, tokens, kubeconfigs ------------------------------------------------------------
def _openssl(*args: str, cwd: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise KubeAPIError("`openssl` is not on the PATH: it makes the test certificates and keys")
    result = subprocess.run([openssl, *args], cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise KubeAPIError(f"openssl {' '.join(args)} failed: {result.stderr.strip()}")


def _make_pki(directory: Path) -> None:
    """A CA, a serving certificate for 127.0.0.1/localhost signed by it, and the service-account
    signing key pair (all ECDSA P-256, generated anew for every start)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "serving.ext").write_text(
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=serverAuth\n"
        f"subjectAltName=IP:{HOST},DNS:localhost\n"
    )
    new_key = "genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out"
    steps = [
        f"{new_key} ca.key",
        "req -x509 -new -key ca.key -subj /CN=devicestate-testenv-ca -days 3650"
        " -addext basicConstraints=critical,CA:TRUE"
        " -addext keyUsage=critical,keyCertSign,cRLSign -out ca.crt",
        f"{new_key} serving.key",
        "req -new -key serving.key -subj /CN=kube-apiserver -out serving.csr",
        "x509 -req -in serving.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650"
        " -extfile serving.ext -out serving.crt",
        f"{new_key} service-account.key",
        "pkey -in service-account.key -pubout -out service-account.pub",
    ]
    for step in steps:
        _openssl(*step.split(), cwd=directory)
    for key in directory.glob("*.key"):
        key.chmod(0o600)


def _token_file(path: Path, admin_token: str, service_token: str) -> None:
    """kube-apiserver's ``--token-auth-file``: token,user,uid,"group1,group2"."""
    lines = [
        f'{admin_token},{ADMIN_USER},devicestate-admin-uid,"{",".join(ADMIN_GROUPS)}"',
        f'{service_token},{SERVICE_USER},devicestate-service-uid,"{",".join(SERVICE_GROUPS)}"',
    ]
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o600)


def _write_kubeconfig(path: Path, server: str, ca_file: Path, user: str, token: str) -> None:
    """A kubeconfig (JSON, which is YAML too) with the CA inline, so the file stands alone."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "devicestate-testenv",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_file.read_bytes()).decode(),
                },
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [
            {
                "name": f"devicestate-testenv-{user}",
                "context": {"cluster": "devicestate-testenv", "user": user},
            }
        ],
        "current-context": f"devicestate-testenv-{user}",
        "preferences": {},
    }
    path.write_text(json.dumps(config, indent=2) + "\n")
    path.chmod(0o600)


# --- processes ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ProcessRef:
    name: str
    pid: int
    start_ticks: int | None
    log: str

    def alive(self) -> bool:
        ticks = process_start_ticks(self.pid)
        return ticks is not None and (self.start_ticks is None or ticks == self.start_ticks)


_children: dict[int, subprocess.Popen[bytes]] = {}


def _spawn(name: str, command: list[str], log: Path) -> ProcessRef:
    with log.open("ab") as out:
        out.write(("$ " + " ".join(command) + "\n").encode())
        out.flush()
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # outlives `devicestate-dev testenv up`; no terminal signals
        )
    _children[process.pid] = process
    return ProcessRef(name, process.pid, process_start_ticks(process.pid), str(log))


def _stop_process(ref: ProcessRef, report: Reporter) -> None:
    if ref.alive():
        terminate(ref.pid, ref.name, report, timeout=30.0)
    child = _children.pop(ref.pid, None)
    if child is not None:
        with contextlib.suppress(Exception):
            child.wait(timeout=5)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _free_ports(count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


def _get(
    url: str, token: str | None = None, context: ssl.SSLContext | None = None
) -> tuple[int, str]:
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as response:
            return int(response.status), response.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode(errors="replace")


def _wait_until(
    what: str, ref: ProcessRef, check: Callable[[], bool], timeout: float, report: Reporter
) -> float:
    """Poll ``check()`` (True when ready) while ``ref`` runs; returns the seconds waited."""
    started = time.monotonic()
    next_note = started + 10
    last = ""
    while True:
        try:
            if check():
                return time.monotonic() - started
            last = ""
        except (OSError, ValueError) as exc:
            last = f" ({exc})"
        if not ref.alive():
            raise KubeAPIError(
                f"{ref.name} exited before {what}; last lines of {ref.log}:\n{tail(Path(ref.log), 40)}"
            )
        if time.monotonic() - started > timeout:
            raise KubeAPIError(
                f"{what}: not ready after {timeout:.0f} s{last}; last lines of {ref.log}:\n"
                f"{tail(Path(ref.log), 40)}"
            )
        if time.monotonic() >= next_note:
            report(f"  waiting for {what}: {time.monotonic() - started:.0f} s")
            next_note += 10
        time.sleep(0.2)


# --- the running API server ------------------------------------------------------------------------
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
    _make_pki(pki)
    admin_token, service_token = secrets.token_hex(24), secrets.token_hex(24)
    _token_file(work_dir / "tokens.csv", admin_token, service_token)
    etcd_client, etcd_peer, api_port = _free_ports(3)
    etcd_url = f"http://{HOST}:{etcd_client}"
    server_url = f"https://{HOST}:{api_port}"
    data = work_dir / "etcd-data"
    shutil.rmtree(data, ignore_errors=True)

    etcd = _spawn(
        "etcd", _etcd_command(binaries.etcd, data, etcd_client, etcd_peer), work_dir / "etcd.log"
    )
    apiserver: ProcessRef | None = None
    try:
        waited = _wait_until(
            f"etcd at {etcd_url}",
            etcd,
            lambda: '"health":"true"' in _get(f"{etcd_url}/health")[1],
            timeout,
            report,
        )
        report(f"etcd v{binaries.versions.etcd} ready at {etcd_url} in {waited:.1f} s")
        apiserver = _spawn(
            "kube-apiserver",
            [
                str(binaries.kube_apiserver),
                *apiserver_flags(work_dir, pki, etcd_url, api_port),
                *extra_flags,
            ],
            work_dir / "kube-apiserver.log",
        )
        context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        waited = _wait_until(
            f"kube-apiserver at {server_url}/readyz",
            apiserver,
            lambda: _get(f"{server_url}/readyz", admin_token, context)[0] == 200,
            timeout,
            report,
        )
        report(
            f"kube-apiserver v{binaries.versions.kubernetes} ready at {server_url} in {waited:.1f} s"
        )
    except BaseException:
        if apiserver is not None:
            _stop_process(apiserver, report)
        _stop_process(etcd, report)
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
    )
    _write_kubeconfig(api.kubeconfig_admin, server_url, api.ca_file, ADMIN_USER, admin_token)
    _write_kubeconfig(api.kubeconfig_service, server_url, api.ca_file, SERVICE_USER, service_token)
    (work_dir / STATE_FILE).write_text(api.to_json())
    report(f"test API server up in {time.monotonic() - started:.1f} s; state in {work_dir}")
    return api


def stop(api: KubeAPI, report: Reporter = _stderr) -> None:
    """Stop kube-apiserver, then etcd, by their recorded PIDs (checked against start times), and
    delete etcd's data."""
    _stop_process(api.apiserver, report)
    _stop_process(api.etcd, report)
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
