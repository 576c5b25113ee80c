"""Building kube-apiserver and etcd for the test API server, from the Go module proxy.

``ensure_binaries`` builds ``kube-apiserver`` (k8s.io/kubernetes) and ``etcd``
(go.etcd.io/etcd/server/v3) from the wrapper Go modules in ``tools/kube-apiserver`` (their go.sum
pins every module) into ``<cache>/kube/<kubernetes>-etcd<etcd>/`` and reuses them from then on;
``<cache>`` is the stack's cache root (``DEVICESTATE_STACK_CACHE_DIR``, default
``~/.cache/devicestate``). The shared build steps are in :mod:`devtools.testenv.gobuild`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from devtools.stack.supervisor import Reporter, StackLayout, file_lock
from devtools.testenv import gobuild

REPO_ROOT = Path(__file__).resolve().parents[2]
KUBE_APISERVER_PACKAGE = "k8s.io/kubernetes/cmd/kube-apiserver"
ETCD_PACKAGE = "go.etcd.io/etcd/server/v3"  # etcd 3.5/3.6: the module root is package main

_stderr = gobuild.stderr_reporter("kubeapi")


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


def versions(tools: Path | None = None) -> Versions:
    """The versions the wrapper modules pin (their go.mod files are the single source)."""
    tools = tools_dir() if tools is None else tools
    return Versions(
        kubernetes=gobuild.required_version(tools / "go.mod", "k8s.io/kubernetes"),
        etcd=gobuild.required_version(tools / "etcd" / "go.mod", "go.etcd.io/etcd/server/v3"),
    )


def cache_dir(vers: Versions, env: Mapping[str, str] | None = None) -> Path:
    """``<stack cache root>/kube/<kubernetes>-etcd<etcd>``, one directory per version pair."""
    root = StackLayout.from_env(env).cache_dir
    return root / "kube" / vers.key


def _go_sum_digest(tools: Path) -> str:
    return gobuild.go_sum_digest((tools / "go.sum", tools / "etcd" / "go.sum"))


def cached_binaries(
    tools: Path | None = None, env: Mapping[str, str] | None = None
) -> Binaries | None:
    """The cached binaries for the pinned versions, if a finished build left them."""
    tools = tools_dir(env) if tools is None else tools
    vers = versions(tools)
    directory = cache_dir(vers, env)
    binaries = Binaries(directory / "kube-apiserver", directory / "etcd", vers)
    reusable = gobuild.is_reusable(
        directory,
        "go_sum_sha256",
        _go_sum_digest(tools),
        (binaries.kube_apiserver, binaries.etcd),
    )
    return binaries if reusable else None


def _ldflags(vers: Versions, package: str) -> str:
    flags = ["-s", "-w"]
    if package.startswith("k8s.io/kubernetes/cmd/"):
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


def go_build_package(
    go: str,
    module_dir: Path,
    package: str,
    output: Path,
    vers: Versions,
    log: Path,
    report: Reporter,
) -> float:
    """``go build`` one package of ``module_dir`` into ``output`` (atomically: built as
    ``<output>.tmp``, then renamed); returns the seconds it took. Packages of k8s.io/kubernetes
    get its version stamped in, as its release build does."""
    tmp = output.with_name(output.name + ".tmp")
    report(f"building {package} in {module_dir} (log: {log})")
    seconds = gobuild.go_build(
        go,
        ["-ldflags", _ldflags(vers, package), "-o", str(tmp), package],
        module_dir,
        log,
        what=package,
        report=report,
        discard=tmp,
    )
    tmp.replace(output)
    report(f"built {output.name} in {seconds:.1f} s")
    return seconds


def ensure_binaries(report: Reporter = _stderr, force: bool = False) -> Binaries:
    """Build kube-apiserver and etcd for the pinned versions, or reuse the cached ones.

    Raises :class:`~devtools.testenv.errors.KubeAPIError` (Go missing, a build failed: the log's
    tail in the message) or ``OSError`` (cache not writable)."""
    started = time.monotonic()
    tools = tools_dir()
    vers = versions(tools)
    directory = cache_dir(vers)
    directory.mkdir(parents=True, exist_ok=True)
    with file_lock(directory / ".build.lock", report, "kube-apiserver/etcd build"):
        cached = None if force else cached_binaries(tools)
        if cached is not None:
            marker = gobuild.read_marker(directory) or {}
            report(
                f"reusing kube-apiserver v{vers.kubernetes} and etcd v{vers.etcd} from "
                f"{directory} (built {marker.get('built_at', '?')}; "
                f"checked in {time.monotonic() - started:.2f} s)"
            )
            return cached
        go = gobuild.go_command(os.environ)
        go_version = gobuild.go_version(go)
        report(
            f"building kube-apiserver v{vers.kubernetes} and etcd v{vers.etcd} with {go_version} "
            f"into {directory} (cold: about 5 to 11 minutes on 2 cores, see docs/kube-apiserver.md)"
        )
        gobuild.clear_marker(directory)
        timings = {
            "etcd": go_build_package(
                go,
                tools / "etcd",
                ETCD_PACKAGE,
                directory / "etcd",
                vers,
                directory / "build-etcd.log",
                report,
            ),
            "kube-apiserver": go_build_package(
                go,
                tools,
                KUBE_APISERVER_PACKAGE,
                directory / "kube-apiserver",
                vers,
                directory / "build-kube-apiserver.log",
                report,
            ),
        }
        gobuild.write_marker(
            directory,
            {
                "kubernetes": vers.kubernetes,
                "etcd": vers.etcd,
                "go": go_version,
                "go_sum_sha256": _go_sum_digest(tools),
                "built_at": gobuild.utc_now(),
                "build_seconds": {name: round(s, 1) for name, s in timings.items()},
            },
        )
    report(f"kube-apiserver and etcd ready in {time.monotonic() - started:.1f} s")
    return Binaries(directory / "kube-apiserver", directory / "etcd", vers)
