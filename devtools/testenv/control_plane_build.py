"""Building kube-scheduler and kube-controller-manager for the test control plane.

Both come from the same ``k8s.io/kubernetes`` release as the test kube-apiserver
(:mod:`devtools.testenv.kubeapi_build`), through the wrapper module
``tools/kube-apiserver/control-plane`` (its own go.mod and go.sum, with kube-apiserver's staging
replace lines; a separate module so that a change here never invalidates the kube-apiserver
cache). They are built into ``<cache>/kube/<kubernetes>-control-plane/`` and reused from then on,
with the same completion marker, file lock and atomic rename as kube-apiserver
(:mod:`devtools.testenv.gobuild`). ``<cache>`` is the stack's cache root
(``DEVICESTATE_STACK_CACHE_DIR``, default ``~/.cache/devicestate``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from devtools.stack.supervisor import Reporter, StackLayout, file_lock
from devtools.testenv import gobuild, kubeapi_build
from devtools.testenv.errors import KubeAPIError

KUBE_SCHEDULER_PACKAGE = "k8s.io/kubernetes/cmd/kube-scheduler"
KUBE_CONTROLLER_MANAGER_PACKAGE = "k8s.io/kubernetes/cmd/kube-controller-manager"

_stderr = gobuild.stderr_reporter("control-plane")


@dataclass(frozen=True)
class ControlPlaneBinaries:
    kube_scheduler: Path
    kube_controller_manager: Path
    kubernetes: str  # "1.36.3", the same as kube-apiserver's


def module_dir(env: Mapping[str, str] | None = None) -> Path:
    """The wrapper module: ``control-plane/`` beside kube-apiserver's (``tools/kube-apiserver``)."""
    return kubeapi_build.tools_dir(env) / "control-plane"


def kubernetes_version(module: Path | None = None) -> str:
    """The ``k8s.io/kubernetes`` version the module pins, without ``v`` (``"1.36.3"``).

    Raises :class:`KubeAPIError` if it is not kube-apiserver's: a scheduler or controller-manager
    of another release than the API server is not what a cluster runs."""
    module = module_dir() if module is None else module
    version = gobuild.required_version(module / "go.mod", "k8s.io/kubernetes")
    apiserver = kubeapi_build.versions(module.parent).kubernetes
    if version != apiserver:
        raise KubeAPIError(
            f"{module / 'go.mod'} pins k8s.io/kubernetes v{version} but kube-apiserver is "
            f"v{apiserver} ({module.parent / 'go.mod'}): change both together"
        )
    return version


def cache_dir(kubernetes: str, env: Mapping[str, str] | None = None) -> Path:
    """``<stack cache root>/kube/<kubernetes>-control-plane``."""
    return StackLayout.from_env(env).cache_dir / "kube" / f"{kubernetes}-control-plane"


def _binaries(directory: Path, kubernetes: str) -> ControlPlaneBinaries:
    return ControlPlaneBinaries(
        directory / "kube-scheduler", directory / "kube-controller-manager", kubernetes
    )


def _digest(module: Path) -> str:
    return gobuild.go_sum_digest((module / "go.sum",))


def cached_binaries(
    module: Path | None = None, env: Mapping[str, str] | None = None
) -> ControlPlaneBinaries | None:
    """The cached binaries for the pinned version, if a finished build left them."""
    module = module_dir(env) if module is None else module
    kubernetes = kubernetes_version(module)
    binaries = _binaries(cache_dir(kubernetes, env), kubernetes)
    reusable = gobuild.is_reusable(
        binaries.kube_scheduler.parent,
        "go_sum_sha256",
        _digest(module),
        (binaries.kube_scheduler, binaries.kube_controller_manager),
    )
    return binaries if reusable else None


def ensure_binaries(report: Reporter = _stderr, force: bool = False) -> ControlPlaneBinaries:
    """Build kube-scheduler and kube-controller-manager for the pinned version, or reuse them.

    Raises :class:`KubeAPIError` (Go missing, versions differ from kube-apiserver's, a build
    failed: the log's tail in the message) or ``OSError`` (cache not writable)."""
    started = time.monotonic()
    module = module_dir()
    kubernetes = kubernetes_version(module)
    directory = cache_dir(kubernetes)
    directory.mkdir(parents=True, exist_ok=True)
    with file_lock(
        directory / ".build.lock", report, "kube-scheduler/kube-controller-manager build"
    ):
        cached = None if force else cached_binaries(module)
        if cached is not None:
            marker = gobuild.read_marker(directory) or {}
            report(
                f"reusing kube-scheduler and kube-controller-manager v{kubernetes} from "
                f"{directory} (built {marker.get('built_at', '?')})"
            )
            return cached
        go = gobuild.go_command(os.environ)
        go_version = gobuild.go_version(go)
        report(
            f"building kube-scheduler and kube-controller-manager v{kubernetes} with {go_version} "
            f"into {directory} (about 2 to 4 minutes after kube-apiserver, see "
            "docs/kube-apiserver.md)"
        )
        gobuild.clear_marker(directory)
        binaries = _binaries(directory, kubernetes)
        vers = kubeapi_build.Versions(kubernetes=kubernetes, etcd="")
        timings = {
            output.name: kubeapi_build.go_build_package(
                go, module, package, output, vers, directory / f"build-{output.name}.log", report
            )
            for package, output in (
                (KUBE_SCHEDULER_PACKAGE, binaries.kube_scheduler),
                (KUBE_CONTROLLER_MANAGER_PACKAGE, binaries.kube_controller_manager),
            )
        }
        gobuild.write_marker(
            directory,
            {
                "kubernetes": kubernetes,
                "go": go_version,
                "go_sum_sha256": _digest(module),
                "built_at": gobuild.utc_now(),
                "build_seconds": {name: round(s, 1) for name, s in timings.items()},
            },
        )
    report(
        f"kube-scheduler and kube-controller-manager ready in {time.monotonic() - started:.1f} s"
    )
    return binaries
