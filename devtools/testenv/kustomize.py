"""kustomize for the deploy tests, built from the Go module proxy and cached like kube-apiserver.

``deploy/`` is a kustomize base with overlays; ``tests/kubeapi/test_deploy.py`` renders every
overlay with the real ``kustomize`` (sigs.k8s.io/kustomize/kustomize/v5) rather than a
re-implementation of the parts it uses. ``ensure_kustomize`` builds it from the wrapper Go module in
``devtools/testenv/kustomize-go/`` (its go.mod names the version, its go.sum pins every module)
into ``<cache>/kustomize/<version>/kustomize`` and reuses it from then on; ``<cache>`` is the
stack's cache root (``DEVICESTATE_STACK_CACHE_DIR``, default ``~/.cache/devicestate``).
``DEVICESTATE_KUSTOMIZE`` names a binary to use instead (no build). ``render`` runs
``kustomize build``.

Cost on this project's 2-core machine: about 50 s cold (empty Go build cache, modules already
downloaded), 15 s with the build cache kube-apiserver leaves, 13 MB on disk.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from devtools.stack.supervisor import Reporter, StackLayout, file_lock
from devtools.testenv import gobuild
from devtools.testenv.errors import KubeAPIError

MODULE_DIR = Path(__file__).resolve().with_name("kustomize-go")
PACKAGE = "sigs.k8s.io/kustomize/kustomize/v5"

_stderr = gobuild.stderr_reporter("kustomize")


def version(module_dir: Path = MODULE_DIR) -> str:
    """The kustomize version the wrapper module pins (``5.8.2``)."""
    return gobuild.required_version(module_dir / "go.mod", PACKAGE)


def cache_dir(vers: str, env: Mapping[str, str] | None = None) -> Path:
    """``<stack cache root>/kustomize/<version>``."""
    return StackLayout.from_env(env).cache_dir / "kustomize" / vers


def _go_sum_digest(module_dir: Path) -> str:
    return gobuild.go_sum_digest((module_dir / "go.sum",))


def cached_kustomize(
    module_dir: Path = MODULE_DIR, env: Mapping[str, str] | None = None
) -> Path | None:
    """The cached binary for the pinned version, if a finished build with this go.sum left it."""
    directory = cache_dir(version(module_dir), env)
    binary = directory / "kustomize"
    reusable = gobuild.is_reusable(
        directory, "go_sum_sha256", _go_sum_digest(module_dir), (binary,)
    )
    return binary if reusable else None


def ensure_kustomize(report: Reporter = _stderr, force: bool = False) -> Path:
    """``$DEVICESTATE_KUSTOMIZE`` if set, else the cached build, else build it now.

    Raises :class:`~devtools.testenv.errors.KubeAPIError` (a bad override, Go missing, the build
    failed: the log's tail in the message) or ``OSError`` (cache not writable)."""
    override = os.environ.get("DEVICESTATE_KUSTOMIZE")
    if override:
        path = Path(override).expanduser()
        if not os.access(path, os.X_OK):
            raise KubeAPIError(f"DEVICESTATE_KUSTOMIZE={override} is not an executable file")
        return path
    vers = version()
    directory = cache_dir(vers)
    directory.mkdir(parents=True, exist_ok=True)
    with file_lock(directory / ".build.lock", report, "kustomize build"):
        cached = None if force else cached_kustomize()
        if cached is not None:
            report(f"reusing kustomize v{vers} from {directory}")
            return cached
        go = gobuild.go_command(os.environ)
        gobuild.clear_marker(directory)
        binary, tmp, log = (
            directory / "kustomize",
            directory / "kustomize.tmp",
            directory / "build.log",
        )
        report(f"building kustomize v{vers} into {directory} (about a minute cold; log: {log})")
        seconds = gobuild.go_build(
            go,
            ["-ldflags", "-s -w", "-o", str(tmp), PACKAGE],
            MODULE_DIR,
            log,
            what=PACKAGE,
            discard=tmp,
        )
        tmp.replace(binary)
        gobuild.write_marker(
            directory,
            {
                "kustomize": vers,
                "go_sum_sha256": _go_sum_digest(MODULE_DIR),
                "built_at": gobuild.utc_now(),
                "build_seconds": round(seconds, 1),
            },
        )
        report(f"built kustomize v{vers} in {seconds:.1f} s")
        return binary


def render(path: Path, binary: Path | None = None, timeout: float = 60.0) -> str:
    """``kustomize build <path>``: the rendered manifests (a multi-document YAML stream)."""
    binary = ensure_kustomize() if binary is None else binary
    result = subprocess.run(
        [str(binary), "build", str(path)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        raise KubeAPIError(f"kustomize build {path} failed: {result.stderr.strip()}")
    return result.stdout
